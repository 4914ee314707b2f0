"""Pushing for LIBERO's On(object, region) atoms of objects the jaws cannot take: a plate is
wider than the jaws (14 cm) and too low (2 cm) for a rim grasp, but it is a dish and slides.

`pushable(compiled, atom, box)` decides (host side, from the object's collision box and the
region's height at the initial state); `LiberoPush` is the stage (a `ScriptedPlanner` with
`phases` and pure-JAX `_waypoints`, chained by `planner.LiberoPlanner` like the others).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import mujoco
import numpy as np

from coda.libero import predicates as P
from coda.libero.planner_bodies import CARRY_Z, WIDE_HALF, Z_REACH, at_height, tops_around
from coda.sim import geometry as G
from coda.sim.planner import CLOSE, ScriptedPlanner, Waypoint
from coda.sim.state import SimState
from coda.sim.tasks.waypoints import wrap

PUSH_HEIGHT = 0.03  # m: an object wider than the jaws and lower than this is pushed (a plate)
PUSH_LEVEL = 0.02  # m: the most a pushed object's target surface may differ from its bottom
PUSH_Z = 0.012  # m: tcp above the object's bottom while pushing: the pads press on its floor
PUSH_PHASES = (
    Waypoint("approach", CLOSE, tol=0.01),
    Waypoint("descend", CLOSE, speed=0.5, tol=0.006, settle=2),
    Waypoint("push", CLOSE, speed=0.35, tol=0.008, settle=4),
    Waypoint("lift", CLOSE, tol=0.02),
)


@dataclasses.dataclass(frozen=True)
class LiberoPush(ScriptedPlanner):
    """An On(object, region) atom by pushing from inside: a plate is wider than the jaws and too
    low for a rim grasp, but it is a dish: the closed fingers come down into its middle and
    move to the region's centre, pushing its raised rim on the far side. Needs no room around
    the plate (a cabinet behind it); the push line is re-aimed every chunk, and the fingers'
    end point keeps their measured offset from the plate's centre along it."""

    atom: tuple = ()
    radius: float = 0.0  # m: the object's largest horizontal half extent
    floor: float = 0.0  # m: the object's bottom below its origin (box lo z, negative or 0)

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return PUSH_PHASES

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        obj = self.atom[1]
        po = G.pos(s, obj)  # [B, 3]
        pt, _ = P._site_frame(s, *self.atom[2:5])  # [B, 3]
        d = pt[..., :2] - po[..., :2]
        u = d / jnp.maximum(jnp.linalg.norm(d, axis=-1, keepdims=True), 1e-6)  # [B, 2]
        start = po[..., :2] - u * 0.005
        reach = jnp.sum((s.ee_pos[..., :2] - po[..., :2]) * u, -1, keepdims=True)  # [B, 1]
        end = pt[..., :2] + u * jnp.clip(reach, 0.0, self.radius)
        z = po[..., 2] + self.floor + PUSH_Z
        high = jnp.clip(tops_around(s, obj) + 0.05, CARRY_Z, Z_REACH)
        at = at_height
        xyz = jnp.stack([at(start, high), at(start, z), at(end, z), at(end, high)], 1)
        # the closed pads' wide face (their local y span) across the push direction
        raw = jnp.arctan2(u[..., 1], u[..., 0])
        yaw = target[..., 3] + wrap(raw - target[..., 3], jnp.pi)
        yaws = jnp.repeat(yaw[:, None], len(PUSH_PHASES), 1)
        return xyz, yaws, jnp.zeros(yaws.shape)


def pushable(compiled, atom: tuple, box: tuple) -> float:
    """The object's horizontal radius if the atom is best done by pushing (an object wider than
    the jaws, lower than PUSH_HEIGHT, onto a region level with where it stands), else 0."""
    if atom[0] != "on_region" or not box:
        return 0.0
    lo, hi = np.asarray(box[0]), np.asarray(box[1])
    half_xy = (hi - lo)[:2] / 2
    if half_xy.min() <= WIDE_HALF or (hi - lo)[2] >= PUSH_HEIGHT:
        return 0.0
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    bottom = d.xpos[m.body(compiled.layout.body_names[atom[1]]).id][2] + lo[2]
    body, pos, quat, size = atom[2:6]
    if body >= 0:
        bid = m.body(compiled.layout.body_names[body]).id
        site = d.xpos[bid] + d.xmat[bid].reshape(3, 3) @ np.asarray(pos)
    else:
        site = np.asarray(pos)
    surface = site[2] + size[2]
    if abs(surface - bottom) > PUSH_LEVEL:
        return 0.0
    return float(np.abs(np.concatenate([lo[:2], hi[:2]])).max())
