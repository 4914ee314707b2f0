"""What a long-lived process holds, bounded: compiled programs, their memory mappings, release.

Every XLA:CPU executable is machine code that the process maps into memory (a read-only, an
executable and a writable mapping per piece: ~18 for a small function, thousands for a policy
update). Linux caps a process's mappings at `vm.max_map_count` (65,530 by default); past it,
`mmap` fails inside native code (XLA, LLVM, MuJoCo) and the process dies with SIGSEGV instead of
raising. A process may live long here — a 15-round run, a study of many cells, a notebook, the
test suite in one process — so what a run compiles must be released when it ends:

* `RunCache`: the library's caches of compiled functions (ν, phase segmenters, MJX episodes,
  Φ endpoint programs, the learner's update programs). Bounded (least recently used dropped)
  and registered here, so that `release` empties every one of them; `register` adds other
  caches (LIBERO's compiled MuJoCo models).
* `release()`: the end of a run (`coda.loop.run`) and of each study cell. Empties the registered
  caches, JAX's own caches (`jax.clear_caches`: a jitted function whose static arguments are
  hashed by identity, e.g. a rollout agent, keeps every executable it ever compiled until then),
  stops MuJoCo's persistent rollout thread pool, and collects garbage. Compiled programs are
  rebuilt on next use — from the persistent compilation cache when one is configured.
* `check(where)`: one warning, with what to do, when the process holds more than
  `WARN_FRACTION` of `vm.max_map_count` — before native code crashes. The loop calls it after
  every round; it returns the process's numbers (`ProcessStats`) for logs and benchmarks.
* `executables()`: how many executables JAX built or loaded in this process (a compile counter,
  `jax.monitoring`), so "the same shapes must not compile twice" can be measured.

Host code only; nothing here is traced. Linux numbers come from /proc; elsewhere the mapping
counts are None and the checks are no-ops.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import logging
import resource
import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)

WARN_FRACTION = 0.8  # warn when mappings exceed this share of vm.max_map_count
_MAPS = "/proc/self/maps"
_MAX_MAPS = "/proc/sys/vm/max_map_count"
_STATUS = "/proc/self/status"


# ----------------------------------------------------------------------------- readings


def map_count() -> int | None:
    """Memory mappings the process holds now (lines of /proc/self/maps); None off Linux."""
    try:
        with open(_MAPS, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def max_map_count() -> int | None:
    """The kernel's per-process mapping limit (`vm.max_map_count`); None where unknown."""
    try:
        with open(_MAX_MAPS) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _status_mb(field: str) -> float | None:
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024.0  # kB
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_mb() -> float | None:
    """Resident memory now, MiB (VmRSS)."""
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    """Peak resident memory of the process so far, MiB (VmHWM; getrusage elsewhere)."""
    peak = _status_mb("VmHWM")
    if peak is not None:
        return peak
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru / (1024.0 * 1024.0) if sys.platform == "darwin" else ru / 1024.0


_COUNTS: collections.Counter = collections.Counter()
_COUNTING = threading.Lock()
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"


def _on_duration(event: str, duration: float, **_: Any) -> None:
    if event == _BACKEND_COMPILE:
        _COUNTS["executables"] += 1


def _on_event(event: str, **_: Any) -> None:
    if event == _CACHE_HIT:
        _COUNTS["cache_hits"] += 1


def count_compiles() -> None:
    """Start counting the executables JAX builds (idempotent; `coda.loop.run` calls it)."""
    with _COUNTING:
        if _COUNTS["listening"]:
            return
        from jax import monitoring

        monitoring.register_event_duration_secs_listener(_on_duration)
        monitoring.register_event_listener(_on_event)
        _COUNTS["listening"] = 1


def executables() -> dict[str, int]:
    """{"executables": built or loaded since counting started, "cache_hits": of those, loaded
    from the persistent compilation cache}. Zeros until `count_compiles()` is called."""
    return {"executables": _COUNTS["executables"], "cache_hits": _COUNTS["cache_hits"]}


