#!/bin/bash
# Runs (or resumes) the registered LIBERO-PRO fifth run, libero_goal only
# (benchmarks/registrations/issue30_libero_pro_v5_goal.md), at the commit that added that file,
# through benchmarks/study_resume.sh (finished cells restored from and committed to
# benchmarks/results/cells/libero_pro_v5_goal).
#
#   nohup benchmarks/libero_pro_v5_resume.sh [worktree] [runs] > runs/libero_pro_v5_goal.out 2>&1 &
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REG=benchmarks/registrations/issue30_libero_pro_v5_goal.md
COMMIT=$(git -C "$HERE/.." log --diff-filter=A --format=%h -1 -- "$REG")
[ -n "$COMMIT" ] || { echo "no commit adds $REG"; exit 1; }
exec "$HERE/study_resume.sh" libero_pro_v5_goal "$COMMIT" configs/libero_study.py:pro_goal \
  "issue 30, LIBERO-PRO v5, goal" "${1:-/tmp/wt_pro5}" "${2:-$HERE/../runs}"
