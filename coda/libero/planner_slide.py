"""Sliding for LIBERO's In(object, region) atoms whose region is a low roofed layer level with the
object's support (a two-layer shelf's lower layer, 6.9 cm high, on the table), for an object with
a long handle (a frying pan).

A pan is 20 cm across and droops ~50 deg when lifted by its handle (the jaws' friction cannot hold
its weight's moment about their closing axis), so it cannot be carried level into a slot; but it
stands on the floor of the layer already: it is taken by the handle where it stands, dragged on
the table (turned on the way so the handle points out of the opening) to just in front of the
opening, pushed in along the opening's normal with the handle still outside, and let go; the
gripper never goes under the roof.

`slide_in(compiled, atom)` (host side, at the task's initial state) finds the opening, the
roof's front edge and the room inside from the region owner's collision boxes and the handle
from the object's own (`planner_insert.long_handle`); None when the atom is not such a case (the
other stages are used then). `LiberoSlide` is the stage: `phases` and pure-JAX `_waypoints`,
chained by `planner.LiberoPlanner` like the others.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax.numpy as jnp
import mujoco
import numpy as np

from coda.libero import predicates as P
from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.libero.planner_bodies import CARRY_Z, Z_REACH, at_height
from coda.libero.planner_geometry import quat_matrix
from coda.libero.planner_insert import (
    HandleStage,
    _opening,
    handle_parts,
    long_handle,
    object_geoms,
)
from coda.sim import geometry as G
from coda.sim import robot
from coda.sim.planner import CLOSE, OPEN, ScriptedPlanner, Waypoint
from coda.sim.state import SimState
from coda.sim.tasks.waypoints import wrap

LEVEL = 0.02  # m: the most the layer's floor may differ from the object's bottom
ROOF_CLEAR = 0.005  # m: the object's top below the roof for it to go in standing
BACK_MARGIN = 0.012  # m: the object off the back wall at the end
FRONT_CLEAR = 0.03  # m: the object outside the roof's front edge before it goes in
DRAG_UP = 0.003  # m: tcp above its grasp height while dragging (the pan skims the table)

PHASES = (
    Waypoint("approach", OPEN),
    Waypoint("descend", OPEN, speed=0.5, tol=0.004),
    Waypoint("grasp", CLOSE, tol=0.01, settle=8),
    Waypoint("front", CLOSE, speed=0.3, tol=0.01, settle=4),
    Waypoint("insert", CLOSE, speed=0.3, tol=0.008, settle=4),
    Waypoint("release", OPEN, tol=0.01, settle=6),
    Waypoint("retreat", OPEN, tol=0.02),
)
CARRIED = (3, 4)  # phases in which the handle must be in the jaws


@dataclasses.dataclass(frozen=True)
class Slide:
    """Host-side geometry of a slide (world frame; the owner a fixed fixture)."""

    opening: tuple  # (ux, uy): unit horizontal direction out of the opening
    final: tuple  # (dx, dy): the object's origin at the end, from the region site's centre
    front: float  # m: the origin's distance outward along `opening` before going in
    handle: tuple  # (x, y, z) grasp point on the handle, object frame (`long_handle`)
    handle_dir: tuple  # (x, y) the handle's direction, object frame
    drag_z: float  # m: tcp height while dragging (world z)
    top: float  # m: the object's top above its origin (box hi z)


@dataclasses.dataclass(frozen=True)
class Layer:
    """A roofed region open on one side (host side, world frame)."""

    c: np.ndarray  # the region site's centre [3]
    size: np.ndarray  # the region's world half extents [3]
    u: np.ndarray  # [2] unit horizontal direction out of the opening
    back: float  # m: from the centre to the back wall along -u
    edge: float  # m: from the centre to the roof's front edge along u
    lat_room: float  # m: from the centre to the nearer side wall
    floor: float  # m: the layer's floor (world z)
    roof: float  # m: the roof's underside (world z)


def _layer(compiled, atom: tuple, bottom: float) -> Layer | None:
    """The layer of an In(object, region) atom whose region is roofed, open on one side and
    has its floor level with `bottom` (the object's, world z), or None."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    owner = m.body(compiled.layout.body_names[atom[2]]).id
    boxes = [
        (d.geom_xpos[g].copy(), geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3)))
        for g in collision_geoms(m, owner)
    ]
    rb = d.xmat[owner].reshape(3, 3)
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    size = np.abs(rb @ quat_matrix(atom[4])) @ np.asarray(atom[5])  # region half extents
    over = [(bc, be) for bc, be in boxes if np.all(np.abs(bc[:2] - c[:2]) < be[:2])]
    floors = [float(bc[2] + be[2]) for bc, be in over if bc[2] + be[2] <= c[2] + size[2]]
    floors = [f for f in floors if f < c[2]]
    floor = max(floors) if floors else max(bottom, float(c[2] - size[2]))
    roofs = [(bc, be) for bc, be in over if bc[2] - be[2] > floor + 0.01]
    if not roofs or abs(floor - bottom) > LEVEL:
        return None
    roof = min(float(bc[2] - be[2]) for bc, be in roofs)
    room = _opening(boxes, c, (roof + floor) / 2)
    if room is None:
        return None
    u, back, _, lat_hi, lat_lo = room
    edge = max(float((bc[:2] - c[:2]) @ u + np.abs(be[:2]) @ np.abs(u)) for bc, be in roofs)
    return Layer(c, size, u, float(back), edge, float(min(lat_hi, lat_lo)), floor, roof)


