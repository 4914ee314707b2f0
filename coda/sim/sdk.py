"""The scene SDK that scene programs g are written against, and Exec(g, seed).

A scene program is plain Python calling only these names:

    add_object(category, role=None, instance=None, name=None) -> name
    set_task(family, **params)                       # τ (roles refer to object roles)
    set_layout(name, x, y, yaw=0.0)                  # σ, one object
    set_attributes(name, dims=None, mass=None, friction=None, rgba=None)   # α, one object
    sample_layout() / sample_attributes()            # fill what the program did not set
    set_table(x=None, y=None, half_x=None, half_y=None, height=None)   # the table (metres)
    uniform(lo, hi) / choice(options) / randint(lo, hi)   # the seeded RNG, for variation

Exec(g, seed) is deterministic: every random draw comes from `numpy.random.default_rng(seed)`.
Anything else (imports, attribute tricks, unknown names) is rejected before it runs: programs
are untrusted (LLM-written) and go through `coda.sandbox` when it is available.

`set_task` resolves family names through the registry `coda.sim.tasks.FAMILIES`; the builder
itself (`coda.sim.builder`) knows no family, so the families can run their own proposals
through it without an import circle.
"""

from __future__ import annotations

from coda.sim import builder as _builder
from coda.sim.builder import SDK_NAMES, SceneProgramError, SceneValueError
from coda.sim.scene_data import Scene
from coda.sim.tasks import FAMILIES

__all__ = [
    "SDK_NAMES",
    "SceneBuilder",
    "SceneProgramError",
    "SceneValueError",
    "exec_program",
]


class SceneBuilder(_builder.SceneBuilder):
    """The SDK with `set_task` resolving the registered families (`coda.sim.tasks.FAMILIES`)."""

    def __init__(self, seed: int, split: str = "train") -> None:
        super().__init__(seed, split, families=FAMILIES)


def exec_program(
    source: str,
    seed: int,
    split: str = "train",
    *,
    isolation: str = "subprocess",
    time_limit_s: float = 10.0,
    memory_limit_mb: float = 1024.0,
) -> Scene:
    """Exec(g, seed): runs a scene program against a fresh SDK and returns the scene.

    Every program passes `coda.sandbox` (AST allowlist: SDK names + safe builtins only).
    `isolation="subprocess"` (default; required for LLM-written programs) runs it in a worker
    with CPU-time, memory and wall-clock limits; `"inprocess"` is for the project's own task
    generators, which are trusted and need to be fast. SDK misuse surfaces as `SandboxError`
    (stage "runtime") carrying the SDK's message, so the writer can repair the program.
    """
    return _builder.run_program(
        source,
        seed,
        split,
        families=FAMILIES,
        isolation=isolation,
        time_limit_s=time_limit_s,
        memory_limit_mb=memory_limit_mb,
    )
