"""Entry point: `python -m launch.main --config=configs/coda.py --workdir=runs/x`."""

from __future__ import annotations

import os

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/coda.py", "Experiment config file (see configs/).", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", "runs/default", "Run folder (created if missing).")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    import jax

    cache = os.path.join(os.path.abspath(_WORKDIR.value), "..", ".jax_cache")
    jax.config.update("jax_compilation_cache_dir", os.path.normpath(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)

    from coda import loop

    logging.info("config:\n%s", _CONFIG.value)
    summary = loop.run(_CONFIG.value, _WORKDIR.value)
    logging.info("summary: %s", summary["headline"])


if __name__ == "__main__":
    app.run(main)
