#!/bin/bash
# Runs (or resumes) a registered LIBERO-PRO run on libero_goal only
# (benchmarks/registrations/issue30_libero_pro_<VERSION>_goal.md) at the commit that added its
# registration, through benchmarks/study_resume.sh: finished cells are restored from and
# committed to benchmarks/results/cells/libero_pro_<VERSION>_goal/.
#
#   nohup benchmarks/libero_pro_goal_resume.sh VERSION [worktree] [runs] \
#       > runs/libero_pro_<VERSION>_goal.out 2>&1 &
#
# VERSION: v6 (the current run); v5 was withdrawn (INDEX.md).
set -u
VERSION=${1:?usage: libero_pro_goal_resume.sh VERSION [worktree] [runs]}
HERE=$(cd "$(dirname "$0")" && pwd)
REG=benchmarks/registrations/issue30_libero_pro_${VERSION}_goal.md
COMMIT=$(git -C "$HERE/.." log --diff-filter=A --format=%h -1 -- "$REG")
[ -n "$COMMIT" ] || { echo "no commit adds $REG"; exit 1; }
exec "$HERE/study_resume.sh" "libero_pro_${VERSION}_goal" "$COMMIT" \
  configs/libero_study.py:pro_goal "issue 30, LIBERO-PRO $VERSION, goal" \
  "${2:-/tmp/wt_pro_$VERSION}" "${3:-$HERE/../runs}"
