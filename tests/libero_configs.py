"""configs/libero.py loaded by path (configs/ is a folder of files, not a package), with
dotted-field overrides: shared by the LIBERO evaluation tests."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def libero_config(**fields):
    """`get_config()` with each `a.b=value` of `fields` set (e.g. `**{"panda.batch": 2}`)."""
    spec = importlib.util.spec_from_file_location("libero_config", ROOT / "configs" / "libero.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config()
    for k, v in fields.items():
        node = cfg
        *path, last = k.split(".")
        for p in path:
            node = node[p]
        node[last] = v
    return cfg
