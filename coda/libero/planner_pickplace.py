"""Pick-and-place for LIBERO's On / In atoms: `LiberoPickPlace`, a stage of `planner.LiberoPlanner`.

Waypoints are computed from the chunk-start state: above the object, down to a grasp height
below its top, close, lift, over the target (an object's origin or a region site's centre),
down until the object's bottom is a little above the target surface, open, up. The jaws close
across the object's narrowest horizontal axis. Our parallel gripper opens 9 cm: objects wider
than that everywhere (LIBERO's bowls) cannot be taken round the middle: the planner straddles
the near rim wall instead (a rim grasp, jaws opened only 2.8 cm, the bowl placed as if upright:
it sags ~15 deg in the jaws). The carry height clears every body around the object; once held,
the real tcp-to-object offsets place it; a fallen / leaning object is grasped on its box / axis;
an elongated object going into a narrower region is turned to the region's long axis; a tilted
region (the wine rack) takes the object only within a thin band, into which it is lowered; an
object going into an opened drawer is placed outward of what overhangs the drawer
(`drawer_slot`: the drawer above's handle); an object with a long handle (a frying pan) is held
by it (`planner_insert.long_handle`) and turned while carried when the tcp over the handle would
be out of reach; a tall bottle whose origin stays above a shallow In region standing, or would
stand above a drawer the goal closes, is pushed over inside it (`topple`); a plate going onto a
raised target is held across its rim ring (`flat_grasp`); an object for a tilted region (the
wine rack's board) is aimed up the board.

`LiberoPickPlace._waypoints` runs the strategies in order: the object's pose (`_object_pose`),
the grasp by object kind (`_jaw_grasp`, then `_flat_grasp` for a plate taken across its ring,
`_handle_grasp` for an object held by a long handle), the target by goal kind (`TARGETS`:
on_obj / on_region / in_region), the carry height, the aim while carried (`_aim`: a region's
axis for `align`, a reachable handle turn for `handle`), and the path (`_path`, with
`_topple_tail` for a push that lays the placed object down).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from coda.libero import predicates as P
from coda.libero.planner_bodies import (
    CARRY_Z,
    LIFT_CLEAR,
    WIDE_HALF,
    Z_REACH,
    at_height,
    clear_of_neighbours,
    flat_side,
    into_reach,
    tops_along,
    tops_around,
)
from coda.libero.planner_geometry import TOPPLE_BEHIND, TOPPLE_PUSH, UPRIGHT_COS
from coda.sim import geometry as G
from coda.sim import robot
from coda.sim.planner import CLOSE, OPEN, ScriptedPlanner, Waypoint
from coda.sim.state import SimState
from coda.sim.tasks.waypoints import wrap

GRASP_BELOW_TOP = 0.03  # m: tcp below the object's top at the grasp
RELEASE_GAP = 0.03  # m: the object's bottom above the target surface at release
RIM_INSET = 0.004  # m: the tcp's distance inside the object's outline for a rim grasp
RIM_BELOW_TOP = 0.025  # m: tcp below the rim for a rim grasp
UPTURNED_BELOW_TOP = 0.006  # m: tcp below an upturned bowl's base (its origin) at the grasp
MAX_HOLD_OFFSET = 0.08  # m: largest tcp-to-object offset the placement compensates
RIM_OPEN = 0.028  # m: finger half-opening for a rim grasp (a bowl in a drawer: the outer
# finger fully open would land on the drawer's wall)
RIM_RELEASE_GAP = 0.01  # m: a bowl hung by its rim pivots when let go from higher
BAND_MARGIN = 0.008  # m: inside the top of a region's admissible band
HANDLE_OFFSET_SLACK = 0.03  # m: a handle-held object's tcp offset beyond the planned one
REACH_MARGIN = 0.02  # m: a handle-held object's tcp target inside the workspace's xy limits
MID_OFFSET = 0.005  # m: a box centre this far off the origin is aimed at an In region's centre
TILT_COS = 0.9  # cos of the tilt beyond which a placement region counts as tilted
UPHILL_MARGIN = 0.01  # m: a tilted region's target up its slope beyond the object's reach
SQUARE_RATIO = 1.15  # a region whose horizontal sizes differ less counts as square

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
TOPPLE_PHASES = (
    Waypoint("behind", CLOSE, tol=0.01),
    Waypoint("down", CLOSE, speed=0.5, tol=0.006),
    Waypoint("tip", CLOSE, speed=0.3, tol=0.01, settle=6),
    Waypoint("up", CLOSE, tol=0.02),
)


class Pose(NamedTuple):
    """The moved object at the chunk start ([B] / [B, k] arrays)."""

    po: jnp.ndarray  # origin [B, 3]
    rot: jnp.ndarray  # [B, 3, 3]
    half: jnp.ndarray  # local half extents [B, 3]
    mid: jnp.ndarray  # world z of its box's centre [B]
    cxy: jnp.ndarray  # xy it is taken about [B, 2]
    top: jnp.ndarray  # [B]
    bottom: jnp.ndarray  # [B]
    height: jnp.ndarray  # upright height [B] or []


class Grasp(NamedTuple):
    """Where and how the jaws take the object."""

    gx: jnp.ndarray  # tcp x [B]
    gy: jnp.ndarray  # tcp y [B]
    yaw: jnp.ndarray  # hand yaw [B]
    z: jnp.ndarray  # tcp z [B]
    rim: jnp.ndarray  # [B] bool: the fingers straddle a thin rim wall
    flat: jnp.ndarray  # [B] bool: the jaws across a flat object's rim ring
    rim_x: jnp.ndarray  # tcp x of a rim grasp [B]
    max_off: float  # m: largest tcp-to-object offset the placement compensates


class Target(NamedTuple):
    """Where the object goes, by goal kind."""

    pt: jnp.ndarray  # the target point [B, 3]
    surface: jnp.ndarray  # world z the object's bottom comes down to [B]
    rs: jnp.ndarray | None  # the region's frame [B, 3, 3] (None for on_obj)
    band_top: jnp.ndarray | None  # highest origin z a tilted region admits [B] (on_region)


def _object_pose(s: SimState, obj: int, box: tuple) -> Pose:
    q = s.body_quat[..., obj, :]  # [B, 4]
    rot = P._quat_mat(q)  # [B, 3, 3]
    half = s.body_half[..., obj, :]  # [B, 3]
    if box:  # as body_half, but with the geoms of bodies welded to it
        lo_b, hi_b = (np.asarray(v) for v in box)
        half = jnp.broadcast_to(jnp.maximum(np.maximum(-lo_b, hi_b), 1e-3), half.shape)
    po = G.pos(s, obj)  # [B, 3]
    if box:
        lo, hi = (jnp.asarray(v, po.dtype) for v in box)
        mid = po[..., 2] + jnp.einsum("...j,j->...", rot[..., 2, :], (lo + hi) / 2)
        ext_z = jnp.sum(jnp.abs(rot[..., 2, :]) * (hi - lo) / 2, -1)  # [B]
        # a fallen / leaning object by its box's centre, not its origin (at a bottle's base:
        # its end once it lies down); an upright one by its origin (a moka pot's box
        # centre lies towards its handle)
        centre = po[..., :2] + jnp.einsum("...ij,j->...i", rot[..., :2, :], (lo + hi) / 2)
        cxy = jnp.where((rot[..., 2, 2] > UPRIGHT_COS)[:, None], po[..., :2], centre)
        height = (hi - lo)[2]
    else:
        mid = po[..., 2]
        cxy = po[..., :2]
        ext_z = jnp.sum(jnp.abs(rot[..., 2, :]) * half, -1)  # world half height [B]
        height = 2 * half[..., 2]
    return Pose(po, rot, half, mid, cxy, mid + ext_z, mid - ext_z, height)


def _jaw_grasp(s: SimState, obj: int, o: Pose, box: tuple) -> Grasp:
    """The jaws across the narrowest horizontal local axis; a rim grasp for an object wider
    than the jaws everywhere, its upturned base for an upturned bowl, a leaning bottle on its
    long axis."""
    rot, cxy, top, bottom = o.rot, o.cxy, o.top, o.bottom
    horiz = jnp.linalg.norm(rot[..., :2, :], axis=-2)  # [B, 3]
    width = jnp.where(horiz > 0.5, o.half, jnp.inf)
    k = jnp.argmin(width, -1)  # [B]
    d = jnp.take_along_axis(rot[..., :2, :], k[:, None, None], -1)[..., 0]  # [B, 2]
    yaw = jnp.arctan2(-d[..., 0], d[..., 1])
    yaw = (yaw + jnp.pi / 2) % jnp.pi - jnp.pi / 2
    # wider than the jaws everywhere (bowls): straddle the near rim wall instead, jaws
    # closing along x, the tcp on the wall (the object's half width minus RIM_INSET)
    wide = jnp.min(width, -1) > WIDE_HALF  # [B]
    grasp_z = jnp.maximum(top - GRASP_BELOW_TOP, bottom + 0.012)
    gxy = cxy
    if box:  # a leaning bottle: the point of its long axis at the grasp height
        long_k = int(np.argmax(np.asarray(box[1]) - np.asarray(box[0])))
        ax = rot[..., :, long_k]  # [B, 3]
        steep = (jnp.abs(ax[..., 2]) > 0.3) & (rot[..., 2, 2] <= UPRIGHT_COS)
        t = jnp.where(steep, (grasp_z - o.mid) / jnp.where(steep, ax[..., 2], 1.0), 0.0)
        gxy = cxy + ax[..., :2] * t[..., None]
        gxy = into_reach(gxy, rot, box)
    rim_x = cxy[..., 0] - (jnp.min(width, -1) - RIM_INSET)
    gx = jnp.where(wide, rim_x, gxy[..., 0])
    gy = jnp.where(wide, cxy[..., 1], gxy[..., 1])
    yaw = jnp.where(wide, jnp.pi / 2, yaw)
    grasp_z = jnp.where(wide, top - RIM_BELOW_TOP, grasp_z)
    # an upturned bowl (local z down: some settle so off a ramekin or the stove) cannot be
    # taken by the rim (the inner finger lands on its base): its origin is at its base's
    # outer face, now on top, and the base (~7 cm across) fits the jaws
    upturned = wide & (rot[..., 2, 2] < 0)
    gx = jnp.where(upturned, cxy[..., 0], gx)
    grasp_z = jnp.where(upturned, o.po[..., 2] - UPTURNED_BELOW_TOP, grasp_z)
    # wider than the jaws' full opening (a bowl, not a moka pot that just fits them): a
    # true rim grasp, the fingers straddling a thin wall
    rim = wide & ~upturned & (jnp.min(width, -1) > robot.FINGER_OPEN)
    return Grasp(gx, gy, yaw, grasp_z, rim, jnp.zeros_like(rim), rim_x, MAX_HOLD_OFFSET)


def _flat_grasp(s: SimState, obj: int, o: Pose, g: Grasp, flat: tuple) -> Grasp:
    """The jaws across a flat object's rim ring, on the side clear of neighbours."""
    r_mid, open_half, z_grasp = flat
    fx, fy, fyaw = flat_side(s, obj, o.cxy, r_mid, open_half)
    rim = g.rim
    return g._replace(
        gx=jnp.where(rim, fx, g.gx),
        gy=jnp.where(rim, fy, g.gy),
        yaw=jnp.where(rim, fyaw, g.yaw),
        z=jnp.where(rim, o.bottom + z_grasp, g.z),
        flat=rim,
        rim=jnp.zeros_like(rim),
    )


