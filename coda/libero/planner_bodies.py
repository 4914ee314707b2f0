"""Pure-JAX reads of the tracked bodies around a moved object, shared by the LIBERO planner's
stages (`planner_pickplace`, `planner_push`, `planner_slide`, `planner_insert`): how high the
bodies beside it or on its way reach, a placement moved clear of a neighbour, a grasp point
moved into reach, the side of a flat object to take it from. Boxes come from `body_half`,
symmetric about each origin (an over-estimate, which only lifts higher). The host-side geometry
(numpy, read once per task) lives in `planner_geometry`.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from coda.libero import predicates as P
from coda.libero.planner_geometry import CLEAR_MARGIN
from coda.sim import robot
from coda.sim.state import SimState

CARRY_Z = 0.22  # m: tcp height while carrying
Z_REACH = float(robot.TARGET_HIGH[2]) - robot.TCP_OFFSET - 0.005  # m: highest tcp waypoint
WIDE_HALF = 0.04  # m: narrowest half width beyond which the jaws (9 cm) take the rim instead
LIFT_CLEAR = 0.03  # m: the object's bottom above every body around it while carried
REACH_END_MARGIN = 0.015  # m: a grasp moved into reach stays this far inside the object's end
GRASP_REACH_MARGIN = 0.005  # m: a grasp point this far inside the xy reach counts as reachable
FLAT_CLEAR = 0.03  # m: clearance of the outer finger from neighbours that suffices


def at_height(xy, z):
    """xy [..., 2] with z (broadcast) appended: [..., 3]."""
    return jnp.concatenate([xy, jnp.broadcast_to(z, xy.shape[:-1])[..., None]], -1)


def tops_around(s: SimState, obj: int) -> jnp.ndarray:
    """Highest top [B] of the tracked bodies whose xy box overlaps body `obj`'s (boxes from
    `body_half`, symmetric about each origin: an over-estimate, which only lifts higher)."""
    rot = P._quat_mat(s.body_quat)  # [B, NB, 3, 3]
    ext = jnp.einsum("...ij,...j->...i", jnp.abs(rot), s.body_half)  # world half [B, NB, 3]
    pos = s.body_pos  # [B, NB, 3]
    gap = jnp.abs(pos[..., :2] - pos[..., obj : obj + 1, :2])  # [B, NB, 2]
    near = jnp.all(gap < ext[..., :2] + ext[..., obj : obj + 1, :2] + 0.01, -1)  # [B, NB]
    near = near.at[..., obj].set(False)
    return jnp.max(jnp.where(near, pos[..., 2] + ext[..., 2], 0.0), -1)


def tops_along(s: SimState, obj: int, a, b, skip: tuple) -> jnp.ndarray:
    """Highest top [B] (plus LIFT_CLEAR) of the tracked bodies (not `skip`) whose xy box comes
    within the object's horizontal reach of the segment from `a` to `b` [B, 2] (0 if none)."""
    rot = P._quat_mat(s.body_quat)  # [B, NB, 3, 3]
    ext = jnp.einsum("...ij,...j->...i", jnp.abs(rot), s.body_half)  # world half [B, NB, 3]
    pos = s.body_pos  # [B, NB, 3]
    ab = (b - a)[:, None, :]  # [B, 1, 2]
    t = jnp.sum((pos[..., :2] - a[:, None, :]) * ab, -1) / jnp.maximum(jnp.sum(ab * ab, -1), 1e-9)
    near_pt = a[:, None, :] + jnp.clip(t, 0.0, 1.0)[..., None] * ab  # [B, NB, 2]
    gap = jnp.abs(pos[..., :2] - near_pt)  # [B, NB, 2]
    reach = jnp.max(ext[..., obj, :2], -1)[:, None, None]  # [B, 1, 1]
    near = jnp.all(gap < ext[..., :2] + reach + 0.01, -1)  # [B, NB]
    for k in skip:
        near = near.at[..., k].set(False)
    top = pos[..., 2] + ext[..., 2] + LIFT_CLEAR
    return jnp.max(jnp.where(near, top, 0.0), -1)


