"""articulated: open or close a cabinet's drawer or door ("open the drawer of the oak cabinet").

Role cabinet (a cabinet_drawer or cabinet_door; its handle and joint are `cabinet.handle` and
joint `cabinet`); params action (open / close) and part (drawer / door). ν: the joint fraction
past `OPEN_FRACTION` / below `CLOSED_FRACTION` (`predicates.articulated_at`). The planner comes
in above the cabinet, grasps the handle and pulls it along the joint (a straight line for a
drawer, an arc about the hinge for a door); task phases reach → grasp → open / close.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import mujoco
import numpy as np

from coda.sim import assets, predicates, robot
from coda.sim import geometry as G
from coda.sim import predicates as P
from coda.sim.builder import SceneProgramError
from coda.sim.predicates import Predicate
from coda.sim.state import SimState, SymbolTable
from coda.sim.tasks import phases as ph
from coda.sim.tasks.base import (
    PotentialTemplate,
    ReachTarget,
    TaskFamily,
    choose_category,
    choose_instance,
    describe,
    distractors,
    line,
    roles_of,
)
from coda.sim.tasks.carry import body_ids
from coda.sim.tasks.waypoints import CLOSE, OPEN, Waypoint, top_np, wrap

PLANNER_PHASES = (
    Waypoint("approach", OPEN, tol=0.01),
    Waypoint("descend", OPEN, speed=0.6, settle=4),
    Waypoint("grasp", CLOSE, settle=7),
    Waypoint("pull", CLOSE, speed=0.35, tol=0.008, settle=3),
    Waypoint("release", OPEN, settle=5),
    Waypoint("retreat", OPEN, tol=0.01),
)
ARC_STEP = 0.045  # rad per control step along a door's arc


class ArticulatedFamily(TaskFamily):
    name = "articulated"
    roles = ("cabinet",)
    INITIAL_OPEN = 0.65  # joint fraction at the start of a "close" task

    def program(self, rng, split="train"):
        cat = choose_category(rng, ("cabinet_drawer", "cabinet_door"), split)
        action = ("open", "close")[int(rng.integers(2))]
        cabinet = choose_instance(rng, cat, split)
        src = line(cat, "cabinet", cabinet)
        src += distractors(rng, split, int(rng.integers(0, 2)), (cabinet,))
        return (
            src + f'set_task("{self.name}", cabinet="cabinet", action="{action}")\n'
            "sample_layout()\n"
        )

    def make_task(self, objects, params):
        roles = self._role_map(objects, params, self.roles)
        c = self._obj(objects, roles["cabinet"])
        if not assets.get_category(c.category).articulated:
            raise SceneProgramError(f"articulated needs a cabinet; got {c.category}")
        action = params.get("action", "open")
        if action not in ("open", "close"):
            raise SceneProgramError(f"action must be 'open' or 'close', got {action!r}")
        part = "drawer" if c.category == "cabinet_drawer" else "door"
        start = 0.0 if action == "open" else self.INITIAL_OPEN
        return {
            "family": self.name,
            "instruction": f"{action} the {part} of the {describe(c)}",
            "roles": roles,
            "params": {"action": action, "part": part},
            "initial": {"joint_fraction": {"cabinet": start}},
            "terminal": {
                "relation": "joint_fraction",
                "args": [
                    "cabinet",
                    ">=" if action == "open" else "<=",
                    predicates.OPEN_FRACTION if action == "open" else predicates.CLOSED_FRACTION,
                ],
            },
        }

    def resample_task(self, scene, rng):
        action = "close" if scene.task["params"]["action"] == "open" else "open"
        return self.make_task(
            scene.objects, {"cabinet": scene.task["roles"]["cabinet"], "action": action}
        )

    def success_fn(self, task) -> Predicate:
        return functools.partial(
            predicates.articulated_at, obj="cabinet", action=task["params"]["action"]
        )

    def task_phases(self, task) -> tuple[ph.Phase, ...]:
        return (
            # reached = at the handle with the jaws open to take it (or already holding it)
            ph.Phase(
                "reach",
                ph.either(
                    ph.reach_open("cabinet.handle"), ph.grasp("cabinet.handle", or_lifted=False)
                ),
            ),
            ph.Phase("grasp", ph.grasp("cabinet.handle", or_lifted=False)),
            ph.Phase(task["params"]["action"], self.success_fn(task)),
        )

    # ---------------------------------------------------------------- planner
    def planner_phases(self, params: Mapping[str, Any]) -> tuple[Waypoint, ...]:
        return PLANNER_PHASES

    def waypoints(
        self, params: Mapping[str, Any], sym: SymbolTable, s: SimState, target: jnp.ndarray
    ) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
        c, h = sym.body("cabinet"), sym.body("cabinet.handle")
        j = sym.joint("cabinet")
        hp = G.pos(s, h)
        q = s.joint_pos[..., j]
        lo, hi = s.joint_range[..., j, 0], s.joint_range[..., j, 1]
        opening = params.get("action") == "open"
        q_goal = jnp.where(opening, lo + 0.8 * (hi - lo), lo) * jnp.ones_like(q)
        cab_yaw = G.yaw_of(s.body_quat[..., c, :])
        hold = target[..., :3] - jnp.array([0.0, 0.0, robot.TCP_OFFSET])
        if params.get("part") == "door":
            hinge = G.pos(s, sym.body("cabinet.door"))
            rel = hp[..., :2] - hinge[..., :2]
            r = jnp.linalg.norm(rel, axis=-1)
            phi_h = jnp.arctan2(rel[..., 1], rel[..., 0])
            part_yaw = cab_yaw + q
            tgt_rel = target[..., :2] - hinge[..., :2]
            phi_t = jnp.arctan2(tgt_rel[..., 1], tgt_rel[..., 0])
            phi_goal = phi_h + (q_goal - q)
            phi_next = phi_t + jnp.clip(wrap(phi_goal - phi_t), -ARC_STEP, ARC_STEP)
            pull_xy = hinge[..., :2] + r[..., None] * jnp.stack(
                [jnp.cos(phi_next), jnp.sin(phi_next)], -1
            )
            pull = jnp.concatenate([pull_xy, hp[..., 2:3]], -1)
            pull_yaw = part_yaw + wrap(phi_next - phi_h)
            togo = r * jnp.abs(wrap(phi_goal - phi_next))
        else:
            axis = jnp.stack([-jnp.cos(cab_yaw), -jnp.sin(cab_yaw), jnp.zeros_like(q)], -1)
            pull = hp + axis * (q_goal - q)[..., None]
            part_yaw = cab_yaw
            pull_yaw = cab_yaw
            togo = jnp.zeros_like(q)
        out_dir = jnp.stack([-jnp.cos(pull_yaw), -jnp.sin(pull_yaw), jnp.zeros_like(q)], -1)
        # come in above the cabinet (an open door must not be swept), then straight down
        above = jnp.concatenate([hp[..., :2], (G.top(s, c) + 0.05)[..., None]], -1)
        at = hp
        retreat = hp + 0.06 * out_dir + jnp.array([0.0, 0.0, 0.1])
        xyz = jnp.stack([above, at, hold, pull, hold, retreat], -2)
        yaw = jnp.stack(
            [part_yaw, part_yaw, target[..., 3], pull_yaw, target[..., 3], target[..., 3]], -1
        )
        zero = jnp.zeros_like(q)
        return xyz, yaw, jnp.stack([zero, zero, zero, togo, zero, zero], -1)

    def reach_targets(self, c: Any, d: Any) -> list[ReachTarget]:
        """The hover above the handle and the handle, then the handle and the retreat over the
        joint's whole range (by forward kinematics at five joint positions)."""
        m, sym = c.model, c.sym
        half = c.consts["body_half"].astype(float)  # [NB, 3]
        ic, bc, obj = body_ids(c, "cabinet")
        _, bh, _ = body_ids(c, "cabinet.handle")
        hp = d.xpos[bh].copy()
        out = [
            (
                "approach",
                obj,
                np.array([hp[0], hp[1], top_np(d.xpos[bc], d.xmat[bc], half[ic]) + 0.05]),
            ),
            ("descend", obj, hp),
        ]
        jname = c.layout.joint_names[sym.joint("cabinet")]
        lo, hi = c.consts["joint_range"][sym.joint("cabinet")].astype(float)
        adr = m.jnt_qposadr[m.joint(jname).id]
        door = m.jnt_type[m.joint(jname).id] == mujoco.mjtJoint.mjJNT_HINGE
        rot = d.xmat[bc].reshape(3, 3)
        cab_yaw = math.atan2(rot[1, 0], rot[0, 0])
        dk = mujoco.MjData(m)
        dk.qpos[:] = d.qpos
        for q in np.linspace(lo, hi, 5):
            dk.qpos[adr] = q
            mujoco.mj_kinematics(m, dk)
            h = dk.xpos[bh].copy()
            yaw = cab_yaw + (q if door else 0.0)
            back = np.array([-0.06 * math.cos(yaw), -0.06 * math.sin(yaw), 0.1])
            out += [
                (f"pull (joint at {q:.2f})", obj, h),
                (f"retreat (joint at {q:.2f})", obj, h + back),
            ]
        return out

    # ---------------------------------------------------------------- potentials
    def potential_template(self, task: Mapping[str, Any]) -> PotentialTemplate:
        roles_of(task, "cabinet", "articulated")
        action = task.get("params", {}).get("action", "open")
        if action == "open":
            goal, move = f"f >= {P.OPEN_FRACTION}", f"ramp(f, 0.0, {P.OPEN_FRACTION})"
        else:
            goal, move = f"f <= {P.CLOSED_FRACTION}", f"ramp(-f, -1.0, -{P.CLOSED_FRACTION})"
        started = "f >= 0.2" if action == "open" else "f <= 0.45"
        frac = '    f = joint_fraction(s, sym.joint("cabinet"))\n'
        return PotentialTemplate(
            kind="articulated",
            phase_to_subgoal=PHASE_TO_SUBGOAL,
            levels=LEVELS,
            coarse=COARSE,
            stages=STAGES,
            descriptions=DESCRIPTIONS,
            defs=_DEFS.format(part="cabinet", handle="cabinet.handle", goal=goal, move=move),
            refine=REFINE,
            refine_defs=_REFINE_DEFS.format(started=started),
            refined_progress={},
            task_description=(
                f"\n\ndef subgoal_0_done(s, sym):\n{frac}    return {goal}\n"
                f"\n\ndef subgoal_0_potential(s, sym):\n{frac}    return {move}\n"
            ),
        )