def _handle_grasp(o: Pose, g: Grasp, handle: tuple) -> Grasp:
    """The jaws across a long handle, at its grasp point."""
    g_loc, h_loc = (jnp.asarray(v, o.po.dtype) for v in handle)
    gw = o.po + jnp.einsum("...ij,j->...i", o.rot, g_loc)  # [B, 3]
    hw = jnp.einsum("...ij,j->...i", o.rot[..., :2, :2], h_loc)  # [B, 2]
    yaw = (jnp.arctan2(hw[..., 1], hw[..., 0]) + jnp.pi / 2) % jnp.pi - jnp.pi / 2
    return g._replace(
        gx=gw[..., 0],
        gy=gw[..., 1],
        z=gw[..., 2],
        yaw=yaw,
        rim=jnp.zeros_like(g.rim),
        max_off=float(np.linalg.norm(handle[0][:2])) + HANDLE_OFFSET_SLACK,
    )


# ----------------------------------------------------------------------------- targets by goal kind


def _target_on_obj(st: LiberoPickPlace, s: SimState, obj: int) -> Target:
    """On(object, object): onto the other object's top."""
    pt = G.pos(s, st.atom[3])
    surface = pt[..., 2] + jnp.sum(
        jnp.abs(P._quat_mat(s.body_quat[..., st.atom[3], :])[..., 2, :])
        * s.body_half[..., st.atom[3], :],
        -1,
    )
    return Target(pt, surface, None, None)


