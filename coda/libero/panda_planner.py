"""A scripted pick-and-place for LIBERO's Panda under OSC_POSE: "put X in / on Y" goals.

Closed loop on the simulator's state (object poses, the grasp site), one 20 Hz action per step:
wait for the stored state's objects to drop (LIBERO's protocol: 10 no-op steps), move above the
object while turning the hand about the vertical so the fingers close across the object's
narrowest horizontal width, descend to its middle (no lower than the fingertips allow over the
table), close, lift, carry above the target (a site: a container's region; or a body: the top
of a plate) high enough that the hanging object clears everything on the way (the target's rim
included), lower until its bottom is just above the target, open, lift. Position actions point
at the phase's waypoint (`(target - site) / 0.05`, clipped: OSC_POSE's goal lands on the
waypoint once within 5 cm); rotation actions turn the hand about the world's vertical only, and
only on the way to above the object; the gripper command is the phase's. The Panda's fingers
open to 8 cm, so it grasps from above objects with a horizontal width under that.

Used for recorded episodes that succeed (`benchmarks/libero_reference/scripted_episodes.py`):
the fidelity benchmark replays them in LIBERO itself and compares success.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from coda.libero import panda as PD
from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.libero.osc import OSCConfig

OPEN, CLOSE = -1.0, 1.0
SETTLE_STEPS = 10  # LIBERO's evaluation waits this many no-op steps
CLEAR = 0.10  # m above the object / target before descending
LIFT = 0.15  # m above the target the grasp site carries at least
CARRY_MARGIN = 0.03  # m between the hanging object's bottom and anything it passes over
CORRIDOR = 0.03  # m beside the carry's straight line within which bodies count as passed over
TIP_MARGIN = 0.004  # m between the fingertips' lowest point and the table at the grasp
STALL = (5, 0.001)  # a descent that moved less than 1 mm over 5 steps met the object's top
PLACE_ABOVE = 0.03  # m above the target the object's bottom is released
REACHED = 0.01  # m: a waypoint is reached
ALIGNED = np.deg2rad(2.0)  # the hand's yaw is aligned within this
WIDTH_TIE = 0.005  # m: widths this close count as equal (the turn then is the smaller one)
GRIP_STEPS = 10  # steps holding still while the fingers close / open (robosuite: 8 to close)
MAX_MOVE = 80  # steps a move may take before the plan gives up
GRIPPER_PREFIX = "gripper0_"  # the gripper's bodies (robosuite's names, `coda.libero.panda`)
_ANGLES = np.deg2rad(np.arange(0.0, 180.0, 2.0))  # closing directions tried for the width
_SIGNS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)


@dataclasses.dataclass
class Plan:
    obj: str
    target: str
    target_is_site: bool
    phase: int = 0
    count: int = 0
    done: bool = False
    grasp_z: float = 0.0
    hang: float = 0.0  # grasp site z - the object's bottom, measured once it is held
    carry_z: float = 0.0  # the grasp site's z while carrying
    heights: list = dataclasses.field(default_factory=list)  # the site's z along the descent


def goal_of(task) -> tuple[str, str] | None:
    """(object, target) of a single In / On goal over a movable object, else None."""
    goal = task.problem.goal
    movable = {n for n, _ in task.problem.objects}
    if len(goal) != 1 or goal[0][0] not in ("in", "on") or goal[0][1] not in movable:
        return None
    return goal[0][1], goal[0][2]


def _bodies(model: mujoco.MjModel, prefix: str) -> list[int]:
    """Bodies named `prefix` or `prefix/...` (an object's parts)."""
    return [
        b
        for b in range(model.nbody)
        if model.body(b).name == prefix or model.body(b).name.startswith(prefix + "/")
    ]


def _geoms(model: mujoco.MjModel, prefix: str) -> np.ndarray:
    """Colliding geom ids of the bodies named `prefix` or `prefix/...` (an object's parts)."""
    bodies = _bodies(model, prefix)
    return np.concatenate([collision_geoms(model, b) for b in bodies] or [np.zeros(0, int)])


def _box(d: mujoco.MjData, model: mujoco.MjModel, geoms: np.ndarray):
    """(lo [3], hi [3]) of the world-aligned box around `geoms`."""
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in geoms:
        half = geom_half_extents(model, g, d.geom_xmat[g].reshape(3, 3))
        lo = np.minimum(lo, d.geom_xpos[g] - half)
        hi = np.maximum(hi, d.geom_xpos[g] + half)
    return lo, hi


def _extent(d: mujoco.MjData, model: mujoco.MjModel, geoms: np.ndarray):
    """(xy centre, bottom z, top z) of the world box around `geoms`."""
    lo, hi = _box(d, model, geoms)
    return (lo[:2] + hi[:2]) / 2, float(lo[2]), float(hi[2])


def _corners(d: mujoco.MjData, model: mujoco.MjModel, geoms: np.ndarray) -> np.ndarray:
    """World corners [8 n, 3] of `geoms`' bounding boxes in their own frames (a rotated
    object's footprint, not its world-aligned box)."""
    pts = []
    for g in geoms:
        c, h = model.geom_aabb[g, :3], model.geom_aabb[g, 3:]
        pts.append(d.geom_xpos[g] + (c + _SIGNS * h) @ d.geom_xmat[g].reshape(3, 3).T)
    return np.concatenate(pts)


def _wrap(a: float) -> float:
    """An angle between two closing directions (which are lines: modulo pi) in [-pi/2, pi/2)."""
    return float((a + np.pi / 2) % np.pi - np.pi / 2)


def closing_yaw(corners: np.ndarray, current: float) -> float:
    """The closing direction (yaw, rad) across the object's narrowest horizontal width; of
    widths within `WIDTH_TIE` of the narrowest, the one nearest `current`."""
    u = np.stack([np.cos(_ANGLES), np.sin(_ANGLES)], axis=1)
    proj = corners[:, :2] @ u.T
    width = proj.max(axis=0) - proj.min(axis=0)
    ok = np.flatnonzero(width <= width.min() + WIDTH_TIE)
    return float(_ANGLES[min(ok, key=lambda i: abs(_wrap(_ANGLES[i] - current)))])


def _near_segment(lo: np.ndarray, hi: np.ndarray, a: np.ndarray, b: np.ndarray, r: float):
    """Whether the segment a -> b (xy) passes within `r` of the box [lo, hi] (xy)."""
    t = np.linspace(0.0, 1.0, 41)[:, None]
    p = a + t * (b - a)
    gap = np.maximum(np.maximum(lo - p, p - hi), 0.0)
    return bool((np.linalg.norm(gap, axis=1) <= r).any())


class PandaPickPlace:
    """One plan per environment of a `PandaEnv`; `act(env)` -> actions [B, 7]."""

    def __init__(self, env):
        goal = goal_of(env.pt.task)
        if goal is None:
            raise ValueError(f"{env.pt.task.name}: no single In / On goal over a movable object")
        obj, target = goal
        m = env.model
        is_site = target in [m.site(i).name for i in range(m.nsite)]
        self.geoms = {n: _geoms(m, n) for n in (obj, target) if not (n == target and is_site)}
        p = env.pt.task.problem
        others = [n for n, _ in p.objects + p.fixtures if n != obj]
        self.others = [g for g in (_geoms(m, n) for n in others) if len(g)]
        tips = [
            b
            for b in range(m.nbody)
            if m.body(b).name.startswith(GRIPPER_PREFIX) and "finger" in m.body(b).name
        ]
        self.fingertips = np.concatenate([collision_geoms(m, b) for b in tips])
        self.finger_joint = m.joint(PD.FINGER_JOINTS[0]).id
        self.plans = [Plan(obj, target, is_site) for _ in env.datas]

    def _target(self, env, d: mujoco.MjData, plan: Plan) -> tuple[np.ndarray, float]:
        if plan.target_is_site:
            p = d.site(plan.target).xpos
            return p[:2].copy(), float(p[2])
        xy, _, top = _extent(d, env.model, self.geoms[plan.target])
        return xy, top

    def _yaw_error(self, env, d: mujoco.MjData, plan: Plan) -> float:
        """Turn (rad, about the vertical) that puts the fingers across the object's narrowest
        width."""
        axis = d.xaxis[self.finger_joint]
        current = float(np.arctan2(axis[1], axis[0]))
        want = closing_yaw(_corners(d, env.model, self.geoms[plan.obj]), current)
        return _wrap(want - current)

    def _grasp_z(self, env, d: mujoco.MjData, bottom: float, top: float) -> float:
        """The object's middle, no lower than the fingertips allow over the table (a tall
        object's top meets the palm before: the descent then stalls, `STALL`)."""
        site_z = d.site_xpos[env.idx.site][2]
        tips = site_z - _corners(d, env.model, self.fingertips)[:, 2].min()  # under the site
        return max((bottom + top) / 2, bottom + tips + TIP_MARGIN)

    def _carry_z(self, env, d: mujoco.MjData, plan: Plan) -> float:
        """The grasp site's z that carries the hanging object over everything within
        `CORRIDOR` of the straight line to the target (LIFT above the target at least)."""
        txy, tz = self._target(env, d, plan)
        pts = _corners(d, env.model, self.geoms[plan.obj])[:, :2]
        here = pts.mean(axis=0)
        r = float(np.linalg.norm(pts - here, axis=1).max()) + CORRIDOR
        tops = [tz]
        for geoms in self.others:
            lo, hi = _box(d, env.model, geoms)
            if _near_segment(lo[:2], hi[:2], here, txy, r):
                tops.append(float(hi[2]))
        return max(tz + LIFT, max(tops) + plan.hang + CARRY_MARGIN)

    def _waypoint(self, env, d: mujoco.MjData, plan: Plan) -> tuple[np.ndarray, float]:
        """(site target [3], gripper command) of the plan's phase."""
        xy, bottom, top = _extent(d, env.model, self.geoms[plan.obj])
        site = d.site_xpos[env.idx.site]
        if plan.phase == 0:  # settle
            return site.copy(), OPEN
        if plan.phase == 1:  # above the object
            return np.r_[xy, top + CLEAR], OPEN
        if plan.phase == 2:  # down to its middle
            plan.grasp_z = self._grasp_z(env, d, bottom, top)
            return np.r_[xy, plan.grasp_z], OPEN
        if plan.phase == 3:  # close
            plan.hang = float(site[2] - bottom)
            return site.copy(), CLOSE
        txy, tz = self._target(env, d, plan)
        if plan.phase == 4:  # lift
            plan.carry_z = plan.carry_z or self._carry_z(env, d, plan)
            return np.r_[site[:2], plan.carry_z], CLOSE
        if plan.phase == 5:  # above the target
            return np.r_[txy, plan.carry_z], CLOSE
        if plan.phase == 6:  # lower until the object's bottom is just above the target
            return np.r_[txy, tz + plan.hang + PLACE_ABOVE], CLOSE
        if plan.phase == 7:  # open
            return site.copy(), OPEN
        return np.r_[txy, plan.carry_z], OPEN  # lift away and wait

    def act(self, env) -> np.ndarray:
        out = np.zeros((env.n_envs, 7))
        for b, (d, plan) in enumerate(zip(env.datas, self.plans, strict=True)):
            target, grip = self._waypoint(env, d, plan)
            err = target - d.site_xpos[env.idx.site]
            out[b, :3] = np.clip(err / OSCConfig.max_delta_pos, -1.0, 1.0)
            yaw = self._yaw_error(env, d, plan) if plan.phase == 1 else 0.0
            out[b, 5] = np.clip(yaw / OSCConfig.max_delta_rot, -1.0, 1.0)
            out[b, 6] = grip
            plan.count += 1
            waiting = plan.phase in (0, 3, 7)
            limit = SETTLE_STEPS if plan.phase == 0 else GRIP_STEPS if waiting else MAX_MOVE
            reached = np.linalg.norm(err) < REACHED and abs(yaw) < ALIGNED
            if plan.phase == 2:  # the descent: the palm on a tall object's top ends it too
                plan.heights.append(float(d.site_xpos[env.idx.site][2]))
                n, tol = STALL
                reached |= len(plan.heights) > n and plan.heights[-n - 1] - plan.heights[-1] < tol
            if (not waiting and reached) or plan.count >= limit:
                if plan.phase < 8:
                    plan.phase, plan.count = plan.phase + 1, 0
        return out
