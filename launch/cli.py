"""Command-line checks shared by the entry points (`launch.main`, `launch.study`,
`launch.libero`): a config file that does not exist, a variant it rejects and an override of a
field it does not have are user typos, so each gets one line naming what is valid, before absl
parses the flags (ml_collections would print a traceback) and before JAX is imported."""

from __future__ import annotations

import difflib
import glob
import importlib.util
import inspect
import os
import re
from typing import Any

from absl import app


def config_arg(argv: list[str], default: str) -> str:
    """The `--config` value as written (the last one wins, as in absl), without loading it."""
    value, i = default, 1
    while i < len(argv) and argv[i] != "--":
        arg = argv[i]
        for prefix in ("--config=", "-config="):
            if arg.startswith(prefix):
                value = arg[len(prefix) :]
        if arg in ("--config", "-config") and i + 1 < len(argv):
            value, i = argv[i + 1], i + 1
        i += 1
    return value


def check_config_arg(spec: str) -> Any:
    """`app.UsageError` for a config file that does not exist or a variant it rejects.

    ml_collections would defer the first to a traceback inside the run and print the second as
    a traceback; both are user typos, so they get one line with the valid choices. Any other
    exception from the config file is a bug in it and keeps its traceback.
    """
    path, *variant = spec.split(":", 1)  # as ml_collections splits it
    if not os.path.isfile(path):
        found = sorted(glob.glob(os.path.join(os.path.dirname(path) or ".", "*.py")))
        raise app.UsageError(
            f"--config: no config file {path!r} (relative to {os.getcwd()}); "
            f"files there: {found or 'none'}"
        )
    mod_spec = importlib.util.spec_from_file_location("_coda_config_check", path)
    if mod_spec is None or mod_spec.loader is None:
        raise app.UsageError(f"--config: {path!r} is not a Python config file")
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    get_config = getattr(module, "get_config", None)
    if not callable(get_config):
        raise app.UsageError(f"--config: {path!r} defines no get_config()")
    if variant and not inspect.signature(get_config).parameters:
        raise app.UsageError(f"--config={spec!r}: {path!r} takes no variant (drop ':...')")
    try:
        return get_config(*variant)
    except ValueError as e:  # the convention for an unknown variant: message names the choices
        raise app.UsageError(f"--config={spec!r}: {e}") from None


def _override_names(argv: list[str]) -> list[str]:
    """The field paths of `--config.a.b=...` / `--config.a.b ...` / `--noconfig.a.b` overrides."""
    names = []
    for arg in argv[1:]:
        if arg == "--":
            break
        m = re.match(r"^--?(?:no)?config\.([^=]+)", arg)
        if m:
            names.append(m.group(1))
    return names


def check_overrides(argv: list[str], config: Any) -> None:
    """`app.UsageError` for an override naming a field the config does not have: the unknown
    field, the valid fields of its section and the closest match, in one line (ml_collections
    would raise an AttributeError traceback from inside flag parsing)."""
    for name in _override_names(argv):
        node, path = config, "config"
        for part in name.split("."):
            keys = list(node.keys()) if hasattr(node, "keys") else None
            if keys is None:
                raise app.UsageError(f"--config.{name}: {path} is a value, not a section")
            if part not in keys:
                close = difflib.get_close_matches(part, keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise app.UsageError(
                    f"--config.{name}: {path} has no field {part!r}{hint} "
                    f"(valid: {', '.join(sorted(keys))})"
                )
            node, path = node[part], f"{path}.{part}"


def check_argv(argv: list[str], default_config: str) -> None:
    """Checks the config file, its variant and the names of the fields the command line
    overrides (see above); a problem exits with the usage and one line naming it. Call it before
    `DEFINE_config_file`: without `--config=`, ml_collections applies the overrides to the
    default config while the flag is being defined."""
    try:
        check_overrides(argv, check_config_arg(config_arg(argv, default_config)))
    except app.UsageError as e:
        app.usage(shorthelp=True, detailed_error=e, exitcode=e.exitcode)
