"""A factored scene s = (τ, σ, α): task, object layout, object attributes.

A scene is data (JSON round-trip); a scene *program* g is Python against the SDK in `sdk.py`
whose execution Exec(g, seed) produces one. Resampling exactly one factor keeps the other two
fixed: `resample(scene, "layout", seed)` changes only poses, "attributes" only sizes / masses /
frictions / colours, "task" only the task (roles, instruction, initial and terminal states).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from typing import Any

import numpy as np

from coda.sim import assets

FACTORS = ("task", "layout", "attributes")

# Workspace regions (metres, world frame); the gripper's home is at x=0.3, facing +x.
TABLE_REGION = ((0.32, 0.62), (-0.24, 0.24))
BACK_REGION = ((0.66, 0.72), (-0.18, 0.18))  # cabinets, fronts facing the gripper (-x)
MIN_GAP = 0.02  # m between footprints at sampling time


@dataclasses.dataclass
class ObjectSpec:
    name: str
    category: str
    instance: str
    role: str | None = None


@dataclasses.dataclass
class Scene:
    objects: list[ObjectSpec]
    task: dict[str, Any]  # τ: family, instruction, roles, params, initial, terminal
    layout: dict[str, dict[str, float]]  # σ: name -> {x, y, yaw}
    attributes: dict[str, dict[str, Any]]  # α: name -> {dims, mass, friction, rgba}
    seed: int = 0
    program: str | None = None

    def object(self, name: str) -> ObjectSpec:
        for o in self.objects:
            if o.name == name:
                return o
        raise KeyError(f"no object {name!r}; objects: {[o.name for o in self.objects]}")

    def role(self, role: str) -> ObjectSpec:
        return self.object(self.task["roles"][role])

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "objects": [dataclasses.asdict(o) for o in self.objects],
            "task": self.task,
            "layout": self.layout,
            "attributes": self.attributes,
            "seed": self.seed,
            "program": self.program,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Scene:
        return cls(
            objects=[ObjectSpec(**o) for o in d["objects"]],
            task=d["task"],
            layout={k: dict(v) for k, v in d["layout"].items()},
            attributes=d["attributes"],
            seed=int(d.get("seed", 0)),
            program=d.get("program"),
        )

    @classmethod
    def from_json(cls, s: str) -> Scene:
        return cls.from_dict(json.loads(s))

    def structure(self) -> tuple:
        """What must match for two scenes to share an MJX bucket (continuous values excluded)."""
        objs = tuple(
            (o.category, assets.get_category(o.category).instance(o.instance).variant, o.role)
            for o in self.objects
        )
        params = tuple(sorted((k, str(v)) for k, v in self.task.get("params", {}).items()))
        return (self.task["family"], params, objs)


def footprint_radius(category: str, attrs: dict[str, Any], instance: str | None = None) -> float:
    """Conservative xy radius of an object's footprint (for layout sampling)."""
    dims = attrs["dims"]
    cat = assets.get_category(category)
    inst = cat.instance(instance)
    p = max(inst.proportions[0], inst.proportions[1])
    if "inner_half" in dims:
        return (dims["inner_half"] * p + 0.012) * math.sqrt(2)
    if "hole_half" in dims:
        return (dims["hole_half"] + 0.03 * inst.proportions[0]) * math.sqrt(2)
    if "depth" in dims:
        return 0.5 * math.hypot(dims["depth"], dims["width"] * inst.proportions[1]) + 0.05
    if "half" in dims:
        return dims["half"] * p * math.sqrt(2)
    r = dims["radius"] * inst.proportions[0]
    if inst.variant == "banana":
        return 2.2 * r
    return r


def sample_layout(
    objects: list[ObjectSpec],
    attributes: dict[str, dict],
    rng: np.random.Generator,
    fixed: dict[str, dict] | None = None,
    max_tries: int = 200,
) -> dict[str, dict]:
    """Rejection-samples non-overlapping poses; articulated fixtures go to the back region."""
    layout: dict[str, dict] = dict(fixed or {})
    placed = [
        (p["x"], p["y"], footprint_radius(o.category, attributes[o.name], o.instance))
        for o in objects
        if (p := layout.get(o.name)) is not None
    ]
    order = sorted(
        objects, key=lambda o: -footprint_radius(o.category, attributes[o.name], o.instance)
    )
    for o in order:
        if o.name in layout:
            continue
        cat = assets.get_category(o.category)
        r = footprint_radius(o.category, attributes[o.name], o.instance)
        region = BACK_REGION if cat.articulated else TABLE_REGION
        for _ in range(max_tries):
            x = float(rng.uniform(*region[0]))
            y = float(rng.uniform(*region[1]))
            if all(math.hypot(x - px, y - py) >= r + pr + MIN_GAP for px, py, pr in placed):
                break
        else:  # keep the last draw; verification will report the overlap
            pass
        if cat.articulated:
            yaw = float(rng.uniform(-0.2, 0.2))
        elif cat.kind == assets.FIXTURE:
            yaw = float(rng.uniform(-0.4, 0.4))
        else:
            yaw = float(rng.uniform(-math.pi / 2, math.pi / 2))
        layout[o.name] = {"x": round(x, 5), "y": round(y, 5), "yaw": round(yaw, 5)}
        placed.append((x, y, r))
    return layout


def sample_attributes(
    objects: list[ObjectSpec], rng: np.random.Generator, fixed: dict[str, dict] | None = None
) -> dict[str, dict]:
    attrs = dict(fixed or {})
    for o in objects:
        if o.name not in attrs:
            cat = assets.get_category(o.category)
            attrs[o.name] = cat.sample_attributes(rng, cat.instance(o.instance))
    return attrs


def resample(scene: Scene, factor: str, seed: int) -> Scene:
    """A copy of `scene` with exactly one factor resampled (deterministic in `seed`)."""
    from coda.sim import tasks  # late import: tasks import scene

    if factor not in FACTORS:
        raise ValueError(f"unknown factor {factor!r}; valid: {FACTORS}")
    rng = np.random.default_rng(seed)
    new = copy.deepcopy(scene)
    if factor == "layout":
        new.layout = sample_layout(new.objects, new.attributes, rng)
    elif factor == "attributes":
        new.attributes = sample_attributes(new.objects, rng)
        tasks.get_family(new.task["family"]).couple_attributes(new)
    else:
        new.task = tasks.get_family(new.task["family"]).resample_task(new, rng)
    new.program = None  # the scene no longer equals Exec(g); the engine writes a new g
    return new
