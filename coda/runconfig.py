"""Checks of a run config (`configs/*.py`) and where a run keeps its caches; pure Python.

`launch.main` calls `validate` before JAX is imported and before anything is written to the
run folder, so a typo is one line naming the field and its valid choices instead of a crash
minutes into the run (or, worse, a run that silently does something else: an unknown split
used to mean "all"). `loop.run` calls it again for configs built in code, with the registered
task families. No JAX / MuJoCo imports here: that is the point.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

SPLITS = ("train", "heldout", "all")  # object instances / categories a run may sample
BACKENDS = ("auto", "native", "mjx")  # `coda.sim.rollout.make_backend` names
CACHE_ENV = "CODA_CACHE_DIR"
DEFAULT_CACHE_DIR = os.path.join("~", ".cache", "coda", "jax")

_MISSING = object()


class ConfigError(ValueError):
    """A run config field is missing or has an invalid value; the message names the field."""


def _get(config: Any, dotted: str) -> Any:
    obj = config
    for part in dotted.split("."):
        try:
            obj = obj[part] if isinstance(obj, dict) else getattr(obj, part)
        except (AttributeError, KeyError):
            return _MISSING
    return obj


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def problems(config: Any, families: Iterable[str] | None = None) -> list[str]:
    """Every invalid field of `config` as 'field: why (valid: ...)'; empty when it is valid.

    `families`: the registered task family names, when known (they need `coda.sim.tasks`,
    which imports JAX); None skips that check.
    """
    out: list[str] = []

    def choice(field: str, valid: tuple[str, ...]) -> None:
        v = _get(config, field)
        if v is _MISSING:
            out.append(f"{field}: missing (valid: {', '.join(valid)})")
        elif v not in valid:
            out.append(f"{field}={v!r} is unknown (valid: {', '.join(valid)})")

    def integer(field: str, lo: int) -> None:
        v = _get(config, field)
        if v is _MISSING:
            out.append(f"{field}: missing (an integer >= {lo})")
        elif not _is_int(v) or v < lo:
            out.append(f"{field}={v!r} must be an integer >= {lo}")

    choice("sim.backend", BACKENDS)
    choice("sim.split", SPLITS)
    integer("seed", 0)
    integer("sim.num_chunks", 1)
    integer("sim.horizon", 1)
    integer("sim.programs_per_family", 1)
    integer("sim.seeds_per_program", 1)
    integer("sim.nthread", 0)
    fams = _get(config, "sim.families")
    if fams is _MISSING:
        out.append("sim.families: missing (a non-empty list of task family names)")
    elif isinstance(fams, str) or not fams or not all(isinstance(f, str) for f in fams):
        out.append(f"sim.families={fams!r} must be a non-empty list of task family names")
    else:
        dup = sorted({f for f in fams if list(fams).count(f) > 1})
        if dup:
            out.append(f"sim.families lists {dup} more than once")
        if families is not None:
            known = sorted(families)
            unknown = [f for f in fams if f not in known]
            if unknown:
                out.append(f"sim.families: unknown {unknown} (valid: {', '.join(known)})")
    if _get(config, "render") is not _MISSING:
        integer("render.width", 1)
        integer("render.height", 1)
        integer("render.per_family", 0)
    cache = _get(config, "cache_dir")
    if cache is not _MISSING and cache is not None and not isinstance(cache, str):
        out.append(f"cache_dir={cache!r} must be a path string ('' = default)")
    return out


def validate(config: Any, families: Iterable[str] | None = None) -> None:
    """Raises `ConfigError` listing every invalid field (one line), else returns None."""
    bad = problems(config, families)
    if bad:
        raise ConfigError("invalid config: " + "; ".join(bad))


def check_workdir(workdir: str) -> str:
    """The absolute run folder; `ConfigError` if it is a file or cannot be created/written."""
    path = os.path.abspath(os.path.expanduser(workdir))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"--workdir={workdir!r} is a file, not a folder")
    parent = path
    while not os.path.exists(parent):  # nearest existing ancestor decides creatability
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"--workdir={workdir!r} cannot be created: {parent!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--workdir={workdir!r}: {parent!r} is not writable")
    return path


def cache_dir(config: Any = None) -> str:
    """JAX's persistent compilation cache folder: `config.cache_dir` if set, else
    `$CODA_CACHE_DIR`, else ~/.cache/coda/jax (shared by runs; never inside a run folder)."""
    value = _get(config, "cache_dir") if config is not None else _MISSING
    if value is _MISSING or not value:
        value = os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
    return os.path.abspath(os.path.expanduser(str(value)))
