"""A scripted pick-and-place planner for LIBERO goals of one On / In atom on a movable object.

It reuses `coda.sim.planner.ScriptedPlanner`'s stepping (closed-loop on the servo setpoint,
phase advance on reaching a waypoint) with LIBERO waypoints computed from the chunk-start
state: above the object, down to a grasp height below its top, close, lift, over the target
(an object's origin or a region site's centre), down until the object's bottom is a little above
the target surface, open, up. The jaws close across the object's narrowest horizontal axis.
Our parallel gripper opens 9 cm: objects wider than that everywhere (LIBERO's bowls) cannot be
taken round the middle: the planner straddles the near rim wall instead (a rim grasp).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from coda.libero import predicates as P
from coda.sim import geometry as G
from coda.sim.planner import CLOSE, OPEN, ScriptedPlanner, Waypoint
from coda.sim.state import SimState

CARRY_Z = 0.22  # m: tcp height while carrying
GRASP_BELOW_TOP = 0.03  # m: tcp below the object's top at the grasp
RELEASE_GAP = 0.03  # m: the object's bottom above the target surface at release
WIDE_HALF = 0.04  # m: narrowest half width beyond which the jaws (9 cm) take the rim instead
RIM_INSET = 0.004  # m: the tcp's distance inside the object's outline for a rim grasp
RIM_BELOW_TOP = 0.025  # m: tcp below the rim for a rim grasp
MAX_HOLD_OFFSET = 0.08  # m: largest tcp-to-object offset the placement compensates

PHASES = (
    Waypoint("approach", OPEN),
    Waypoint("descend", OPEN, speed=0.5, tol=0.004),
    Waypoint("grasp", CLOSE, tol=0.01, settle=8),
    Waypoint("lift", CLOSE, tol=0.01),
    Waypoint("transport", CLOSE, tol=0.01, settle=8),  # let a swinging object calm down
    Waypoint("lower", CLOSE, speed=0.5, tol=0.006),
    Waypoint("release", OPEN, tol=0.01, settle=6),
    Waypoint("retreat", OPEN, tol=0.02),
)


def supported(atoms: tuple) -> bool:
    """Goals this planner handles: a single On / In atom (object or region target)."""
    return len(atoms) == 1 and atoms[0][0] in ("on_obj", "on_region", "in_region")


@dataclasses.dataclass(frozen=True)
class LiberoPickPlace(ScriptedPlanner):
    atom: tuple = ()  # the goal's static atom (`predicates.resolve`)

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return PHASES

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        del target
        kind, obj = self.atom[0], self.atom[1]
        q = s.body_quat[..., obj, :]  # [B, 4]
        rot = P._quat_mat(q)  # [B, 3, 3]
        half = s.body_half[..., obj, :]  # [B, 3]
        po = G.pos(s, obj)  # [B, 3]
        ext_z = jnp.sum(jnp.abs(rot[..., 2, :]) * half, -1)  # world half height [B]
        top = po[..., 2] + ext_z
        bottom = po[..., 2] - ext_z
        # jaws close across the narrowest horizontal local axis
        horiz = jnp.linalg.norm(rot[..., :2, :], axis=-2)  # [B, 3]
        width = jnp.where(horiz > 0.5, half, jnp.inf)
        k = jnp.argmin(width, -1)  # [B]
        d = jnp.take_along_axis(rot[..., :2, :], k[:, None, None], -1)[..., 0]  # [B, 2]
        yaw = jnp.arctan2(-d[..., 0], d[..., 1])
        yaw = (yaw + jnp.pi / 2) % jnp.pi - jnp.pi / 2
        # wider than the jaws everywhere (bowls): straddle the near rim wall instead, jaws
        # closing along x, the tcp on the wall (the object's half width minus RIM_INSET)
        wide = jnp.min(width, -1) > WIDE_HALF  # [B]
        rim_x = po[..., 0] - (jnp.min(width, -1) - RIM_INSET)
        gx = jnp.where(wide, rim_x, po[..., 0])
        yaw = jnp.where(wide, jnp.pi / 2, yaw)
        grasp_z = jnp.maximum(top - GRASP_BELOW_TOP, bottom + 0.012)
        grasp_z = jnp.where(wide, top - RIM_BELOW_TOP, grasp_z)
        hold = grasp_z - bottom  # tcp above the object's bottom while held
        if kind == "on_obj":
            pt = G.pos(s, self.atom[3])
            surface = pt[..., 2] + jnp.sum(
                jnp.abs(P._quat_mat(s.body_quat[..., self.atom[3], :])[..., 2, :])
                * s.body_half[..., self.atom[3], :],
                -1,
            )
        else:
            body, pos, quat, size = self.atom[2:6]
            pt, rs = P._site_frame(s, body, pos, quat)
            ext = jnp.abs(jnp.einsum("...ij,j->...i", rs, jnp.asarray(size, pt.dtype)))[..., 2]
            surface = pt[..., 2] + (ext if kind == "on_region" else -ext)
        place_z = surface + hold + RELEASE_GAP
        carry = jnp.maximum(CARRY_Z, place_z + 0.05)
        if kind != "on_obj" and self.atom[2] >= 0:  # clear the rim of the region's owner
            owner = self.atom[2]
            rim = G.pos(s, owner)[..., 2] + jnp.sum(
                jnp.abs(P._quat_mat(s.body_quat[..., owner, :])[..., 2, :])
                * s.body_half[..., owner, :],
                -1,
            )
            carry = jnp.maximum(carry, rim + hold + RELEASE_GAP)

        def at(x, y, z):
            return jnp.stack([x, y, z], -1)

        # once held, aim the object (not the tcp) at the target: the tcp-to-object offset of
        # the chunk-start state (a long bottle grasped off its centre swings in the jaws)
        off = s.ee_pos[..., :2] - po[..., :2]  # [B, 2]
        n = jnp.linalg.norm(off, axis=-1, keepdims=True)
        off = off * jnp.minimum(1.0, MAX_HOLD_OFFSET / jnp.maximum(n, 1e-6))  # a dropped object
        ox, oy = gx, po[..., 1]
        tx, ty = pt[..., 0] + off[..., 0], pt[..., 1] + off[..., 1]
        xyz = jnp.stack(
            [
                at(ox, oy, top + 0.08),
                at(ox, oy, grasp_z),
                at(ox, oy, grasp_z),
                at(ox, oy, carry),
                at(tx, ty, carry),
                at(tx, ty, place_z),
                at(tx, ty, place_z),
                at(tx, ty, carry),
            ],
            1,
        )  # [B, P, 3]
        yaws = jnp.repeat(yaw[:, None], len(PHASES), 1)
        return xyz, yaws, jnp.zeros(yaws.shape)


def planner_for(compiled, horizon: int = 10) -> LiberoPickPlace:
    """The planner of a compiled LIBERO task; a clear error for goals it does not handle."""
    atoms = compiled.success.keywords["atoms"]
    if not supported(atoms):
        raise ValueError(
            f"the LIBERO planner handles one On / In goal; {compiled.scene.task['params']['task']}"
            f" has {[a[0] for a in atoms]}"
        )
    return LiberoPickPlace("libero", (), compiled.sym, horizon, atoms[0])
