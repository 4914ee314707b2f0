"""Insertion for LIBERO's In(object, region) atoms whose region is enclosed (the microwave's
inside): a roof over the region, walls on all sides but one opening.

Lowered from above, the object lands on the roof. Our gripper (a palm 2.4 cm tall on 6 cm
fingers, nothing above it) fits under the roof only beside a low grasp point, and after the
release it must leave sideways: fingers straddling a rim wall are trapped (up is the roof,
every horizontal move hooks the wall). An object with a handle (a mug) is therefore taken by
its handle, the jaws closing across the handle's width, so that once let go the open fingers
slide off the handle's outer end. The stage: grasp the handle low, lift, turn the object while
carrying it so the handle points out of the opening, lower it in front of the opening with its
bottom just above the inside floor, move in along the opening's normal until it sits in the
interior's middle, release, withdraw the same way, rise. Where the point in front of the opening
that needs is out of the gripper's reach (an opening facing the workspace's edge), the handle
is turned sideways instead (the tcp then sits beside the object, not in front of it) and the
open fingers slide off it sideways under the roof before they withdraw.

`enclosure(compiled, atom)` (host side, at the task's initial state) finds the roof, floor,
opening and the room inside from the region owner's collision boxes, and the object's handle
from its own; None when the region is not enclosed, the object has no handle or it does not fit
(the pick-and-place stage is used then). `LiberoInsert` is the stage: `phases` and pure-JAX
`_waypoints`, chained by `planner.LiberoPlanner` like the others.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, NamedTuple

import jax.numpy as jnp
import mujoco
import numpy as np

from coda.libero import predicates as P
from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.libero.planner_bodies import CARRY_Z, Z_REACH, at_height
from coda.libero.planner_geometry import quat_matrix
from coda.sim import geometry as G
from coda.sim import robot
from coda.sim.planner import CLOSE, OPEN, ScriptedPlanner, Waypoint
from coda.sim.state import SimState
from coda.sim.tasks.waypoints import wrap

GRIPPER_STACK = 0.084  # m: finger tips to the palm's top
PALM_ABOVE_TCP = robot.TCP_OFFSET  # m: the palm's top above the tcp
PALM_HALF_LONG = 0.06  # m: the palm's half length along the jaws' closing direction
HANDLE_FACTOR = 1.3  # a geom this much farther from the body's axis than the median is handle
HANDLE_GRASP_UP = 0.025  # m: tcp above the handle's lowest point at the grasp
HANDLE_INSET = 0.009  # m: tcp inside the handle's outer end (pads cover the outer bar)
FLOOR_GAP = 0.01  # m: the object's bottom above the inside floor while it goes in
ROOF_MARGIN = 0.01  # m: the palm's top below the roof
OPENING_MARGIN = 0.012  # m: the handle's outer end inside the opening's plane
BACK_MARGIN = 0.005  # m: the object off the back wall
FRONT_CLEAR = 0.02  # m: the object outside the opening before it goes in
SLIDE = 0.035  # m: the open fingers' move along a sideways handle, off its end
LONG_HANDLE = 0.06  # m: a handle reaching this far beyond the body is held on its own (a pan)
HANDLE_ROOT_OUT = 0.02  # m: a long handle's grasp point beyond the body's outer extent
HANDLE_TOP_DOWN = 0.015  # m: the tcp below a long handle's top at the grasp
LIFT_CLEAR = 0.03  # m: the object's bottom above the enclosure's top while carried

PHASES = (
    Waypoint("approach", OPEN),
    Waypoint("descend", OPEN, speed=0.5, tol=0.004),
    Waypoint("grasp", CLOSE, tol=0.01, settle=8),
    Waypoint("lift", CLOSE, tol=0.01),
    Waypoint("transport", CLOSE, tol=0.01, settle=8),
    Waypoint("lower", CLOSE, speed=0.5, tol=0.006, settle=4),
    Waypoint("insert", CLOSE, speed=0.3, tol=0.006, settle=4),
    Waypoint("release", OPEN, tol=0.01, settle=6),
    Waypoint("slide", OPEN, speed=0.5, tol=0.01),
    Waypoint("withdraw", OPEN, speed=0.5, tol=0.01),
    Waypoint("retreat", OPEN, tol=0.02),
)
CARRIED = (4, 5, 6)  # phases in which the object must be in the jaws


@dataclasses.dataclass(frozen=True)
class Enclosure:
    """Host-side geometry of an insertion (all world frame, the owner a fixed fixture)."""

    opening: tuple  # (ux, uy): unit horizontal direction out of the opening
    final: tuple  # (dx, dy): the object's origin at the end, from the region site's centre
    front: float  # m: the origin's distance outward along `opening` before going in
    floor: float  # m: the inside floor's height (world z)
    top: float  # m: the enclosure's highest point (world z)
    handle: tuple  # (x, y, z) grasp point on the handle, object frame
    handle_dir: tuple  # (x, y) unit direction of the handle from the body's axis, object frame
    box_lo: tuple  # object collision box, object frame
    box_hi: tuple
    handle_to: tuple = ()  # (x, y): world direction the handle is turned to (() = opening)
    slide: float = 0.0  # m: how far the open fingers move along it to leave the handle


def object_geoms(m: mujoco.MjModel, d: mujoco.MjData, bid: int):
    """(centres [G, 3], half extents [G, 3]) of a body's collision geoms in its own frame."""
    rb, pb = d.xmat[bid].reshape(3, 3), d.xpos[bid]
    cs, es = [], []
    for g in collision_geoms(m, bid):
        cs.append(rb.T @ (d.geom_xpos[g] - pb))
        es.append(geom_half_extents(m, g, rb.T @ d.geom_xmat[g].reshape(3, 3)))
    return np.asarray(cs).reshape(-1, 3), np.asarray(es).reshape(-1, 3)


