"""What every stage of the sandbox shares: the structured error, the static limits, the name of
program frames, and the safe builtins a program may use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SANDBOX_FILENAME", "SAFE_BUILTIN_NAMES", "Limits", "SandboxError"]

SANDBOX_FILENAME = "<sandbox>"


class SandboxError(Exception):
    """A program was refused or failed; carries what an LLM needs to repair it.

    ``stage`` is one of ``syntax``, ``validate``, ``runtime``, ``timeout``, ``memory``,
    ``result``; ``line`` is the 1-based line in the program (``None`` when unknown).
    """

    STAGES = ("syntax", "validate", "runtime", "timeout", "memory", "result")

    def __init__(self, stage: str, reason: str, line: int | None = None) -> None:
        if stage not in self.STAGES:
            raise ValueError(f"unknown sandbox stage {stage!r}; valid: {self.STAGES}")
        self.stage = stage
        self.reason = reason
        self.line = line
        where = f" (line {line})" if line is not None else ""
        super().__init__(f"[{stage}]{where} {reason}")

    def to_feedback(self) -> dict[str, Any]:
        """JSON-ready form for repair prompts and memory traces."""
        return {"stage": self.stage, "line": self.line, "reason": self.reason}

    def __reduce__(self):  # picklable across the worker pipe
        return (SandboxError, (self.stage, self.reason, self.line))


@dataclass(frozen=True)
class Limits:
    """Static bounds checked before anything runs; generous for real programs."""

    max_source_chars: int = 50_000
    max_nodes: int = 20_000
    max_depth: int = 60
    max_str_len: int = 4_096
    max_int_abs: int = 10**9
    max_display_elems: int = 1_000
    max_pow_exponent: int = 64
    max_range_len: int = 100_000


def _safe_range(limit: int) -> Callable[..., range]:
    def safe_range(*args: int) -> range:
        r = range(*args)
        if len(r) > limit:
            raise ValueError(f"range of length {len(r)} exceeds the sandbox limit {limit}")
        return r

    safe_range.__name__ = "range"
    return safe_range


_SAFE_BUILTINS_BASE: dict[str, Any] = {
    "abs": abs,
    "all": all,
    "any": any,
    "bool": bool,
    "dict": dict,
    "divmod": divmod,
    "enumerate": enumerate,
    "filter": filter,
    "float": float,
    "int": int,
    "isinstance": isinstance,
    "len": len,
    "list": list,
    "map": map,
    "max": max,
    "min": min,
    "reversed": reversed,
    "round": round,
    "set": set,
    "sorted": sorted,
    "str": str,
    "sum": sum,
    "tuple": tuple,
    "zip": zip,
    "frozenset": frozenset,
    "True": True,
    "False": False,
    "None": None,
    # Assertion failures must be raisable by `assert`.
    "AssertionError": AssertionError,
}
SAFE_BUILTIN_NAMES = frozenset(_SAFE_BUILTINS_BASE) | {"range"}


def _safe_builtins(limits: Limits) -> dict[str, Any]:
    out = dict(_SAFE_BUILTINS_BASE)
    out["range"] = _safe_range(limits.max_range_len)
    return out
