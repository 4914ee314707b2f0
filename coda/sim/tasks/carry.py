"""The pick → carry → place skeleton shared by pick_place, put_inside and stack_or_insert.

`CarryFamily` implements, once, what these families have in common: the planner's eight phases
and their waypoints, the numpy mirror of those for `verify`, the task phases reach → grasp →
lift → transport → ν, and the potential template's stages. Each family module fills in what
differs through three hooks: which roles are carried where (`carried`), where the object is put
down (`place_height`, and `carry_yaw` for a peg turned to its hole) and the program-language
snippets of its terminal relation (`carry_program`).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from coda.sim import geometry as G
from coda.sim import predicates as P
from coda.sim import robot
from coda.sim.state import SimState, SymbolTable
from coda.sim.tasks import phases as ph
from coda.sim.tasks.base import PotentialTemplate, ReachTarget, TaskFamily, roles_of
from coda.sim.tasks.waypoints import CLOSE, OPEN, Waypoint, grasp_yaw, top_np

PLANNER_PHASES = (
    Waypoint("approach", OPEN, tol=0.01),
    Waypoint("descend", OPEN, speed=0.6, tol=0.004, settle=4),
    Waypoint("grasp", CLOSE, settle=7),
    Waypoint("lift", CLOSE, speed=0.7, tol=0.01),
    Waypoint("transport", CLOSE, speed=0.7, tol=0.008, settle=2),
    Waypoint("lower", CLOSE, speed=0.4, tol=0.004, settle=4),
    Waypoint("release", OPEN, settle=6),
    Waypoint("retreat", OPEN, tol=0.01),
)
GRASP_OFFSETS = (-0.02, 0.04)  # m: the tcp's height above the object centre is clipped to this


@dataclasses.dataclass(frozen=True)
class CarryProgram:
    """A carry family's terminal relation in the training-program language (`o` the carried
    body, `d` the destination, `DEPTH` the task's depth): bodies of `placed` (ν), `at_dest`
    (over or already in/on the destination) and `lowered_done` (relation held, released or
    not), the expression of the bottom's height above where it must end up, and that end
    height of the object's centre (for the single-stage task-description potential)."""

    kind: str
    final: str
    at_dest: str
    lowered: str
    gap: str
    goal_z: str


