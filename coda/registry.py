"""One registry style for every pluggable part (task families, policies, critics, engines,
potential compilers, LLM backends, memory layouts, physics backends, strategies).

A `Registry` maps names to entries. An entry is the object itself, or a ``"module:attribute"``
string imported on first lookup, so that the names are known, listed and checked without
importing what they name (JAX, MuJoCo, an SDK): `coda.registries` declares every built-in name
that way, and `coda.runconfig` checks a whole config against them before JAX is imported.
Looking up an unknown name raises `UnknownName`, whose message lists the valid names.

    from coda.registries import CRITICS
    critic = CRITICS.make("offline", n_probes=2)       # CRITICS["offline"](n_probes=2)
    CRITICS.register("mine", MyCritic)                  # or @CRITICS.register("mine")

Pure Python; imports nothing of coda.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownName(KeyError, ValueError):  # noqa: N818 - reads as what it is at the raise site
    """A name no registry entry has; the message lists the valid ones. A KeyError (a failed
    lookup) and a ValueError (a bad config value), so either `except` catches it."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class Registry(Mapping[str, T], Generic[T]):
    """name -> entry (an object, or ``"module:attribute"`` resolved on first lookup), in
    registration order. `kind` names what the entries are in error messages."""

    def __init__(self, kind: str, entries: Mapping[str, T | str] | None = None) -> None:
        self.kind = kind
        self._entries: dict[str, T | str] = {}
        for name, entry in (entries or {}).items():
            self.register(name, entry)

    def register(self, name: str, entry: T | str | None = None, *, replace: bool = False) -> Any:
        """Adds `entry` under `name` (a second registration of a name is an error unless
        `replace`). Without `entry`, a decorator: ``@REGISTRY.register("name")``."""
        if entry is None:

            def deco(obj: T) -> T:
                self.register(name, obj, replace=replace)
                return obj

            return deco
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} name must be a non-empty string, not {name!r}")
        if name in self._entries and not replace:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if isinstance(entry, str) and ":" not in entry:
            raise ValueError(f"{self.kind} {name!r}: a lazy entry is 'module:attribute'")
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Removes `name` (e.g. a test's toy entry); an unknown name raises `UnknownName`."""
        if name not in self._entries:
            raise UnknownName(self.unknown(name))
        del self._entries[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def unknown(self, name: Any) -> str:
        """The one-line message for a name no entry has."""
        return f"unknown {self.kind} {name!r}; valid: {', '.join(self._entries)}"

    def __getitem__(self, name: str) -> T:
        try:
            entry = self._entries[name]
        except (KeyError, TypeError):
            raise UnknownName(self.unknown(name)) from None
        if isinstance(entry, str):  # lazy: import once, keep the object
            module, _, attr = entry.partition(":")
            obj = getattr(importlib.import_module(module), attr)
            self._entries[name] = entry = obj
        return entry  # type: ignore[return-value]

    def make(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """``self[name](*args, **kwargs)``: an instance from a factory entry."""
        factory: Callable[..., Any] = self[name]  # type: ignore[assignment]
        return factory(*args, **kwargs)

    def build(self, name: str, /, **available: Any) -> Any:
        """``self[name](**kw)`` with kw the entries of `available` its signature names: the
        caller offers everything any entry may need (a critic's policy and backend, another
        critic's LLM client) and never switches on the name. A required parameter that is not
        offered is an error naming it."""
        factory = self[name]
        params = inspect.signature(factory).parameters
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            return factory(**available)  # type: ignore[operator]
        missing = [
            n
            for n, p in params.items()
            if p.default is inspect.Parameter.empty
            and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            and n not in available
        ]
        if missing:
            raise TypeError(f"{self.kind} {name!r} needs {missing}; offered: {sorted(available)}")
        return factory(**{k: v for k, v in available.items() if k in params})  # type: ignore[operator]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._entries)})"
