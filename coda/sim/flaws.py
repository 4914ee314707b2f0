"""Planted flaws: scripted experts that fail only under a condition on one scene factor.

A `Flaw` is a known difficulty for benchmarking critics: the scripted planner
(`coda.sim.planner.ScriptedPlanner`) with one departure in one task phase, taken only on scenes
where a condition on one factor of the scene s = (τ, σ, α) holds (`Condition`: a pure function
of the `Scene` record, e.g. the carried object's mass above a band, its initial y beyond a line,
its category in a set, the task's action). Its ground truth is ψ* = (factor, phase): the factor
whose counterfactual change removes the failure and the task phase (the critic's phase names,
`TaskFamily.task_phases`) in which the expert departs.

The flawed expert acts only through actions. `FlawedPlanner` wraps the planner: on rows whose
scene meets the condition it servoes to the planner's own waypoints with the named planner
phases' waypoint (tcp position) or gripper command altered (`Departure`: shifted, jaws slack
around the object, jaws kept squeezing it, jaws at a fixed command), everything else as the
planner; on every other row its actions, carry and phase labels are the planner's, exactly. The
condition is evaluated once per bucket variant on the host (from the scenes a bucket was built
from, as a bucket-bound policy factory does) and travels in the policy's carry, so one compiled
policy serves every bucket of a structure and no simulator state is ever edited.

`FLAWS` is the library (>= 8 flaws across the four families, the three scene factors and five
task phases); `coda.sim.flaw_check`: `flaw_scenes` draws seeded, verified scenes of a flaw's
family from the family's own proposals split by the condition, and `check_flaw` measures
validity: the plain planner
>= 90 % on those scenes, the flawed one <= 20 % where the condition holds and >= 80 % where it
does not.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coda.sim import robot
from coda.sim.planner import PlannerCarry, ScriptedPlanner, planner_for, servo_chunk
from coda.sim.scene_data import Scene
from coda.sim.state import SimState, SymbolTable
from coda.sim.tasks import get_family
from coda.sim.tasks.waypoints import OPEN, Waypoint

__all__ = [
    "FLAWS",
    "Attribute",
    "Condition",
    "Departure",
    "Distance",
    "Flaw",
    "FlawedPlanner",
    "GripAt",
    "Layout",
    "LetGo",
    "Shift",
    "Slack",
    "TaskIs",
    "Wedge",
    "get_flaw",
    "task_phase_of",
]

FACTORS = ("task", "layout", "attributes")
_OPS = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le}

# The carry families' planner phases grouped by the task phase they serve (the last task phase is
# the family's own name for the put-down: place | stack | insert); the articulated family's pull,
# release and retreat serve its action (open | close).
_CARRY_TASK_PHASE = {
    "approach": "reach",
    "descend": "reach",
    "grasp": "grasp",
    "lift": "lift",
    "transport": "transport",
}
_ARTICULATED_TASK_PHASE = {"approach": "reach", "descend": "reach", "grasp": "grasp"}


def _carries(family: str) -> bool:
    """Whether `family` carries an object (pick -> carry -> place); else it moves a fixture's
    part (the articulated family: a cabinet's handle)."""
    return hasattr(get_family(family), "carried")


def task_phase_of(family: str, params: dict[str, Any], planner_phase: str) -> str:
    """The task phase (the critic's phase name) a planner phase of `family` serves."""
    if not _carries(family):
        return _ARTICULATED_TASK_PHASE.get(planner_phase, params.get("action", "open"))
    fam = get_family(family)
    if planner_phase in _CARRY_TASK_PHASE:
        return _CARRY_TASK_PHASE[planner_phase]
    return fam.last_phase(params)  # lower, release, retreat


def _role_name(scene: Scene, role: str) -> str:
    """Object name of `role`: "object" = the object the task moves (the carried object, or the
    cabinet), "destination" = where it goes; otherwise a role of τ."""
    fam, params, roles = scene.task["family"], scene.task.get("params", {}), scene.task["roles"]
    if role in ("object", "destination"):
        if not _carries(fam):
            return roles["cabinet"]
        carried = get_family(fam).carried(params)
        return roles[carried[0] if role == "object" else carried[1]]
    return roles[role]


# ----------------------------------------------------------------------------- conditions


class Condition:
    """A predicate on one factor of a scene: `factor` (task | layout | attributes), `text` for
    reports, `__call__(scene) -> bool` reading only that factor's part of the record."""

    factor: str = ""
    text: str = ""

    def __call__(self, scene: Scene) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Layout(Condition):
    """σ: the initial `axis` (x | y) coordinate of `role`'s object `op` `value` (m)."""

    role: str
    axis: str
    op: str
    value: float
    factor: str = "layout"

    @property
    def text(self) -> str:
        return f"{self.role}.{self.axis} {self.op} {self.value}"

    def __call__(self, scene: Scene) -> bool:
        v = scene.layout[_role_name(scene, self.role)][self.axis]
        return bool(_OPS[self.op](v, self.value))


@dataclasses.dataclass(frozen=True)
class Distance(Condition):
    """σ: the initial xy distance between two roles' objects `op` `value` (m)."""

    a: str
    b: str
    op: str
    value: float
    factor: str = "layout"

    @property
    def text(self) -> str:
        return f"|{self.a} - {self.b}|_xy {self.op} {self.value}"

    def __call__(self, scene: Scene) -> bool:
        pa, pb = (scene.layout[_role_name(scene, r)] for r in (self.a, self.b))
        d = float(np.hypot(pa["x"] - pb["x"], pa["y"] - pb["y"]))
        return bool(_OPS[self.op](d, self.value))


@dataclasses.dataclass(frozen=True)
class Attribute(Condition):
    """α: `role`'s mass | friction | size (its `half` or `radius` dim, m) `op` `value`."""

    role: str
    key: str
    op: str
    value: float
    factor: str = "attributes"

    @property
    def text(self) -> str:
        return f"{self.role}.{self.key} {self.op} {self.value}"

    def __call__(self, scene: Scene) -> bool:
        a = scene.attributes[_role_name(scene, self.role)]
        if self.key == "size":
            v = a["dims"].get("half", a["dims"].get("radius"))
        else:
            v = a[self.key]
        return bool(_OPS[self.op](float(v), self.value))


@dataclasses.dataclass(frozen=True)
class TaskIs(Condition):
    """τ: `role`'s object category (key "category") or a task parameter (e.g. "action") is one
    of `values`."""

    key: str
    values: tuple[str, ...]
    role: str = "object"
    factor: str = "task"

    @property
    def text(self) -> str:
        what = f"{self.role}.category" if self.key == "category" else f"task.{self.key}"
        return f"{what} in {{{', '.join(sorted(self.values))}}}"

    def __call__(self, scene: Scene) -> bool:
        if self.key == "category":
            v = scene.object(_role_name(scene, self.role)).category
        else:
            v = scene.task.get("params", {}).get(self.key)
        return v in self.values


# ----------------------------------------------------------------------------- departures


@dataclasses.dataclass(frozen=True)
class Ctx:
    """What a departure may read: the chunk-start state, the servo setpoint, the symbol table,
    the task's family and params (all available to the policy)."""

    s: SimState
    cmd: jnp.ndarray  # [B, 6]
    sym: SymbolTable
    family: str
    params: dict[str, Any]

    def body(self, role: str = "object") -> int:
        if not _carries(self.family):
            return self.sym.body("cabinet.handle")
        carried = get_family(self.family).carried(self.params)
        return self.sym.body(carried[0] if role == "object" else carried[1])

    def half_width(self, role: str = "object", widest: bool = False) -> jnp.ndarray:
        """[B] half of the object's horizontal width (the narrowest side, or the widest)."""
        h = self.s.body_half[..., self.body(role), :2]
        return jnp.max(h, -1) if widest else jnp.min(h, -1)


class Departure:
    """How the expert departs in its named planner phases: `__call__(ctx, xyz [B, P, 3],
    yaw [B, P], grip [B, P]) -> (xyz, yaw, grip)`; only the named phases' columns are kept.
    `hold`: extra control steps the named phases wait at their waypoint before the next phase
    (the arm catches up with its setpoint while the departure lasts)."""

    text: str = ""
    hold: int = 0


def _grip_for_half(half: jnp.ndarray) -> jnp.ndarray:
    """The gripper command whose finger servo target is `half` (`robot.apply_actions` inverted)."""
    frac = (robot.FINGER_OPEN - half) / (robot.FINGER_OPEN - robot.FINGER_CLOSED)
    return jnp.clip(2.0 * frac - 1.0, -1.0, 1.0)


@dataclasses.dataclass(frozen=True)
class Shift(Departure):
    """The phase's tcp waypoint shifted by (dx, dy, dz) m."""

    dx: float = 0.0
    dy: float = 0.0
    dz: float = 0.0

    @property
    def text(self) -> str:
        return f"waypoint shifted by ({self.dx}, {self.dy}, {self.dz}) m"

    def __call__(self, ctx, xyz, yaw, grip):
        return xyz + jnp.array([self.dx, self.dy, self.dz]), yaw, grip


@dataclasses.dataclass(frozen=True)
class Slack(Departure):
    """Jaws commanded to the object's widest half-width plus `margin` (no squeeze: it slips);
    with `within`, only once the setpoint is within that xy distance (m) of the destination
    (mid-carry), the phase's own command before."""

    margin: float = 0.015
    hold: int = 8
    within: float | None = None

    @property
    def text(self) -> str:
        where = f" once within {self.within} m of the destination" if self.within else ""
        return (
            f"jaws slack{where}: opened to the object's width + {2 * self.margin * 1000:.0f} mm,"
            f" held {self.hold} steps"
        )

    def __call__(self, ctx, xyz, yaw, grip):
        g = jnp.broadcast_to(
            _grip_for_half(ctx.half_width(widest=True) + self.margin)[:, None], grip.shape
        )
        if self.within is not None:
            dest = ctx.s.body_pos[..., ctx.body("destination"), :2]  # [B, 2]
            wrist = ctx.cmd[..., :2]  # the tcp's xy is the wrist's (the hand is level)
            near = jnp.linalg.norm(wrist - dest, axis=-1) < self.within  # [B]
            g = jnp.where(near[:, None], g, grip)
        return xyz, yaw, g


@dataclasses.dataclass(frozen=True)
class Wedge(Departure):
    """Jaws opened only to the object's narrowest half-width less `squeeze` (still gripping it)."""

    squeeze: float = 0.003

    @property
    def text(self) -> str:
        return f"jaws opened only to the object's width - {2 * self.squeeze * 1000:.0f} mm"

    def __call__(self, ctx, xyz, yaw, grip):
        g = _grip_for_half(jnp.maximum(ctx.half_width() - self.squeeze, 0.0))
        return xyz, yaw, jnp.broadcast_to(g[:, None], grip.shape)


@dataclasses.dataclass(frozen=True)
class GripAt(Departure):
    """Jaws held at a fixed command (-1 open ... 1 closed)."""

    value: float = OPEN

    @property
    def text(self) -> str:
        return f"gripper command held at {self.value:+.1f}"

    def __call__(self, ctx, xyz, yaw, grip):
        return xyz, yaw, jnp.full_like(grip, self.value)


@dataclasses.dataclass(frozen=True)
class LetGo(Departure):
    """An articulated part's handle let go mid-pull: once the joint has moved `fraction` of its
    range from where the task starts it, the jaws open and the hand goes to `rise` m above the
    handle (the phase's own waypoint and command before), so the part stops short."""

    fraction: float = 0.12
    rise: float = 0.08

    @property
    def text(self) -> str:
        return (
            f"once the joint has moved {self.fraction:.0%} of its range, jaws open and the hand "
            f"rises to {self.rise} m above the handle"
        )

    def __call__(self, ctx, xyz, yaw, grip):
        j = ctx.sym.joint("cabinet")
        q = ctx.s.joint_pos[..., j]
        lo, hi = ctx.s.joint_range[..., j, 0], ctx.s.joint_range[..., j, 1]
        opened = get_family("articulated").INITIAL_OPEN  # where a close task starts it
        start = lo if ctx.params.get("action") == "open" else lo + opened * (hi - lo)
        moved = jnp.abs(q - start) > self.fraction * (hi - lo)  # [B]
        handle = ctx.s.body_pos[..., ctx.body(), :] + jnp.array([0.0, 0.0, self.rise])
        xyz = jnp.where(moved[:, None, None], handle[:, None, :], xyz)
        return xyz, yaw, jnp.where(moved[:, None], OPEN, grip)


# ----------------------------------------------------------------------------- flaws


@dataclasses.dataclass(frozen=True)
class Flaw:
    """A planted flaw: the planner of `family` departs (`departure`) in `planner_phases` (all
    serving task phase `phase`) on scenes where `condition` (on one factor) holds.

    `scope`: which of the family's programs the flaw is defined on (e.g. stacking, not
    insertion, where the last phase's name depends on the mode); a scene outside it is neither
    condition-true nor -false."""

    name: str
    family: str
    phase: str
    planner_phases: tuple[str, ...]
    condition: Condition
    departure: Departure
    why: str = ""  # the physical reason it fails under the condition
    scope: Callable[[Scene], bool] | None = None

    @property
    def factor(self) -> str:
        return self.condition.factor

    @property
    def ground_truth(self) -> tuple[str, str]:
        return self.factor, self.phase

    def in_scope(self, scene: Scene) -> bool:
        return scene.task["family"] == self.family and (self.scope is None or self.scope(scene))

    def holds(self, scene: Scene) -> bool:
        """The condition on `scene` (a pure function of its record)."""
        return self.in_scope(scene) and self.condition(scene)

    def policy(self, bucket, horizon: int = 10) -> FlawedPlanner:
        """The flawed expert for `bucket` (a bucket -> policy factory, as `planner_for`)."""
        cond = np.array([self.holds(v.scene) for v in bucket.padded], bool)
        return FlawedPlanner(planner_for(bucket, horizon), self, cond)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "family": self.family,
            "ground_truth": list(self.ground_truth),
            "condition": self.condition.text,
            "planner_phases": list(self.planner_phases),
            "mechanism": self.departure.text,
            "why": self.why,
        }


