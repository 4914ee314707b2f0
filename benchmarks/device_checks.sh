#!/usr/bin/env bash
# Issue 15's accelerator checks as one prepared command for a lent GPU machine (the `run` tool:
# one call, <= 10 min, nothing fetched there). Writes everything under $OUT:
#   env.txt                    jax / mujoco versions and devices seen
#   rollout_throughput_gpu.json MJX env-steps/s for pick-place at N = 1024 and 4096 (+ log)
#   gpu_loop_summary.json      the `:gpu` loop, round 0 + one round, timed (+ report.md, log)
#
# The device image has jax (0.11.2, CUDA 13 plugins: device KINDS.md) but not MuJoCo or
# ml-collections: `make device-wheels` here downloads those into .whl/ (ignored, ~32 MB), and the
# call carries it: run(command="bash benchmarks/device_checks.sh", carry=[".whl"]).
# Our pin is jax 0.9.2; jax 0.11 is untested with this code until this script has run.
#
# DEVICE_CHECKS_SMOKE=1 shrinks every size (the plumbing on a CPU: tested by hand here).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/device_checks}
mkdir -p "$OUT"
PY=${PY:-python3}
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
unset JAX_PLATFORMS
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
"$PY" - <<'PYEOF' 2>&1 | tee "$OUT/env.txt"
import jax, mujoco
from mujoco import mjx  # noqa: F401
print("jax", jax.__version__, "devices", jax.devices(), "mujoco", mujoco.__version__)
PYEOF

if [ "${DEVICE_CHECKS_SMOKE:-0}" = 1 ]; then
  NS=8; LOOP="--config=configs/coda.py:smoke --config.loop.rounds=1 --config.render.enabled=False"
  T1=900; T2=600
else
  NS=1024,4096
  LOOP="--config=configs/coda.py:gpu --config.loop.rounds=1 --config.loop.bc_steps=2000"
  LOOP="$LOOP --config.loop.demo_seeds=16 --config.eval.episodes=64 --config.render.enabled=False"
  T1=240; T2=300
fi

start=$(date +%s)
timeout "$T1" "$PY" benchmarks/rollout_throughput.py --n-envs "$NS" --mjx-chunks full \
  --mjx-policies planner,mlp --policies planner --out "$OUT/rollout_throughput_gpu.json" \
  > "$OUT/throughput.log" 2>&1
echo "throughput rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/times.txt"

start=$(date +%s)
rm -rf /tmp/gpu_loop
# shellcheck disable=SC2086
timeout "$T2" "$PY" -m launch.main $LOOP --workdir=/tmp/gpu_loop > "$OUT/gpu_loop.log" 2>&1
echo "gpu loop rc=$? in $(( $(date +%s) - start )) s" | tee -a "$OUT/times.txt"
cp /tmp/gpu_loop/summary.json "$OUT/gpu_loop_summary.json" 2>/dev/null
cp /tmp/gpu_loop/report.md "$OUT/gpu_loop_report.md" 2>/dev/null
tail -n 5 "$OUT/throughput.log" "$OUT/gpu_loop.log"
