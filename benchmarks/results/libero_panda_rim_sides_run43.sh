#!/usr/bin/env bash
# the Panda planner at 3045310 (a rim grasp's side checked against each geom of a fixture), from a
# worktree (/work/wt43c), all 50 states, paired with r41 (LIBERO-90, libero_goal) and r43 (libero_10): every task where the
# side chosen at the first stage changed in a scan of all five suites at their 50 states
# (LIBERO-90 34, 43, 85) and every task with a rim grasp in a later stage, which the scan cannot
# see (libero_goal 3; libero_10 3, 4; LIBERO-90 1, 2, 8, 21, 24, 29, 45, 63, 64); then, held
# out, the three changed tasks under the layout shift (level 3), before (e942c1d, /work/wt43d)
# and after
set -uo pipefail
R=/work/runs/pp43
run() {  # worktree, name, flags...
  local wt=$1 name=$2; shift 2
  (cd "$wt" && .venv/bin/python -m launch.libero --config=configs/libero.py --config.init_states=0 --config.gifs=0 --config.panda.workers=1 "$@" --workdir=$R/$name > $R/$name.log 2>&1)
  echo "$name rc=$? $(date)" >> $R/progress.txt
}
run /work/wt43c rim_90 --config.suite=libero_90 --config.tasks=1,2,8,21,24,29,34,43,45,63,64,85 &
( run /work/wt43c rim_goal --config.suite=libero_goal --config.tasks=3
  run /work/wt43c rim_10 --config.suite=libero_10 --config.tasks=3,4
  run /work/wt43d rim_90_layout3_before --config.suite=libero_90 --config.tasks=34,43,85 --config.perturbation=layout3 )
wait
run /work/wt43c rim_90_layout3_after --config.suite=libero_90 --config.tasks=34,43,85 --config.perturbation=layout3