# ----------------------------------------------------------------------------- potential template

PHASE_TO_SUBGOAL = {
    "approach": "reach",
    "descend": "reach",
    "grasp": "grasp",
    "pull": "move",
    "push": "move",
    "release": "move",
    "retreat": "move",
}
COARSE = {"reach": "acquire", "grasp": "acquire", "move": "move"}
LEVELS = {0: ("reach", "grasp", "move"), 1: ("acquire", "move")}
DESCRIPTIONS = {
    "reach": "tool centre at the handle",
    "grasp": "both fingers hold the handle",
    "move": "joint at the goal fraction",
    "acquire": "handle held",
    "hover": "tool centre above the handle",
    "enclose": "handle centred between the open fingers",
    "start": "joint moving toward the goal",
}

_DEFS = """
PART = "{part}"
HANDLE = "{handle}"


def goal_reached(s, sym):
    f = joint_fraction(s, sym.joint(PART))
    return {goal}


def grasp_done(s, sym):
    return grasped(s, sym.body(HANDLE)) | goal_reached(s, sym)


def reach_done(s, sym):
    return (ee_distance(s, sym.body(HANDLE)) < 0.03) | grasp_done(s, sym)


def reach_progress(s, sym):
    return distance_progress(ee_distance(s, sym.body(HANDLE)), 0.15)


def grasp_progress(s, sym):
    closing = ramp(0.09 - gripper_opening(s), 0.0, 0.04)
    return closing * distance_progress(ee_distance(s, sym.body(HANDLE)), 0.05)


def move_progress(s, sym):
    f = joint_fraction(s, sym.joint(PART))
    return {move}
"""
_REFINE_DEFS = """

def hover_done(s, sym):
    h = sym.body(HANDLE)
    over = (xy_distance(s.ee_pos, pos(s, h)) < 0.015) & (s.ee_pos[..., 2] > pos(s, h)[..., 2])
    return over | reach_done(s, sym)


def hover_progress(s, sym):
    return distance_progress(xy_distance(s.ee_pos, pos(s, sym.body(HANDLE))), 0.1)


def enclose_done(s, sym):
    return (ee_distance(s, sym.body(HANDLE)) < 0.012) | grasp_done(s, sym)


def enclose_progress(s, sym):
    return distance_progress(ee_distance(s, sym.body(HANDLE)), 0.02)


def started_done(s, sym):
    f = joint_fraction(s, sym.joint(PART))
    return ({started}) | goal_reached(s, sym)
"""
REFINE = {
    "reach": ("hover", "reach"),
    "grasp": ("enclose", "grasp"),
    "move": ("start", "move"),
}
STAGES = {
    "reach": ("reach_done", "reach_progress"),
    "grasp": ("grasp_done", "grasp_progress"),
    "move": ("goal_reached", "move_progress"),
    "acquire": ("grasp_done", "reach_progress"),
    "hover": ("hover_done", "hover_progress"),
    "enclose": ("enclose_done", "enclose_progress"),
    "start": ("started_done", "move_progress"),
}


FAMILY = ArticulatedFamily()  # the registered instance (coda.registries.FAMILIES)
