"""The scene SDK's implementation: `SceneBuilder` and running a program against it.

The builder knows no task family: `set_task(family, ...)` resolves the name through the
`families` mapping it is given. That keeps this module below the families (which run their own
proposals through it) and `coda.sim.sdk` above them (it binds the registry `FAMILIES`).
Program authors read `coda.sim.sdk`'s documentation; this module is its machinery.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from coda import sandbox
from coda.runconfig import SPLITS
from coda.sim import assets
from coda.sim.scene_data import (
    ObjectSpec,
    Scene,
    check_table,
    sample_attributes,
    sample_layout,
)


class SceneProgramError(ValueError):
    """A scene program called the SDK wrongly; the message is meant for the program's author."""


class SceneValueError(SceneProgramError):
    """An SDK call got an impossible or out-of-range value for one object's field.

    Raised at the call (not later by MuJoCo's compiler, where one bad size aborts a whole
    batch); `object` and `field` say what to repair. Values inside a category's metric range
    widened by the slack that `verify`'s scale check allows are accepted, so a scene the SDK
    builds never fails that check for a value the program set.
    """

    def __init__(self, obj: str, field: str, detail: str) -> None:
        super().__init__(f"object {obj!r}, field {field}: {detail}")
        self.object, self.field, self.detail = obj, field, detail

    def __reduce__(self):  # pickles across the sandbox's worker boundary
        return type(self), (self.object, self.field, self.detail)


