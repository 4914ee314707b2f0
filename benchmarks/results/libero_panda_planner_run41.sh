#!/usr/bin/env bash
# the Panda planner on every suite, all 50 initial states, from scratch at f7abde6 (worktree /work/wt41)
set -uo pipefail
cd /work/wt41
for s in libero_goal libero_spatial libero_object libero_10 libero_90; do
  .venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=$s --config.init_states=0 --config.gifs=0 --config.panda.workers=1 --workdir=/work/runs/pp41/$s > /work/runs/pp41/$s.log 2>&1
  echo "$s rc=$? $(date)" >> /work/runs/pp41/progress.txt
done