def _object(compiled, body: int):
    """(collision geoms' centres [G, 3], half extents [G, 3], object frame; the object's
    bottom, world z) at the task's initial state."""
    m = compiled.model
    d = mujoco.MjData(m)
    d.qpos[:] = compiled.init_qpos
    mujoco.mj_kinematics(m, d)
    obj = m.body(compiled.layout.body_names[body]).id
    cs, es = object_geoms(m, d, obj)
    rot = d.xmat[obj].reshape(3, 3)
    signs = np.array([[i, j, k] for i in (-1, 1) for j in (-1, 1) for k in (-1, 1)], float)
    corners = (cs[:, None, :] + signs[None] * es[:, None, :]).reshape(-1, 3)  # object frame
    low = float(np.min(corners @ rot[2])) if len(cs) else 0.0  # lowest corner, world z offset
    return cs, es, float(d.xpos[obj][2]) + low, rot


def slide_in(compiled, atom: tuple) -> Slide | None:
    """The slide geometry of an In(object, region) atom, or None (see the module doc)."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    handle = long_handle(compiled, atom[1])
    if not handle:
        return None
    cs, es, bottom, _ = _object(compiled, atom[1])
    lay = _layer(compiled, atom, bottom)
    if lay is None:
        return None
    lo, hi = (cs - es).min(0), (cs + es).max(0)
    if lay.floor + (hi[2] - lo[2]) + ROOF_CLEAR > lay.roof:
        return None  # does not fit under the roof standing
    u, size = lay.u, lay.size
    # the body's reach about the origin, the handle pointing out along u (object frame: the
    # handle's direction h turned onto u, so a world direction w is h-relative)
    h = np.asarray(handle[1])
    body = ~handle_parts(cs, es)[1]  # the geoms that are not handle
    rot = np.array([[h[0], -h[1]], [h[1], h[0]]])  # turns +x onto the handle's direction

    def reach(w):  # w in the frame with the handle along +x
        bw = rot @ w
        return float(np.max(cs[body, :2] @ bw + np.abs(es[body, :2]) @ np.abs(bw)))

    r_back = reach(np.array([-1.0, 0.0]))  # away from the handle: into the layer
    reg_u = float(np.abs(size[:2]) @ np.abs(u))
    if max(reach(np.array([0.0, 1.0])), reach(np.array([0.0, -1.0]))) + BACK_MARGIN > (
        lay.lat_room
    ):
        return None  # too wide for the layer
    t = float(np.clip(-lay.back + r_back + BACK_MARGIN, -reg_u + 0.01, reg_u - 0.01))
    if t > lay.edge:
        return None
    final = u * t
    front = lay.edge - t + r_back + FRONT_CLEAR
    return Slide(
        tuple(float(v) for v in u), tuple(float(v) for v in final), float(front),
        tuple(float(v) for v in handle[0]), tuple(float(v) for v in handle[1]),
        float(lay.floor + handle[0][2] - lo[2] + DRAG_UP), float(hi[2]),
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LiberoSlide(HandleStage):
    """An In(object, low roofed layer) atom: the object dragged by its handle and pushed in."""

    sl: Slide | None = None
    PHASES: ClassVar[tuple] = PHASES
    CARRIED: ClassVar[tuple] = CARRIED

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        e = self.sl
        u = jnp.asarray(e.opening)
        h = self._turned(s, e.handle, e.handle_dir, u)
        fin, front = self._ends(s, e.final, h.off, u, e.front)
        gxy = h.gw[..., :2]
        high = jnp.minimum(jnp.maximum(CARRY_Z, h.po[..., 2] + e.top + 0.08), Z_REACH)
        at, gz = at_height, h.gw[..., 2]
        xyz = jnp.stack(
            [at(gxy, high), at(gxy, gz), at(gxy, gz), at(front, e.drag_z),
             at(fin, e.drag_z), at(fin, e.drag_z), at(fin, high)],
            1,
        )  # fmt: skip
        yaw = jnp.stack([h.grasp_yaw] * 3 + [h.carried_yaw] * 4, 1)  # [B, P]
        zero = jnp.zeros(yaw.shape)
        return xyz, yaw, zero, zero


# ------------------------------------------------------------- a tall object laid down, pushed in

TIP_BEHIND = 0.03  # m: the pushing tcp behind the standing object's outline before the tip
TIP_BELOW_TOP = 0.03  # m: the pushing tcp below the standing object's top
TIP_PUSH = 0.08  # m: the tip push's end beyond the object's centre
TIP_RISE = 0.15  # m: tcp height between the tip and the push in (world z above the floor)
PUSH_GAP = 0.025  # m: the pusher's centre outward of the lying object's end before the push
PUSH_UP = 0.015  # m: the pushing tcp above the floor (the pads' underside 5 mm above it)
IN_MARGIN = 0.03  # m: the origin inside the region's edge at the end of the push
PAD_HALF = 0.008  # m: the closed pads' half thickness along the push (robot.FINGER_HALF[0])

TIP_PHASES = (
    Waypoint("behind", CLOSE, tol=0.01),
    Waypoint("down", CLOSE, speed=0.5, tol=0.006),
    Waypoint("tip", CLOSE, speed=0.3, tol=0.01, settle=6),
    Waypoint("rise", CLOSE, tol=0.02),
    Waypoint("over", CLOSE, tol=0.01),
    Waypoint("lower", CLOSE, speed=0.5, tol=0.006, settle=2),
    Waypoint("push", CLOSE, speed=0.35, tol=0.008, settle=4),
    Waypoint("back", CLOSE, tol=0.02),
)


@dataclasses.dataclass(frozen=True)
class ToppleIn:
    """Host-side geometry of laying a standing object down and pushing it into a layer."""

    opening: tuple  # (ux, uy): unit horizontal direction out of the opening (world)
    centre: tuple  # (x, y): the region site's centre (world; the owner a fixed fixture)
    t_in: float  # m: the origin's final distance from the centre along `opening`
    lat_max: float  # m: the origin's largest lateral distance from the centre
    up: int  # the object's local axis standing upright (its height)
    thin: int  # its local axis of least horizontal extent (it falls across it)
    sign: float  # ±1: the thin axis' sign that points out of the opening at the start
    height: float  # m: the object's extent along `up`
    thick: float  # m: its extent along `thin`
    floor: float  # m: the layer's floor (world z)


def topple_in(compiled, atom: tuple) -> ToppleIn | None:
    """The geometry of an In(object, low layer) atom whose object stands on its end too tall
    for the layer but fits lying (a 12.4 cm book under a shelf 6.9 cm high), or None: it is
    pushed over outward, across its thin axis, onto its big face, then pushed in by its outer
    end (its origin, at its base, leads) until the origin is inside the region."""
    if atom[0] != "in_region" or atom[2] < 0 or long_handle(compiled, atom[1]):
        return None
    cs, es, bottom, rot = _object(compiled, atom[1])
    if not len(cs):
        return None
    lay = _layer(compiled, atom, bottom)
    if lay is None:
        return None
    lo, hi = (cs - es).min(0), (cs + es).max(0)
    k = int(np.argmax(np.abs(rot[2])))
    if abs(rot[2, k]) < 0.95 or rot[2, k] < 0:
        return None  # not standing on its base
    ext = hi - lo
    others = [j for j in range(3) if j != k]
    j = min(others, key=lambda i: ext[i])
    room = lay.roof - lay.floor
    if ext[k] + ROOF_CLEAR <= room or ext[j] + ROOF_CLEAR > room:
        return None  # fits standing, or not even lying
    wide = max(ext[i] for i in others)
    if wide / 2 + BACK_MARGIN > lay.lat_room:
        return None
    u = lay.u
    ax = rot[:2, j]
    sign = 1.0 if float(ax @ u) >= 0 else -1.0
    reg_u = float(np.abs(lay.size[:2]) @ np.abs(u))
    lat = np.array([-u[1], u[0]])
    reg_l = float(np.abs(lay.size[:2]) @ np.abs(lat))
    lat_max = max(0.0, min(reg_l, lay.lat_room) - wide / 2 - BACK_MARGIN)
    return ToppleIn(
        (float(u[0]), float(u[1])), (float(lay.c[0]), float(lay.c[1])),
        reg_u - IN_MARGIN, float(lat_max), k, j, sign, float(ext[k]), float(ext[j]),
        float(lay.floor),
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LiberoTopplePush(ScriptedPlanner):
    """An In(object, low layer) atom for a tall standing object (`topple_in`)."""

    atom: tuple = ()
    tp: ToppleIn | None = None

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return TIP_PHASES

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        e = self.tp
        obj = self.atom[1]
        po = G.pos(s, obj)  # [B, 3]
        rot = P._quat_mat(s.body_quat[..., obj, :])  # [B, 3, 3]
        u = jnp.asarray(e.opening)
        lat = jnp.asarray((-e.opening[1], e.opening[0]))
        # standing: push the top over along the thin axis' outward sense
        ap = e.sign * rot[..., :2, e.thin]
        ap = ap / jnp.maximum(jnp.linalg.norm(ap, axis=-1, keepdims=True), 1e-6)  # [B, 2]
        az = rot[..., :, e.up]  # [B, 3]: the object's height axis (base -> top)
        mid = po + az * (e.height / 2)  # the standing centre (origin at the base)
        top = po[..., 2] + jnp.abs(az[..., 2]) * e.height
        z_tip = top - TIP_BELOW_TOP
        behind = mid[..., :2] - ap * (e.thick / 2 + TIP_BEHIND)
        tip_end = mid[..., :2] + ap * TIP_PUSH
        z_high = e.floor + TIP_RISE
        # lying: push its outer end (the top) towards -u until the origin is inside
        # the push line through the lying object's centre (a push off it turned a book onto
        # the side wall); re-aimed every chunk
        c0 = jnp.asarray(e.centre)
        end_out = po[..., :2] + az[..., :2] * e.height  # [B, 2]
        com = po[..., :2] + az[..., :2] * (e.height / 2)
        side = (com - c0) @ lat  # [B]
        start = c0 + lat * side[..., None] + u * ((end_out - c0) @ u + PUSH_GAP)[..., None]
        # the pusher's end: the origin e.t_in along u from the centre, the object's length
        # along u outward of it, its lateral place kept inside the region
        length = jnp.abs(az[..., :2] @ u) * e.height  # [B]
        side = jnp.clip(side, -e.lat_max, e.lat_max)
        push_end = c0 + lat * side[..., None] + u * (e.t_in + length + PAD_HALF + 0.003)[..., None]
        z_push = e.floor + PUSH_UP
        at = at_height
        tip = jnp.stack(
            [at(behind, top + 0.04), at(behind, z_tip), at(tip_end, z_tip), at(tip_end, z_high)],
            1,
        )  # [B, 4, 3]
        # once it lies, the tip's waypoints are where the tcp is (its axes no longer say where
        # the tip was): they count as reached and the push follows
        fallen = jnp.abs(az[..., 2]) < 0.5  # [B]
        cur = target[..., :3] - jnp.asarray((0.0, 0.0, robot.TCP_OFFSET))  # tcp setpoint
        tip = jnp.where(fallen[:, None, None], cur[:, None, :], tip)
        push = jnp.stack(
            [at(start, z_high), at(start, z_push), at(push_end, z_push),
             at(push_end + u * 0.05, z_high)],
            1,
        )  # fmt: skip
        xyz = jnp.concatenate([tip, push], 1)  # [B, P, 3]

        def across(d):  # the closed pads' wide face across a push along d, near the setpoint
            raw = jnp.arctan2(d[..., 1], d[..., 0])
            return target[..., 3] + wrap(raw - target[..., 3], jnp.pi)

        y_tip = jnp.where(fallen, target[..., 3], across(ap))
        y_push = across(jnp.broadcast_to(-u, ap.shape))
        yaw = jnp.stack([y_tip] * 4 + [y_push] * 4, 1)  # [B, P]
        zero = jnp.zeros(yaw.shape)
        return xyz, yaw, zero, zero