def _region_site(st: LiberoPickPlace, s: SimState):
    """(target point [B, 3], the region's frame [B, 3, 3], its world half height [B]): the
    region site's centre, moved to the stage's slot and, for a topple, near the region's end."""
    body, pos, quat, size = st.atom[2:6]
    pt, rs = P._site_frame(s, body, pos, quat)
    if st.slot:  # LIBERO's region frame: d = R (p - p_site), so p = p_site + R^T d
        d = jnp.asarray((*st.slot, 0.0), pt.dtype)
        pt = pt + jnp.einsum("...ji,j->...i", rs, d)
    if st.topple:  # stood near the region's end, to fall along it
        (dx, dy), _, t_base, _ = st.topple
        pt = pt.at[..., :2].add(jnp.asarray((dx * t_base, dy * t_base), pt.dtype))
    ext = jnp.abs(jnp.einsum("...ij,j->...i", rs, jnp.asarray(size, pt.dtype)))[..., 2]
    return pt, rs, ext


def _target_in_region(st: LiberoPickPlace, s: SimState, obj: int) -> Target:
    """In(object, region): down to the region's floor."""
    pt, rs, ext = _region_site(st, s)
    return Target(pt, pt[..., 2] - ext, rs, None)


def _target_on_region(st: LiberoPickPlace, s: SimState, obj: int) -> Target:
    """On(object, region): onto the region's top, clear of neighbours standing in it, up a
    tilted region's board and within the thin band it admits."""
    body, size = st.atom[2], st.atom[5]
    pt, rs, ext = _region_site(st, s)
    # (not for a handle-held pan: its box about the origin, 26 cm along the handle,
    # "overlaps" a moka pot 21 cm away and shifted the pan to the region's edge)
    if not st.handle:
        skip = {obj, body, *(st.atom[6] or ())}
        pt = clear_of_neighbours(s, obj, pt, pt[..., 2] + ext, size, skip)
    up_shift = jnp.zeros(pt.shape[:-1])  # [B]: along a tilted region's own z
    if st.box:
        # a tilted region (the wine rack's: its z runs up the 27.5 deg board, its y is
        # the board's normal, a 4 mm lip at d_z = 0): aimed up the board by the
        # object's horizontal half extent, so the object lands on the board above
        # the lip, not half over it (the cream cheese slid over the lip and fell)
        zr = rs[..., 2, :]  # the region's z in world [B, 3]
        tilted = zr[..., 2] < TILT_COS
        lo_b, hi_b = np.asarray(st.box[0]), np.asarray(st.box[1])
        reach = float(np.max(np.maximum(-lo_b[:2], hi_b[:2])))
        up_shift = jnp.where(tilted, reach + UPHILL_MARGIN, 0.0)
        pt = pt + up_shift[..., None] * zr
    surface = pt[..., 2] + ext
    # a tilted region (a wine rack's slot) admits the origin only within a thin band
    # above its centre: d = R (p - p_site) of a vertical offset δ is δ R e_z, so
    # |δ R_i2| < size_i (i = x, y) and δ R_22 < size_z + 0.10 bound δ. The object is
    # lowered (held) to at most that height: it comes to rest on the fixture there.
    c = jnp.abs(rs[..., :, 2])  # [B, 3]
    sz = jnp.asarray(size, c.dtype)
    lim = jnp.concatenate(
        [
            sz[:2] / jnp.maximum(c[..., :2], 1e-6),
            ((sz[2] + 0.1 - up_shift[..., None]) / jnp.maximum(c[..., 2:], 1e-6)),
        ],
        -1,
    )
    band_top = pt[..., 2] + jnp.min(lim, -1) - BAND_MARGIN  # highest origin z [B]
    return Target(pt, surface, rs, band_top)


