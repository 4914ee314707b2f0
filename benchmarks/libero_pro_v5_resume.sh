#!/bin/bash
# The LIBERO-PRO fifth run on libero_goal (withdrawn: benchmarks/results/INDEX.md), through
# benchmarks/libero_pro_goal_resume.sh at the commit that added its registration.
#
#   nohup benchmarks/libero_pro_v5_resume.sh [worktree] [runs] > runs/libero_pro_v5_goal.out 2>&1 &
exec "$(dirname "$0")/libero_pro_goal_resume.sh" v5 "${1:-/tmp/wt_pro5}" "${2:-$(cd "$(dirname "$0")/.." && pwd)/runs}"