def find_handle(cs: np.ndarray, es: np.ndarray) -> tuple | None:
    """(grasp point [3], direction [2], tangential half width) of an object's handle, object
    frame; None if it has none. Handle geoms lie HANDLE_FACTOR farther out from the body's axis
    than the median geom, all to one side; the axis is the mean of the other geoms' centres
    (a mug's wall ring), found by a few rounds from their median."""
    parts = handle_parts(cs, es)
    if parts is None:
        return None
    axis, far, h, t, _, out, lat, half_w = parts
    zlo = float(np.min(cs[far, 2] - es[far, 2]))
    g = np.concatenate([axis + h * (out - HANDLE_INSET) + t * lat, [zlo + HANDLE_GRASP_UP]])
    return g, h, half_w


def long_handle(compiled, body: int) -> tuple:
    """((x, y, z) grasp point, (hx, hy) direction) in the object's frame of a handle reaching
    LONG_HANDLE or more beyond the object's body (a frying pan), else (). A pan, 20 cm across,
    is wider than the jaws everywhere; its rim wall is held only at an edge and the pan turns
    out of the jaws, so it is held by its handle: near the handle's root (a shorter lever for
    the pan's weight), the tcp HANDLE_TOP_DOWN below the handle's top there (host side)."""
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    cs, es = object_geoms(m, d, m.body(compiled.layout.body_names[body]).id)
    parts = handle_parts(cs, es)
    if parts is None:
        return ()
    axis, far, h, t, rest_out, out, lat, _ = parts
    # too wide for the jaws across every axis (a bottle's cap along its long axis is no handle)
    narrow = np.min(np.max(np.abs(np.stack([cs - es, cs + es]))[..., :2], (0, 1)))
    if out - rest_out < LONG_HANDLE or narrow <= robot.FINGER_OPEN:
        return ()
    s = min(rest_out + HANDLE_ROOT_OUT, out - HANDLE_INSET)
    rel = cs[:, :2] - axis
    cover = far & (np.abs(rel @ h - s) <= np.abs(es[:, :2]) @ np.abs(h))
    if not cover.any():
        return ()
    z = float(np.max(cs[cover, 2] + es[cover, 2])) - HANDLE_TOP_DOWN
    g = axis + h * s + t * lat
    return (float(g[0]), float(g[1]), z), (float(h[0]), float(h[1]))