TARGETS = {
    "on_obj": _target_on_obj,
    "on_region": _target_on_region,
    "in_region": _target_in_region,
}


# ----------------------------------------------------------------------------- carrying


def _carry_z(st: LiberoPickPlace, s: SimState, o: Pose, pt, place_z, hold):
    """tcp height while carrying [B]: above the placement, clear of every body beside or
    under the object, on its way and the region owner's rim, within reach."""
    kind, obj = st.atom[0], st.atom[1]
    carry = jnp.maximum(CARRY_Z, place_z + 0.05)
    # lifted clear of every body beside or under it (a bowl in a drawer rises past the
    # drawer's walls before it moves sideways)
    carry = jnp.maximum(carry, tops_around(s, obj) + hold + LIFT_CLEAR)
    # ... and of every body on the way to the target (the second moka pot swept the first
    # off the stove when carried over it at the first's height)
    skip = (obj,) if kind == "on_obj" or st.atom[2] < 0 else (obj, st.atom[2])
    carry = jnp.maximum(carry, tops_along(s, obj, o.po[..., :2], pt[..., :2], skip) + hold)
    if kind != "on_obj" and st.atom[2] >= 0:  # clear the rim of the region's owner
        owner = st.atom[2]
        owner_top = G.pos(s, owner)[..., 2] + jnp.sum(
            jnp.abs(P._quat_mat(s.body_quat[..., owner, :])[..., 2, :])
            * s.body_half[..., owner, :],
            -1,
        )
        carry = jnp.maximum(carry, owner_top + hold + RELEASE_GAP)
    return jnp.minimum(carry, Z_REACH)  # a waypoint out of reach is never reached


