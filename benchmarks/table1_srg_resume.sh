#!/bin/bash
# Runs (or resumes) the registered Table 1 addendum (benchmarks/registrations/
# issue29_srg_addendum.md) at its registered commit, across machines that do not keep runs/:
# finished cells are restored from benchmarks/results/cells/table1_srg and every cell that
# finishes is copied there and committed (benchmarks/study_cells.py).
#
#   nohup benchmarks/table1_srg_resume.sh COMMIT [worktree] [runs] > runs/table1_srg.out 2>&1 &
#
# success_rate_guided adopts coda's round-0 checkpoint of the same seed, which the cell store
# does not carry: a restored coda cell whose seed's success_rate_guided cell has not finished and
# whose checkpoint is gone is removed, so the study reruns it at the same commit.
# About 1,000 s of cells per seed unloaded (coda ~800 s with round 0, the baseline ~200 s).
set -u
COMMIT=${1:?usage: table1_srg_resume.sh COMMIT [worktree] [runs]}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${2:-/tmp/wt_srg}
RUNS=${3:-$REPO/runs}
PY=$REPO/.venv/bin/python
WORK=$RUNS/table1_srg
STORE=$REPO/benchmarks/results/cells/table1_srg
mkdir -p "$RUNS"
if [ ! -d "$WT" ]; then
  git -C "$REPO" worktree add --detach "$WT" "$COMMIT"
fi
[ -e "$WT/.venv" ] || ln -s "$REPO/.venv" "$WT/.venv"
$PY "$REPO/benchmarks/study_cells.py" restore --workdir="$WORK" --store="$STORE"
for s in 0 1 2 3 4; do
  c=$WORK/coda/seed$s
  if [ -f "$c/summary.json" ] && [ ! -f "$WORK/success_rate_guided/seed$s/summary.json" ] &&
    [ ! -f "$c/checkpoints/round_0000/COMPLETE" ]; then
    echo "seed $s: coda's round 0 is gone; its cell reruns"
    mv "$c" "$c.restored.$(date +%s)"
  fi
done
save() {
  out=$($PY "$REPO/benchmarks/study_cells.py" save --workdir="$WORK" --store="$STORE")
  if [ -n "$(git -C "$REPO" status --porcelain -- "$STORE")" ]; then
    git -C "$REPO" add "$STORE" &&
      git -C "$REPO" commit -q -m "study cells (issue 29, Table 1 SRG addendum): $out" -- "$STORE"
  fi
}
(while sleep 120; do save; done) &
SAVER=$!
cd "$WT" || exit 1
.venv/bin/python -m launch.study --config=configs/table1.py:srg --workdir="$WORK" >> "$WORK.log" 2>&1
kill $SAVER 2>/dev/null
save
