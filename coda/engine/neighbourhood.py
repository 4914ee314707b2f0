"""Neighbourhood edits: one factor of a scene put where a mode's failures were.

A diagnosed difficulty lives somewhere: a region of the table, a distance between the task's
objects, a band of masses or sizes, a category, an action. These edits put the scene there and
vary everything else of the same factor (the objects that play no task role are redrawn):

    place_in_region(boxes, distances=[], rest="resample", side="inside")   # layout
        boxes     {role: [[x_lo, x_hi], [y_lo, y_hi]]}: each role's object inside its box (m)
        distances [[role_a, role_b, lo, hi], ...]: xy distance between two roles' objects in
                  [lo, hi] m (rejection-sampled together with the boxes)
        rest      "resample": every other object re-placed at random, clear of them; "keep":
                  the others stay, the roles' spots must be clear of them
    set_in_bands(bands, rest="resample", side="inside")                    # attributes
        bands     {role: {field: [lo, hi]}}; field: a dims key (half, radius, ...), "width"
                  (the object's width key), "mass" or "friction"; absolute values, each drawn
                  uniformly in the band cut to the object's category range (a band outside the
                  range gives its nearest end); fields an object does not have are skipped
        rest      "resample": the attributes of objects that play no task role redrawn
    choose_task(categories, params={})                                     # task
        categories {role: [category, ...]}: the role played by an object of one of them
        params     {task parameter: [value, ...]} (e.g. action: [open]): the goal relation
        One of the tasks the family accepts on the scene's objects that meets both, drawn
        uniformly (the base's own task among them); unnamed roles and parameters keep theirs.

``side="outside"`` is the control of a recreate pair (`coda.engine.pairs`): each box axis, band
and distance band of the program drawn outside its interval, uniformly over what is left of the
object's range (the region, the category's range, 0-0.566 m), when at least `MIN_OUTSIDE` of
the range is left; else anywhere in the range (an interval that covers nearly all of it names
no direction to move away in). Roles are symbolic (`coda.engine.roles`). Every method raises
`SceneProgramError` when the scene cannot be put there (no clear spot, no object of those
categories).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from coda.engine.roles import concrete_task_role
from coda.sim import assets, tasks
from coda.sim.scene import (
    BACK_REGION,
    MIN_GAP,
    TABLE_REGION,
    sample_attributes,
    sample_layout,
)
from coda.sim.sdk import SceneProgramError

__all__ = [
    "EDIT_NAMES",
    "RESTS",
    "NeighbourhoodMixin",
    "check_bands",
    "check_boxes",
    "check_choices",
    "check_distances",
    "check_rest",
    "object_region",
]

RESTS = ("resample", "keep")
SIDES = ("inside", "outside")
MIN_OUTSIDE = 0.1  # an "outside" draw needs this share of the range left outside the band
DISTANCE_SPAN = 0.566  # m: the span of distances (the sampling region's diagonal)
EDIT_NAMES = ("place_in_region", "set_in_bands", "choose_task")  # as program edits
WIDTH_KEYS = ("half", "radius", "inner_half", "width", "hole_half")


# ----------------------------------------------------------------------------- parameter checks


def _pair(v: Any, what: str) -> list[float]:
    ok = (
        isinstance(v, (list, tuple))
        and len(v) == 2
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        and math.isfinite(v[0])
        and math.isfinite(v[1])
        and v[0] <= v[1]
    )
    if not ok:
        raise ValueError(f"{what} must be [lo, hi] numbers with lo <= hi, got {v!r}")
    return [float(v[0]), float(v[1])]


def _role_key(r: Any) -> str:
    if not isinstance(r, str) or not r:
        raise ValueError(f"a role must be a non-empty name, got {r!r}")
    return r


def check_boxes(v: Any) -> dict[str, list[list[float]]]:
    """{role: [[x_lo, x_hi], [y_lo, y_hi]]} (at least one role)."""
    if not isinstance(v, Mapping) or not v:
        raise ValueError("must be a non-empty {role: [[x_lo, x_hi], [y_lo, y_hi]]}")
    out = {}
    for r, box in v.items():
        if not isinstance(box, (list, tuple)) or len(box) != 2:
            raise ValueError(f"box of {r!r} must be [[x_lo, x_hi], [y_lo, y_hi]], got {box!r}")
        out[_role_key(r)] = [_pair(box[0], f"{r}.x"), _pair(box[1], f"{r}.y")]
    return out


def check_distances(v: Any) -> list[list[Any]]:
    """[[role_a, role_b, lo, hi], ...] (may be empty)."""
    if not isinstance(v, (list, tuple)):
        raise ValueError(f"must be a list of [role_a, role_b, lo, hi], got {v!r}")
    out = []
    for d in v:
        if not isinstance(d, (list, tuple)) or len(d) != 4:
            raise ValueError(f"each distance must be [role_a, role_b, lo, hi], got {d!r}")
        lo, hi = _pair(d[2:], "distance")
        if lo < 0:
            raise ValueError(f"a distance band must be >= 0, got {d!r}")
        out.append([_role_key(d[0]), _role_key(d[1]), lo, hi])
    return out


def check_bands(v: Any) -> dict[str, dict[str, list[float]]]:
    """{role: {field: [lo, hi]}} (at least one role, each with at least one field)."""
    if not isinstance(v, Mapping) or not v:
        raise ValueError("must be a non-empty {role: {field: [lo, hi]}}")
    out = {}
    for r, fields in v.items():
        if not isinstance(fields, Mapping) or not fields:
            raise ValueError(f"bands of {r!r} must be a non-empty {{field: [lo, hi]}}")
        out[_role_key(r)] = {str(k): _pair(b, f"{r}.{k}") for k, b in fields.items()}
    return out


def check_choices(v: Any) -> dict[str, list[Any]]:
    """{name: [value, ...]} with JSON scalar values (may be empty)."""
    if not isinstance(v, Mapping):
        raise ValueError(f"must be a {{name: [value, ...]}}, got {v!r}")
    out = {}
    for k, vals in v.items():
        ok = isinstance(vals, (list, tuple)) and vals
        if not ok or any(not isinstance(x, (str, int, float)) or x is True for x in vals):
            raise ValueError(f"{k!r} must be a non-empty list of strings or numbers, got {vals!r}")
        out[_role_key(k)] = list(vals)
    return out


def check_side(v: Any) -> str:
    if v not in SIDES:
        raise ValueError(f"must be one of {list(SIDES)}, got {v!r}")
    return v


def check_rest(v: Any) -> str:
    if v not in RESTS:
        raise ValueError(f"must be one of {list(RESTS)}, got {v!r}")
    return v


# ----------------------------------------------------------------------------- helpers


def object_region(category: str) -> tuple[tuple[float, float], tuple[float, float]]:
    """Where the family samples an object of `category` (articulated fixtures at the back)."""
    return BACK_REGION if assets.get_category(category).articulated else TABLE_REGION


def _outside(lo: float, hi: float, a: float, b: float, rng: Any) -> float:
    """A value of [a, b] outside [lo, hi], uniform over what is left, when that is at least
    `MIN_OUTSIDE` of [a, b]; else anywhere in [a, b] (a band that covers nearly the whole range
    names no direction to move away in)."""
    left, right = max(min(lo, b) - a, 0.0), max(b - max(hi, a), 0.0)
    if left + right < MIN_OUTSIDE * (b - a) or left + right <= 0.0:
        return float(rng.uniform(a, b))
    u = float(rng.uniform(0.0, left + right))
    return a + u if u < left else max(hi, a) + (u - left)


def _cut(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    """[lo, hi] cut to [a, b]; a band that misses it collapses to its nearest end."""
    lo2, hi2 = max(lo, a), min(hi, b)
    if lo2 <= hi2:
        return lo2, hi2
    end = a if hi < a else b
    return end, end


class NeighbourhoodMixin:
    """The neighbourhood edits of `coda.engine.edits.EditBuilder` (module docstring)."""

    # ------------------------------------------------------------ layout
    def _placed_clear(self, name: str, x: float, y: float, placed: Sequence[tuple]) -> bool:
        r = self.footprint(name)
        tb = self.table
        on_table = (
            tb["x"] - tb["half_x"] + r <= x <= tb["x"] + tb["half_x"] - r
            and tb["y"] - tb["half_y"] + r <= y <= tb["y"] + tb["half_y"] - r
        )
        return on_table and all(
            math.hypot(x - px, y - py) >= r + pr + MIN_GAP for px, py, pr in placed
        )

    def _draw_roles(self, names, samplers, dists, fixed, tries) -> dict[str, tuple[float, float]]:
        """Rejection-samples the roles' spots: `samplers` give (x, y) per role, `dists` are
        (name_a, name_b, ok(d)) predicates; each spot clear of `fixed` and of the others."""
        for _ in range(tries):
            placed, pos = list(fixed), {}
            for n, draw in zip(names, samplers, strict=True):
                x, y = draw()
                if not self._placed_clear(n, x, y, placed):
                    break
                pos[n] = (x, y)
                placed.append((x, y, self.footprint(n)))
            else:
                if all(
                    ok(math.hypot(pos[a][0] - pos[b][0], pos[a][1] - pos[b][1]))
                    for a, b, ok in dists
                ):
                    return pos
        raise SceneProgramError(
            f"no clear placement of {list(names)} at the asked boxes and distances after "
            f"{tries} draws"
        )

    def _layout_constraints(self, names, boxes, distances, side):
        """Per role an (x, y) sampler and per role pair a distance predicate: inside the boxes
        and bands, or (``side="outside"``) outside each one that leaves room (`_outside`)."""
        samplers = []
        for n, ((x0, x1), (y0, y1)) in zip(names, boxes.values(), strict=True):
            (rx0, rx1), (ry0, ry1) = object_region(self._check(n).category)
            if side == "inside":
                (a0, a1), (b0, b1) = _cut(x0, x1, rx0, rx1), _cut(y0, y1, ry0, ry1)
                samplers.append(
                    lambda a0=a0, a1=a1, b0=b0, b1=b1: (
                        float(self.rng.uniform(a0, a1)),
                        float(self.rng.uniform(b0, b1)),
                    )
                )
            else:
                bx, by = (x0, x1, rx0, rx1), (y0, y1, ry0, ry1)
                samplers.append(
                    lambda bx=bx, by=by: (_outside(*bx, self.rng), _outside(*by, self.rng))
                )
        dists = []
        for a, b, lo, hi in distances:
            na, nb = self.role(a), self.role(b)
            if side == "inside":
                dists.append((na, nb, lambda d, lo=lo, hi=hi: lo <= d <= hi))
            elif lo + max(DISTANCE_SPAN - hi, 0.0) >= MIN_OUTSIDE * DISTANCE_SPAN:
                dists.append((na, nb, lambda d, lo=lo, hi=hi: not lo <= d <= hi))
        return samplers, dists

    def place_in_region(
        self,
        boxes: Mapping[str, Sequence[Sequence[float]]],
        distances: Sequence[Sequence[Any]] = (),
        rest: str = "resample",
        side: str = "inside",
        tries: int = 400,
    ) -> None:
        """Puts each role's object inside its box (and role pairs at distances in their bands),
        or outside them (``side="outside"``), the other objects re-placed at random
        (``rest="resample"``) or left (``"keep"``); see the module docstring."""
        try:
            boxes, distances = check_boxes(boxes), check_distances(distances)
            rest, side = check_rest(rest), check_side(side)
        except ValueError as e:
            raise SceneProgramError(f"place_in_region: {e}") from None
        names = [self.role(r) for r in boxes]
        if len(set(names)) != len(names):
            raise SceneProgramError(f"place_in_region: two roles name one object: {list(boxes)}")
        samplers, dists = self._layout_constraints(names, boxes, distances, side)
        others = [o for o in self.objects if o.name not in names]
        fixed = []
        if rest == "keep":
            fixed = [
                (self.layout[o.name]["x"], self.layout[o.name]["y"], self.footprint(o.name))
                for o in others
            ]
        pos = self._draw_roles(names, samplers, dists, fixed, tries)
        new = {
            n: {**self.layout[n], "x": round(x, 5), "y": round(y, 5)} for n, (x, y) in pos.items()
        }
        if rest == "resample":
            new = sample_layout(
                self.objects, self.attributes, self.rng, fixed=new, table=self.table
            )
        for n, p in new.items():
            self.set_layout(n, p["x"], p["y"], p.get("yaw", 0.0))

    # ------------------------------------------------------------ attributes
    def _band_value(self, lo: float, hi: float, a: float, b: float, side: str) -> float:
        if side == "outside":
            return _outside(lo, hi, a, b, self.rng)
        a, b = _cut(lo, hi, a, b)
        return float(self.rng.uniform(a, b))

    def set_in_bands(
        self,
        bands: Mapping[str, Mapping[str, Sequence[float]]],
        rest: str = "resample",
        side: str = "inside",
    ) -> None:
        """Each role's fields drawn inside their bands (cut to the category's range), the
        objects that play no task role redrawn (``rest="resample"``) or left; module doc."""
        try:
            bands, rest, side = check_bands(bands), check_rest(rest), check_side(side)
        except ValueError as e:
            raise SceneProgramError(f"set_in_bands: {e}") from None
        if rest == "resample":
            bound = set(self.task.get("roles", {}).values())
            keep = {n: a for n, a in self.attributes.items() if n in bound}
            for n, a in sample_attributes(self.objects, self.rng, fixed=keep).items():
                if n not in bound:
                    self.set_attributes(n, dims=a["dims"], mass=a["mass"], friction=a["friction"])
        for r, fields in bands.items():
            name = self.role(r)
            cat = assets.get_category(self._check(name).category)
            dims, kw = {}, {}
            for field, (lo, hi) in fields.items():
                key = (
                    next((k for k in WIDTH_KEYS if k in cat.dims), "")
                    if field == "width"
                    else field
                )
                if key in ("mass", "friction"):
                    kw[key] = round(self._band_value(lo, hi, *getattr(cat, key), side), 6)
                elif key in cat.dims:
                    dims[key] = round(self._band_value(lo, hi, *cat.dims[key], side), 6)
            self.set_attributes(name, dims=dims or None, **kw)

    # ------------------------------------------------------------ task
    def _task_options(self, categories: dict[str, list], params: dict[str, list]) -> list[dict]:
        scene = self._scene()
        fam = tasks.get_family(self.task["family"])
        base = {**self.task.get("params", {}), **self.task.get("roles", {})}
        slots = []  # (key in make_task's params, candidate values)
        for r, cats in categories.items():
            key = concrete_task_role(scene, r)
            if key is None:
                raise SceneProgramError(
                    f"choose_task: {r!r} is not a task role here; task roles: "
                    f"{sorted(self.task.get('roles', {}))}"
                )
            slots.append((key, [o.name for o in self.objects if o.category in cats]))
        slots += [(k, list(v)) for k, v in params.items()]
        found, seen = [], set()
        for combo in itertools.product(*(vals for _, vals in slots)):
            kw = {**base, **dict(zip((k for k, _ in slots), combo, strict=True))}
            try:
                task = fam.make_task(self.objects, kw)
            except (SceneProgramError, ValueError, KeyError):
                continue
            ok = all(
                self._check(task["roles"][concrete_task_role(scene, r)]).category in cats
                for r, cats in categories.items()
            ) and all(task.get("params", {}).get(k) in v for k, v in params.items())
            sig = repr(sorted({**task.get("params", {}), **task["roles"]}.items()))
            if ok and sig not in seen:
                seen.add(sig)
                found.append({**task.get("params", {}), **task["roles"]})
        return found

    def choose_task(
        self, categories: Mapping[str, Sequence[str]], params: Mapping[str, Sequence[Any]] = {}
    ) -> None:
        """One task the family accepts here whose roles' categories and parameters are in the
        given sets, drawn uniformly (module docstring)."""
        try:
            categories, params = check_choices(categories), check_choices(params)
        except ValueError as e:
            raise SceneProgramError(f"choose_task: {e}") from None
        found = self._task_options(categories, params)
        if not found:
            raise SceneProgramError(
                f"choose_task: no task of this scene has {categories} and {params}; objects: "
                f"{[(o.name, o.category) for o in self.objects]}"
            )
        self.set_task(self.task["family"], **found[int(self.rng.integers(len(found)))])


# ----------------------------------------------------------------------------- as program edits


def _focus(v: Any) -> str | None:
    return None if v is None else _role_key(v)


def _with_focus(e: Mapping[str, Any], roles: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*([e["focus"]] if e.get("focus") else []), *roles]))


def _region_roles(e: Mapping[str, Any]) -> tuple[str, ...]:
    return _with_focus(e, [*e["boxes"], *(r for d in e["distances"] for r in d[:2])])


def edit_specs(make: Any) -> tuple[Any, ...]:
    """The three edits as `coda.engine.programs.EditSpec`s (`make` is that class): name,
    factor, no role slots (their roles are the keys of their parameters), parameters with
    their checkers, the builder call, the roles named in the parameters (``focus`` first: the
    role the difficulty is about, the program's primary role)."""
    focus = ("focus", _focus, None)
    return (
        make(
            "place_in_region",
            "layout",
            (),
            (
                ("boxes", check_boxes, {}),
                ("distances", check_distances, []),
                ("rest", check_rest, "resample"),
                ("side", check_side, "inside"),
                focus,
            ),
            lambda b, r, p: b.place_in_region(p["boxes"], p["distances"], p["rest"], p["side"]),
            _region_roles,
        ),
        make(
            "set_in_bands",
            "attributes",
            (),
            (
                ("bands", check_bands, {}),
                ("rest", check_rest, "resample"),
                ("side", check_side, "inside"),
                focus,
            ),
            lambda b, r, p: b.set_in_bands(p["bands"], p["rest"], p["side"]),
            lambda e: _with_focus(e, list(e["bands"])),
        ),
        make(
            "choose_task",
            "task",
            (),
            (("categories", check_choices, {}), ("params", check_choices, {}), focus),
            lambda b, r, p: b.choose_task(p["categories"], p["params"]),
            lambda e: _with_focus(e, list(e["categories"])),
        ),
    )


def edit_source(e: Mapping[str, Any]) -> str:
    """One neighbourhood edit as SDK source (its roles declared by role(...) calls first)."""
    name = e["edit"]
    if name == "place_in_region":
        roles, call = (
            _region_roles(e),
            (
                f"place_in_region({json.dumps(e['boxes'])}, {json.dumps(e['distances'])}, "
                f"{json.dumps(e['rest'])}, {json.dumps(e['side'])})"
            ),
        )
    elif name == "set_in_bands":
        roles = _with_focus(e, list(e["bands"]))
        call = (
            f"set_in_bands({json.dumps(e['bands'])}, {json.dumps(e['rest'])}, "
            f"{json.dumps(e['side'])})"
        )
    elif name == "choose_task":
        roles = _with_focus(e, list(e["categories"]))
        call = f"choose_task({json.dumps(e['categories'])}, {json.dumps(e['params'])})"
    else:
        raise ValueError(f"not a neighbourhood edit: {name!r}")
    return "".join(f"role({json.dumps(r)})\n" for r in roles) + call