def handle_parts(cs: np.ndarray, es: np.ndarray) -> tuple | None:
    """(axis [2], handle geoms [G] bool, direction [2], tangent [2], the body's outer extent
    along the direction, the handle's, its lateral offset, its tangential half width), object
    frame, or None without a handle (`find_handle`)."""
    if len(cs) < 6:
        return None
    axis = np.median(cs[:, :2], 0)
    for _ in range(5):  # the axis from the geoms that are not handle (a ring's mean)
        rel = cs[:, :2] - axis
        r = np.linalg.norm(rel, axis=1)
        far = r > HANDLE_FACTOR * np.median(r)
        axis = cs[~far, :2].mean(0) if (~far).any() else axis
    rel = cs[:, :2] - axis
    r = np.linalg.norm(rel, axis=1)
    if not far.any() or far.sum() > len(cs) // 3:
        return None
    h = rel[far].mean(0)
    h = h / max(float(np.linalg.norm(h)), 1e-9)
    if np.min(rel[far] @ h / r[far]) < np.cos(np.radians(40)):  # not one-sided
        return None
    t = np.array([-h[1], h[0]])
    rest_out = float(np.max(rel[~far] @ h + np.abs(es[~far, :2]) @ np.abs(h)))
    out = float(np.max(rel[far] @ h + np.abs(es[far, :2]) @ np.abs(h)))
    if out - rest_out < 0.02:  # too short to take beside the body
        return None
    lat = float(np.mean(rel[far] @ t))
    half_w = float(np.max(np.abs(rel[far] @ t - lat) + np.abs(es[far, :2]) @ np.abs(t)))
    if half_w > robot.FINGER_OPEN - 0.015:
        return None
    return axis, far, h, t, rest_out, out, lat, half_w


def _ray_walls(boxes, c: np.ndarray, u: np.ndarray, z: float) -> float:
    """Distance from c along horizontal unit u to the nearest box face crossing height z and
    c's lateral line (inf if none)."""
    lat = np.array([-u[1], u[0]])
    best = np.inf
    for bc, be in boxes:
        if abs(bc[2] - z) >= be[2]:
            continue
        if abs((bc[:2] - c[:2]) @ lat) >= np.abs(be[:2]) @ np.abs(lat):
            continue
        near = (bc[:2] - c[:2]) @ u - np.abs(be[:2]) @ np.abs(u)
        if near > -1e-6:
            best = min(best, float(near))
    return best


def _opening(boxes, c: np.ndarray, z: float) -> tuple | None:
    """(u [2] unit horizontal direction out of the single opening, the back wall's distance
    along -u, lat [2] the lateral direction, the side walls' distances along +lat and -lat)
    from c at height z, or None unless exactly one side of the four is open."""
    dirs = [np.array(v, float) for v in ((1, 0), (-1, 0), (0, 1), (0, -1))]
    dist = [_ray_walls(boxes, c, u, z) for u in dirs]
    open_ = [k for k in range(4) if not np.isfinite(dist[k])]
    if len(open_) != 1:
        return None
    u = dirs[open_[0]]
    back = dist[[1, 0, 3, 2][open_[0]]]  # the wall opposite the opening
    lat = np.array([-u[1], u[0]])
    lat_hi = min(dist[k] for k in range(4) if abs(dirs[k] @ lat - 1) < 1e-9)
    lat_lo = min(dist[k] for k in range(4) if abs(dirs[k] @ lat + 1) < 1e-9)
    return u, back, lat, lat_hi, lat_lo


