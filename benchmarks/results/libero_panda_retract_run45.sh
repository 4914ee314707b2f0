#!/usr/bin/env bash
# the Panda planner with the transit's retract (a hand left about horizontal by a pull goes back
# with its orientation held before it turns down), from a worktree (/work/wt45) at one commit;
# paired per (task, state) with session 44's runs at bc6b82d / 9bf4db1 (r44), which had no
# retract. (1) libero_goal, every task at states 0-9, fixtures chained as openpi's client places
# them (seed 7): the protocol under which the stall was found (r44: 94 / 100); (2) default
# protocol, all 50 states, every task whose name mentions something a pull opens (open, drawer,
# microwave, cabinet: 38 tasks), the only tasks whose hands a stage leaves about horizontal.
# Episodes where the retract never fires run exactly as before. A fix checked, not a learning
# claim
set -uo pipefail
cd /work/wt45
out=/work/runs/retract45
mkdir -p $out
run() {  # name, extra flags
  .venv/bin/python -m launch.libero --config=configs/libero.py --config.gifs=0 --config.panda.workers=2 "${@:2}" --workdir=$out/$1 > $out/$1.log 2>&1
  echo "$1 rc=$? $(date)" >> $out/progress.txt
}
run goal_chain --config.suite=libero_goal --config.init_states=10 --config.panda.fixture_seed=7 --config.panda.fixture_chain=True
run goal --config.suite=libero_goal --config.init_states=0 --config.tasks=0,2,3,4
run spatial --config.suite=libero_spatial --config.init_states=0 --config.tasks=4,9
run 10 --config.suite=libero_10 --config.init_states=0 --config.tasks=3,9
run 90 --config.suite=libero_90 --config.init_states=0 --config.tasks=0,1,2,3,4,5,6,7,8,10,11,15,22,23,24,25,26,28,29,31,32,33,35,40,41,42,43,86,88,89
