#!/usr/bin/env bash
# the Panda planner at e5899ce (the microwave door pushed wider, the straight carry in), from a
# worktree (/work/wt42): libero_10 over all 50 states, and the two LIBERO-90 tasks whose door
# stage the change can reach (33 "close the microwave", 35 "open the microwave"), paired with
# the r41 files
set -uo pipefail
cd /work/wt42
.venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=libero_10 --config.init_states=0 --config.gifs=0 --config.panda.workers=1 --workdir=/work/runs/pp42/libero_10 > /work/runs/pp42/libero_10.log 2>&1
echo "libero_10 rc=$? $(date)" >> /work/runs/pp42/progress.txt
.venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=libero_90 --config.tasks=33,35 --config.init_states=0 --config.gifs=0 --config.panda.workers=1 --workdir=/work/runs/pp42/libero_90_doors > /work/runs/pp42/libero_90_doors.log 2>&1
echo "libero_90 doors rc=$? $(date)" >> /work/runs/pp42/progress.txt