def _handle_way(cs, es, g, h, c, size, room: tuple, edge: float) -> tuple | None:
    """(hw the world direction the handle points at the end, the fingers' slide off it, the
    origin's final offset from the region's centre [2], its distance in front of the opening)
    of the first handle direction with which the object fits inside and the tcp in front of
    the opening is in reach, or None.

    The handle pointing out of the opening (the fingers slide off it on the way out); where
    the tcp cannot reach the point in front of the opening that needs (an opening facing the
    workspace's edge), the handle pointing sideways: the fingers slide off it sideways under
    the roof, then leave through the opening."""
    u, back, lat, lat_hi, lat_lo = room
    reg_u, reg_l = float(np.abs(size[:2]) @ np.abs(u)), float(np.abs(size[:2]) @ np.abs(lat))
    rel, ext = cs[:, :2], np.abs(es[:, :2])  # object geoms about its origin, object frame
    lo_xy = np.asarray(robot.TARGET_LOW[:2]) + 0.01
    hi_xy = np.asarray(robot.TARGET_HIGH[:2]) - 0.01
    for hw, slide in ((u, 0.0), (lat, SLIDE), (-lat, SLIDE)):
        ang = np.arctan2(hw[1], hw[0]) - np.arctan2(h[1], h[0])
        rot = np.array([[np.cos(ang), -np.sin(ang)], [np.sin(ang), np.cos(ang)]])
        gw = rot @ g[:2]  # tcp from the origin, world, once turned
        pw = rot @ np.array([-h[1], h[0]])  # the jaws' closing direction, world
        corners = [gw + a * pw * PALM_HALF_LONG + b * hw * 0.015 + e * hw * slide
                   for a in (-1, 1) for b in (-1, 1) for e in (0, 1)]  # fmt: skip

        def reach(w, grip=True, rot=rot, corners=corners):
            bw = rot.T @ w  # the world direction in the object's frame
            out = float(np.max(rel @ bw + ext @ np.abs(bw)))
            return max(out, max(float(p @ w) for p in corners)) if grip else out

        t_lo = -back + reach(-u) + BACK_MARGIN
        t_hi = edge - reach(u, grip=False) - OPENING_MARGIN
        l_lo, l_hi = -lat_lo + reach(-lat) + BACK_MARGIN, lat_hi - reach(lat) - BACK_MARGIN
        if t_lo > t_hi or l_lo > l_hi:
            continue  # does not fit inside
        t = float(np.clip((t_lo + t_hi) / 2, -reg_u + 0.01, reg_u - 0.01))
        lt = float(np.clip((l_lo + l_hi) / 2, -reg_l + 0.01, reg_l - 0.01))
        final = u * t + lat * lt
        front = edge - t + reach(-u, grip=False) + FRONT_CLEAR
        tcp_front = c[:2] + final + u * front + gw + hw * slide
        if np.all(tcp_front >= lo_xy) and np.all(tcp_front <= hi_xy):
            return hw, slide, final, front
    return None