def _rotate(off, turn):
    """xy offsets [B, 2] turned by `turn` [B] (or [K] against [B, 1])."""
    c_, s_ = jnp.cos(turn), jnp.sin(turn)
    return jnp.stack([c_ * off[..., 0] - s_ * off[..., 1], s_ * off[..., 0] + c_ * off[..., 1]], -1)


def _align_turn(st: LiberoPickPlace, o: Pose, rs, off):
    """(offset [B, 2], yaw change [B]) that turns the object's long horizontal axis onto the
    region's long axis while carried."""
    rot = o.rot
    lo_, hi_ = np.asarray(st.box[0]), np.asarray(st.box[1])
    kl = int(np.argmax((hi_ - lo_)[:2]))  # the object's long horizontal local axis
    a_obj = jnp.arctan2(rot[..., 1, kl], rot[..., 0, kl])
    kr = 0 if st.atom[5][0] >= st.atom[5][1] else 1
    a_reg = jnp.arctan2(rs[..., kr, 1], rs[..., kr, 0])  # LIBERO: axes are R's rows
    # a square region (a caddy's side compartment): the nearer of its two axes
    square = max(st.atom[5][:2]) < SQUARE_RATIO * min(st.atom[5][:2])
    turn = wrap(a_reg - a_obj, jnp.pi / 2 if square else jnp.pi)  # [B], ±π/4 / ±π/2
    # an upright object's box centre (not its origin) on the region's centre: a book's
    # origin sits 1.2 cm off its middle, enough for its edge to land on a wall's top
    # (its local x, y only: a mug's box centre 5 cm up, projected while it sags in a
    # rim grasp, moved it 1.3 cm)
    mid_loc = np.asarray([(lo_[0] + hi_[0]) / 2, (lo_[1] + hi_[1]) / 2, 0.0])
    # only in a region shorter than the object (the caddy's front compartment) or a
    # square one (its side compartments): there the origin-aimed book hit a wall. Not
    # in the back compartment (the book fits either way): there the shift changed where
    # the book stands after it drops below LIBERO's band, and re-grasping it blew up
    # the solver in 4 of 50 states (libero_10 book 48 -> 46/50)
    long_half = float(np.max((hi_ - lo_)[:2]) / 2)
    tight = max(st.atom[5][:2]) < long_half or square
    if np.linalg.norm(mid_loc) > MID_OFFSET and tight:  # (a mug's 1.5 mm: no)
        mid_xy = jnp.einsum("...ij,j->...i", rot[..., :2, :], jnp.asarray(mid_loc))
        off = off - jnp.where((rot[..., 2, 2] > UPRIGHT_COS)[:, None], mid_xy, 0.0)
    return _rotate(off, turn), turn


