"""Directed counterfactual probes: one factor of a failed scene moved on purpose, not redrawn.

Besides random redraws (`coda.sim.scene.resample`), the critic probes each factor of the focus
object (the object the task acts on: the task's first role, e.g. pick_place's target, stack's
top, articulated's cabinet) in a chosen direction:

- `away`: a value far from the failing one. Layout: the focus object moved to the other side of
  its region on both table axes (to the 20 % / 80 % point of the region's span on the side
  opposite its current one; if that overlaps another object, a few other free spots between
  there and the middle on both axes, then only the y, then only the x axis is moved).
  Attributes: every size, the mass and the friction of the focus object set to the other end
  of its category's range (the end farther from the current value). If the failure is
  keyed to that factor's value, an away probe should succeed.
- `relation` (layout, second round): the focus object's distance to the task's second role
  object (its destination / base / hole) moved to the other end: far pairs brought together,
  near ones taken apart (`layout_relation`).
- `near`: a small perturbation that should keep failing when the failure is keyed to the value
  (layout: the focus object shifted `NEAR_SHIFT` in a seeded direction; attributes: sizes, mass
  and friction scaled by 1 +- `NEAR_SCALE`). A near probe that succeeds says the failure is not
  tied to the exact value: it is a control, like a repeat of the unchanged scene.
- `recategorized` (task): the focus role played by an object of another category, in place: the
  focus object replaced by an instance of another graspable category that the family accepts
  for the role (`make_task` validates it; the instruction names the new object), keeping its
  name, pose, mass and friction, with sizes scaled so its narrowest horizontal width matches the
  old object's (the width the jaws span). A category-keyed failure flips; a size, weight,
  friction or position-keyed one does not. Families with several goal relations already change
  the relation in their own task resample (articulated: open <-> close).

Each builder returns a new `Scene` (program cleared) or None when the probe does not exist
(no focus object, no other accepted category, no free spot). Probes are verified by the caller.
"""

from __future__ import annotations

import copy
import math

import numpy as np

from coda.sim import assets
from coda.sim.builder import SceneProgramError
from coda.sim.compile import compile_scene
from coda.sim.scene import (
    BACK_REGION,
    MIN_GAP,
    TABLE_REGION,
    ObjectSpec,
    Scene,
    footprint_radius,
)
from coda.sim.tasks import get_family

NEAR_SHIFT = 0.015  # m: a near layout probe moves the focus object this far
NEAR_SCALE = 0.03  # relative: a near attribute probe scales sizes / mass / friction by 1 +- this
AWAY_QUANTILE = 0.2  # an away layout probe goes to this fraction of the region from its far end
AWAY_TRIES = 6  # other spots on the far side tried when that point is taken


def focus_object(scene: Scene) -> str | None:
    """The object the task acts on: the task's first role's object (None without roles)."""
    roles = scene.task.get("roles", {})
    return next(iter(roles.values()), None)


def _fresh(scene: Scene) -> Scene:
    out = copy.deepcopy(scene)
    out.program = None  # the scene no longer equals Exec(g)
    return out


def _region(scene: Scene, name: str) -> tuple[tuple[float, float], tuple[float, float]]:
    cat = assets.get_category(scene.object(name).category)
    return BACK_REGION if cat.articulated else TABLE_REGION


def _free(scene: Scene, name: str, x: float, y: float) -> bool:
    """No other object's footprint within the sampling gap of `name` placed at (x, y)."""
    o = scene.object(name)
    r = footprint_radius(o.category, scene.attributes[name], o.instance)
    for other in scene.objects:
        if other.name == name:
            continue
        p = scene.layout[other.name]
        ro = footprint_radius(other.category, scene.attributes[other.name], other.instance)
        if math.hypot(x - p["x"], y - p["y"]) < r + ro + MIN_GAP:
            return False
    return True


def _other_side(v: float, lo: float, hi: float) -> float:
    q = AWAY_QUANTILE if v > 0.5 * (lo + hi) else 1.0 - AWAY_QUANTILE
    return lo + q * (hi - lo)