def enclosure(compiled, atom: tuple) -> Enclosure | None:
    """The insertion geometry of an In(object, region) atom whose region is enclosed, or None."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    names = compiled.layout.body_names
    owner = m.body(names[atom[2]]).id
    obj = m.body(names[atom[1]]).id
    boxes = [
        (d.geom_xpos[g].copy(), geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3)))
        for g in collision_geoms(m, owner)
    ]
    if not boxes:
        return None
    rb = d.xmat[owner].reshape(3, 3)
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    rs = rb @ quat_matrix(atom[4])
    size = np.abs(rs) @ np.asarray(atom[5])  # world half extents of the region
    over = [(bc, be) for bc, be in boxes if np.all(np.abs(bc[:2] - c[:2]) < be[:2])]
    roofs = [(bc, be) for bc, be in over if bc[2] - be[2] > c[2]]
    if not roofs:
        return None
    roof = min(float(bc[2] - be[2]) for bc, be in roofs)
    floors = [float(bc[2] + be[2]) for bc, be in over if bc[2] + be[2] <= c[2]]
    floor = max(floors) if floors else float(c[2] - size[2])
    cs, es = object_geoms(m, d, obj)
    handle = find_handle(cs, es)
    if handle is None:
        return None
    g, h, _ = handle
    lo = (cs - es).min(0)
    hi = (cs + es).max(0)
    if roof - floor > (hi[2] - lo[2]) + GRIPPER_STACK + 0.02:
        return None  # room to come down from above: the pick-and-place stage
    room = _opening(boxes, c, (roof + floor) / 2)
    if room is None:
        return None
    u = room[0]
    edge = max(float((bc[:2] - c[:2]) @ u + np.abs(be[:2]) @ np.abs(u)) for bc, be in roofs)
    # the palm's top under the roof with the object's bottom FLOOR_GAP above the floor
    if floor + FLOOR_GAP + (g[2] - lo[2]) + PALM_ABOVE_TCP > roof - ROOF_MARGIN:
        return None
    way = _handle_way(cs, es, g, h, c, size, room, edge)
    if way is None:
        return None
    hw, slide, final, front = way
    top = max(float(bc[2] + be[2]) for bc, be in boxes)
    return Enclosure(
        tuple(float(v) for v in u), tuple(float(v) for v in final), float(front),
        float(floor), top, tuple(float(v) for v in g), tuple(float(v) for v in h),
        tuple(float(v) for v in lo), tuple(float(v) for v in hi),
        tuple(float(v) for v in hw), float(slide),
    )  # fmt: skip


class HandleCarry(NamedTuple):
    """A handle-held object turned while carried so that its handle points a given way."""

    po: jnp.ndarray  # the object's origin [B, 3]
    rot: jnp.ndarray  # its rotation [B, 3, 3]
    gw: jnp.ndarray  # the handle's grasp point, world [B, 3]
    held: jnp.ndarray  # [B] bool
    turn: jnp.ndarray  # yaw still to turn [B]
    grasp_yaw: jnp.ndarray  # hand yaw at the grasp [B]
    carried_yaw: jnp.ndarray  # hand yaw once turned [B]
    off: jnp.ndarray  # tcp from the origin once turned [B, 2]


@dataclasses.dataclass(frozen=True)
class HandleStage(ScriptedPlanner):
    """A stage that takes its object by a handle and turns it on the way so the handle points
    out of a region's opening, then brings it in along the opening's normal (`LiberoInsert`,
    `planner_slide.LiberoSlide`): their phases, carried phases and the handle's turn."""

    atom: tuple = ()
    PHASES: ClassVar[tuple] = ()
    CARRIED: ClassVar[tuple] = ()  # phases in which the object must be in the jaws

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return self.PHASES

    @property
    def carried(self) -> tuple[int, ...]:
        return self.CARRIED

    def _turned(self, s: SimState, handle: tuple, handle_dir: tuple, to) -> HandleCarry:
        """The handle (`handle`, `handle_dir`: object frame) to be turned to world direction
        `to` [2]: jaws across the handle (yaw ≡ the handle's heading mod π); of the two, the
        one whose final yaw (after the turn) stays inside the yaw range, so the turn never
        hits a stop. The tcp-to-origin offset is the measured one when held, else the planned
        one."""
        obj = self.atom[1]
        po = G.pos(s, obj)  # [B, 3]
        rot = P._quat_mat(s.body_quat[..., obj, :])  # [B, 3, 3]
        gw = po + jnp.einsum("...ij,j->...i", rot, jnp.asarray(handle))  # [B, 3]
        hw = jnp.einsum("...ij,j->...i", rot[..., :2, :2], jnp.asarray(handle_dir))  # [B, 2]
        a_out = jnp.arctan2(to[1], to[0])
        turn = wrap(a_out - jnp.arctan2(hw[..., 1], hw[..., 0]))  # [B]: still to turn
        f1 = wrap(jnp.full_like(turn, a_out))
        f2 = f1 - jnp.pi * jnp.sign(f1 + 1e-9)
        final = jnp.where(jnp.abs(f1 - turn) <= jnp.pi, f1, f2)
        grasp_yaw = final - turn
        held = G.grasped(s, obj)  # [B]
        cmd_yaw = s.ee_cmd[..., 3] if s.ee_cmd is not None else grasp_yaw
        carried_yaw = jnp.where(held, wrap(cmd_yaw + turn), final)
        off = jnp.where(held[:, None], s.ee_pos[..., :2] - po[..., :2], gw[..., :2] - po[..., :2])
        c_, s_ = jnp.cos(turn), jnp.sin(turn)
        off = jnp.stack(
            [c_ * off[..., 0] - s_ * off[..., 1], s_ * off[..., 0] + c_ * off[..., 1]], -1
        )  # [B, 2]: tcp from the origin once turned
        return HandleCarry(po, rot, gw, held, turn, grasp_yaw, carried_yaw, off)

    def _ends(self, s: SimState, final: tuple, off, u, front: float):
        """(tcp xy at the end [B, 2], tcp xy in front of the opening [B, 2]): the object's
        origin `final` from the region site's centre, `front` outward along `u`."""
        pt, _ = P._site_frame(s, *self.atom[2:5])  # [B, 3]
        fin = pt[..., :2] + jnp.asarray(final) + off  # tcp xy at the end [B, 2]
        return fin, fin + u * front


