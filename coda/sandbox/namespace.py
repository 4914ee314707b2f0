"""What a program may be handed: identifiers bound to values, never a module; a chosen set of a
module's functions travels as a ``RestrictedModule``.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["RestrictedModule", "restricted_module"]


def _check_namespace(namespace: Mapping[str, Any]) -> None:
    for k, v in namespace.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise ValueError(f"namespace key {k!r} is not an identifier")
        if isinstance(v, types.ModuleType):
            raise ValueError(
                f"namespace[{k!r}] is a module; modules expose file and process access. "
                "Pass restricted_module(module, names) instead."
            )


class RestrictedModule:
    """Chosen attributes of a module; pickles by (module name, names) so it reaches workers."""

    def __init__(self, module_name: str, names: Iterable[str]) -> None:
        import importlib

        module = importlib.import_module(module_name)
        self._spec = (module_name, tuple(names))
        for name in self._spec[1]:
            if name.startswith("_"):
                raise ValueError(f"cannot expose private attribute {name!r}")
            value = getattr(module, name)
            if isinstance(value, types.ModuleType):
                raise ValueError(f"{module_name}.{name} is a module; expose its functions instead")
            setattr(self, name, value)

    def __reduce__(self):
        return (RestrictedModule, self._spec)

    def __repr__(self) -> str:
        return f"RestrictedModule({self._spec[0]!r}, {list(self._spec[1])})"


def restricted_module(module: types.ModuleType, names: Iterable[str]) -> RestrictedModule:
    """Expose chosen attributes of a module (e.g. ``jax.numpy``) without the rest of it.

    Program code cannot reach the module itself: the object holds only the listed attributes
    (its private bookkeeping is behind an underscore, which the validator refuses).
    """
    return RestrictedModule(module.__name__, names)
