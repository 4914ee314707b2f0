#!/usr/bin/env bash
# the Panda planner at 3e306aa (a handle gripped near its core, `panda_outline.handle_grip`), from
# a worktree (/work/wt43): every task with a moka pot (the only objects taken by a solid handle),
# all 50 states, paired with r42 (libero_10) and r41 (LIBERO-90); then libero_10's two-pot task
# under the layout shift (level 3), before (e676932, worktree /work/wt43b) and after, its states
# not looked at while the change was made
set -uo pipefail
R=/work/runs/pp43
run() {  # worktree, name, flags...
  local wt=$1 name=$2; shift 2
  (cd "$wt" && .venv/bin/python -m launch.libero --config=configs/libero.py --config.init_states=0 --config.gifs=0 --config.panda.workers=1 "$@" --workdir=$R/$name > $R/$name.log 2>&1)
  echo "$name rc=$? $(date)" >> $R/progress.txt
}
run /work/wt43 libero_10_moka --config.suite=libero_10 --config.tasks=2,8 &
run /work/wt43 libero_90_moka --config.suite=libero_90 --config.tasks=19,38
wait
run /work/wt43b libero_10_8_layout3_before --config.suite=libero_10 --config.tasks=8 --config.perturbation=layout3 &
run /work/wt43 libero_10_8_layout3_after --config.suite=libero_10 --config.tasks=8 --config.perturbation=layout3
wait