@dataclasses.dataclass(frozen=True)
class FlawedPlanner:
    """The scripted planner with a `Flaw`'s departure on the rows whose scene meets its
    condition (`cond` [B], from the bucket's scenes; carried, not hashed: one compile per
    structure). Rows without the condition get the planner's actions, carry and labels."""

    base: ScriptedPlanner
    flaw: Flaw
    cond: np.ndarray = dataclasses.field(compare=False, hash=False, repr=False)

    @property
    def horizon(self) -> int:
        return int(self.base.horizon)

    def init(self, batch: int, rng: jax.Array):
        cond = np.zeros(batch, bool)
        cond[: min(batch, len(self.cond))] = self.cond[:batch]
        return self.base.init(batch, rng), jnp.asarray(cond)

    @property
    def _phases(self) -> tuple[Waypoint, ...]:
        """The planner's phases, the named ones waiting `departure.hold` steps longer."""
        hold = self.flaw.departure.hold
        return tuple(
            dataclasses.replace(p, settle=p.settle + hold)
            if p.name in self.flaw.planner_phases and hold
            else p
            for p in self.base.phases
        )

    def _waypoints(self, s: SimState, cmd: jnp.ndarray):
        base = self.base
        phases = base.phases
        params = dict(base.params)
        out = base._waypoints(s, cmd)
        if len(out) == 5:
            xyz, yaw, togo, pitch, grip = out
        else:
            xyz, yaw, togo = out
            pitch = jnp.zeros_like(yaw)
            grip = jnp.broadcast_to(jnp.array([p.grip for p in phases]), yaw.shape)
        ctx = Ctx(s, cmd, base.sym, base.family, params)
        nxyz, nyaw, ngrip = self.flaw.departure(ctx, xyz, yaw, grip)
        mask = jnp.array([p.name in self.flaw.planner_phases for p in phases])  # [P]
        xyz = jnp.where(mask[None, :, None], nxyz, xyz)
        yaw = jnp.where(mask[None, :], nyaw, yaw)
        grip = jnp.where(mask[None, :], ngrip, grip)
        return xyz, yaw, togo, pitch, grip

    def act(self, params: Any, state: SimState, carry, rng: jax.Array):
        pc, cond = carry
        a0, c0, i0 = self.base.act(params, state, pc, rng)
        a1, c1, i1 = servo_chunk(self._waypoints, self._phases, state, pc, self.horizon)
        actions = jnp.where(cond[:, None, None], a1, a0)
        pc = PlannerCarry(jnp.where(cond, c1.phase, c0.phase), jnp.where(cond, c1.count, c0.count))
        info = {"phase": jnp.where(cond[:, None], i1["phase"], i0["phase"])}
        return actions, (pc, cond), info


