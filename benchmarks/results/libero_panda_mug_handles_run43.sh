#!/usr/bin/env bash
# the Panda planner at 2e05d37 (a mug's handle: at most 3 geoms whatever its share, its pieces within
# 2.5 cm of the outermost one; on top of the rim side change of 3045310), from a worktree
# (/work/wt43e), all 50 states: every task that picks a mug whose handle the rules change (the red
# coffee mug: LIBERO-90 65, 66, 71, 84; the yellow and white mug: LIBERO-90 34, 68, 76, libero_10
# 4 and 9; the white porcelain mug's handle is the same 3 pieces under both rules), paired with r41
# (LIBERO-90) and r43 (libero_10); then, held out, the LIBERO-90 mug tasks under the layout shift
# (level 3), before (e942c1d: neither change, /work/wt43d) and after
set -uo pipefail
R=/work/runs/pp43
run() {  # worktree, name, flags...
  local wt=$1 name=$2; shift 2
  (cd "$wt" && .venv/bin/python -m launch.libero --config=configs/libero.py --config.init_states=0 --config.gifs=0 --config.panda.workers=1 "$@" --workdir=$R/$name > $R/$name.log 2>&1)
  echo "$name rc=$? $(date)" >> $R/progress.txt
}
run /work/wt43e mug_90 --config.suite=libero_90 --config.tasks=34,65,66,68,71,76,84
run /work/wt43e mug_10 --config.suite=libero_10 --config.tasks=4,9
run /work/wt43d mug_90_layout3_before --config.suite=libero_90 --config.tasks=34,65,66,68,71,76,84 --config.perturbation=layout3
run /work/wt43e mug_90_layout3_after --config.suite=libero_90 --config.tasks=34,65,66,68,71,76,84 --config.perturbation=layout3