def _number(obj: str, field: str, v: Any, positive: bool = False) -> float:
    """`v` as a finite float (positive if asked), else `SceneValueError` naming obj.field."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise SceneValueError(obj, field, f"must be a number, got {v!r}")
    v = float(v)
    if not math.isfinite(v):
        raise SceneValueError(obj, field, f"must be finite, got {v!r}")
    if positive and v <= 0:
        raise SceneValueError(obj, field, f"must be positive, got {v!r}")
    return v


def _name(what: str, v: Any, optional: bool = False) -> str | None:
    if (v is None and optional) or (isinstance(v, str) and v):
        return v
    raise SceneProgramError(f"{what} must be a non-empty string, got {v!r}")


class TaskMaker(Protocol):
    """What the builder needs of a task family (`coda.sim.tasks.TaskFamily` is one)."""

    def make_task(self, objects: list[ObjectSpec], params: dict[str, Any]) -> dict[str, Any]: ...

    def couple_attributes(self, scene: Scene) -> None: ...


class SceneBuilder:
    """The SDK's state while one program runs; `families` resolves `set_task(family, ...)`
    (name -> family), so the builder itself knows no family."""

    def __init__(self, seed: int, split: str = "train", *, families: Mapping[str, TaskMaker]):
        self.families = families
        if split not in SPLITS:  # a typo must not silently mean "all"
            raise SceneProgramError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.split = split
        self.objects: list[ObjectSpec] = []
        self.task: dict[str, Any] | None = None
        self.layout: dict[str, dict] = {}
        self.attributes: dict[str, dict] = {}
        self.table: dict[str, float] = check_table(None)

    # ---------------------------------------------------------------- objects
    def add_object(
        self,
        category: str,
        role: str | None = None,
        instance: str | None = None,
        name: str | None = None,
    ) -> str:
        _name("add_object: category", category)
        _name("add_object: role", role, optional=True)
        _name("add_object: instance", instance, optional=True)
        _name("add_object: name", name, optional=True)
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
        if family not in self.families:
            raise SceneProgramError(
                f"unknown task family {family!r}; valid: {sorted(self.families)}"
            )
        self.task = self.families[family].make_task(self.objects, params)

    def set_layout(self, name: str, x: float, y: float, yaw: float = 0.0) -> None:
        self._check(name)
        self.layout[name] = {k: _number(name, k, v) for k, v in (("x", x), ("y", y), ("yaw", yaw))}

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
            if not isinstance(dims, dict):
                raise SceneValueError(
                    name, "dims", f"must be a dict {{size: metres}}, got {dims!r}"
                )
            unknown = set(dims) - set(cat.dims)
            if unknown:
                raise SceneValueError(
                    name,
                    "dims",
                    f"has unknown sizes {sorted(unknown)} for a {obj.category}; "
                    f"valid: {sorted(cat.dims)}",
                )
            cur["dims"].update(
                {k: _number(name, f"dims.{k}", v, positive=True) for k, v in dims.items()}
            )
        if mass is not None:
            cur["mass"] = _number(name, "mass", mass, positive=True)
        if friction is not None:
            cur["friction"] = _number(name, "friction", friction, positive=True)
        if rgba is not None:
            if not isinstance(rgba, (list, tuple)) or len(rgba) != 4:
                raise SceneValueError(name, "rgba", f"needs 4 values in [0, 1], got {rgba!r}")
            cur["rgba"] = [_number(name, f"rgba[{i}]", c) for i, c in enumerate(rgba)]
            if not all(0.0 <= c <= 1.0 for c in cur["rgba"]):
                raise SceneValueError(name, "rgba", f"values must be in [0, 1], got {rgba!r}")
        for field, value in cat.scale_problems(cur):  # the program set it: defaults are in range
            key = field.split(".")[-1]
            lo, hi = cat.dims[key] if field.startswith("dims.") else getattr(cat, field)
            raise SceneValueError(
                name,
                field,
                f"{value:.4g} is outside the {obj.category} range [{lo:.4g}, {hi:.4g}] "
                f"(+-{assets.SCALE_SLACK:.0%} accepted)",
            )
        self.attributes[name] = cur

    def set_table(
        self,
        x: float | None = None,
        y: float | None = None,
        half_x: float | None = None,
        half_y: float | None = None,
        height: float | None = None,
    ) -> None:
        """The table's centre, half extents and height (its top stays at z = 0); unset fields
        keep their current value."""
        given = {"x": x, "y": y, "half_x": half_x, "half_y": half_y, "height": height}
        try:
            self.table = check_table(
                {**self.table, **{k: v for k, v in given.items() if v is not None}}
            )
        except ValueError as e:
            raise SceneProgramError(str(e)) from None

    def sample_attributes(self) -> None:
        self.attributes = sample_attributes(self.objects, self.rng, self.attributes)

    def sample_layout(self) -> None:
        self.sample_attributes()  # footprints depend on sizes
        self.layout = sample_layout(
            self.objects, self.attributes, self.rng, self.layout, table=self.table
        )

    # ---------------------------------------------------------------- randomness
    def uniform(self, lo: float, hi: float) -> float:
        ok = all(
            isinstance(v, (int, float, np.integer, np.floating))
            and not isinstance(v, bool)
            and math.isfinite(v)
            for v in (lo, hi)
        )
        if not ok or lo > hi:
            raise SceneProgramError(f"uniform(lo, hi) needs finite lo <= hi, got ({lo!r}, {hi!r})")
        return float(self.rng.uniform(lo, hi))

    def randint(self, lo: int, hi: int) -> int:
        for v in (lo, hi):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise SceneProgramError(f"randint(lo, hi) needs integers, got ({lo!r}, {hi!r})")
        if lo > hi:
            raise SceneProgramError(f"randint(lo, hi) needs lo <= hi, got ({lo}, {hi})")
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
        scene = Scene(
            list(self.objects),
            self.task,
            self.layout,
            self.attributes,
            self.seed,
            program,
            table=dict(self.table),
        )
        self.families[self.task["family"]].couple_attributes(scene)
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
            "set_table": self.set_table,
            "uniform": self.uniform,
            "randint": self.randint,
            "choice": self.choice,
        }


SDK_NAMES = tuple(SceneBuilder(0, families={}).namespace())


def _finish(builder: SceneBuilder, program: str) -> dict[str, Any]:
    return builder.build(program=program).to_dict()


def run_program(
    source: str,
    seed: int,
    split: str = "train",
    *,
    families: Mapping[str, TaskMaker],
    isolation: str = "subprocess",
    time_limit_s: float = 10.0,
    memory_limit_mb: float = 1024.0,
) -> Scene:
    """Exec(g, seed) with the families `set_task` may name: runs a scene program against a
    fresh SDK and returns the scene (`coda.sim.sdk.exec_program` binds the registered ones).

    Every program passes `coda.sandbox` (AST allowlist: SDK names + safe builtins only).
    `isolation="subprocess"` (default; required for LLM-written programs) runs it in a worker
    with CPU-time, memory and wall-clock limits; `"inprocess"` is for the project's own task
    generators, which are trusted and need to be fast. SDK misuse surfaces as `SandboxError`
    (stage "runtime") carrying the SDK's message, so the writer can repair the program.
    """
    builder = SceneBuilder(seed, split, families=families)
    ns = dict(builder.namespace())
    ns["finish_scene"] = functools.partial(_finish, builder, source)
    sandbox.validate(source, tuple(builder.namespace()))  # the user part, before the epilogue
    full = source.rstrip("\n") + "\nresult = finish_scene()\n"
    out = sandbox.execute(
        full, ns, time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb, isolation=isolation
    )
    return Scene.from_dict(out)
