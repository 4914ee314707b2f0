#!/bin/bash
# Runs (or resumes) the registered Table 1 addendum (benchmarks/registrations/
# issue29_srg_addendum.md) at its registered commit through benchmarks/study_resume.sh (finished
# cells restored from benchmarks/results/cells/table1_srg, each new one committed there).
#
#   nohup benchmarks/table1_srg_resume.sh COMMIT [worktree] [runs] > runs/table1_srg.out 2>&1 &
#
# success_rate_guided adopts coda's round-0 checkpoint of the same seed, which the cell store
# does not carry: a restored coda cell whose seed's success_rate_guided cell has not finished and
# whose checkpoint is gone is removed, so the study reruns it at the same commit. Its cells'
# configs name that checkpoint's folder (loop.start_from), so restored cells count as finished
# only under the runs folder they ran in (/work/runs here): elsewhere the baseline's cells rerun.
# About 1,000 s of cells per seed unloaded (coda ~800 s with round 0, the baseline ~200 s).
set -u
COMMIT=${1:?usage: table1_srg_resume.sh COMMIT [worktree] [runs]}
export PRE_RUN='for s in 0 1 2 3 4; do
  c=$WORK/coda/seed$s
  if [ -f "$c/summary.json" ] && [ ! -f "$WORK/success_rate_guided/seed$s/summary.json" ] &&
    [ ! -f "$c/checkpoints/round_0000/COMPLETE" ]; then
    echo "seed $s: coda'"'"'s round 0 is gone; its cell reruns"
    mv "$c" "$c.restored.$(date +%s)"
  fi
done'
exec "$(dirname "$0")/study_resume.sh" table1_srg "$COMMIT" configs/table1.py:srg \
  "issue 29, Table 1 SRG addendum" "${2:-/tmp/wt_srg}" "${3:-$(cd "$(dirname "$0")/.." && pwd)/runs}"
