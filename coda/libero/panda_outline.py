"""An object's outline and grasp, read from its MuJoCo geoms (the Panda planner's geometry).

The world-aligned box and the rotated corners of an object's colliding geoms; the closing
direction across its narrowest horizontal width; where the fingers take it (across that width,
or straddling a wide object's wall: a bowl); its handle (the geoms sticking out of its core: a
moka pot's, a mug's); whether a straight carry passes near a box. Used by
`panda_planner.PandaPickPlace` and the articulated, door, slide and insert stages.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero.geoms import collision_geoms, geom_half_extents

WIDTH_TIE = 0.005  # m: widths this close count as equal (the turn then is the smaller one)
RIM_WIDTH = 0.07  # m: an object wider than this everywhere is taken by its rim wall (a bowl)
RIM_INSET = 0.004  # m: the grasp site inside the object's outline for a rim grasp
SOLID_CORE = 0.5  # an object is solid when its core geom reaches this share of its height
HANDLE_REACH = 0.02  # m: geoms this near the outermost one's distance from the core, and
HOLLOW_HANDLE_REACH = 0.025  # m: a hollow one's (a mug's handle pieces reach 2.4 cm inwards
# of its outermost one; its walls lie 4 cm inwards)
HANDLE_SPAN = 0.05  # m: this near the outermost one itself, are its handle
HANDLE_SHARE = 0.3  # a handle is at most this share of an object's geoms (moka pot: 4 / 15)
HOLLOW_HANDLE_SHARE = 0.15  # of a hollow one's (a mug's: 3 / 39; a tilted bowl's side: 9 / 40)
HANDLE_GEOMS = 3  # geoms: a part this small may be a handle whatever its share (the red coffee
# mug is modelled coarsely: its handle is 3 of its 11 geoms)
HANDLE_OUT = 0.02  # m: how much farther than the median geom a handle reaches (a bowl's wall
# pieces are all about as far)
PAD_HALF = 0.008  # m: a finger pad's half width across the closing axis (robosuite's pad box)
PAD_INSET = 0.002  # m: the pads' edge this far inside a handle's inner end (`handle_grip`)
RIM_SIDES = (
    (-1.0, 0.0),
    (0.0, -1.0),
    (0.0, 1.0),
    (1.0, 0.0),
)  # the walls of a rim grasp (tried nearest the hand's start first)
_ANGLES = np.deg2rad(np.arange(0.0, 180.0, 2.0))  # closing directions tried for the width
CORNER_SIGNS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)


def body_geoms(model: mujoco.MjModel, prefix: str) -> np.ndarray:
    """Colliding geom ids of the bodies named `prefix` or `prefix/...` (an object's parts)."""
    bodies = [
        b
        for b in range(model.nbody)
        if model.body(b).name == prefix or model.body(b).name.startswith(prefix + "/")
    ]
    return np.concatenate([collision_geoms(model, b) for b in bodies] or [np.zeros(0, int)])


def world_box(d: mujoco.MjData, model: mujoco.MjModel, geoms: np.ndarray):
    """(lo [3], hi [3]) of the world-aligned box around `geoms`."""
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for g in geoms:
        half = geom_half_extents(model, g, d.geom_xmat[g].reshape(3, 3))
        lo = np.minimum(lo, d.geom_xpos[g] - half)
        hi = np.maximum(hi, d.geom_xpos[g] + half)
    return lo, hi


def extent(d: mujoco.MjData, model: mujoco.MjModel, geoms: np.ndarray):
    """(xy centre, bottom z, top z) of the world box around `geoms`."""
    lo, hi = world_box(d, model, geoms)
    return (lo[:2] + hi[:2]) / 2, float(lo[2]), float(hi[2])


def geom_corners(d: mujoco.MjData, model: mujoco.MjModel, geoms: np.ndarray) -> np.ndarray:
    """World corners [8 n, 3] of `geoms`' bounding boxes in their own frames (a rotated
    object's footprint, not its world-aligned box)."""
    pts = []
    for g in geoms:
        c, h = model.geom_aabb[g, :3], model.geom_aabb[g, 3:]
        pts.append(d.geom_xpos[g] + (c + CORNER_SIGNS * h) @ d.geom_xmat[g].reshape(3, 3).T)
    return np.concatenate(pts)


def wrap(a: float) -> float:
    """An angle between two closing directions (which are lines: modulo pi) in [-pi/2, pi/2)."""
    return float((a + np.pi / 2) % np.pi - np.pi / 2)


def narrowest(corners: np.ndarray, current: float) -> tuple[float, float]:
    """(yaw, width): the closing direction (rad) across the object's narrowest horizontal
    width, and that width; of widths within `WIDTH_TIE` of the narrowest, the direction
    nearest `current`."""
    u = np.stack([np.cos(_ANGLES), np.sin(_ANGLES)], axis=1)
    proj = corners[:, :2] @ u.T
    width = proj.max(axis=0) - proj.min(axis=0)
    ok = np.flatnonzero(width <= width.min() + WIDTH_TIE)
    i = min(ok, key=lambda i: abs(wrap(_ANGLES[i] - current)))
    return float(_ANGLES[i]), float(width[i])


def swinging_geoms(model: mujoco.MjModel, geoms) -> np.ndarray:
    """Those of `geoms` (a scene's fixtures') on a part that turns on a hinge (a microwave's
    door, a stove's knob) or is carried by one: a hand that meets one swings it, as it pushes a
    movable object."""

    def swings(b: int) -> bool:
        while b > 0:
            first, n = model.body_jntadr[b], model.body_jntnum[b]
            if (model.jnt_type[first : first + n] == mujoco.mjtJoint.mjJNT_HINGE).any():
                return True
            b = int(model.body_parentid[b])
        return False

    return np.array([g for g in geoms if swings(int(model.geom_bodyid[g]))], int)


def closing_yaw(corners: np.ndarray, current: float) -> float:
    """The closing direction (yaw, rad) of `narrowest`."""
    return narrowest(corners, current)[0]


def grasp_of(corners: np.ndarray, current: float, side: int = 0):
    """(grasp site xy, closing yaw, rim): across the narrowest width at the footprint's
    centre; for an object wider than `RIM_WIDTH` everywhere (a bowl), the fingers straddle
    its wall on `RIM_SIDES[side]`, closing towards the centre."""
    yaw, width = narrowest(corners, current)
    centre = centre_xy(corners)
    if width <= RIM_WIDTH:
        return centre, yaw, False
    u = np.asarray(RIM_SIDES[side])
    half = (corners[:, :2].max(axis=0) - corners[:, :2].min(axis=0)) / 2
    wall = centre + u * (half - RIM_INSET)
    return wall, float(np.arctan2(u[1], u[0])), True


def handle_of(d: mujoco.MjData, m: mujoco.MjModel, geoms: np.ndarray, current: float):
    """(handle geoms, closing yaw, solid) of an object: the geoms about as far from its core
    (its geom of largest footprint) as the outermost one and near it, when that one sticks
    out (`HANDLE_OUT`) and they are narrow enough to close on (a moka pot's or a mug's
    handle; a bowl's wall pieces, all about as far, are not);
    solid: the core reaches `SOLID_CORE` of the object's height (a moka pot, not a mug or a
    bowl, whose core is the floor). None without such a part."""
    lo, hi = world_box(d, m, geoms)
    boxes = [world_box(d, m, np.array([g])) for g in geoms]
    core = _core(boxes)
    centre = (core[0][:2] + core[1][:2]) / 2
    dist = np.array([np.linalg.norm((b[0][:2] + b[1][:2]) / 2 - centre) for b in boxes])
    mid = np.array([(b[0][:2] + b[1][:2]) / 2 for b in boxes])
    near = np.linalg.norm(mid - mid[int(np.argmax(dist))], axis=1) <= HANDLE_SPAN
    solid = bool(core[1][2] >= lo[2] + SOLID_CORE * (hi[2] - lo[2]))
    reach = HANDLE_REACH if solid else HOLLOW_HANDLE_REACH
    part = np.asarray(geoms)[(dist >= dist.max() - reach) & near]
    yaw, width = narrowest(geom_corners(d, m, part), current)
    if width > RIM_WIDTH or dist.max() - np.median(dist) < HANDLE_OUT:
        return None
    share = HANDLE_SHARE if solid else HOLLOW_HANDLE_SHARE
    if len(part) > max(HANDLE_GEOMS, share * len(geoms)):
        return None  # a tilted bowl's raised side, not a handle
    return part, yaw, solid


def _core(boxes: list) -> tuple:
    """The (lo, hi) box of largest footprint among `boxes`: an object's core."""
    return max(boxes, key=lambda b: float(np.prod(b[1][:2] - b[0][:2])))


def handle_grip(d: mujoco.MjData, m: mujoco.MjModel, geoms: np.ndarray, part) -> np.ndarray:
    """Where the fingers take a solid object by its handle `part` (`handle_of`), xy: on the
    line from the handle's centre towards the core's, as near the core as keeps the pads on
    the handle (their edge `PAD_INSET` inside its inner end), never outwards of its centre.
    The pads carry no torsional friction, so the object's weight turns it about their closing
    axis with the lever from the grip to its mass: a moka pot taken at its handle's middle
    pivoted in the grip as it was lifted and was set down tilted, taken nearer its body it
    stays upright (benchmarks/results/libero_panda_moka_grip_r43.md)."""
    lo, hi = world_box(d, m, part)
    mid = (lo[:2] + hi[:2]) / 2
    core = _core([world_box(d, m, np.array([g])) for g in geoms])
    u = (core[0][:2] + core[1][:2]) / 2 - mid
    if np.linalg.norm(u) < 1e-9:
        return mid
    u = u / np.linalg.norm(u)
    inner = float(((geom_corners(d, m, part)[:, :2] - mid) @ u).max())
    return mid + max(0.0, inner - PAD_HALF - PAD_INSET) * u


def centre_xy(corners: np.ndarray) -> np.ndarray:
    """The xy centre of the box around `corners` (an outline's footprint)."""
    return (corners[:, :2].min(axis=0) + corners[:, :2].max(axis=0)) / 2


def near_segment(lo: np.ndarray, hi: np.ndarray, a: np.ndarray, b: np.ndarray, r: float):
    """Whether the segment a -> b (xy) passes within `r` of the box [lo, hi] (xy)."""
    t = np.linspace(0.0, 1.0, 41)[:, None]
    p = a + t * (b - a)
    gap = np.maximum(np.maximum(lo - p, p - hi), 0.0)
    return bool((np.linalg.norm(gap, axis=1) <= r).any())