def _handle_turn(s: SimState, held, yaw, pt, off):
    """(offset [B, 2], yaw change [B], the yaw it turns from [B]) of a handle-held object:
    the handle turned (about the tcp, while carried) away from the workspace's edge when the
    tcp over it would be out of reach (a pan on a stove near the edge): the first of no turn, a
    quarter turn either way, a half turn that leaves the tcp REACH_MARGIN inside the reach and
    the hand's yaw inside its range."""
    base = jnp.where(held, s.ee_cmd[..., 3], yaw) if s.ee_cmd is not None else yaw
    lo_xy = jnp.asarray(robot.TARGET_LOW[:2]) + REACH_MARGIN
    hi_xy = jnp.asarray(robot.TARGET_HIGH[:2]) - REACH_MARGIN
    cands = jnp.asarray([0.0, np.pi / 2, -np.pi / 2, np.pi])
    c_, s_ = jnp.cos(cands), jnp.sin(cands)  # [K]
    rx = c_ * off[..., :1] - s_ * off[..., 1:]  # [B, K]
    ry = s_ * off[..., :1] + c_ * off[..., 1:]
    cx, cy = pt[..., 0:1] + rx, pt[..., 1:2] + ry
    margin = jnp.minimum(
        jnp.minimum(cx - lo_xy[0], hi_xy[0] - cx), jnp.minimum(cy - lo_xy[1], hi_xy[1] - cy)
    )  # [B, K]
    ok = (margin >= 0) & (jnp.abs(base[:, None] + cands) < robot.TARGET_HIGH[3] - 0.05)
    k = jnp.where(ok.any(-1), jnp.argmax(ok, -1), jnp.argmax(margin, -1))  # [B]
    off = jnp.stack([rx, ry], -1)[jnp.arange(k.shape[0]), k]  # [B, 2]
    return off, cands[k], base


