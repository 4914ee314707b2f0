"""A scripted pick-and-place for LIBERO's Panda under OSC_POSE: "put X in / on Y" goals.

Closed loop on the simulator's state (object poses, the grasp site), one 20 Hz action per step:
wait for the stored state's objects to drop (LIBERO's protocol: 10 no-op steps), move above the
object, descend to its middle, close, lift, carry above the target (a site: a container's
region; or a body: the top of a plate), lower, open, lift. Position actions point at the phase's
waypoint (`(target - site) / 0.05`, clipped: OSC_POSE's goal lands on the waypoint once within
5 cm), the hand keeps its orientation, the gripper command is the phase's. The Panda's fingers
open to 8 cm, so it grasps objects narrower than that from above; it does not turn the hand
(no yaw alignment), so long objects lying across the fingers' axis are missed.

Used for recorded episodes that succeed (`benchmarks/libero_reference/scripted_episodes.py`):
the fidelity benchmark replays them in LIBERO itself and compares success.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.libero.osc import OSCConfig

OPEN, CLOSE = -1.0, 1.0
SETTLE_STEPS = 10  # LIBERO's evaluation waits this many no-op steps
CLEAR = 0.10  # m above the object / target before descending
LIFT = 0.15  # m above the object's top after the grasp
REACHED = 0.01  # m: a waypoint is reached
GRIP_STEPS = 10  # steps holding still while the fingers close / open (robosuite: 8 to close)
MAX_MOVE = 80  # steps a move may take before the plan gives up


@dataclasses.dataclass
class Plan:
    obj: str
    target: str
    target_is_site: bool
    phase: int = 0
    count: int = 0
    done: bool = False
    grasp_z: float = 0.0


def goal_of(task) -> tuple[str, str] | None:
    """(object, target) of a single In / On goal over a movable object, else None."""
    goal = task.problem.goal
    movable = {n for n, _ in task.problem.objects}
    if len(goal) != 1 or goal[0][0] not in ("in", "on") or goal[0][1] not in movable:
        return None
    return goal[0][1], goal[0][2]


def _geoms(model: mujoco.MjModel, prefix: str) -> np.ndarray:
    """Colliding geom ids of the bodies named `prefix` or `prefix/...` (an object's parts)."""
    bodies = [
        b
        for b in range(model.nbody)
        if model.body(b).name == prefix or model.body(b).name.startswith(prefix + "/")
    ]
    return np.concatenate([collision_geoms(model, b) for b in bodies] or [np.zeros(0, int)])


def _extent(d: mujoco.MjData, model: mujoco.MjModel, geoms: np.ndarray):
    """(xy centre, bottom z, top z) of the world boxes around `geoms`."""
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in geoms:
        half = geom_half_extents(model, g, d.geom_xmat[g].reshape(3, 3))
        lo = np.minimum(lo, d.geom_xpos[g] - half)
        hi = np.maximum(hi, d.geom_xpos[g] + half)
    return (lo[:2] + hi[:2]) / 2, float(lo[2]), float(hi[2])


class PandaPickPlace:
    """One plan per environment of a `PandaEnv`; `act(env)` -> actions [B, 7]."""

    def __init__(self, env):
        goal = goal_of(env.pt.task)
        if goal is None:
            raise ValueError(f"{env.pt.task.name}: no single In / On goal over a movable object")
        obj, target = goal
        is_site = target in [env.model.site(i).name for i in range(env.model.nsite)]
        self.geoms = {
            n: _geoms(env.model, n) for n in (obj, target) if not (n == target and is_site)
        }
        self.plans = [Plan(obj, target, is_site) for _ in env.datas]

    def _target(self, env, d: mujoco.MjData, plan: Plan) -> tuple[np.ndarray, float]:
        if plan.target_is_site:
            p = d.site(plan.target).xpos
            return p[:2].copy(), float(p[2])
        xy, _, top = _extent(d, env.model, self.geoms[plan.target])
        return xy, top

    def _waypoint(self, env, d: mujoco.MjData, plan: Plan) -> tuple[np.ndarray, float]:
        """(site target [3], gripper command) of the plan's phase."""
        xy, bottom, top = _extent(d, env.model, self.geoms[plan.obj])
        if plan.phase == 0:  # settle
            return d.site_xpos[env.idx.site].copy(), OPEN
        if plan.phase == 1:  # above the object
            return np.r_[xy, top + CLEAR], OPEN
        if plan.phase == 2:  # down to its middle (not below 2 cm over its bottom)
            plan.grasp_z = max((bottom + top) / 2, bottom + 0.02)
            return np.r_[xy, plan.grasp_z], OPEN
        if plan.phase == 3:  # close
            return d.site_xpos[env.idx.site].copy(), CLOSE
        txy, tz = self._target(env, d, plan)
        if plan.phase == 4:  # lift
            return np.r_[d.site_xpos[env.idx.site][:2], tz + LIFT], CLOSE
        if plan.phase == 5:  # above the target
            return np.r_[txy, tz + LIFT], CLOSE
        if plan.phase == 6:  # lower until the object's bottom is just above the target
            return np.r_[txy, tz + (plan.grasp_z - bottom) + 0.03], CLOSE
        if plan.phase == 7:  # open
            return d.site_xpos[env.idx.site].copy(), OPEN
        return np.r_[txy, tz + LIFT], OPEN  # lift away and wait

    def act(self, env) -> np.ndarray:
        out = np.zeros((env.n_envs, 7))
        for b, (d, plan) in enumerate(zip(env.datas, self.plans, strict=True)):
            target, grip = self._waypoint(env, d, plan)
            err = target - d.site_xpos[env.idx.site]
            out[b, :3] = np.clip(err / OSCConfig.max_delta_pos, -1.0, 1.0)
            out[b, 6] = grip
            plan.count += 1
            waiting = plan.phase in (0, 3, 7)
            limit = SETTLE_STEPS if plan.phase == 0 else GRIP_STEPS if waiting else MAX_MOVE
            if (not waiting and np.linalg.norm(err) < REACHED) or plan.count >= limit:
                if plan.phase < 8:
                    plan.phase, plan.count = plan.phase + 1, 0
        return out
