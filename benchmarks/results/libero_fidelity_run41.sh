#!/usr/bin/env bash
# issue 31 fidelity rerun from scratch at f7abde6 (worktree /work/wt41)
set -euo pipefail
cd /work/wt41
R=/work/runs/fid41
export MUJOCO_GL=egl
git rev-parse HEAD > $R/commit.txt
.venv/bin/python benchmarks/libero_reference/make_episodes.py --tasks_per_suite=10 --inits_per_task=4 --steps=80 --zero_prefix=10 --frames_every=40 --seed=0 --out=$R/episodes.json
.venv/bin/python benchmarks/libero_reference/scripted_episodes.py --suite=libero_object --tasks=0-9 --inits=0,1 --steps=200 --seed=7 --out=$R/scripted.json
.venv-libero-ref/bin/python benchmarks/libero_reference/replay.py --episodes=$R/episodes.json --out=$R/reference > $R/replay.log 2>&1
.venv-libero-ref/bin/python benchmarks/libero_reference/replay.py --episodes=$R/scripted.json --out=$R/reference_scripted > $R/replay_scripted.log 2>&1
.venv/bin/python benchmarks/libero_fidelity.py --reference=$R/reference,$R/reference_scripted --out=$R/libero_fidelity
echo done > $R/DONE