class CarryFamily(TaskFamily):
    """A family whose task is: grasp one object, carry it to a destination, put it down."""

    @abc.abstractmethod
    def carried(self, params: Mapping[str, Any]) -> tuple[str, str]:
        """(role of the carried object, role of its destination) for the task's params."""

    @abc.abstractmethod
    def place_height(self, params: Mapping[str, Any], top: Any, floor: Any) -> tuple[Any, float]:
        """(height the put-down is measured from, clearance m) given the destination's top and
        its container floor (jnp [B] in the planner, floats in the mirror)."""

    def carry_yaw(
        self, params: Mapping[str, Any], s: SimState, o: int, d: int, ee_yaw: jnp.ndarray
    ) -> jnp.ndarray:
        """Wrist yaw [B] while carrying and lowering; default: keep the grasp heading."""
        del params, s, o, d
        return ee_yaw

    def interior(self, params: Mapping[str, Any]) -> bool:
        """Whether transport ends over the destination's interior (not just its footprint)."""
        del params
        return False

    def last_phase(self, params: Mapping[str, Any]) -> str:
        """Name of the final task phase (ν)."""
        del params
        return "place"

    @abc.abstractmethod
    def carry_program(self, task: Mapping[str, Any]) -> CarryProgram:
        """The terminal relation's snippets for the potential template (ValueError if τ's
        params are not this family's)."""

    # ---------------------------------------------------------------- phases
    def task_phases(self, task: dict[str, Any]) -> tuple[ph.Phase, ...]:
        params = task.get("params", {})
        obj, dest = self.carried(params)
        return (
            # reached = the object between the open jaws, ready to close on it (or held)
            ph.Phase("reach", ph.either(ph.reach(obj, ready=True), ph.grasp(obj))),
            ph.Phase("grasp", ph.grasp(obj)),
            # a grasp is finished when the hand goes on to lift (with the object or without)
            ph.Phase("lift", ph.lift(obj), moved_on=ph.hand_up(obj)),
            ph.Phase("transport", ph.at(obj, dest, interior=self.interior(params))),
            # the put-down starts when the object leaves the jaws: transport must hold until
            # then (carrying it across the destination on the way elsewhere is not transport)
            ph.Phase(self.last_phase(params), self.success_fn(task), start=ph.released(obj)),
        )

    # ---------------------------------------------------------------- planner
    def planner_phases(self, params: Mapping[str, Any]) -> tuple[Waypoint, ...]:
        del params
        return PLANNER_PHASES

    def waypoints(
        self, params: Mapping[str, Any], sym: SymbolTable, s: SimState, target: jnp.ndarray
    ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        obj_role, dest_role = self.carried(params)
        o, d = sym.body(obj_role), sym.body(dest_role)
        op, dp = G.pos(s, o), G.pos(s, d)
        ohz = G.half(s, o)[..., 2]
        gyaw = grasp_yaw(s.body_quat[..., o, :])
        grasp_z = jnp.maximum(op[..., 2], 0.012)
        above_obj = jnp.stack([op[..., 0], op[..., 1], G.top(s, o) + 0.07], -1)
        at_obj = jnp.stack([op[..., 0], op[..., 1], grasp_z], -1)
        offset = jnp.clip(s.ee_pos[..., 2] - op[..., 2], *GRASP_OFFSETS)  # tcp above obj centre
        ee_yaw = G.yaw_of(s.ee_quat)
        base, margin = self.place_height(params, G.top(s, d), dp[..., 2] + s.inner[..., d, 3])
        place_z = base + ohz + offset + margin
        carry_z = jnp.maximum(G.top(s, d) + 2 * ohz + 0.05, 0.14)
        carry_yaw = self.carry_yaw(params, s, o, d, ee_yaw)
        lift = jnp.stack([target[..., 0], target[..., 1], carry_z], -1)
        over_dest = jnp.stack([dp[..., 0], dp[..., 1], carry_z], -1)
        lower = jnp.stack([dp[..., 0], dp[..., 1], place_z], -1)
        retreat = jnp.stack([dp[..., 0], dp[..., 1], carry_z + 0.05], -1)
        hold = target[..., :3] - jnp.array([0.0, 0.0, robot.TCP_OFFSET])
        xyz = jnp.stack([above_obj, at_obj, hold, lift, over_dest, lower, hold, retreat], -2)
        held = target[..., 3]
        yaw = jnp.stack([gyaw, gyaw, held, held, carry_yaw, carry_yaw, held, held], -1)
        return xyz, yaw, jnp.zeros_like(yaw)  # [B, P, 3], [B, P], [B, P]

    def reach_targets(self, c: Any, d: Any) -> list[ReachTarget]:
        """Hover above the object, grasp, carry height over the destination, the place height
        for every grasp offset the planner allows, retreat."""
        params = c.scene.task.get("params", {})
        half = c.consts["body_half"].astype(float)  # [NB, 3]
        obj_role, dest_role = self.carried(params)
        io, bo, oname = body_ids(c, obj_role)
        idst, bd, dname = body_ids(c, dest_role)
        op, dp = d.xpos[bo], d.xpos[bd]
        ohz = float(half[io][2])
        top_d = top_np(d.xpos[bd], d.xmat[bd], half[idst])
        carry_z = max(top_d + 2 * ohz + 0.05, 0.14)
        out = [
            (
                "approach",
                oname,
                np.array([op[0], op[1], top_np(d.xpos[bo], d.xmat[bo], half[io]) + 0.07]),
            ),
            ("descend", oname, np.array([op[0], op[1], max(op[2], 0.012)])),
            ("lift", oname, np.array([op[0], op[1], carry_z])),
            ("transport", dname, np.array([dp[0], dp[1], carry_z])),
        ]
        floor = dp[2] + float(c.consts["inner"][idst][3])
        base, margin = self.place_height(params, top_d, floor)
        for offset in GRASP_OFFSETS:
            out.append(("lower", dname, np.array([dp[0], dp[1], base + ohz + offset + margin])))
        out.append(("retreat", dname, np.array([dp[0], dp[1], carry_z + 0.05])))
        return out

    # ---------------------------------------------------------------- potentials
    def potential_template(self, task: Mapping[str, Any]) -> PotentialTemplate:
        prog = self.carry_program(task)
        params = task.get("params", {})
        obj, dest = self.carried(params)
        roles_of(task, obj, prog.kind)
        depth = float(params.get("depth", P.INSERT_DEPTH))
        defs = _DEFS.format(
            obj=obj, dest=dest, depth=depth, final=prog.final, at_dest=prog.at_dest, gap=prog.gap
        )
        return PotentialTemplate(
            kind=prog.kind,
            phase_to_subgoal=PHASE_TO_SUBGOAL,
            levels=LEVELS,
            coarse=COARSE,
            stages=STAGES,
            descriptions=DESCRIPTIONS,
            defs=defs,
            refine=REFINE,
            refine_defs=_REFINE_DEFS.format(lowered=prog.lowered, gap=prog.gap),
            refined_progress=REFINED_PROGRESS,
            task_description=_TASK_DESC_DEFS.format(
                obj=obj, dest=dest, depth=depth, final=prog.final, goal_z=prog.goal_z
            ),
        )


def body_ids(c: Any, role: str) -> tuple[int, int, str]:
    """(tracked index, MuJoCo body id, object name) of the body playing `role` in compiled
    scene `c` (for the numpy mirrors of the waypoints)."""
    i = c.sym.body(role)
    name = c.layout.body_names[i]
    return i, c.model.body(name).id, name.split("/")[0]


# ----------------------------------------------------------------------------- potential template

# planner / critic phase names -> subgoal name
PHASE_TO_SUBGOAL = {
    "approach": "reach",
    "descend": "reach",
    "grasp": "grasp",
    "lift": "lift",
    "transport": "carry",
    "lower": "place",
    "release": "place",
    "retreat": "place",
}
# coarse (level 1) stage that absorbs each full stage
COARSE = {"reach": "acquire", "grasp": "acquire", "lift": "carry", "carry": "carry"}
LEVELS = {0: ("reach", "grasp", "lift", "carry", "place"), 1: ("acquire", "carry", "place")}

DESCRIPTIONS = {
    "reach": "tool centre at the object",
    "grasp": "both fingers hold the object",
    "lift": "object off the table",
    "carry": "object over the destination",
    "place": "object at its destination and released",
    "acquire": "object held",
    "hover": "tool centre above the object",
    "enclose": "object centred between the open fingers",
    "raise": "object at carrying height",
    "near_dest": "object near the destination",
    "lower": "object resting at the destination, still held",
    "release": "fingers opened, object left in place",
}

_DEFS = """
OBJ = "{obj}"
DEST = "{dest}"
DEPTH = {depth}


def roles(sym):
    return sym.body(OBJ), sym.body(DEST)


def placed(s, sym):
    o, d = roles(sym)
    {final}


def at_dest(s, sym):
    o, d = roles(sym)
    {at_dest}


def lift_done(s, sym):
    o, d = roles(sym)
    return lifted(s, o, 0.03) | at_dest(s, sym) | placed(s, sym)


def grasp_done(s, sym):
    o, d = roles(sym)
    return grasped(s, o) | lift_done(s, sym)


def reach_done(s, sym):
    o, d = roles(sym)
    return (ee_distance(s, o) < 0.025) | grasp_done(s, sym)


def reach_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(ee_distance(s, o), 0.15)


def grasp_progress(s, sym):
    o, d = roles(sym)
    closing = ramp(0.09 - gripper_opening(s), 0.0, 0.04)
    return closing * distance_progress(ee_distance(s, o), 0.05)


def lift_progress(s, sym):
    o, d = roles(sym)
    return ramp(height(s, o), 0.0, 0.03)


def carry_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(xy_distance(pos(s, o), pos(s, d)), 0.15)


def place_progress(s, sym):
    o, d = roles(sym)
    lowered = ramp(-({gap}), -0.12, -0.005)
    released = jnp.where(grasped(s, o), 0.0, 1.0)
    return 0.7 * lowered + 0.3 * released
"""

# finer stages for the diagnosed subgoal (level 0): dense progress where the policy fails
_REFINE_DEFS = """

def hover_done(s, sym):
    o, d = roles(sym)
    over = (xy_distance(s.ee_pos, pos(s, o)) < 0.015) & (s.ee_pos[..., 2] > top(s, o))
    return over | reach_done(s, sym)


def hover_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(xy_distance(s.ee_pos, pos(s, o)), 0.1)


def enclose_done(s, sym):
    o, d = roles(sym)
    return (ee_distance(s, o) < 0.012) | grasp_done(s, sym)


def enclose_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(ee_distance(s, o), 0.02)


def raise_done(s, sym):
    o, d = roles(sym)
    return lifted(s, o, 0.06) | at_dest(s, sym) | placed(s, sym)


def raise_progress(s, sym):
    o, d = roles(sym)
    return ramp(height(s, o), 0.03, 0.06)


def near_dest_done(s, sym):
    o, d = roles(sym)
    return (xy_distance(pos(s, o), pos(s, d)) < 0.05) | at_dest(s, sym) | placed(s, sym)


def fine_carry_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(xy_distance(pos(s, o), pos(s, d)), 0.03)


def lowered_done(s, sym):
    o, d = roles(sym)
    {lowered}


def lower_progress(s, sym):
    o, d = roles(sym)
    return ramp(-({gap}), -0.12, -0.005)


def release_progress(s, sym):
    return ramp(gripper_opening(s), 0.0, 0.09)
"""
# focus stage -> the stages that replace it
REFINE = {
    "reach": ("hover", "reach"),
    "grasp": ("enclose", "grasp"),
    "lift": ("lift", "raise"),
    "carry": ("near_dest", "carry"),
    "place": ("lower", "release"),
}
# per stage: (done, progress) function names
STAGES = {
    "reach": ("reach_done", "reach_progress"),
    "grasp": ("grasp_done", "grasp_progress"),
    "lift": ("lift_done", "lift_progress"),
    "carry": ("at_dest", "carry_progress"),
    "place": ("placed", "place_progress"),
    "acquire": ("grasp_done", "reach_progress"),
    "hover": ("hover_done", "hover_progress"),
    "enclose": ("enclose_done", "enclose_progress"),
    "raise": ("raise_done", "raise_progress"),
    "near_dest": ("near_dest_done", "carry_progress"),
    "lower": ("lowered_done", "lower_progress"),
    "release": ("placed", "release_progress"),
}
REFINED_PROGRESS = {
    "reach": "reach_progress",
    "grasp": "grasp_progress",
    "lift": "lift_progress",
    "carry": "fine_carry_progress",
}

_TASK_DESC_DEFS = """
OBJ = "{obj}"
DEST = "{dest}"
DEPTH = {depth}


def subgoal_0_done(s, sym):
    o, d = sym.body(OBJ), sym.body(DEST)
    {final}


def subgoal_0_potential(s, sym):
    o, d = sym.body(OBJ), sym.body(DEST)
    goal = jnp.stack([pos(s, d)[..., 0], pos(s, d)[..., 1], {goal_z}], -1)
    return distance_progress(distance(pos(s, o), goal), 0.2)
"""
