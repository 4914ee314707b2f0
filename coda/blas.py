"""OpenBLAS's kernels pinned, so that runs give the same bits on every x86-64 machine.

numpy's OpenBLAS picks its kernels for the CPU it loads on (`DYNAMIC_ARCH`): `SkylakeX` on a CPU
with AVX-512, `Haswell` / `Zen` (the same kernels) on one with AVX2. The kernels sum in
different orders, so `np.linalg.pinv` / `inv` / `@` in the Panda's OSC controller and in the
scripted planner return different last bits on the two kinds of machine, and contact-rich
episodes amplify them into different steps and outcomes (measured: benchmarks/results/INDEX.md,
"The same bits on AVX2 and AVX-512 machines"). `pin` sets `OPENBLAS_CORETYPE=Haswell` where
the CPU has AVX2 and FMA, which OpenBLAS reads once, when numpy first loads it: so it must run
before anything imports numpy (`launch/__init__.py` and `tests/conftest.py` call it). With it,
a run on an AVX-512 machine reproduced an AVX2 machine's run step for step; numpy's own SIMD
loops gave the same bits with their AVX-512 paths disabled; XLA (ν) compiles for the host and
is not pinned. `core` names the kernels the running process uses (recorded with results).
No numpy import in this module.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import sys

PINNED = "Haswell"  # OpenBLAS's AVX2 + FMA kernels (also what it picks on AMD Zen 1-3)
VARIABLE = "OPENBLAS_CORETYPE"
NEEDS = ("avx2", "fma")  # the CPU flags the pinned kernels use
CORENAME = (  # the symbol by which an OpenBLAS build names its kernels, by build
    "scipy_openblas_get_corename64_",
    "scipy_openblas_get_corename",
    "openblas_get_corename64_",
    "openblas_get_corename",
)


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The first processor's flags in `/proc/cpuinfo` (empty where there is none)."""
    if cpuinfo is None:
        path = pathlib.Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def supported(cpuinfo: str | None = None) -> bool:
    """Whether this CPU runs the pinned kernels (`NEEDS`)."""
    return set(NEEDS) <= cpu_flags(cpuinfo)


def pin(environ=os.environ, cpuinfo: str | None = None, loaded=None) -> str | None:
    """Set `OPENBLAS_CORETYPE` to `PINNED` in `environ` where it is unset, numpy is not loaded
    yet (`loaded`: the imported modules, default `sys.modules`) and the CPU has `NEEDS`.
    -> the value set, or None (a value already there, set by the user, is kept)."""
    loaded = sys.modules if loaded is None else loaded
    if VARIABLE in environ or "numpy" in loaded:
        return None
    if not supported(cpuinfo):
        return None
    environ[VARIABLE] = PINNED
    return PINNED


def core() -> str:
    """The kernels the process's OpenBLAS uses ('Haswell', 'SkylakeX', ...), 'unknown' where
    no OpenBLAS is loaded or it does not say (call after numpy is imported)."""
    maps = pathlib.Path("/proc/self/maps")
    if not maps.exists():
        return "unknown"
    libs = {ln.split()[-1] for ln in maps.read_text().splitlines() if "openblas" in ln.lower()}
    for lib in sorted(libs):
        try:
            handle = ctypes.CDLL(lib)
        except OSError:
            continue
        for name in CORENAME:
            fn = getattr(handle, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return "unknown"
