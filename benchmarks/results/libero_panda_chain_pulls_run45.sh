#!/usr/bin/env bash
# the Panda planner at 1209c5d (the transit's retract in) from a worktree (/work/wt45b): states
# 0-9 of every task whose name mentions what a pull opens (open, drawer, microwave, cabinet) in
# libero_spatial, libero_10 and LIBERO-90, fixtures chained as openpi's client places them (seed
# 7: state s gets the (s + 1)-th reset's). Paired per (task, state) with the same commit's code
# under the default placement (retract45's runs, a0506a1: same planner). Does any other pull task
# stall under openpi's placements as libero_goal's drawer-and-bowl did? A check, not a learning
# claim
set -uo pipefail
cd /work/wt45b
out=/work/runs/chain45
mkdir -p $out
run() {  # name, extra flags
  .venv/bin/python -m launch.libero --config=configs/libero.py --config.gifs=0 --config.panda.workers=2 --config.init_states=10 --config.panda.fixture_seed=7 --config.panda.fixture_chain=True "${@:2}" --workdir=$out/$1 > $out/$1.log 2>&1
  echo "$1 rc=$? $(date)" >> $out/progress.txt
}
run spatial_chain --config.suite=libero_spatial --config.tasks=4,9
run 10_chain --config.suite=libero_10 --config.tasks=3,9
run 90_chain --config.suite=libero_90 --config.tasks=0,1,2,3,4,5,6,7,8,10,11,15,22,23,24,25,26,28,29,31,32,33,35,40,41,42,43,86,88,89
