"""Editing one factor of an existing scene through the SDK's own setters.

`EditBuilder` is the scene SDK (`coda.sim.sdk.SceneBuilder`) preloaded with a parent scene and
locked to one factor: ``set_layout`` is refused unless the factor is ``layout``,
``set_attributes`` unless it is ``attributes``, ``set_task`` unless it is ``task``; objects and
the table are fixed. Whatever edits run on it (the offline engine's parameterised edits, or an
LLM-written program in the sandbox), the result differs from its parent in that one factor only,
and every value still passes the SDK's own checks (known sizes, metric ranges, valid roles).

On top of the SDK the builder offers read helpers and parameterised edit helpers, which are also
what an LLM-written edit program may call (`EDIT_NAMES`, documented in `SDK_EXTRAS_DOC`):

    role(r) -> name                        # symbolic role -> object (see coda.engine.roles)
    pose(name) / attrs(name)               # the object's current pose / attributes (copies)
    size_range(name, field) -> [lo, hi]    # category range of a dims key, "width", mass, friction
    place_beside(subject, anchor, side, gap_lo, gap_hi)   # layout: subject next to anchor
    move_to_edge(name, margin_lo, margin_hi)              # layout: near the reachable edge
    shift(name, distance)                                 # layout: random direction
    set_quantile(name, field, q_lo, q_hi)                 # attributes: place in category range
    perturb(name, magnitude)                              # attributes: one random field
    rebind(role, exclude_roles=())                        # task: another object plays role
    resample_task()                                       # task: the family's own resample
    place_in_region / set_in_bands / choose_task          # a factor where failures were
                                                          # (coda.engine.neighbourhood)

Magnitudes (how far a variant moved from its parent) are measured afterwards by
`factor_magnitude`, in normalised units so that a control of another factor can be matched:
* layout: the largest object displacement / `LAYOUT_SCALE` (the diagonal of the table region
  where objects are sampled, 0.566 m);
* attributes: the largest change of one field (a dims key, mass or friction) as a fraction of its
  category range (hi - lo);
* task: the largest displacement of a task role's location (old object -> new object) /
  `LAYOUT_SCALE`; a task change that rebinds no role (articulated open <-> close, insertion
  depth) counts `TASK_PARAM_MAGNITUDE`.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np

from coda.engine.neighbourhood import NeighbourhoodMixin
from coda.engine.roles import available_roles, concrete_task_role, resolve_role
from coda.sim import assets, robot, tasks
from coda.sim.scene import (
    MIN_GAP,
    TABLE_REGION,
    Scene,
    footprint_radius,
    sample_attributes,
    sample_layout,
)
from coda.sim.sdk import SceneBuilder, SceneProgramError

__all__ = [
    "EDIT_NAMES",
    "FACTORS",
    "LAYOUT_SCALE",
    "SDK_EXTRAS_DOC",
    "TASK_PARAM_MAGNITUDE",
    "EditBuilder",
    "changed_factors",
    "factor_magnitude",
    "scene_to_program",
]

FACTORS = ("task", "layout", "attributes")
LAYOUT_SCALE = math.hypot(
    TABLE_REGION[0][1] - TABLE_REGION[0][0], TABLE_REGION[1][1] - TABLE_REGION[1][0]
)  # 0.566 m
TASK_PARAM_MAGNITUDE = 0.25
WIDTH_KEYS = ("half", "radius", "inner_half", "width", "hole_half")
HOME_XY = np.asarray(robot.HOME[:2], float)
EDGE_SIDES = ("far", "left", "right")
SIDES = ("approach", "behind", "left", "right")
_EDIT_STREAM = 0xED17  # second SeedSequence word of every edit's RNG
# The cameras (verify.check_view) see |y| <= ~0.37 m at the front of the table and more further
# back (measured by projecting a grid through verify.cameras); edge placements stay inside it.
VIEW_HALF_Y = 0.35
_SLACK_IN = 0.98  # stay this far inside the SDK's slack so rounding never trips its check


def _setter_error(factor: str, what: str) -> SceneProgramError:
    return SceneProgramError(
        f"this program may only change the {factor} factor; {what} changes another factor"
    )


class EditBuilder(NeighbourhoodMixin, SceneBuilder):
    """The SDK preloaded with `parent`, locked to edit `factor` only (see the module doc)."""

    def __init__(self, parent: Scene, seed: int, factor: str, split: str = "all") -> None:
        if factor not in FACTORS:
            raise ValueError(f"unknown factor {factor!r}; valid: {FACTORS}")
        super().__init__(seed, split)
        # a stream of its own: Exec(g, seed) of the parent must not replay the same draws
        self.rng = np.random.default_rng([self.seed, _EDIT_STREAM])
        self.factor = factor
        self.parent = parent
        self.objects = copy.deepcopy(parent.objects)
        self.task = copy.deepcopy(parent.task)
        self.layout = copy.deepcopy(parent.layout)
        self.attributes = copy.deepcopy(parent.attributes)
        self.table = dict(parent.table)

    # ------------------------------------------------------------ the SDK, locked to one factor
    def add_object(self, *args: Any, **kwargs: Any) -> str:
        raise SceneProgramError("objects are fixed by the parent scene; add_object is not allowed")

    def set_table(self, *args: Any, **kwargs: Any) -> None:
        raise SceneProgramError("the table is fixed by the parent scene; set_table is not allowed")

    def set_layout(self, name: str, x: float, y: float, yaw: float = 0.0) -> None:
        if self.factor != "layout":
            raise _setter_error(self.factor, "set_layout")
        super().set_layout(name, x, y, yaw)

    def set_attributes(self, name: str, dims=None, mass=None, friction=None, rgba=None) -> None:
        if self.factor != "attributes":
            raise _setter_error(self.factor, "set_attributes")
        super().set_attributes(name, dims, mass, friction, rgba)

    def set_task(self, family: str, **params: Any) -> None:
        if self.factor != "task":
            raise _setter_error(self.factor, "set_task")
        if family != self.task["family"]:
            raise SceneProgramError(
                f"the family is fixed by the parent scene ({self.task['family']!r}), got {family!r}"
            )
        super().set_task(family, **params)

    # ------------------------------------------------------------ reads
    def _scene(self) -> Scene:
        return Scene(self.objects, self.task, self.layout, self.attributes, table=self.table)

    def role(self, r: str) -> str:
        name = resolve_role(self._scene(), r)
        if name is None:
            raise SceneProgramError(
                f"no object plays role {r!r}; available roles: {available_roles(self._scene())}"
            )
        return name

    def pose(self, name: str) -> dict[str, float]:
        self._check(name)
        return dict(self.layout[name])

    def attrs(self, name: str) -> dict[str, Any]:
        self._check(name)
        return copy.deepcopy(self.attributes[name])

    def _field(self, name: str, field: str) -> tuple[str, float, float]:
        """(resolved field, lo, hi) of a dims key, "width" (its width key), mass or friction."""
        cat = assets.get_category(self._check(name).category)
        if field in ("mass", "friction"):
            lo, hi = getattr(cat, field)
            return field, lo, hi
        if field == "width":
            field = next((k for k in WIDTH_KEYS if k in cat.dims), "")
        if field not in cat.dims:
            raise SceneProgramError(
                f"{name!r} (a {cat.name}) has no size {field!r}; valid: "
                f"{sorted(cat.dims) + ['width', 'mass', 'friction']}"
            )
        lo, hi = cat.dims[field]
        return field, lo, hi

    def size_range(self, name: str, field: str) -> list[float]:
        _, lo, hi = self._field(name, field)
        return [lo, hi]

    def footprint(self, name: str) -> float:
        o = self._check(name)
        return footprint_radius(o.category, self.attributes[name], o.instance)

    # ------------------------------------------------------------ layout helpers
    def _clear(self, name: str, x: float, y: float) -> bool:
        """True if `name` at (x, y) keeps `MIN_GAP` to every other footprint and the table."""
        r = self.footprint(name)
        tb = self.table
        if not (
            tb["x"] - tb["half_x"] + r <= x <= tb["x"] + tb["half_x"] - r
            and tb["y"] - tb["half_y"] + r <= y <= tb["y"] + tb["half_y"] - r
        ):
            return False
        for o in self.objects:
            if o.name == name:
                continue
            p = self.layout[o.name]
            if math.hypot(x - p["x"], y - p["y"]) < r + self.footprint(o.name) + MIN_GAP:
                return False
        return True

    def _yaw(self, name: str) -> float:
        cat = assets.get_category(self._check(name).category)
        if cat.kind == assets.FIXTURE:
            return float(self.layout[name].get("yaw", 0.0))  # fixtures keep their orientation
        return float(self.rng.uniform(-math.pi / 2, math.pi / 2))

    def _place(self, name: str, candidates) -> None:
        """Sets the first clear candidate (x, y); the last one if none is clear (verification
        then reports why)."""
        last = None
        for x, y in candidates:
            last = (x, y)
            if self._clear(name, x, y):
                break
        if last is None:
            raise SceneProgramError(f"no candidate position for {name!r}")
        self.set_layout(name, round(last[0], 5), round(last[1], 5), round(self._yaw(name), 5))

    def place_beside(
        self,
        subject: str,
        anchor: str,
        side: str = "approach",
        gap_lo: float = 0.0,
        gap_hi: float = 0.02,
        jitter: float = 0.35,
        tries: int = 24,
    ) -> None:
        """Puts `subject` next to `anchor` on `side`, footprints `gap` in [gap_lo, gap_hi] m apart.

        The approach side faces the gripper's home (the way the gripper comes in); behind is the
        opposite, left / right are 90 degrees off; the direction is jittered by +-`jitter` rad.
        """
        if side not in SIDES:
            raise SceneProgramError(f"side must be one of {SIDES}, got {side!r}")
        if not 0.0 <= gap_lo <= gap_hi <= 0.5:
            raise SceneProgramError(f"need 0 <= gap_lo <= gap_hi <= 0.5 m, got {gap_lo}, {gap_hi}")
        self._check(subject)
        a = self.layout[self._check(anchor).name]
        to_home = HOME_XY - np.array([a["x"], a["y"]])
        base = math.atan2(to_home[1], to_home[0])
        base += {"approach": 0.0, "behind": math.pi, "left": math.pi / 2, "right": -math.pi / 2}[
            side
        ]
        reach = self.footprint(anchor) + self.footprint(subject)

        def cands():
            for _ in range(tries):
                th = base + float(self.rng.uniform(-jitter, jitter))
                d = reach + float(self.rng.uniform(gap_lo, gap_hi))
                yield a["x"] + d * math.cos(th), a["y"] + d * math.sin(th)

        self._place(subject, cands())

    def move_to_edge(
        self,
        name: str,
        margin_lo: float = 0.0,
        margin_hi: float = 0.04,
        sides: tuple[str, ...] | list[str] = EDGE_SIDES,
        tries: int = 24,
    ) -> None:
        """Moves `name` to within [margin_lo, margin_hi] m of the workspace edge on one of
        `sides` (far = +x, left = +y, right = -y).

        The workspace is where the gripper can hover over an object and the cameras see it: the
        reach box's xy (`robot.TARGET_LOW/HIGH`), |y| <= `VIEW_HALF_Y`, and the table, shrunk by
        the object's footprint.
        """
        bad = [s for s in sides if s not in EDGE_SIDES]
        if bad or not sides:
            raise SceneProgramError(
                f"sides must be a non-empty subset of {EDGE_SIDES}, got {sides}"
            )
        if not 0.0 <= margin_lo <= margin_hi <= 0.3:
            raise SceneProgramError(f"need 0 <= margin_lo <= margin_hi <= 0.3 m, got {margin_lo}")
        r = self.footprint(name)
        tb = self.table
        x_lo = max(TABLE_REGION[0][0], tb["x"] - tb["half_x"] + r)
        x_hi = min(float(robot.TARGET_HIGH[0]), tb["x"] + tb["half_x"]) - r
        y_lo = max(float(robot.TARGET_LOW[1]), -VIEW_HALF_Y, tb["y"] - tb["half_y"]) + r
        y_hi = min(float(robot.TARGET_HIGH[1]), VIEW_HALF_Y, tb["y"] + tb["half_y"]) - r
        sides = list(sides)

        def cands():
            for _ in range(tries):
                side = sides[int(self.rng.integers(len(sides)))]
                m = float(self.rng.uniform(margin_lo, margin_hi))
                if side == "far":
                    yield x_hi - m, float(self.rng.uniform(y_lo + 0.1, y_hi - 0.1))
                else:
                    y = y_hi - m if side == "left" else y_lo + m
                    yield float(self.rng.uniform(x_lo, x_hi - 0.1)), y

        self._place(name, cands())

    def shift(self, name: str, distance: float, tries: int = 24) -> None:
        """Moves `name` by `distance` m in a random direction (a clear one when there is one)."""
        if not 0.0 <= distance <= 1.0:
            raise SceneProgramError(f"distance must be in [0, 1] m, got {distance}")
        p = self.layout[self._check(name).name]

        def cands():
            for _ in range(tries):
                th = float(self.rng.uniform(-math.pi, math.pi))
                yield p["x"] + distance * math.cos(th), p["y"] + distance * math.sin(th)

        self._place(name, cands())

    # ------------------------------------------------------------ attribute helpers
    def _q_to_value(self, lo: float, hi: float, q: float) -> float:
        """Category quantile q (0 = lo, 1 = hi) to a value, clipped inside the SDK's slack."""
        v = lo + q * (hi - lo)
        s = assets.SCALE_SLACK * _SLACK_IN
        return float(np.clip(v, lo * (1 - s), hi * (1 + s)))

    def _set_field(self, name: str, field: str, value: float) -> None:
        if field in ("mass", "friction"):
            self.set_attributes(name, **{field: value})
        else:
            self.set_attributes(name, dims={field: value})

    def set_quantile(self, name: str, field: str, q_lo: float, q_hi: float) -> None:
        """Sets `field` (a dims key, "width", "mass", "friction") to the category quantile
        q ~ U[q_lo, q_hi] (0 = the range's low end, 1 = its high end; up to +-0.25 beyond)."""
        if not -0.5 <= q_lo <= q_hi <= 1.5:
            raise SceneProgramError(f"need -0.5 <= q_lo <= q_hi <= 1.5, got {q_lo}, {q_hi}")
        field, lo, hi = self._field(name, field)
        q = float(self.rng.uniform(q_lo, q_hi))
        self._set_field(name, field, round(self._q_to_value(lo, hi, q), 6))

    def perturb(self, name: str, magnitude: float) -> None:
        """Moves one random attribute field of `name` (a dims key, mass or friction) by
        `magnitude` of its category range in a random direction (the other direction if that
        one leaves the SDK's range)."""
        if not 0.0 <= magnitude <= 1.5:
            raise SceneProgramError(f"magnitude must be in [0, 1.5], got {magnitude}")
        cat = assets.get_category(self._check(name).category)
        fields = [*cat.dims, "mass", "friction"]
        field = fields[int(self.rng.integers(len(fields)))]
        _, lo, hi = self._field(name, field)
        cur = self.attributes[name][field] if field in ("mass", "friction") else None
        if cur is None:
            cur = self.attributes[name]["dims"][field]
        s = assets.SCALE_SLACK * _SLACK_IN
        sign = 1.0 if self.rng.uniform() < 0.5 else -1.0
        new = cur + sign * magnitude * (hi - lo)
        if not lo * (1 - s) <= new <= hi * (1 + s):
            new = cur - sign * magnitude * (hi - lo)
        self._set_field(name, field, round(float(np.clip(new, lo * (1 - s), hi * (1 + s))), 6))

    # ------------------------------------------------------------ task helpers
    def _task_params(self) -> dict[str, Any]:
        return {**self.task.get("params", {}), **self.task.get("roles", {})}

    def rebind(self, r: str, exclude_roles: tuple[str, ...] | list[str] = ()) -> None:
        """Another object plays role `r` (any object the family accepts for it, in random
        order), keeping the other roles; `SceneProgramError` if none can."""
        scene = self._scene()
        key = concrete_task_role(scene, r)
        if key is None:
            raise SceneProgramError(
                f"{r!r} is not a task role of this scene; task roles: {sorted(self.task['roles'])}"
            )
        taken = set(self.task["roles"].values()) | {self.role(e) for e in exclude_roles}
        options = [o.name for o in self.objects if o.name not in taken]
        order = self.rng.permutation(len(options)) if options else []
        errors = []
        for i in order:
            try:
                self.set_task(self.task["family"], **{**self._task_params(), key: options[i]})
                return
            except SceneProgramError as e:
                errors.append(f"{options[i]}: {e}")
        raise SceneProgramError(
            f"no other object can play {r!r} ({key}) in this scene"
            + (f"; tried {errors}" if errors else "; there is no free object")
        )

    def resample_task(self) -> None:
        """The family's own task resampling (e.g. open <-> close, another block on top)."""
        fam = tasks.get_family(self.task["family"])
        new = fam.resample_task(self._scene(), self.rng)
        self.set_task(self.task["family"], **{**new.get("params", {}), **new.get("roles", {})})

    def resample_layout(self) -> None:
        """Every object re-placed at random (the layout factor's own distribution)."""
        new = sample_layout(self.objects, self.attributes, self.rng, table=self.table)
        for n, p in new.items():
            self.set_layout(n, p["x"], p["y"], p.get("yaw", 0.0))

    def resample_attributes(self) -> None:
        """Every object's attributes redrawn (the attributes factor's own distribution)."""
        for n, a in sample_attributes(self.objects, self.rng).items():
            self.set_attributes(n, dims=a["dims"], mass=a["mass"], friction=a["friction"])

    # ------------------------------------------------------------ finish
    def build(self, program: str | None = None) -> Scene:
        scene = super().build(program=None)
        scene.seed = self.seed
        scene.program = scene_to_program(scene)
        return scene

    def namespace(self) -> dict[str, Any]:
        ns = super().namespace()
        ns.update({n: getattr(self, n) for n in EDIT_NAMES})
        return ns