def clear_of_neighbours(s: SimState, obj: int, pt, surface, size: tuple, skip: set):
    """The target `pt` [B, 3] moved inside its region (at most its half size less CLEAR_MARGIN
    per world axis) away from the tracked bodies standing above `surface` [B] whose xy box
    would overlap the object's there (pudding "right of the plate" lands on the plate's rim)."""
    rot = P._quat_mat(s.body_quat)  # [B, NB, 3, 3]
    ext = jnp.einsum("...ij,...j->...i", jnp.abs(rot), s.body_half)[..., :2]  # [B, NB, 2]
    pos = s.body_pos  # [B, NB, 3]
    rel = pt[..., None, :2] - pos[..., :2]  # [B, NB, 2]
    need = ext + ext[..., obj : obj + 1, :] + CLEAR_MARGIN
    over = need - jnp.abs(rel)  # [B, NB, 2] > 0 on both axes: overlapping
    keep = jnp.ones(pos.shape[-2], bool).at[jnp.asarray(sorted(skip), jnp.int32)].set(False)
    high = pos[..., 2] + jnp.einsum("...ij,...j->...i", jnp.abs(rot), s.body_half)[..., 2]
    hit = keep & jnp.all(over > 0, -1) & (high > surface[..., None] + 0.005)  # [B, NB]
    ax = jnp.argmin(over, -1)  # [B, NB]: the cheaper axis to move along
    step = jnp.where(jnp.arange(2) == ax[..., None], over, 0.0) * jnp.sign(rel)  # [B, NB, 2]
    shift = jnp.sum(jnp.where(hit[..., None], step, 0.0), -2)  # [B, 2]
    lim = jnp.maximum(jnp.asarray(size[:2], pt.dtype) - CLEAR_MARGIN, 0.0)
    return pt.at[..., :2].add(jnp.clip(shift, -lim, lim))


def into_reach(gxy, rot, box: tuple):
    """A grasp point [B, 2] outside the gripper's xy reach moved along the object's long
    horizontal axis into it, at most to REACH_END_MARGIN inside the object's end (LIBERO-PRO's
    position swap put an 8 cm cream cheese's centre 1.2 cm beyond our reach; its near half is
    within it). Points already in reach, or objects too short for it, keep their grasp."""
    lo_b, hi_b = np.asarray(box[0]), np.asarray(box[1])
    kl = int(np.argmax((hi_b - lo_b)[:2]))  # the long horizontal local axis
    half = float((hi_b - lo_b)[kl] / 2)
    a = rot[..., :2, kl]  # [B, 2]: its horizontal direction
    a = a / jnp.maximum(jnp.linalg.norm(a, axis=-1, keepdims=True), 1e-6)
    lo = jnp.asarray(robot.TARGET_LOW[:2]) + GRASP_REACH_MARGIN
    hi = jnp.asarray(robot.TARGET_HIGH[:2]) - GRASP_REACH_MARGIN
    t = jnp.sum((jnp.clip(gxy, lo, hi) - gxy) * a, -1)  # [B]: the clip projected on the axis
    lim = max(half - REACH_END_MARGIN, 0.0)
    return gxy + a * jnp.clip(t, -lim, lim)[..., None]


def flat_side(s: SimState, obj: int, cxy, r_mid: float, open_half: float):
    """(tcp x [B], tcp y [B], yaw [B]) of a flat grasp: of the four sides (+x, -x, +y, -y) of
    the object's centre `cxy` [B, 2], the first whose outer finger keeps FLAT_CLEAR from every
    other tracked body's xy box and whose tcp is in reach, else the clearest (a plate pressed
    against a bowl: the fingers taken on the bowl's side closed on the bowl's rim)."""
    dirs = jnp.asarray([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]], cxy.dtype)  # [4, 2]
    tcp = cxy[:, None, :] + dirs * r_mid  # [B, 4, 2]
    outer = cxy[:, None, :] + dirs * (r_mid + open_half + robot.FINGER_HALF[1])
    rot = P._quat_mat(s.body_quat)  # [B, NB, 3, 3]
    ext = jnp.einsum("...ij,...j->...i", jnp.abs(rot), s.body_half)[..., :2]  # [B, NB, 2]
    gap = jnp.abs(outer[:, :, None, :] - s.body_pos[:, None, :, :2]) - ext[:, None]  # [B,4,NB,2]
    dist = jnp.linalg.norm(jnp.maximum(gap, 0.0), axis=-1)  # [B, 4, NB]
    dist = dist.at[..., obj].set(jnp.inf)
    clear = jnp.min(dist, -1)  # [B, 4]
    lo, hi = jnp.asarray(robot.TARGET_LOW[:2]), jnp.asarray(robot.TARGET_HIGH[:2])
    reach = jnp.all((tcp > lo) & (tcp < hi), -1)  # [B, 4]
    k = jnp.argmax(jnp.where(reach, jnp.minimum(clear, FLAT_CLEAR), -1.0), -1)  # [B]
    pick = jnp.take_along_axis(tcp, k[:, None, None], 1)[:, 0]  # [B, 2]
    yaw = jnp.where(k < 2, jnp.pi / 2, 0.0)  # jaws closing along the side's axis
    return pick[..., 0], pick[..., 1], yaw
