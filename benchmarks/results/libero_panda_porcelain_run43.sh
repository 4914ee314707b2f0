#!/usr/bin/env bash
# the Panda planner at 305e6a2, from the worktree /work/wt43g (af45680, the same planner code), all 50
# states: the tasks that pick the white porcelain mug (LIBERO-90 67, 72, 85; libero_10 6). The
# states-0-9 check found task 72 ending at other steps: the porcelain mug's core (the geom of
# largest world box) depends on its yaw, so its handle's pieces can differ by state and the
# handle rules reach it too, which the scan at state 0 had not shown
set -uo pipefail
R=/work/runs/pp43
cd /work/wt43g
.venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=libero_90 --config.tasks=67,72,85 --config.init_states=0 --config.gifs=0 --config.panda.workers=1 --workdir=$R/porcelain_90 > $R/porcelain_90.log 2>&1 &
.venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=libero_10 --config.tasks=6 --config.init_states=0 --config.gifs=0 --config.panda.workers=1 --workdir=$R/porcelain_10 > $R/porcelain_10.log 2>&1
wait
echo "porcelain done $(date)" >> $R/progress.txt