EDIT_NAMES = (
    "role",
    "pose",
    "attrs",
    "size_range",
    "footprint",
    "place_beside",
    "move_to_edge",
    "shift",
    "set_quantile",
    "perturb",
    "rebind",
    "resample_task",
    "resample_layout",
    "resample_attributes",
    "place_in_region",
    "set_in_bands",
    "choose_task",
)


def _doc(fn) -> str:
    import inspect

    sig = str(inspect.signature(fn)).replace("self, ", "")
    doc = inspect.getdoc(fn) or ""
    return f"{fn.__name__}{sig}\n    " + doc.replace("\n", "\n    ")


SDK_EXTRAS_DOC = (
    "The scene is preloaded with the parent scene; objects and table are fixed. Extra names:\n"
    + "\n".join(_doc(getattr(EditBuilder, n)) for n in EDIT_NAMES)
)


# ----------------------------------------------------------------------------- comparisons


def _factor_view(scene: Scene) -> dict[str, Any]:
    d = scene.to_dict()
    return {k: d[k] for k in ("objects", "task", "layout", "attributes", "table")}


def changed_factors(parent: Scene, child: Scene) -> list[str]:
    """Which of objects / task / layout / attributes / table differ (by their JSON)."""
    import json

    a, b = _factor_view(parent), _factor_view(child)
    return [k for k in a if json.dumps(a[k], sort_keys=True) != json.dumps(b[k], sort_keys=True)]


