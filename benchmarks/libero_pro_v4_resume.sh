#!/bin/bash
# Runs (or resumes) the registered LIBERO-PRO study, fourth run
# (benchmarks/registrations/issue30_libero_pro_v4.md), at its registered commit, across machines
# that do not keep runs/: finished cells are first restored from benchmarks/results/cells/, and
# every cell that finishes is copied there and committed (benchmarks/study_cells.py), so a
# restart loses at most the cell in progress.
#
#   nohup benchmarks/libero_pro_v4_resume.sh [worktree] [runs] > runs/libero_pro_v4.out 2>&1 &
#
# SUITES (default "spatial object goal", the registered order) runs a subset: on 2 cores, two
# copies on disjoint subsets (SUITES="spatial object" and SUITES=goal) finish in about half
# the time; never two copies on one suite (they would run the same cell).
#
# worktree: where the registered commit is checked out (default /tmp/wt_pro4; made if missing);
# runs: the study workdirs' parent (default <repo>/runs). About 36 min per cell, 27 cells.
set -u
COMMIT=53d2e0f
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${1:-/tmp/wt_pro4}
RUNS=${2:-$REPO/runs}
PY=$REPO/.venv/bin/python
SUITES=${SUITES:-"spatial object goal"}  # a subset runs beside another copy on the others
mkdir -p "$RUNS"
if [ ! -d "$WT" ]; then
  git -C "$REPO" worktree add --detach "$WT" "$COMMIT"
fi
[ -e "$WT/.venv" ] || ln -s "$REPO/.venv" "$WT/.venv"
store() { echo "$REPO/benchmarks/results/cells/libero_pro_v4_$1"; }
for s in $SUITES; do
  $PY "$REPO/benchmarks/study_cells.py" restore --workdir="$RUNS/libero_pro_v4_$s" --store="$(store $s)"
done
save_all() {
  for s in $SUITES; do
    out=$($PY "$REPO/benchmarks/study_cells.py" save --workdir="$RUNS/libero_pro_v4_$s" --store="$(store $s)")
    # committed whenever the store has changes (a commit that failed, e.g. on another
    # commit's lock, is retried on the next pass)
    if [ -n "$(git -C "$REPO" status --porcelain -- "$(store $s)")" ]; then
      git -C "$REPO" add "$(store $s)" &&
        git -C "$REPO" commit -q -m "study cells (issue 30, LIBERO-PRO v4, $s): $out" -- "$(store $s)"
    fi
  done
}
(while sleep 120; do save_all; done) &
SAVER=$!
cd "$WT" || exit 1
for s in $SUITES; do
  .venv/bin/python -m launch.study --config=configs/libero_study.py:pro_$s \
    --workdir="$RUNS/libero_pro_v4_$s" >> "$RUNS/libero_pro_v4_$s.log" 2>&1
done
kill $SAVER 2>/dev/null
save_all
