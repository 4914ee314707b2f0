"""Entry point: `python -m launch.main --config=configs/coda.py --workdir=runs/x [--resume]`.

Runs the CoDA loop (`coda.loop.run`); the same command on the same workdir resumes after the
last complete round.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging as std_logging
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from coda import blas, runconfig  # pure Python: validation runs before JAX is imported
from coda.loop import distributed  # numpy only at import
from launch import cli

_DEFAULT_CONFIG = "configs/coda.py"
if __name__ == "__main__":  # a typo in the config arguments: one line, before JAX
    cli.check_argv(sys.argv, _DEFAULT_CONFIG)
_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG, "Experiment config file (see configs/).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", "runs/default", "Run folder (created if missing).")
_RESUME = flags.DEFINE_bool(
    "resume",
    True,
    "Continue after the last complete round when --workdir holds a run (the default); "
    "--noresume refuses a folder that already holds rounds.",
)

# Launch environment of a multi-host run (README "Multi-device and multi-host"); not config
# fields: the same config runs on one host or many. Each defaults from an environment variable.
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address",
    distributed.env_default(distributed.ENV_COORDINATOR, ""),
    f"host:port of process 0's coordinator (multi-host); env ${distributed.ENV_COORDINATOR}.",
)
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes",
    distributed.env_default(distributed.ENV_NUM_PROCESSES, 1),
    f"Processes (hosts) in the run; 1 = single process. env ${distributed.ENV_NUM_PROCESSES}.",
    lower_bound=1,
)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id",
    distributed.env_default(distributed.ENV_PROCESS_ID, 0),
    f"This process's index in [0, num_processes); 0 writes the run folder. "
    f"env ${distributed.ENV_PROCESS_ID}.",
    lower_bound=0,
)


class _DropMessage(std_logging.Filter):
    """Drops log records whose message contains `text` (one known, harmless message)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: std_logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


def quiet_third_party_logs() -> None:
    """Silences the noise our own setup causes on every run; errors are never silenced.

    Call before jax is imported. Each knob defers to a value the user already set:
    - XLA's C++ warning on every persistent-cache hit ("Assume version compatibility. PjRt-IFRT
      does not track XLA executable versions"): TF_CPP_MIN_LOG_LEVEL=2 keeps C++ errors only
      (set TF_CPP_MIN_LOG_LEVEL=0 to see XLA's warnings again);
    - JAX probing for a TPU when libtpu is not installed: JAX_PLATFORMS=cpu when no accelerator
      plugin is installed either, and that one INFO line dropped otherwise;
    - PyOpenGL's INFO line "No OpenGL_accelerate module loaded" (an optional speed-up);
    - XLA's false "target machine feature +prefer-no-gather is not supported" errors on every
      cache load on AVX-512 hosts: `drop_tuning_feature_errors`.
    mujoco.mjx's stdout prints about the optional warp backend: see `import_mjx_quietly`.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if importlib.util.find_spec("libtpu") is None:
        plugins = importlib.util.find_spec("jax_plugins") is not None
        if not plugins and "JAX_PLATFORMS" not in os.environ:
            os.environ["JAX_PLATFORMS"] = "cpu"
        tpu_probe = _DropMessage("Unable to initialize backend 'tpu'")
        std_logging.getLogger("jax._src.xla_bridge").addFilter(tpu_probe)
    std_logging.getLogger("OpenGL.acceleratesupport").setLevel(std_logging.WARNING)
    drop_tuning_feature_errors()


# XLA's CPU loader checks each feature an executable was compiled with against the host's
# features (llvm::sys::getHostCPUFeatures) and logs an ERROR per feature it does not find. On a
# host with AVX-512, XLA adds the LLVM *tuning* features prefer-no-gather / prefer-no-scatter to
# every compilation (they steer instruction choice; the CPU never lacks them), and the host list
# never contains tuning features: so every load from the persistent cache, on the machine that
# compiled it, logs two ~2,000-character "could lead to execution errors such as SIGILL" lines.
# Only lines naming those two features are dropped; a real mismatch (+avx512f from a cache
# compiled elsewhere) and every other line pass unchanged.
_TUNING_FEATURE_ERROR = (
    r"Loading XLA:CPU AOT result\. Target machine feature \+prefer-no-(gather|scatter) is not"
)
# The filter is a separate process, so what a crashing process writes last (a fatal signal's
# traceback) still comes out; it ignores Ctrl-C (its own session) and exits at end of input.
_FILTER = """
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
drop = re.compile(sys.argv[1].encode())
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    if not drop.search(line):
        out.write(line)
        out.flush()
