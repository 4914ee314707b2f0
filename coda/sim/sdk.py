"""The scene SDK that scene programs g are written against, and Exec(g, seed).

A scene program is plain Python calling only these names:

    add_object(category, role=None, instance=None, name=None) -> name
    set_task(family, **params)                       # τ (roles refer to object roles)
    set_layout(name, x, y, yaw=0.0)                  # σ, one object
    set_attributes(name, dims=None, mass=None, friction=None, rgba=None)   # α, one object
    sample_layout() / sample_attributes()            # fill what the program did not set
    uniform(lo, hi) / choice(options) / randint(lo, hi)   # the seeded RNG, for variation

Exec(g, seed) is deterministic: every random draw comes from `numpy.random.default_rng(seed)`.
Anything else (imports, attribute tricks, unknown names) is rejected before it runs: programs
are untrusted (LLM-written) and go through `coda.sandbox` when it is available.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from coda.sim import assets
from coda.sim.scene import ObjectSpec, Scene, sample_attributes, sample_layout


class SceneProgramError(ValueError):
    """A scene program called the SDK wrongly; the message is meant for the program's author."""


class SceneBuilder:
    def __init__(self, seed: int, split: str = "train"):
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.split = split
        self.objects: list[ObjectSpec] = []
        self.task: dict[str, Any] | None = None
        self.layout: dict[str, dict] = {}
        self.attributes: dict[str, dict] = {}

    # ---------------------------------------------------------------- objects
    def add_object(
        self,
        category: str,
        role: str | None = None,
        instance: str | None = None,
        name: str | None = None,
    ) -> str:
        try:
            cat = assets.get_category(category)
        except KeyError as e:
            raise SceneProgramError(str(e.args[0])) from None
        if instance is None:
            pool = assets.instances_for(category, self.split) or list(cat.instances)
            instance = pool[int(self.rng.integers(len(pool)))].name
        try:
            cat.instance(instance)
        except KeyError as e:
            raise SceneProgramError(str(e.args[0])) from None
        name = name or role or f"{category}_{sum(o.category == category for o in self.objects)}"
        if any(o.name == name for o in self.objects):
            raise SceneProgramError(f"object name {name!r} already used")
        if role is not None and any(o.role == role for o in self.objects):
            raise SceneProgramError(f"role {role!r} already assigned")
        if len(self.objects) >= 8:
            raise SceneProgramError("at most 8 objects per scene")
        self.objects.append(ObjectSpec(name, category, instance, role))
        return name

    # ---------------------------------------------------------------- factors
    def set_task(self, family: str, **params: Any) -> None:
        from coda.sim import tasks

        try:
            fam = tasks.get_family(family)
        except KeyError as e:
            raise SceneProgramError(str(e.args[0])) from None
        self.task = fam.make_task(self.objects, params)

    def set_layout(self, name: str, x: float, y: float, yaw: float = 0.0) -> None:
        self._check(name)
        self.layout[name] = {"x": float(x), "y": float(y), "yaw": float(yaw)}

    def set_attributes(
        self,
        name: str,
        dims: dict | None = None,
        mass: float | None = None,
        friction: float | None = None,
        rgba: list | None = None,
    ) -> None:
        obj = self._check(name)
        cat = assets.get_category(obj.category)
        cur = self.attributes.get(name) or cat.default_attributes(cat.instance(obj.instance))
        cur = {**cur, "dims": dict(cur["dims"])}
        if dims is not None:
            unknown = set(dims) - set(cat.dims)
            if unknown:
                raise SceneProgramError(
                    f"unknown dims {sorted(unknown)} for {obj.category}; valid: {sorted(cat.dims)}"
                )
            cur["dims"].update({k: float(v) for k, v in dims.items()})
        if mass is not None:
            cur["mass"] = float(mass)
        if friction is not None:
            cur["friction"] = float(friction)
        if rgba is not None:
            if len(rgba) != 4:
                raise SceneProgramError("rgba needs 4 values")
            cur["rgba"] = [float(c) for c in rgba]
        self.attributes[name] = cur

    def sample_attributes(self) -> None:
        self.attributes = sample_attributes(self.objects, self.rng, self.attributes)

    def sample_layout(self) -> None:
        self.sample_attributes()  # footprints depend on sizes
        self.layout = sample_layout(self.objects, self.attributes, self.rng, self.layout)

    # ---------------------------------------------------------------- randomness
    def uniform(self, lo: float, hi: float) -> float:
        return float(self.rng.uniform(lo, hi))

    def randint(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi + 1))

    def choice(self, options):
        options = list(options)
        if not options:
            raise SceneProgramError("choice() of an empty sequence")
        return options[int(self.rng.integers(len(options)))]

    # ---------------------------------------------------------------- finish
    def _check(self, name: str) -> ObjectSpec:
        for o in self.objects:
            if o.name == name:
                return o
        raise SceneProgramError(f"no object {name!r}; objects: {[o.name for o in self.objects]}")

    def build(self, program: str | None = None) -> Scene:
        if not self.objects:
            raise SceneProgramError("the program added no objects")
        if self.task is None:
            raise SceneProgramError("the program never called set_task(...)")
        self.sample_attributes()
        self.sample_layout()
        from coda.sim import tasks

        scene = Scene(
            list(self.objects), self.task, self.layout, self.attributes, self.seed, program
        )
        tasks.get_family(self.task["family"]).couple_attributes(scene)
        return scene

    def namespace(self) -> dict[str, Any]:
        """The names a scene program may call."""
        return {
            "add_object": self.add_object,
            "set_task": self.set_task,
            "set_layout": self.set_layout,
            "set_attributes": self.set_attributes,
            "sample_layout": self.sample_layout,
            "sample_attributes": self.sample_attributes,
            "uniform": self.uniform,
            "randint": self.randint,
            "choice": self.choice,
        }


SDK_NAMES = tuple(SceneBuilder(0).namespace())


def _finish(builder: SceneBuilder, program: str) -> dict[str, Any]:
    return builder.build(program=program).to_dict()


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
    from coda import sandbox

    builder = SceneBuilder(seed, split)
    ns = dict(builder.namespace())
    ns["finish_scene"] = functools.partial(_finish, builder, source)
    sandbox.validate(source, tuple(builder.namespace()))  # the user part, before the epilogue
    full = source.rstrip("\n") + "\nresult = finish_scene()\n"
    out = sandbox.execute(
        full, ns, time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb, isolation=isolation
    )
    return Scene.from_dict(out)
