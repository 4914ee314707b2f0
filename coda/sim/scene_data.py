"""Scene data: the factored record s = (τ, σ, α), its JSON checks, and the family-independent
samplers of layouts and attributes.

This module sits below the task families (they build τ over `ObjectSpec`s); `coda.sim.scene`
re-exports everything here and adds `resample`, which needs the families. Import from
`coda.sim.scene` unless you are a module the families depend on.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from coda.sim import assets

FACTORS = ("task", "layout", "attributes")

# Workspace regions (metres, world frame); the gripper's home is at x=0.3, facing +x.
TABLE_REGION = ((0.32, 0.62), (-0.24, 0.24))
BACK_REGION = ((0.66, 0.72), (-0.18, 0.18))  # cabinets, fronts facing the gripper (-x)
MIN_GAP = 0.02  # m between footprints at sampling time

# The table: a fixed box whose top surface is at z = 0 (every layout height, planner waypoint and
# predicate is relative to it). Its centre (x, y), half extents and height are a scene attribute;
# the default holds both sampling regions grown by the largest footprint radius sampled there
# (a cabinet's 0.26 m at x 0.72 reaches x 0.98; a long bin at a region's corner y +-0.42), so
# `sample_layout` never has to cut a region for it.
TABLE_DEFAULT = {"x": 0.5, "y": 0.0, "half_x": 0.5, "half_y": 0.5, "height": 0.75}
TABLE_LIMITS = {  # sensible ranges (m) for a person-scale tabletop
    "x": (-1.0, 2.0),
    "y": (-1.5, 1.5),
    "half_x": (0.1, 1.5),
    "half_y": (0.1, 1.5),
    "height": (0.2, 1.2),
}


def check_table(table: dict[str, Any] | None) -> dict[str, float]:
    """The table attribute completed with defaults and validated (a clear error names the field);
    None means the default table."""
    if table is None:
        return dict(TABLE_DEFAULT)
    if not isinstance(table, dict):
        raise ValueError(f"table must be a dict of {sorted(TABLE_DEFAULT)}, got {table!r}")
    unknown = set(table) - set(TABLE_DEFAULT)
    if unknown:
        raise ValueError(f"unknown table fields {sorted(unknown)}; valid: {sorted(TABLE_DEFAULT)}")
    out = dict(TABLE_DEFAULT)
    for k, v in table.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"table.{k} must be a finite number, got {v!r}")
        lo, hi = TABLE_LIMITS[k]
        if not lo <= v <= hi:
            raise ValueError(f"table.{k}={v!r} outside [{lo}, {hi}] m")
        out[k] = float(v)
    return out


class SceneFormatError(ValueError):
    """A scene record (JSON / dict) is malformed; the message says where and which field."""


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_record(d: Any, where: str = "scene") -> None:
    """Raises `SceneFormatError` naming the field when `d` cannot be a scene.

    Structure, known categories / instances and physically possible values (finite poses;
    finite, positive sizes, masses and frictions) are checked here, so a bad record fails where
    it is read instead of aborting a whole batch in MuJoCo's compiler. Values outside a
    category's metric range are possible scenes and are left to `verify`'s scale check.
    """

    def bad(field: str, why: str) -> SceneFormatError:
        return SceneFormatError(f"{where}: {field} {why}")

    if not isinstance(d, dict):
        raise bad("record", f"must be an object, got {type(d).__name__}")
    missing = [k for k in ("objects", "task", "layout", "attributes") if k not in d]
    if missing:
        raise bad(", ".join(missing), "missing")
    names = _check_objects(d["objects"], bad)
    _check_task(d["task"], names, bad)
    _check_layout(d, names, bad)
    _check_attributes(d, bad)
    seed = d.get("seed", 0)
    if not _finite(seed) or int(seed) != seed:
        raise bad("seed", f"must be an integer, got {seed!r}")
    if d.get("program") is not None and not isinstance(d["program"], str):
        raise bad("program", f"must be a string or null, got {type(d['program']).__name__}")


def _check_objects(objects: Any, bad: Callable[[str, str], SceneFormatError]) -> list[str]:
    """The object list of a record (keys, known category / instance, unique names) -> names."""
    if not isinstance(objects, list) or not objects:
        raise bad("objects", "must be a non-empty list")
    names: list[str] = []
    for i, o in enumerate(objects):
        f = f"objects[{i}]"
        if not isinstance(o, dict):
            raise bad(f, f"must be an object, got {type(o).__name__}")
        fields = {x.name for x in dataclasses.fields(ObjectSpec)}
        if set(o) - fields or {"name", "category", "instance"} - set(o):
            raise bad(f, f"has keys {sorted(o)}; needs name, category, instance (role optional)")
        for k in ("name", "category", "instance"):
            if not isinstance(o[k], str) or not o[k]:
                raise bad(f"{f}.{k}", f"must be a non-empty string, got {o[k]!r}")
        if o.get("role") is not None and not isinstance(o["role"], str):
            raise bad(f"{f}.role", f"must be a string or null, got {o['role']!r}")
        try:
            assets.get_category(o["category"]).instance(o["instance"])
        except KeyError as e:
            raise bad(f"{f} ({o['name']!r})", str(e.args[0])) from None
        if o["name"] in names:
            raise bad(f"{f}.name", f"{o['name']!r} is used twice")
        names.append(o["name"])
    return names


def _check_task(task: Any, names: list[str], bad: Callable[[str, str], SceneFormatError]) -> None:
    """The task: a family string, and roles bound to objects of the record."""
    if not isinstance(task, dict) or not isinstance(task.get("family"), str):
        raise bad("task", "must be an object with a 'family' string")
    roles = task.get("roles", {})
    if not isinstance(roles, dict):
        raise bad("task.roles", "must be an object {role: object name}")
    for r, n in roles.items():
        if n not in names:
            raise bad(f"task.roles.{r}", f"refers to unknown object {n!r}; objects: {names}")


def _check_layout(d: dict, names: list[str], bad: Callable[[str, str], SceneFormatError]) -> None:
    """Layout and attributes name exactly the record's objects; every pose is finite."""
    for factor in ("layout", "attributes"):
        if not isinstance(d[factor], dict):
            raise bad(factor, "must be an object {object name: ...}")
        extra = sorted(set(d[factor]) - set(names))
        if extra:
            raise bad(factor, f"has unknown objects {extra}; objects: {names}")
        absent = [n for n in names if n not in d[factor]]
        if absent:
            raise bad(factor, f"misses objects {absent}")
    for n, pose in d["layout"].items():
        if not isinstance(pose, dict) or not {"x", "y"} <= set(pose):
            raise bad(f"layout.{n}", f"must be an object with x, y (yaw, z optional), got {pose!r}")
        for k, v in pose.items():
            if k not in ("x", "y", "yaw", "z") or not _finite(v):
                raise bad(f"layout.{n}.{k}", f"must be a finite number, got {v!r}")