def _stack(scene: Scene) -> bool:
    return scene.task.get("params", {}).get("mode") == "stack"


FLAWS: tuple[Flaw, ...] = (
    Flaw(
        "reach_overshoot_right",
        "pick_place",
        "reach",
        ("descend",),
        Layout("object", "y", "<", -0.05),
        Shift(dy=-0.07),
        "reaching to the right of the centre line, the descent overshoots outwards by 7 cm, so "
        "the jaws come down beside the object",
    ),
    Flaw(
        "lift_slack_heavy",
        "pick_place",
        "lift",
        ("lift",),
        Attribute("object", "mass", ">", 0.13),
        Slack(),
        "lifting a heavy object the jaws slacken to its width: no squeeze, no friction to "
        "carry its weight, it stays on the table",
    ),
    Flaw(
        "grasp_slide_round",
        "pick_place",
        "grasp",
        ("grasp",),
        TaskIs("category", ("ball", "fruit")),
        Shift(dy=0.06),
        "with a round target the hand slides 6 cm to the left while the jaws close (the pads "
        "slip on the curved surface): they close beside it",
    ),
    Flaw(
        "transport_slack_far",
        "put_inside",
        "transport",
        ("transport",),
        Distance("object", "destination", ">", 0.3),
        Slack(within=0.2),
        "on long carries the jaws slacken half-way: the object drops from the jaws short of "
        "the container",
    ),
    Flaw(
        "grasp_slide_slippery",
        "put_inside",
        "grasp",
        ("grasp",),
        Attribute("object", "friction", "<", 0.9),
        Shift(dx=-0.06),
        "on low-friction objects the hand slides 6 cm towards the robot while the jaws close: "
        "they close beside it",
    ),
    Flaw(
        "stack_wedge_wide",
        "stack_or_insert",
        "stack",
        ("release", "retreat"),
        Attribute("object", "size", ">", 0.019),
        Wedge(),
        "letting go of a wide block the jaws open less than its width: it stays squeezed and "
        "leaves the base with the hand",
        scope=_stack,
    ),
    Flaw(
        "lift_slack_back",
        "stack_or_insert",
        "lift",
        ("lift",),
        Layout("object", "x", ">", 0.47),
        Slack(),
        "lifting an object from the back half of the table the jaws slacken: it stays behind",
    ),
    Flaw(
        "open_let_go",
        "articulated",
        "open",
        ("pull",),
        TaskIs("action", ("open",)),
        LetGo(),
        "the handle is let go an eighth of the way: opening needs it held all the way, closing "
        "only pushes",
    ),
    Flaw(
        "reach_high_left",
        "articulated",
        "reach",
        ("descend",),
        Layout("object", "y", ">", 0.03),
        Shift(dz=0.06),
        "for cabinets left of the centre line the descent stops 6 cm above the handle",
    ),
)


def get_flaw(name: str) -> Flaw:
    for f in FLAWS:
        if f.name == name:
            return f
    raise KeyError(f"no flaw {name!r}; flaws: {[f.name for f in FLAWS]}")