def layout_away(scene: Scene, seed: int) -> Scene | None:
    """The focus object moved to the other side of its region (module docstring); a seeded
    jitter of up to 1 cm makes retries differ. None when every option overlaps an object."""
    name = focus_object(scene)
    if name is None:
        return None
    rng = np.random.default_rng(seed)
    p = scene.layout[name]
    (x0, x1), (y0, y1) = _region(scene, name)
    jx, jy = rng.uniform(-0.01, 0.01, size=2)
    far_x, far_y = _other_side(p["x"], x0, x1) + jx, _other_side(p["y"], y0, y1) + jy
    # blocked: other free spots on the far side of both axes before moving one axis only
    qx = sorted((_other_side(p["x"], x0, x1), 0.5 * (x0 + x1)))
    qy = sorted((_other_side(p["y"], y0, y1), 0.5 * (y0 + y1)))
    spots = [(far_x, far_y)]
    spots += [(rng.uniform(*qx), rng.uniform(*qy)) for _ in range(AWAY_TRIES)]
    for x, y in (*spots, (p["x"], far_y), (far_x, p["y"])):
        if _free(scene, name, x, y):
            out = _fresh(scene)
            out.layout[name] = {**p, "x": round(float(x), 5), "y": round(float(y), 5)}
            return out
    return None


def _partner(scene: Scene) -> str | None:
    """The task's second role's object (where the focus object goes: a destination, a base, a
    hole; None when the task has one role)."""
    names = list(scene.task.get("roles", {}).values())
    return names[1] if len(names) > 1 else None


def layout_relation(scene: Scene, seed: int) -> Scene | None:
    """The focus object's distance to the task's second role object moved to the other end:
    a far pair brought next to each other (the focus object set down beside the partner, on
    the side it came from), a near one taken apart (to the far side of its region). The
    relation, not the position, is what changes most. None without a partner or a free spot."""
    name, other = focus_object(scene), _partner(scene)
    if name is None or other is None:
        return None
    rng = np.random.default_rng(seed)
    p, q = scene.layout[name], scene.layout[other]
    (x0, x1), (y0, y1) = _region(scene, name)
    dx, dy = p["x"] - q["x"], p["y"] - q["y"]
    d = math.hypot(dx, dy)
    span = math.hypot(x1 - x0, y1 - y0)
    o, po = scene.object(name), scene.object(other)
    r = footprint_radius(o.category, scene.attributes[name], o.instance)
    ro = footprint_radius(po.category, scene.attributes[other], po.instance)
    close = r + ro + MIN_GAP + 0.01
    for _ in range(8):
        a = math.atan2(dy, dx) + float(rng.uniform(-0.6, 0.6))
        if d > 0.5 * (close + 0.5 * span):  # far apart: set it down beside the partner
            x, y = q["x"] + close * math.cos(a), q["y"] + close * math.sin(a)
        else:  # close together: take it to the far side of the region from the partner
            x, y = _other_side(q["x"], x0, x1), _other_side(q["y"], y0, y1)
            x, y = x + float(rng.uniform(-0.02, 0.02)), y + float(rng.uniform(-0.02, 0.02))
        if x0 <= x <= x1 and y0 <= y <= y1 and _free(scene, name, x, y):
            out = _fresh(scene)
            out.layout[name] = {**p, "x": round(float(x), 5), "y": round(float(y), 5)}
            return out
    return None


def layout_near(scene: Scene, seed: int) -> Scene | None:
    """The focus object shifted `NEAR_SHIFT` in a seeded direction (None: no focus object)."""
    name = focus_object(scene)
    if name is None:
        return None
    a = float(np.random.default_rng(seed).uniform(0.0, 2.0 * math.pi))
    out = _fresh(scene)
    p = out.layout[name]
    x, y = p["x"] + NEAR_SHIFT * math.cos(a), p["y"] + NEAR_SHIFT * math.sin(a)
    out.layout[name] = {**p, "x": round(x, 5), "y": round(y, 5)}
    return out


