#!/usr/bin/env bash
# Reruns benchmarks/rollout_throughput.py on a GPU machine: MJX and the policies run on the GPU,
# raw mujoco.rollout and the native backend's physics on all CPU cores.
#
#   bash benchmarks/rollout_throughput_gpu.sh [extra rollout_throughput.py flags]
#
# Installs jax[cuda12] at the venv's pinned jax version if JAX sees no GPU. MJX runs every N
# with the full episode (--mjx-chunks full) and both policies. Writes
# benchmarks/results/rollout_throughput_gpu.json (override with OUT=...).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
OUT=${OUT:-benchmarks/results/rollout_throughput_gpu.json}
unset JAX_PLATFORMS  # the test setup pins cpu; here JAX must find the GPU

has_gpu() {
  "$PY" -c "import jax, sys; sys.exit(0 if any(d.platform == 'gpu' for d in jax.devices()) else 1)" \
    2>/dev/null
}

if ! has_gpu; then
  JAX_VERSION=$("$PY" -c "import jax; print(jax.__version__)")
  echo "no GPU visible to jax ${JAX_VERSION}; installing jax[cuda12]==${JAX_VERSION}"
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install "jax[cuda12]==${JAX_VERSION}"
  else
    uv pip install --python "$PY" "jax[cuda12]==${JAX_VERSION}"
  fi
  if ! has_gpu; then
    echo "jax still sees no GPU (devices: $("$PY" -c 'import jax; print(jax.devices())'))" >&2
    exit 1
  fi
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# Keep XLA from grabbing 75% of GPU memory up front (the native backend's policy shares it).
export XLA_PYTHON_CLIENT_PREALLOCATE=${XLA_PYTHON_CLIENT_PREALLOCATE:-false}

exec "$PY" benchmarks/rollout_throughput.py \
  --n-envs 1,64,256,1024,4096 \
  --mjx-chunks full \
  --mjx-policies planner,mlp \
  --out "$OUT" \
  "$@"
