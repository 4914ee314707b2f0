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

import jax.numpy as jnp
import mujoco
import numpy as np

from coda.libero import predicates as P
from coda.libero.planner import CARRY_Z, Z_REACH, quat_matrix
from coda.libero.planner_insert import _handle_parts, _object_geoms, _ray_walls, long_handle
from coda.libero.scene import collision_geoms, geom_half_extents
from coda.sim import geometry as G
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


def slide_in(compiled, atom: tuple) -> Slide | None:
    """The slide geometry of an In(object, region) atom, or None (see the module doc)."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    handle = long_handle(compiled, atom[1])
    if not handle:
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
    rb = d.xmat[owner].reshape(3, 3)
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    size = np.abs(rb @ quat_matrix(atom[4])) @ np.asarray(atom[5])  # region half extents
    cs, es = _object_geoms(m, d, obj)
    lo, hi = (cs - es).min(0), (cs + es).max(0)
    bottom = float(d.xpos[obj][2] + lo[2])  # the object upright where it stands
    over = [(bc, be) for bc, be in boxes if np.all(np.abs(bc[:2] - c[:2]) < be[:2])]
    floors = [float(bc[2] + be[2]) for bc, be in over if bc[2] + be[2] <= c[2] + size[2]]
    floors = [f for f in floors if f < c[2]]
    floor = max(floors) if floors else max(bottom, float(c[2] - size[2]))
    roofs = [(bc, be) for bc, be in over if bc[2] - be[2] > floor + 0.01]
    if not roofs or abs(floor - bottom) > LEVEL:
        return None
    roof = min(float(bc[2] - be[2]) for bc, be in roofs)
    if floor + (hi[2] - lo[2]) + ROOF_CLEAR > roof:
        return None  # does not fit under the roof standing
    mid = (roof + floor) / 2
    dirs = [np.array(v, float) for v in ((1, 0), (-1, 0), (0, 1), (0, -1))]
    dist = [_ray_walls(boxes, c, u, mid) for u in dirs]
    open_ = [k for k in range(4) if not np.isfinite(dist[k])]
    if len(open_) != 1:
        return None
    u = dirs[open_[0]]
    back = dist[[1, 0, 3, 2][open_[0]]]
    lat = np.array([-u[1], u[0]])
    edge = max(float((bc[:2] - c[:2]) @ u + np.abs(be[:2]) @ np.abs(u)) for bc, be in roofs)
    # the body's reach about the origin, the handle pointing out along u (object frame: the
    # handle's direction h turned onto u, so a world direction w is h-relative)
    h = np.asarray(handle[1])
    body = ~_handle_parts(cs, es)[1]  # the geoms that are not handle
    rot = np.array([[h[0], -h[1]], [h[1], h[0]]])  # turns +x onto the handle's direction

    def reach(w):  # w in the frame with the handle along +x
        bw = rot @ w
        return float(np.max(cs[body, :2] @ bw + np.abs(es[body, :2]) @ np.abs(bw)))

    r_back = reach(np.array([-1.0, 0.0]))  # away from the handle: into the layer
    reg_u = float(np.abs(size[:2]) @ np.abs(u))
    lat_room = min(dist[k] for k in range(4) if abs(dirs[k] @ lat) > 0.5)
    if max(reach(np.array([0.0, 1.0])), reach(np.array([0.0, -1.0]))) + BACK_MARGIN > lat_room:
        return None  # too wide for the layer
    t = float(np.clip(-back + r_back + BACK_MARGIN, -reg_u + 0.01, reg_u - 0.01))
    if t > edge:
        return None
    final = u * t
    front = edge - t + r_back + FRONT_CLEAR
    return Slide(
        tuple(float(v) for v in u), tuple(float(v) for v in final), float(front),
        tuple(float(v) for v in handle[0]), tuple(float(v) for v in handle[1]),
        float(floor + handle[0][2] - lo[2] + DRAG_UP), float(hi[2]),
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class LiberoSlide(ScriptedPlanner):
    """An In(object, low roofed layer) atom: the object dragged by its handle and pushed in."""

    atom: tuple = ()
    sl: Slide | None = None

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return PHASES

    @property
    def carried(self) -> tuple[int, ...]:
        return CARRIED

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        e = self.sl
        obj = self.atom[1]
        po = G.pos(s, obj)  # [B, 3]
        rot = P._quat_mat(s.body_quat[..., obj, :])  # [B, 3, 3]
        gw = po + jnp.einsum("...ij,j->...i", rot, jnp.asarray(e.handle))  # [B, 3]
        hw = jnp.einsum("...ij,j->...i", rot[..., :2, :2], jnp.asarray(e.handle_dir))  # [B, 2]
        u = jnp.asarray(e.opening)
        a_out = jnp.arctan2(u[1], u[0])
        turn = wrap(a_out - jnp.arctan2(hw[..., 1], hw[..., 0]))  # [B]: still to turn
        # jaws across the handle (yaw = its heading mod π); of the two, the one whose final yaw
        # stays inside the yaw range
        f1 = wrap(jnp.full_like(turn, a_out))
        f2 = f1 - jnp.pi * jnp.sign(f1 + 1e-9)
        final_yaw = jnp.where(jnp.abs(f1 - turn) <= jnp.pi, f1, f2)
        grasp_yaw = final_yaw - turn
        held = G.grasped(s, obj)  # [B]
        cmd_yaw = s.ee_cmd[..., 3] if s.ee_cmd is not None else grasp_yaw
        carried_yaw = jnp.where(held, wrap(cmd_yaw + turn), final_yaw)
        off = jnp.where(held[:, None], s.ee_pos[..., :2] - po[..., :2], gw[..., :2] - po[..., :2])
        c_, s_ = jnp.cos(turn), jnp.sin(turn)
        off = jnp.stack(
            [c_ * off[..., 0] - s_ * off[..., 1], s_ * off[..., 0] + c_ * off[..., 1]], -1
        )  # [B, 2]: tcp from the origin once turned
        pt, _ = P._site_frame(s, *self.atom[2:5])  # [B, 3]
        fin = pt[..., :2] + jnp.asarray(e.final) + off  # tcp xy at the end [B, 2]
        front = fin + u * e.front
        gxy = gw[..., :2]
        high = jnp.minimum(jnp.maximum(CARRY_Z, po[..., 2] + e.top + 0.08), Z_REACH)

        def at(xy, z):
            return jnp.concatenate([xy, jnp.broadcast_to(z, xy.shape[:-1])[..., None]], -1)

        xyz = jnp.stack(
            [at(gxy, high), at(gxy, gw[..., 2]), at(gxy, gw[..., 2]), at(front, e.drag_z),
             at(fin, e.drag_z), at(fin, e.drag_z), at(fin, high)],
            1,
        )  # fmt: skip
        yaw = jnp.stack([grasp_yaw] * 3 + [carried_yaw] * 4, 1)  # [B, P]
        zero = jnp.zeros(yaw.shape)
        return xyz, yaw, zero, zero
