#!/usr/bin/env bash
# the Panda planner at bc6b82d (session 43's HEAD), from a worktree (/work/wt44): every suite over
# all 50 states from scratch, one run per suite, paired with r41 / r42 / r43: the clean confirmation
# of the per-suite figures that session 43 composed from task subsets run at different commits
set -uo pipefail
cd /work/wt44
for suite in libero_90 libero_10 libero_goal libero_spatial libero_object; do
  .venv/bin/python -m launch.libero --config=configs/libero.py --config.suite=$suite --config.init_states=0 --config.gifs=0 --config.panda.workers=2 --workdir=/work/runs/pp44/$suite > /work/runs/pp44/$suite.log 2>&1
  echo "$suite rc=$? $(date)" >> /work/runs/pp44/progress.txt
done