def _far_end(v: float, lo: float, hi: float) -> float:
    return lo if v > 0.5 * (lo + hi) else hi


def attributes_away(scene: Scene, seed: int = 0) -> Scene | None:
    """The focus object's sizes, mass and friction at the other end of its category's ranges
    (deterministic: `seed` is unused). None without a focus object."""
    name = focus_object(scene)
    if name is None:
        return None
    out = _fresh(scene)
    cat = assets.get_category(out.object(name).category)
    a = out.attributes[name]
    a["dims"] = {
        k: round(_far_end(v, *cat.dims[k]), 5) if k in cat.dims else v for k, v in a["dims"].items()
    }
    a["mass"] = round(_far_end(a["mass"], *cat.mass), 5)
    a["friction"] = round(_far_end(a["friction"], *cat.friction), 5)
    get_family(out.task["family"]).couple_attributes(out)
    return out


def attributes_near(scene: Scene, seed: int) -> Scene | None:
    """The focus object's sizes, mass and friction each scaled by 1 +- `NEAR_SCALE` (signs
    seeded). None without a focus object."""
    name = focus_object(scene)
    if name is None:
        return None
    sign = np.random.default_rng(seed).choice([-1.0, 1.0], size=3)
    out = _fresh(scene)
    a = out.attributes[name]
    a["dims"] = {k: round(v * (1.0 + float(sign[0]) * NEAR_SCALE), 5) for k, v in a["dims"].items()}
    a["mass"] = round(a["mass"] * (1.0 + float(sign[1]) * NEAR_SCALE), 5)
    a["friction"] = round(a["friction"] * (1.0 + float(sign[2]) * NEAR_SCALE), 5)
    get_family(out.task["family"]).couple_attributes(out)
    return out


def _narrowest_width(scene: Scene, name: str) -> float:
    c = compile_scene(scene)
    half = c.consts["body_half"][c.object_bodies[name]]
    return float(2.0 * min(half[0], half[1]))


def recategorized(scene: Scene, seed: int) -> Scene | None:
    """The focus object replaced in place by an instance of another graspable category the
    family accepts for its role, holding name, pose, mass, friction and narrowest width (module
    docstring); categories tried in a seeded order. None when no other category is accepted."""
    name = focus_object(scene)
    if name is None:
        return None
    old = scene.object(name)
    if not assets.get_category(old.category).graspable:
        return None
    rng = np.random.default_rng(seed)
    family = get_family(scene.task["family"])
    cats = [
        c.name
        for c in assets.CATEGORIES.values()
        if c.name != old.category
        and c.split == "train"  # never a held-out category
        and family._graspables([ObjectSpec(name, c.name, c.instances[0].name)])
    ]
    for cname in [cats[i] for i in rng.permutation(len(cats))]:
        insts = assets.instances_for(cname, "train") or list(assets.get_category(cname).instances)
        if not insts:
            continue
        inst = insts[int(rng.integers(len(insts)))]
        out = _fresh(scene)
        spec = out.object(name)
        spec.category, spec.instance = cname, inst.name
        try:
            params = {**scene.task["params"], **scene.task["roles"]}
            out.task = family.make_task(out.objects, params)
        except (SceneProgramError, ValueError, KeyError):
            continue  # the family does not accept this category for the role
        old_a = scene.attributes[name]
        new_a = assets.get_category(cname).sample_attributes(rng, inst)
        new_a["mass"], new_a["friction"] = old_a["mass"], old_a["friction"]
        out.attributes[name] = new_a
        try:
            scale = _narrowest_width(scene, name) / max(_narrowest_width(out, name), 1e-6)
        except Exception:  # noqa: BLE001 - a category the compiler cannot place here
            continue
        new_a["dims"] = {k: round(v * scale, 5) for k, v in new_a["dims"].items()}
        family.couple_attributes(out)
        return out
    return None
