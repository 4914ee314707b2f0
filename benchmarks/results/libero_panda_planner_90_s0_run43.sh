#!/usr/bin/env bash
# the Panda planner at af45680 (all of session 43's changes), from a worktree (/work/wt43g): every
# LIBERO-90 task at states 0-9, paired with r41's same episodes: a check, on a fifth of the
# states, that the tasks the scans say no change reaches end as before
set -uo pipefail
cd /work/wt43g
.venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=libero_90 --config.init_states=10 --config.gifs=0 --config.panda.workers=2 --workdir=/work/runs/pp43/libero_90_s0 > /work/runs/pp43/libero_90_s0.log 2>&1
echo "libero_90_s0 rc=$? $(date)" >> /work/runs/pp43/progress.txt