def _check_attributes(d: dict, bad: Callable[[str, str], SceneFormatError]) -> None:
    """Every object's sizes (its category's dims), mass and friction are positive and finite;
    rgba is 4 finite numbers."""
    cats = {o["name"]: assets.get_category(o["category"]) for o in d["objects"]}
    for n, a in d["attributes"].items():
        f = f"attributes.{n}"
        if not isinstance(a, dict) or not isinstance(a.get("dims"), dict):
            raise bad(f, "must be an object with dims, mass, friction, rgba")
        for k in cats[n].dims:
            v = a["dims"].get(k)
            if not _finite(v) or v <= 0:
                raise bad(f"{f}.dims.{k}", f"must be a positive finite size (m), got {v!r}")
        for k in ("mass", "friction"):
            if not _finite(a.get(k)) or a[k] <= 0:
                raise bad(f"{f}.{k}", f"must be a positive finite number, got {a.get(k)!r}")
        rgba = a.get("rgba")
        if not isinstance(rgba, list) or len(rgba) != 4 or not all(map(_finite, rgba)):
            raise bad(f"{f}.rgba", f"must be 4 finite numbers, got {rgba!r}")


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
    table: dict[str, float] = dataclasses.field(default_factory=lambda: dict(TABLE_DEFAULT))

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
            "table": self.table,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "scene") -> Scene:
        """The scene of a `to_dict` record; `SceneFormatError` (naming `where` and the field)
        if it is malformed."""
        check_record(d, where)
        return cls(
            objects=[ObjectSpec(**o) for o in d["objects"]],
            task=d["task"],
            layout={k: dict(v) for k, v in d["layout"].items()},
            attributes=d["attributes"],
            seed=int(d.get("seed", 0)),
            program=d.get("program"),
            table=check_table(d.get("table")),  # scenes saved before tables had one: default
        )

    @classmethod
    def from_json(cls, s: str, where: str = "scene JSON") -> Scene:
        """`where` prefixes errors (e.g. "scenes.jsonl:12" when reading a file line by line)."""
        try:
            d = json.loads(s)
        except json.JSONDecodeError as e:
            raise SceneFormatError(
                f"{where}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})"
            ) from None
        return cls.from_dict(d, where)

    def structure(self) -> tuple:
        """What must match for two scenes to share an MJX bucket (continuous values excluded).

        A bucket is scored by one ν and planned by one planner, so everything they read is
        structure: the family, the task params and which object plays each role (by position
        in `objects`, i.e. by tracked body; "stack blue on red" is not "stack red on blue")."""
        objs = tuple(
            (o.category, assets.get_category(o.category).instance(o.instance).variant, o.role)
            for o in self.objects
        )
        params = tuple(sorted((k, str(v)) for k, v in self.task.get("params", {}).items()))
        index = {o.name: i for i, o in enumerate(self.objects)}
        roles = tuple(sorted((r, index.get(n, -1)) for r, n in self.task.get("roles", {}).items()))
        return (self.task["family"], params, roles, objs)


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
    table: dict[str, float] | None = None,
) -> dict[str, dict]:
    """Rejection-samples non-overlapping poses; articulated fixtures go to the back region.
    Each region is cut to where the object's footprint stays on the table (a smaller table
    than the default shrinks the regions; one too small for a footprint pins it to the centre)."""
    tb = check_table(table)
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
        region = _on_table(BACK_REGION if cat.articulated else TABLE_REGION, tb, r)
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


def _on_table(region, table: dict[str, float], r: float):
    """`region` ((x0, x1), (y0, y1)) cut to centres whose radius-r footprint is on the table."""
    out = []
    for (lo, hi), c, h in (
        (region[0], table["x"], table["half_x"]),
        (region[1], table["y"], table["half_y"]),
    ):
        a, b = max(lo, c - h + r), min(hi, c + h - r)
        out.append((a, b) if a <= b else (c, c))
    return tuple(out)


def sample_attributes(
    objects: list[ObjectSpec], rng: np.random.Generator, fixed: dict[str, dict] | None = None
) -> dict[str, dict]:
    attrs = dict(fixed or {})
    for o in objects:
        if o.name not in attrs:
            cat = assets.get_category(o.category)
            attrs[o.name] = cat.sample_attributes(rng, cat.instance(o.instance))
    return attrs