def _aim(st: LiberoPickPlace, s: SimState, o: Pose, g: Grasp, held, tg: Target):
    """(tcp-to-target offset [B, 2], yaw change while carried [B], the yaw it turns from [B]
    or None): once held, the object (not the tcp) aimed at the target by the chunk-start
    state's tcp-to-object offset (a long bottle grasped off its centre swings in the jaws)."""
    po = o.po
    off = s.ee_pos[..., :2] - po[..., :2]  # [B, 2]
    n = jnp.linalg.norm(off, axis=-1, keepdims=True)
    off = off * jnp.minimum(1.0, g.max_off / jnp.maximum(n, 1e-6))  # a dropped object
    if st.handle:  # before the grasp: the planned handle offset
        off = jnp.where(held[:, None], off, jnp.stack([g.gx, g.gy], -1) - po[..., :2])
    rim_off = jnp.stack([g.rim_x, o.cxy[..., 1]], -1) - po[..., :2]  # upright [B, 2]
    off = jnp.where(g.rim[:, None], rim_off, off)
    turn, base = jnp.zeros_like(g.yaw), None  # [B]: yaw change while carried
    if st.align and st.box:
        off, turn = _align_turn(st, o, tg.rs, off)
    if st.handle:
        off, turn, base = _handle_turn(s, held, g.yaw, tg.pt, off)
    return off, turn, base


# ----------------------------------------------------------------------------- the path


def _path(s: SimState, o: Pose, g: Grasp, held, pt, off, carry, place_z):
    """tcp xyz [B, P, 3] of PHASES."""

    def at(x, y, z):
        return jnp.stack([x, y, z], -1)

    ox, oy = g.gx, g.gy
    tx, ty = pt[..., 0] + off[..., 0], pt[..., 1] + off[..., 1]
    return jnp.stack(
        [
            at(ox, oy, o.top + 0.08),
            at(ox, oy, g.z),
            at(ox, oy, g.z),
            at(ox, oy, carry),
            at(tx, ty, carry),
            at(tx, ty, place_z),
            at(tx, ty, place_z),
            # straight up once let go: aimed by the (now stale) tcp-to-object offset, a
            # retreat after a missed placement chased the object and never ended
            at(
                jnp.where(held, tx, s.ee_pos[..., 0]),
                jnp.where(held, ty, s.ee_pos[..., 1]),
                carry,
            ),
        ],
        1,
    )  # [B, P, 3]


def _topple_tail(st: LiberoPickPlace, pt, xyz, yaws, grip):
    """PHASES' path extended by TOPPLE_PHASES: the closed fingers behind the placed object's
    top push it over along the region."""
    (dx, dy), z_push, _, y_push = st.topple
    u = jnp.asarray((dx, dy), pt.dtype)
    foot = float(np.max(np.abs(np.concatenate([st.box[0], st.box[1]]))))
    back = pt[..., :2] - u * (foot + TOPPLE_BEHIND)
    end = pt[..., :2] + u * TOPPLE_PUSH
    xyz = jnp.concatenate(
        [xyz, jnp.stack([at_height(back, z_push + 0.05), at_height(back, z_push),
                         at_height(end, z_push), at_height(end, z_push + 0.05)], 1)],
        1,
    )  # fmt: skip
    yaws = jnp.concatenate([yaws, jnp.full((yaws.shape[0], 4), y_push, yaws.dtype)], 1)
    grip = jnp.concatenate([grip, jnp.full((grip.shape[0], 4), CLOSE, grip.dtype)], 1)
    return xyz, yaws, grip


