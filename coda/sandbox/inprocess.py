"""Running a validated program in this process: restricted globals, a CPU-time deadline enforced by
a line tracer on sandboxed frames, and the mapping of any failure to a ``SandboxError``.
"""

from __future__ import annotations

import ast
import functools
import sys
import time
import traceback
import types
from collections.abc import Callable, Mapping
from typing import Any

from coda.sandbox.base import SANDBOX_FILENAME, Limits, SandboxError, _safe_builtins

__all__ = ["ensure_finite"]


class _Deadline(BaseException):
    """Raised inside sandboxed frames at the deadline; BaseException so helpers can't swallow it."""


def _install_deadline(limit_s: float | None) -> Callable[[], None]:
    """Trace only sandboxed frames and interrupt them at the deadline; returns an uninstaller.

    The deadline counts the CPU time of the thread running the program (`time.thread_time`), not
    wall-clock time: on a loaded machine (CI, parallel tests, JAX threads in the host) a program
    that is descheduled would otherwise hit its time limit before the limit it really exceeds
    (e.g. a doubling allocation reported as a timeout instead of a memory blow-up, depending on
    the machine's load). Wall-clock time is still bounded by the parent's deadline
    in subprocess isolation.
    """
    if limit_s is None:
        return lambda: None
    deadline = time.thread_time() + limit_s
    previous = sys.gettrace()

    def local(frame: types.FrameType, event: str, arg: Any):
        if time.thread_time() > deadline:
            raise _Deadline()
        return local

    def global_trace(frame: types.FrameType, event: str, arg: Any):
        if frame.f_code.co_filename != SANDBOX_FILENAME:
            return None
        if time.thread_time() > deadline:
            raise _Deadline()
        return local

    sys.settrace(global_trace)
    return lambda: sys.settrace(previous)


def _program_line(tb: types.TracebackType | None) -> int | None:
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == SANDBOX_FILENAME:
            line = lineno
    return line


def _translate(exc: BaseException, limit_s: float | None) -> SandboxError:
    """Map an exception raised while running a program to a structured error."""
    if isinstance(exc, SandboxError):
        return exc
    line = _program_line(exc.__traceback__)
    if isinstance(exc, _Deadline):
        return SandboxError("timeout", f"program exceeded its time limit of {limit_s} s", line)
    if isinstance(exc, MemoryError):
        return SandboxError("memory", "program exceeded its memory limit", line)
    if isinstance(exc, RecursionError):
        return SandboxError("runtime", "recursion too deep (RecursionError)", line)
    if isinstance(exc, AssertionError):
        msg = str(exc) or "assertion failed"
        return SandboxError("runtime", f"AssertionError: {msg}", line)
    msg = str(exc)
    if len(msg) > 500:
        msg = msg[:500] + "..."
    return SandboxError("runtime", f"{type(exc).__name__}: {msg}", line)


def _run_in_process(
    tree: ast.Module,
    namespace: Mapping[str, Any],
    limits: Limits,
    time_limit_s: float | None,
) -> dict[str, Any]:
    code = compile(tree, SANDBOX_FILENAME, "exec")
    env: dict[str, Any] = {"__builtins__": _safe_builtins(limits)}
    env.update(namespace)
    uninstall = _install_deadline(time_limit_s)
    try:
        exec(code, env)  # noqa: S102 - the whole point: validated, restricted globals
    except BaseException as e:  # noqa: BLE001 - every failure becomes a structured value
        uninstall()
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        raise _translate(e, time_limit_s) from None
    uninstall()
    return env


def ensure_finite(value: Any, what: str = "potential") -> None:
    """Raise ``SandboxError('result')`` unless ``value`` is numeric and all-finite."""
    import numpy as np

    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise SandboxError(
            "result", f"{what} returned a non-numeric value of type {type(value).__name__}"
        ) from None
    if not np.all(np.isfinite(arr)):
        n_bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise SandboxError("result", f"{what} returned non-finite values (NaN/inf in {n_bad})")


def _wrap_function(fn: Callable[..., Any], time_limit_s: float | None) -> Callable[..., Any]:
    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        uninstall = _install_deadline(time_limit_s)
        try:
            return fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            if type(e).__module__.startswith("jax") and not isinstance(e, _Deadline):
                raise  # JAX tracing errors (e.g. concretization) keep their own type and message
            raise _translate(e, time_limit_s) from None
        finally:
            uninstall()

    return guarded