def factor_magnitude(parent: Scene, child: Scene, factor: str) -> float:
    """How far `child` moved from `parent` along `factor`, normalised (see the module doc)."""
    if factor == "layout":
        d = [
            math.hypot(child.layout[n]["x"] - p["x"], child.layout[n]["y"] - p["y"])
            for n, p in parent.layout.items()
        ]
        return max(d, default=0.0) / LAYOUT_SCALE
    if factor == "attributes":
        best = 0.0
        for o in parent.objects:
            cat = assets.get_category(o.category)
            pa, ca = parent.attributes[o.name], child.attributes[o.name]
            for k, (lo, hi) in cat.dims.items():
                best = max(best, abs(ca["dims"][k] - pa["dims"][k]) / (hi - lo))
            for k in ("mass", "friction"):
                lo, hi = getattr(cat, k)
                best = max(best, abs(ca[k] - pa[k]) / (hi - lo))
        return best
    if factor == "task":
        old, new = parent.task.get("roles", {}), child.task.get("roles", {})
        moved = [
            math.hypot(
                parent.layout[new[r]]["x"] - parent.layout[old[r]]["x"],
                parent.layout[new[r]]["y"] - parent.layout[old[r]]["y"],
            )
            for r in old
            if r in new and new[r] != old[r]
        ]
        if moved:
            return max(moved) / LAYOUT_SCALE
        return TASK_PARAM_MAGNITUDE if child.task != parent.task else 0.0
    raise ValueError(f"unknown factor {factor!r}; valid: {FACTORS}")


