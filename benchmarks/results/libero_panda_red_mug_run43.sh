#!/usr/bin/env bash
# the Panda planner at a8ce341 (a part of at most 3 geoms may be a handle: the red coffee mug's), from
# a worktree (/work/wt43e), all 50 states: every task that picks the red mug (the only picked
# object the rule reaches: the other hollow objects under 20 geoms, the basket and the tray, are
# never picked), LIBERO-90 65, 66, 71, 84, paired with r41; then, held out, the same tasks under
# the layout shift (level 3), before (3045310, /work/wt43c) and after
set -uo pipefail
R=/work/runs/pp43
run() {  # worktree, name, flags...
  local wt=$1 name=$2; shift 2
  (cd "$wt" && .venv/bin/python -m launch.libero --config=configs/libero.py --config.init_states=0 --config.gifs=0 --config.panda.workers=1 "$@" --workdir=$R/$name > $R/$name.log 2>&1)
  echo "$name rc=$? $(date)" >> $R/progress.txt
}
run /work/wt43e red_90 --config.suite=libero_90 --config.tasks=65,66,71,84
run /work/wt43c red_90_layout3_before --config.suite=libero_90 --config.tasks=65,66,71,84 --config.perturbation=layout3
run /work/wt43e red_90_layout3_after --config.suite=libero_90 --config.tasks=65,66,71,84 --config.perturbation=layout3
