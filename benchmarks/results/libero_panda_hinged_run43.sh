#!/usr/bin/env bash
# the Panda planner at c670cbe (the way across to an object passes over hinged fixture parts: a
# microwave's door, a stove's knob; on top of 3e306aa, 3045310, a8ce341, 2e05d37), from a worktree
# (/work/wt43f), all 50 states: the task whose first pick's way changed in a scan of every task
# with a hinged part at its 50 states (LIBERO-90 34), and every task with a hinged part whose
# pick comes after another stage, which the scan cannot see (LIBERO-90 21, 38, 40, 42, 45;
# libero_10 2, 8, 9; libero_goal 3); then LIBERO-90 34 under the layout shift (level 3)
set -uo pipefail
R=/work/runs/pp43
run() {  # worktree, name, flags...
  local wt=$1 name=$2; shift 2
  (cd "$wt" && .venv/bin/python -m launch.libero --config=configs/libero.py --config.init_states=0 --config.gifs=0 --config.panda.workers=1 "$@" --workdir=$R/$name > $R/$name.log 2>&1)
  echo "$name rc=$? $(date)" >> $R/progress.txt
}
run /work/wt43f hinged_90 --config.suite=libero_90 --config.tasks=34,21,38,40,42,45
run /work/wt43f hinged_10 --config.suite=libero_10 --config.tasks=2,8,9
run /work/wt43f hinged_goal --config.suite=libero_goal --config.tasks=3
run /work/wt43f hinged_90_34_layout3 --config.suite=libero_90 --config.tasks=34 --config.perturbation=layout3
