"""Gate 2: running a program in a worker subprocess with ``RLIMIT_CPU`` / ``RLIMIT_AS``, a CPU-time
deadline inside the worker and a wall-clock backstop in the parent.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import pickle
import sys
from collections.abc import Mapping
from typing import Any

from coda.sandbox.base import Limits, SandboxError
from coda.sandbox.checker import validate
from coda.sandbox.inprocess import _run_in_process, _translate, _wrap_function, ensure_finite

__all__: list[str] = []

_MB = 1024 * 1024


def _set_worker_limits(time_limit_s: float | None, memory_limit_mb: float | None) -> None:
    import resource

    if time_limit_s is not None:
        cpu = int(math.ceil(time_limit_s)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if memory_limit_mb is not None:
        # Budget on top of what the interpreter already maps, so limits mean "extra memory".
        with open("/proc/self/statm") as f:
            vm_pages = int(f.read().split()[0])
        current = vm_pages * os.sysconf("SC_PAGE_SIZE")
        cap = current + int(memory_limit_mb * _MB)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _worker_main(
    conn: Any,
    source: str,
    namespace: dict[str, Any],
    allowed: list[str],
    profile: str,
    limits: Limits,
    time_limit_s: float | None,
    memory_limit_mb: float | None,
    result_name: str | None,
    call: tuple[str, tuple[Any, ...]] | None,
) -> None:
    """Subprocess body: limit itself, run the program, send ('ok', value) or ('err', error)."""
    try:
        _set_worker_limits(time_limit_s, memory_limit_mb)
        sys.setrecursionlimit(2_000)
        tree = validate(source, allowed, profile=profile, limits=limits)
        env = _run_in_process(tree, namespace, limits, time_limit_s)
        if call is not None:
            fn_name, args = call
            fn = _wrap_function(env[fn_name], time_limit_s)
            value = fn(*args)
            if profile == "potential":
                ensure_finite(value, f"{fn_name}(probe)")
        elif result_name is None:
            value = None
        elif result_name not in env:
            raise SandboxError(
                "result", f"program did not assign the variable {result_name!r} with its result"
            )
        else:
            value = env[result_name]
        try:
            payload = pickle.dumps(("ok", value))
        except Exception as e:  # noqa: BLE001
            raise SandboxError(
                "result", f"program result is not transferable ({type(e).__name__}: {e})"
            ) from None
        conn.send_bytes(payload)
    except BaseException as e:  # noqa: BLE001
        err = _translate(e, time_limit_s)
        try:
            conn.send_bytes(pickle.dumps(("err", err)))
        except BaseException:  # noqa: BLE001 - e.g. out of memory while reporting
            os._exit(3)
    finally:
        conn.close()


def _default_start_method() -> str:
    # forkserver: the server is a clean single-threaded process, so forking from it is safe even
    # when the host runs JAX/XLA threads; namespaces travel by pickle.
    methods = mp.get_all_start_methods()
    return "forkserver" if "forkserver" in methods else "spawn"


def _run_worker(
    source: str,
    namespace: Mapping[str, Any],
    *,
    profile: str,
    limits: Limits,
    time_limit_s: float,
    memory_limit_mb: float | None,
    result_name: str | None,
    call: tuple[str, tuple[Any, ...]] | None,
    start_method: str | None,
) -> Any:
    ctx = mp.get_context(start_method or _default_start_method())
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_worker_main,
        args=(
            child,
            source,
            dict(namespace),
            sorted(namespace),
            profile,
            limits,
            time_limit_s,
            memory_limit_mb,
            result_name,
            call,
        ),
        daemon=True,
    )
    try:
        proc.start()
    except Exception as e:  # noqa: BLE001 - e.g. unpicklable namespace
        raise ValueError(f"could not start the sandbox worker: {type(e).__name__}: {e}") from e
    child.close()
    # The worker's own limits are CPU time (the tracer deadline, RLIMIT_CPU), which machine load
    # does not change. The wall-clock backstop only catches a worker that stops making progress
    # without using CPU; it is generous so that a loaded machine (worker start, unpickling, a
    # descheduled program) cannot turn a memory or runtime failure into a timeout.
    backstop = 4.0 * time_limit_s + 10.0
    try:
        if not parent.poll(backstop):
            raise SandboxError(
                "timeout",
                f"program exceeded its time limit of {time_limit_s} s "
                f"(no answer within the {backstop:.0f} s wall-clock backstop)",
            )
        try:
            status, value = pickle.loads(parent.recv_bytes())
        except (EOFError, OSError):
            proc.join(1.0)
            code = proc.exitcode
            import signal

            if code == -signal.SIGXCPU or code == -signal.SIGKILL:
                raise SandboxError(
                    "timeout", f"program exceeded its CPU-time limit of {time_limit_s} s"
                ) from None
            if code == 3:
                raise SandboxError("memory", "program exceeded its memory limit") from None
            raise SandboxError(
                "runtime", f"sandbox worker died unexpectedly (exit code {code})"
            ) from None
    finally:
        parent.close()
        if proc.is_alive():
            proc.kill()
        proc.join(2.0)
    if status == "err":
        raise value
    return value
