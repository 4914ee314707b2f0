#!/bin/bash
# Runs (or resumes) the registered LIBERO-PRO study, fourth run
# (benchmarks/registrations/issue30_libero_pro_v4.md), at its registered commit, one suite after
# the other through benchmarks/study_resume.sh: finished cells are first restored from
# benchmarks/results/cells/libero_pro_v4_<suite>/, and every cell that finishes is copied there
# and committed, so a restart loses at most the cell in progress. (All 27 cells have run; the
# results are in benchmarks/results/INDEX.md.)
#
#   nohup benchmarks/libero_pro_v4_resume.sh [worktree] [runs] > runs/libero_pro_v4.out 2>&1 &
#
# SUITES (default "spatial object goal", the registered order) runs a subset: two copies on
# disjoint subsets (SUITES="spatial object" and SUITES=goal) finish in about half the time on
# 2 cores; never two copies on one suite (they would run the same cell).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
for s in ${SUITES:-spatial object goal}; do
  "$HERE/study_resume.sh" "libero_pro_v4_$s" 53d2e0f "configs/libero_study.py:pro_$s" \
    "issue 30, LIBERO-PRO v4, $s" "${1:-/tmp/wt_pro4}" "${2:-$HERE/../runs}"
done
