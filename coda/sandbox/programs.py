"""The two ways a program runs: ``execute`` (scene programs, in a worker subprocess by default) and
``compile_function`` (potential programs, compiled into an in-process function after an optional
probe in a worker).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from typing import Any

from coda.sandbox.base import Limits, SandboxError
from coda.sandbox.checker import validate
from coda.sandbox.inprocess import _run_in_process, _wrap_function
from coda.sandbox.namespace import _check_namespace
from coda.sandbox.worker import _run_worker

__all__ = ["compile_function", "execute"]


def execute(
    source: str,
    namespace: Mapping[str, Any],
    *,
    time_limit_s: float = 5.0,
    memory_limit_mb: float | None = 512.0,
    result_name: str | None = "result",
    profile: str = "scene",
    isolation: str = "subprocess",
    limits: Limits | None = None,
    start_method: str | None = None,
) -> Any:
    """Validate and run a program; return the value it bound to ``result_name``.

    ``isolation="subprocess"`` (default, required for scene programs) runs it in a worker with
    ``RLIMIT_CPU``/``RLIMIT_AS``, a CPU-time deadline and a wall-clock backstop; the namespace and
    the result travel by pickle, so SDK objects mutated by the program come back only through
    the result.
    ``isolation="inprocess"`` runs it here with only the line-tracer deadline (no memory limit);
    use it for trusted-shape programs such as already-probed potentials.
    Raises ``SandboxError`` for every failure of the program.
    """
    limits = limits or Limits()
    _check_namespace(namespace)
    if isolation not in ("subprocess", "inprocess"):
        raise ValueError(f"unknown isolation {isolation!r}; valid: ['inprocess', 'subprocess']")
    tree = validate(source, namespace.keys(), profile=profile, limits=limits)
    if isolation == "inprocess":
        env = _run_in_process(tree, namespace, limits, time_limit_s)
        if result_name is None:
            return None
        if result_name not in env:
            raise SandboxError(
                "result", f"program did not assign the variable {result_name!r} with its result"
            )
        return env[result_name]
    return _run_worker(
        source,
        namespace,
        profile=profile,
        limits=limits,
        time_limit_s=time_limit_s,
        memory_limit_mb=memory_limit_mb,
        result_name=result_name,
        call=None,
        start_method=start_method,
    )


def compile_function(
    source: str,
    entry: str,
    namespace: Mapping[str, Any],
    *,
    time_limit_s: float = 5.0,
    probe_args: tuple[Any, ...] | None = None,
    probe_memory_limit_mb: float | None = 1024.0,
    limits: Limits | None = None,
    start_method: str | None = None,
) -> Callable[..., Any]:
    """Validate a potential program and return its ``entry`` function, usable in-process.

    The function's globals are only ``namespace`` plus the safe builtins; calls run under a
    CPU-time deadline (of the calling thread) of ``time_limit_s``. With ``probe_args`` the
    program is first run once in a limited worker subprocess as ``entry(*probe_args)`` and its
    output must be finite, so a non-terminating, memory-hungry or NaN-producing potential is
    refused before it runs here.
    The result may be passed to ``jax.jit``; JAX's own tracing errors propagate unchanged.
    """
    limits = limits or Limits()
    _check_namespace(namespace)
    tree = validate(source, namespace.keys(), profile="potential", limits=limits)
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if entry not in defs:
        raise SandboxError(
            "validate", f"program must define a top-level function {entry!r}; found {sorted(defs)}"
        )
    if probe_args is not None:
        _run_worker(
            source,
            namespace,
            profile="potential",
            limits=limits,
            time_limit_s=time_limit_s,
            memory_limit_mb=probe_memory_limit_mb,
            result_name=None,
            call=(entry, tuple(probe_args)),
            start_method=start_method,
        )
    env = _run_in_process(tree, namespace, limits, time_limit_s)
    return _wrap_function(env[entry], time_limit_s)