@dataclasses.dataclass(frozen=True)
class LiberoInsert(HandleStage):
    """An In(object, enclosed region) atom: the object taken by its handle and slid in."""

    enc: Enclosure | None = None
    PHASES: ClassVar[tuple] = PHASES
    CARRIED: ClassVar[tuple] = CARRIED

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        e = self.enc
        u = jnp.asarray(e.opening)
        to = jnp.asarray(e.handle_to or e.opening)  # where the handle points at the end
        h = self._turned(s, e.handle, e.handle_dir, to)
        po, rot, gw, held = h.po, h.rot, h.gw, h.held
        lo, hi = jnp.asarray(e.box_lo), jnp.asarray(e.box_hi)
        mid = po[..., 2] + jnp.einsum("...j,j->...", rot[..., 2, :], (lo + hi) / 2)
        bottom = mid - jnp.sum(jnp.abs(rot[..., 2, :]) * (hi - lo) / 2, -1)  # [B]
        top = mid + jnp.sum(jnp.abs(rot[..., 2, :]) * (hi - lo) / 2, -1)
        hold = jnp.where(held, s.ee_pos[..., 2] - bottom, gw[..., 2] - bottom)  # tcp over bottom
        fin, front = self._ends(s, e.final, h.off, u, e.front)
        z_in = e.floor + FLOOR_GAP + hold
        carry = jnp.maximum(CARRY_Z, e.top + hold + LIFT_CLEAR)
        carry = jnp.minimum(carry, Z_REACH)
        at = at_height
        gxy = gw[..., :2]
        # above the enclosure too: coming down past an open door's top edge swings it into
        # the object
        approach = jnp.minimum(jnp.maximum(top + 0.08, e.top + 0.04), Z_REACH)
        xyz = jnp.stack(
            [at(gxy, approach), at(gxy, gw[..., 2]), at(gxy, gw[..., 2]),
             at(gxy, carry), at(front, carry), at(front, z_in), at(fin, z_in),
             at(fin, z_in), at(fin + to * e.slide, z_in), at(front + to * e.slide, z_in),
             at(front + to * e.slide, carry)],
            1,
        )  # fmt: skip
        g, c = h.grasp_yaw, h.carried_yaw
        yaw = jnp.stack([g, g, g, g] + [c] * 7, 1)  # [B, P]
        zero = jnp.zeros(yaw.shape)
        return xyz, yaw, zero, zero