class CompileLog:
    """Records every program JAX lowers for compilation while active, as (name, argument shapes
    and types): `with CompileLog() as c: ...; c.duplicates()` names what compiled twice with the
    same shapes (a jitted function rebuilt, or static arguments hashed by identity)."""

    _LOGGER = "jax._src.interpreters.pxla"
    _PREFIX = "Compiling %s with global shapes and types"

    def __init__(self) -> None:
        self.records: list[tuple[str, str]] = []
        outer = self

        class _Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if isinstance(record.msg, str) and record.msg.startswith(outer._PREFIX):
                    name, avals = record.args[0], record.args[1]
                    outer.records.append((str(name), str(avals)))

        self._handler = _Handler(level=logging.DEBUG)
        self._level: int | None = None

    def __enter__(self) -> CompileLog:
        lg = logging.getLogger(self._LOGGER)
        self._level = lg.level
        lg.addHandler(self._handler)
        if not lg.isEnabledFor(logging.DEBUG):
            lg.setLevel(logging.DEBUG)
        self._propagate, lg.propagate = lg.propagate, False  # records reach only this handler
        return self

    def __exit__(self, *exc: Any) -> None:
        lg = logging.getLogger(self._LOGGER)
        lg.removeHandler(self._handler)
        lg.setLevel(self._level or logging.NOTSET)
        lg.propagate = self._propagate

    def counts(self) -> collections.Counter:
        return collections.Counter(self.records)

    def duplicates(self) -> dict[tuple[str, str], int]:
        """{(program name, argument shapes): times lowered} for those lowered more than once."""
        return {k: n for k, n in self.counts().items() if n > 1}


@dataclasses.dataclass(frozen=True)
class ProcessStats:
    maps: int | None  # memory mappings now
    max_maps: int | None  # vm.max_map_count
    rss_mb: float | None  # resident memory now
    peak_rss_mb: float  # peak resident memory so far
    executables: int  # XLA executables built or loaded so far (count_compiles)
    cache_hits: int  # of those, loaded from the persistent compilation cache

    @property
    def map_fraction(self) -> float | None:
        if self.maps is None or not self.max_maps:
            return None
        return self.maps / self.max_maps

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["rss_mb"] = None if self.rss_mb is None else round(self.rss_mb, 1)
        d["peak_rss_mb"] = round(self.peak_rss_mb, 1)
        return d

    def line(self) -> str:
        maps = "n/a" if self.maps is None else f"{self.maps:,}"
        frac = self.map_fraction
        lim = "" if frac is None else f" ({100 * frac:.0f}% of vm.max_map_count {self.max_maps:,})"
        rss = "n/a" if self.rss_mb is None else f"{self.rss_mb:,.0f} MiB"
        return (
            f"{maps} memory mappings{lim}, RSS {rss} (peak {self.peak_rss_mb:,.0f} MiB), "
            f"{self.executables:,} XLA executables built or loaded"
        )


def stats() -> ProcessStats:
    ex = executables()
    return ProcessStats(
        maps=map_count(),
        max_maps=max_map_count(),
        rss_mb=rss_mb(),
        peak_rss_mb=peak_rss_mb(),
        executables=ex["executables"],
        cache_hits=ex["cache_hits"],
    )


# ----------------------------------------------------------------------------- the warning

_warned = threading.Event()


