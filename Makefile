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

.PHONY: setup lock run smoke test test-slow lint format clean

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

setup: $(BIN)/.installed

# Re-resolve the lock after changing a pin in pyproject.toml (needs PyPI; commit the result).
lock:
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --custom-compile-command "make lock" -o $(LOCK)

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