# ----------------------------------------------------------------------------- programs g


def _lit(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_lit(k)}: {_lit(w)}" for k, w in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_lit(w) for w in v) + "]"
    if isinstance(v, str):
        import json

        return json.dumps(v)
    if isinstance(v, bool) or v is None:
        return repr(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        return repr(float(v)) if isinstance(v, (float, np.floating)) else repr(int(v))
    raise TypeError(f"cannot write {type(v).__name__} into a scene program")


def scene_to_program(scene: Scene) -> str:
    """An explicit scene program g with Exec(g, any seed) == `scene` (every value written out).

    This is the g stored for an engine-made variant: the SDK rebuilds it exactly, so the
    variant can be re-created, compiled and audited from memory alone.
    """
    lines = [
        f"add_object({_lit(o.category)}, role={_lit(o.role)}, instance={_lit(o.instance)}, "
        f"name={_lit(o.name)})"
        for o in scene.objects
    ]
    lines.append("set_table(" + ", ".join(f"{k}={_lit(v)}" for k, v in scene.table.items()) + ")")
    kw = {**scene.task.get("params", {}), **scene.task.get("roles", {})}
    args = "".join(f", {k}={_lit(v)}" for k, v in kw.items())
    lines.append(f"set_task({_lit(scene.task['family'])}{args})")
    for o in scene.objects:
        a = scene.attributes[o.name]
        lines.append(
            f"set_attributes({_lit(o.name)}, dims={_lit(a['dims'])}, mass={_lit(a['mass'])}, "
            f"friction={_lit(a['friction'])}, rgba={_lit(a['rgba'])})"
        )
    for o in scene.objects:
        p = scene.layout[o.name]
        lines.append(
            f"set_layout({_lit(o.name)}, {_lit(p['x'])}, {_lit(p['y'])}, {_lit(p.get('yaw', 0.0))})"
        )
    return "\n".join(lines) + "\n"
