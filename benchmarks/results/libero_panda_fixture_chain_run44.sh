#!/usr/bin/env bash
# the Panda planner at 9bf4db1 from a worktree (/work/wt44c): libero_goal, every task at states
# 0-9, fixtures at seed 7's placement, unchained (the first reset's for every state) and chained
# (openpi's client: state s gets the (s + 1)-th reset's); paired per (task, state). A check that
# the chained protocol runs end to end and of how much it moves a state-based policy; not a
# learning claim
set -uo pipefail
cd /work/wt44c
mkdir -p /work/runs/chain44
for chain in False True; do
  .venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=libero_goal --config.init_states=10 --config.gifs=0 --config.panda.workers=1 --config.panda.fixture_seed=7 --config.panda.fixture_chain=$chain --workdir=/work/runs/chain44/goal_chain_$chain > /work/runs/chain44/goal_chain_$chain.log 2>&1
  echo "chain=$chain rc=$? $(date)" >> /work/runs/chain44/progress.txt
done
