"""Entry point: `python -m launch.study --config=configs/table1.py --workdir=runs/table1`.

Runs every (strategy, seed) cell of the study config through `coda.loop.run` and writes
`<workdir>/table1.{json,md}` (`coda.study`). The same command on the same workdir resumes:
finished cells are read back, unfinished ones continue after their last complete round.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from coda import runconfig  # pure Python: validation runs before JAX is imported
from launch import cli

_DEFAULT_CONFIG = "configs/table1.py"
if __name__ == "__main__":  # a typo in the config arguments: one line, before JAX
    cli.check_argv(sys.argv, _DEFAULT_CONFIG)
_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG, "Study config file (configs/table1.py).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", "runs/table1", "Study folder (created if missing).")


def check(config) -> None:
    """Every user-fixable problem as `runconfig.ConfigError`, before JAX or the folder."""
    from coda import study

    try:
        study.check_study(config)
    except study.StudyError as e:
        raise runconfig.ConfigError(str(e)) from None
    for strategy, seed in study.cells(config):
        cfg = study.cell_config(config, strategy, seed)
        bad = runconfig.problems(cfg)
        if bad:
            raise runconfig.ConfigError(
                f"study.base (cell {strategy}/seed{seed}): {'; '.join(bad)}"
            )


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        check(_CONFIG.value)
        workdir = runconfig.check_workdir(_WORKDIR.value)
    except runconfig.ConfigError as e:
        raise app.UsageError(str(e)) from None
    # as launch.main: XLA's C++ warnings off, no TPU probe without an accelerator plugin
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    no_plugin = importlib.util.find_spec("jax_plugins") is None
    if importlib.util.find_spec("libtpu") is None and no_plugin:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    cache = runconfig.cache_dir(_CONFIG.value.study.base)
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    from coda import study

    command = "python -m launch.study " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    table = study.run_study(_CONFIG.value, workdir, command=command)
    logging.info(
        "study: %d cells (%d failed), OOD ordering %s; %s",
        table["cells_total"],
        table["cells_failed"],
        " > ".join(table["ordering"]),
        os.path.join(workdir, "table1.md"),
    )


if __name__ == "__main__":
    app.run(main)
