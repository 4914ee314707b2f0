#!/usr/bin/env bash
# libero_10's mug into the microwave (task 9) under the LIBERO-Plus-style layout shift, level 3,
# all 50 states, before (906c0c3, session 41's planner) and after (e5899ce: the door pushed wider,
# the straight carry in), from worktrees at those commits, one after the other
set -uo pipefail
for c in 906c0c3 e5899ce; do
  git -C /work/main worktree add -f /work/wt_$c $c > /dev/null 2>&1
  ln -sfn /work/main/.venv /work/wt_$c/.venv
  (cd /work/wt_$c && .venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=libero_10 --config.tasks=9 --config.perturbation=layout3 --config.init_states=0 --config.gifs=0 --config.panda.workers=1 --workdir=/work/runs/pp42/microwave_layout3_$c > /work/runs/pp42/microwave_layout3_$c.log 2>&1)
  echo "$c rc=$? $(date)" >> /work/runs/pp42/progress.txt
done