"""


def _host_has_avx512() -> bool:
    return "avx512f" in blas.cpu_flags()


def drop_tuning_feature_errors(force: bool = False) -> bool:
    """Routes this process's stderr (fd 2) through a line filter that drops XLA's false "target
    machine feature +prefer-no-gather/scatter is not supported" errors (see above). Only on
    Linux hosts with AVX-512 (the only ones that print them), unless `force`; once per process;
    CODA_RAW_STDERR=1 turns it off. True when the filter is in place."""
    import atexit
    import subprocess
    import sys

    global _FILTER_PROC
    if _FILTER_PROC is not None:
        return True
    if os.environ.get("CODA_RAW_STDERR") == "1" or not (force or _host_has_avx512()):
        return False
    sys.stderr.flush()
    saved = os.dup(2)
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", _FILTER, _TUNING_FEATURE_ERROR],
        stdin=r,
        stdout=saved,
        stderr=saved,
        start_new_session=True,
    )
    os.close(r)
    os.dup2(w, 2)
    os.close(w)
    _FILTER_PROC = proc

    def _restore() -> None:  # at a normal exit: the filter drains and ends before we do
        sys.stderr.flush()
        os.dup2(saved, 2)
        try:  # a child process still holding stderr keeps the filter (and its lines) alive
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass

    atexit.register(_restore)
    return True


_FILTER_PROC = None


def import_mjx_quietly() -> None:
    """Imports mujoco.mjx with its stdout prints ("Failed to import warp: ...", an optional
    backend we do not use) moved to debug-level logging; import errors still raise."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            import mujoco.mjx  # noqa: F401
    finally:
        for line in out.getvalue().splitlines():
            logging.debug("mujoco.mjx: %s", line)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # Everything a user can mistype is checked here: before JAX is imported, before the run
    # folder is touched. (Task families are checked by loop.run, which needs coda.sim.tasks.)
    try:
        runconfig.validate(_CONFIG.value)
        workdir = runconfig.check_workdir(_WORKDIR.value)
    except runconfig.ConfigError as e:
        raise app.UsageError(str(e)) from None
    if _NUM_PROCESSES.value > 1 and not _COORDINATOR.value:
        raise app.UsageError("--num_processes > 1 needs --coordinator_address=host:port")
    if _PROCESS_ID.value >= _NUM_PROCESSES.value:
        raise app.UsageError(
            f"--process_id={_PROCESS_ID.value} must be < --num_processes={_NUM_PROCESSES.value}"
        )
    cache = runconfig.cache_dir(_CONFIG.value)
    quiet_third_party_logs()
    import jax

    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    # before any JAX computation: joins the other processes (no-op for --num_processes=1)
    distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    logging.info("JAX compilation cache: %s", cache)

    if _CONFIG.value.sim.backend == "mjx" or (
        _CONFIG.value.sim.backend == "auto" and jax.default_backend() != "cpu"
    ):
        import_mjx_quietly()
    from coda import loop

    logging.info("config:\n%s", _CONFIG.value)
    try:
        summary = loop.run(_CONFIG.value, workdir, resume=_RESUME.value)
    except runconfig.ConfigError as e:  # raised by loop.run's checks, before it writes anything
        raise app.UsageError(str(e)) from None
    logging.info("summary: %s", summary["headline"])


if __name__ == "__main__":
    app.run(main)