def check(where: str, fraction: float = WARN_FRACTION) -> ProcessStats:
    """The process's numbers now; one warning (until the count falls back below the line)
    when its mappings exceed `fraction` of vm.max_map_count."""
    s = stats()
    frac = s.map_fraction
    if frac is None or frac <= fraction:
        _warned.clear()
        return s
    if not _warned.is_set():
        _warned.set()
        log.warning(
            "%s: this process holds %s memory mappings, %.0f%% of the kernel's limit "
            "vm.max_map_count = %s; past it native code (XLA, MuJoCo) crashes with a "
            "segmentation fault instead of raising. Release what finished runs compiled "
            "(coda.lifetime.release(); coda.loop.run does it when a run ends), run fewer runs "
            "per process (one process per study cell), or raise the limit "
            "(sudo sysctl -w vm.max_map_count=262144).",
            where,
            f"{s.maps:,}",
            100 * frac,
            f"{s.max_maps:,}",
        )
    return s


# ----------------------------------------------------------------------------- caches

_REGISTRY: dict[str, Callable[[], Any]] = {}  # name -> what empties that cache


def register(name: str, clear: Callable[[], Any]) -> None:
    """Registers another cache that holds compiled programs or models (e.g. a
    `functools.lru_cache`'s `cache_clear`) for `release` to empty."""
    if name in _REGISTRY:
        raise ValueError(f"a cache named {name!r} is already registered")
    _REGISTRY[name] = clear


class RunCache:
    """A bounded, registered cache of compiled functions (least recently used dropped first).

    `name` is its entry in the registry that `release` empties; `maxsize` bounds what it keeps
    alive (each entry may hold many executables). Not thread-safe beyond the GIL's dict ops.
    """

    def __init__(self, name: str, maxsize: int):
        if maxsize < 1:
            raise ValueError(f"RunCache {name!r}: maxsize must be >= 1, got {maxsize}")
        self.name, self.maxsize = name, int(maxsize)
        self._d: collections.OrderedDict = collections.OrderedDict()
        self.hits = self.misses = 0
        register(name, self.clear)

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The entry for `key`, built by `make()` on a miss."""
        if key in self._d:
            self._d.move_to_end(key)
            self.hits += 1
            return self._d[key]
        self.misses += 1
        value = make()
        self._d[key] = value
        while len(self._d) > self.maxsize:
            self._d.popitem(last=False)
        return value

    def __contains__(self, key: Hashable) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def clear(self) -> int:
        n = len(self._d)
        self._d.clear()
        return n


def caches() -> list[str]:
    """The registered caches' names."""
    return list(_REGISTRY)


def release(*, jax_caches: bool = True, measure: bool = False) -> dict[str, Any]:
    """Drop what finished runs compiled; returns what was released.

    Empties every registered `RunCache`, then (`jax_caches`) JAX's compilation and tracing
    caches, stops MuJoCo's persistent rollout thread pool, and collects garbage. Objects the
    caller still holds (a learner, an agent) keep their own programs. `measure`: also count the
    mappings each step frees (`freed`: {step: mappings}), for benchmarks.
    """
    before = map_count()
    freed: dict[str, int] = {}
    entries: dict[str, int] = {}

    def step(name: str, fn: Callable[[], Any]) -> None:
        m0 = map_count() if measure else None
        out = fn()
        if measure:
            gc.collect()
            m1 = map_count()
            if m0 is not None and m1 is not None:
                freed[name] = m0 - m1
        if isinstance(out, int):
            entries[name] = out

    if measure:
        gc.collect()
        before = map_count()
    for name, clear in list(_REGISTRY.items()):
        step(name, clear)
    if jax_caches:
        import jax

        step("jax", jax.clear_caches)
    mj_rollout = sys.modules.get("mujoco.rollout")
    if mj_rollout is not None and hasattr(mj_rollout, "shutdown_persistent_pool"):
        step("mujoco_rollout_pool", mj_rollout.shutdown_persistent_pool)
    gc.collect()
    after = map_count()
    out: dict[str, Any] = {"maps_before": before, "maps_after": after, "entries": entries}
    if measure:
        out["freed"] = freed
    log.info("released compiled programs: %s -> %s memory mappings", _fmt(before), _fmt(after))
    return out


def _fmt(n: int | None) -> str:
    return "n/a" if n is None else f"{n:,}"