@dataclasses.dataclass(frozen=True)
class LiberoPickPlace(ScriptedPlanner):
    atom: tuple = ()  # the goal's static atom (`predicates.resolve`)
    # the moved object's collision box in its own frame, (lo xyz, hi xyz): LIBERO objects'
    # origins sit at their base, so the symmetric `body_half` puts a bottle's bottom a bottle
    # height too low (and its carry height out of reach); () = symmetric about the origin
    box: tuple = ()
    slot: tuple = ()  # (x, y) in the region's frame: where in a shared region this one goes
    # turn the held object so its long horizontal axis lies along the region's long axis (a
    # book into a caddy's compartment narrower than the book is long)
    align: bool = False
    # ((x, y, z) grasp point, (x, y) direction) of a long handle in the object's frame
    # (`planner_insert.long_handle`: a frying pan, held by its handle, not its rim); () = none
    handle: tuple = ()
    # ((x, y) world unit direction, tcp z, base offset along it, hand yaw) of a push that lays the
    # placed object down (`topple`: a bottle whose origin stays above the region standing,
    # e.g. ketchup into a drawer); ()
    topple: tuple = ()
    # (ring's mid radius, jaw half opening, tcp height above the bottom) of a flat wide object
    # taken across its rim ring (`flat_grasp`: a LIBERO plate onto a raised target); ()
    flat: tuple = ()

    @property
    def phases(self) -> tuple[Waypoint, ...]:
        return PHASES + TOPPLE_PHASES if self.topple else PHASES

    def _waypoints(self, s: SimState, target: jnp.ndarray):
        del target
        kind, obj = self.atom[0], self.atom[1]
        o = _object_pose(s, obj, self.box)
        g = _jaw_grasp(s, obj, o, self.box)
        # once held, the tcp-to-object offsets are the real ones (a bowl hung by its rim sags,
        # a bottle slips in the jaws); before, the planned grasp's
        # a bowl hung by its rim tilts in the jaws (~15 deg): it is placed as if upright, so
        # its low side meets the target first and it is pressed back upright before release
        held = G.grasped(s, obj)  # [B]
        if self.flat:
            g = _flat_grasp(s, obj, o, g, self.flat)
        if self.handle:
            g = _handle_grasp(o, g, self.handle)
        hold = jnp.where(held, s.ee_pos[..., 2] - o.bottom, g.z - o.bottom)  # [B]
        hold = jnp.where(g.rim, o.height - RIM_BELOW_TOP, hold)
        tg = TARGETS[kind](self, s, obj)
        place_z = tg.surface + hold + jnp.where(g.rim | g.flat, RIM_RELEASE_GAP, RELEASE_GAP)
        if tg.band_top is not None:
            origin_over_tcp = hold - (o.po[..., 2] - o.bottom)  # tcp above the origin held
            place_z = jnp.minimum(place_z, tg.band_top + origin_over_tcp)
        carry = _carry_z(self, s, o, tg.pt, place_z, hold)
        off, turn, base = _aim(self, s, o, g, held, tg)
        xyz = _path(s, o, g, held, tg.pt, off, carry, place_z)
        yaws = jnp.repeat(g.yaw[:, None], len(PHASES), 1)
        if self.align:  # carried phases (transport on) turn from the setpoint's yaw
            carried = s.ee_cmd[..., 3] + turn if s.ee_cmd is not None else g.yaw
            yaws = yaws.at[:, 4:].set(carried[:, None])
        if self.handle:
            yaws = yaws.at[:, 4:].set((base + turn)[:, None])
        # a rim grasp opens only as far as the rim wall needs
        opened = jnp.where(g.rim, 1.0 - 2.0 * RIM_OPEN / robot.FINGER_OPEN, OPEN)
        if self.flat:
            opened = jnp.where(g.flat, 1.0 - 2.0 * self.flat[1] / robot.FINGER_OPEN, opened)
        grip = jnp.stack(
            [opened if p.grip == OPEN else jnp.full_like(opened, p.grip) for p in PHASES], 1
        )
        if self.topple:
            xyz, yaws, grip = _topple_tail(self, tg.pt, xyz, yaws, grip)
        return xyz, yaws, jnp.zeros(yaws.shape), jnp.zeros(yaws.shape), grip  # grip [B, P]
