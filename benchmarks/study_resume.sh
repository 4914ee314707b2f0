#!/bin/bash
# Runs (or resumes) one registered study (`launch.study`) at its registered commit, across
# machines that do not keep runs/: its finished cells are first restored from the cell store
# (benchmarks/results/cells/<name>/), and every cell that finishes is copied there and committed
# (benchmarks/study_cells.py), so a restart loses at most the cell in progress.
#
#   nohup benchmarks/study_resume.sh NAME COMMIT CONFIG LABEL [worktree] [runs] > NAME.out 2>&1 &
#
# NAME: the workdir's and the cell store's name; COMMIT: the registered commit (checked out in
# the worktree, default /tmp/wt_<NAME>, made if missing); CONFIG: the study's --config value
# (e.g. configs/table1.py:srg); LABEL: what the cell commits say the study is (e.g. "issue 29,
# Table 1 SRG addendum"); runs: the workdirs' parent (default <repo>/runs). A caller that must
# act on the restored cells before the run (table1_srg_resume.sh) sets PRE_RUN to a command,
# run with WORK (the workdir) exported.
set -u
NAME=${1:?usage: study_resume.sh NAME COMMIT CONFIG LABEL [worktree] [runs]}
COMMIT=${2:?commit}
CONFIG=${3:?config}
LABEL=${4:?label}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WT=${5:-/tmp/wt_$NAME}
RUNS=${6:-$REPO/runs}
PY=$REPO/.venv/bin/python
export WORK=$RUNS/$NAME
STORE=$REPO/benchmarks/results/cells/$NAME
mkdir -p "$RUNS"
if [ ! -d "$WT" ]; then
  git -C "$REPO" worktree add --detach "$WT" "$COMMIT"
fi
[ -e "$WT/.venv" ] || ln -s "$REPO/.venv" "$WT/.venv"
$PY "$REPO/benchmarks/study_cells.py" restore --workdir="$WORK" --store="$STORE" --config="$CONFIG"
if [ -n "${PRE_RUN:-}" ]; then
  bash -c "$PRE_RUN"
fi
save() {
  out=$($PY "$REPO/benchmarks/study_cells.py" save --workdir="$WORK" --store="$STORE")
  # committed whenever the store has changes (a commit that failed, e.g. on another commit's
  # lock, is retried on the next pass)
  if [ -n "$(git -C "$REPO" status --porcelain -- "$STORE")" ]; then
    git -C "$REPO" add "$STORE" &&
      git -C "$REPO" commit -q -m "study cells ($LABEL): $out" -- "$STORE"
  fi
}
(while sleep 120; do save; done) &
SAVER=$!
cd "$WT" || exit 1
.venv/bin/python -m launch.study --config="$CONFIG" --workdir="$WORK" >> "$WORK.log" 2>&1
kill $SAVER 2>/dev/null
save
