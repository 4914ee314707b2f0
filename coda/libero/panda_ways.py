"""The hand's ways past what stands near the object it takes (LIBERO's Panda planner).

`pass_height`, on the way to above the object: OSC_POSE's position action is the waypoint's
error clipped per axis, so the hand drops at full speed while it still has most of the way
across to go, and reaches the approach height (10 cm over a flat box) long before it is there.
libero_10's "put both the cream cheese box and the butter in the basket": a 13.1 cm milk
carton stands between the hand's start and the 1.8 cm cream-cheese box. The open fingers swept
through the carton at site height 0.13 m and knocked it over onto the box in all 17 of the 50
initial states that failed; the hand then came down on the fallen carton. `pass_height` traces
that clipped way from the hand's start, tests the hand's exact collision geoms
(`panda_beside.Clearance`, pointing down, at the start's and the end's closing yaw) along it
against what the planner gives it (`PandaPickPlace`: the movable objects, which the fingers
would topple; counting the fixtures, kitchen 10's pudding crossed high over the open drawer
and its way down beside the drawer then failed),
and where they come within `PASS_MARGIN` of anything, finds the lowest height from which
the way across at that height, then straight down, is clear. `PandaPickPlace` then crosses
at that height and comes down over the object. Where the way is already clear nothing changes.

`exit_shift`, with the object held: the shortest slide out from under an overhang before it
rises (an opened drawer over a bowl on the table: lifted straight, the bowl met the drawer's
floor and fell).
"""

from __future__ import annotations

import numpy as np

from coda.libero.geoms import geom_half_extents
from coda.libero.panda_beside import LEVELS, LOW, LOW_MARGIN, MARGIN, Clearance
from coda.libero.panda_outline import geom_corners

PASS_MARGIN = 0.02  # m: kept between the hand and anything on its way across to the object (the
# traced way is not the arm's: crossing 1 cm clear of the traced way, the fingers hit a carton)
PASS_STEP = 0.02  # m: the crossing heights tried, upwards
PASS_MAX = 0.30  # m: the highest crossing tried over the approach height
TRACE_STEP = 0.01  # m: the traced way's largest move along an axis between two tests
ACTION_SCALE = 0.05  # m: OSC_POSE's position action of 1 (`osc.OSCConfig.max_delta_pos`)
NEAR = 0.01  # m: a waypoint this near in xy is over (`panda_planner.REACHED`)
ALONG_STEP = 0.005  # m: the grasp's shifts along a box's length tried
TURNS = np.deg2rad(np.arange(0.0, 20.1, 5.0))  # the closing axis's turns tried, each sign
TURN_COST = 2.5  # degrees of turn that weigh as much as one `ALONG_STEP` of shift
PAD_IN = 0.015  # m: the shifted grasp's fingers this far inside the box's end
ELONGATED = 1.5  # a box this many times longer than it is wide is taken off its centre (a
# can's grasp moved 5 mm and turned 20° pushed the can away: libero_10's alphabet soup)
OPEN_USE = 0.07  # m: the widest the turned fingers may have to span (the hand opens 8 cm)
OVERHANG_CLEAR = 0.015  # m: a held object's outline clear of an overhang before it rises


def clipped_way(start: np.ndarray, goal: np.ndarray) -> np.ndarray:
    """[n, 3] the points the site passes moving from `start` to `goal` with the action
    `clip((goal - site) / ACTION_SCALE, -1, 1)`: along the clipped error's direction, until
    within `NEAR` of the goal in xy (or at it)."""
    p, out = np.asarray(start, float).copy(), []
    for _ in range(10_000):
        out.append(p.copy())
        err = goal - p
        if np.linalg.norm(err[:2]) < NEAR and abs(err[2]) < TRACE_STEP:
            break
        a = np.clip(err / ACTION_SCALE, -1.0, 1.0)
        move = TRACE_STEP * a / max(float(np.abs(a).max()), 1e-9)
        p = goal.copy() if (np.abs(err) <= np.abs(move)).all() else p + move
    return np.asarray(out)


def _clear(clear: Clearance, way: np.ndarray, yaws, margin: float = PASS_MARGIN) -> bool:
    for p in way:
        for yaw in yaws:
            u = np.array([np.cos(yaw), np.sin(yaw), 0.0])
            if clear.gap(p, u, margin, obj=True) < margin:
                return False
    return True


def pass_height(clear: Clearance, start: np.ndarray, goal: np.ndarray, yaws) -> float:
    """0.0 when the clipped way from the site at `start` to `goal` (above the object) is
    clear of everything (the object too) by `PASS_MARGIN` with the hand at each yaw of `yaws`
    (rad, its fingers' closing axis); else the lowest height (every `PASS_STEP` up to
    `PASS_MAX` over the goal) from which the way across at that height is, and the way
    straight down to `goal` is clear by `MARGIN` (as the way down from there to the grasp:
    `panda_beside`, `along_grasp`); 0.0 when none is (the way as before)."""
    goal = np.asarray(goal, float)
    if _clear(clear, clipped_way(start, goal), yaws):
        return 0.0
    for z in np.arange(goal[2] + PASS_STEP, goal[2] + PASS_MAX + 1e-9, PASS_STEP):
        over = np.r_[goal[:2], z]
        down = np.linspace(over, goal, max(2, int(np.ceil((z - goal[2]) / TRACE_STEP)) + 1))
        if _clear(clear, clipped_way(start, over), yaws) and _clear(clear, down, yaws, MARGIN):
            return float(z)
    return 0.0


def along_grasp(clear: Clearance, corners, centre, yaw: float, grasp_z: float, high: float):
    """(xy [2], yaw): where the hand takes a box (fingers closing across it, `yaw`, at
    `centre`) so that its straight way down, from `high` to `grasp_z`, is clear by `MARGIN`
    (`LOW_MARGIN` within `LOW` of the grasp; the exact hand and forearm link of `clear`).
    None when the exact hand passes at the centre or no shift along the box's length (its
    fingers `PAD_IN` inside its ends) and turn of the closing axis (the box at most
    `OPEN_USE` across it) clears it; of those that do, the least moved (a shift of
    `ALONG_STEP` weighs as a turn of `TURN_COST` degrees: a butter box taken turned 25°
    slipped out of the fingers as they squeezed it straight). Only for a box at least
    `ELONGATED` times as long as it is wide."""
    levels = np.linspace(grasp_z, high, LEVELS)

    def free(xy, a, exact: bool = False) -> bool:
        u = np.array([np.cos(a), np.sin(a), 0.0])
        for z in levels:
            margin = 0.0 if exact else MARGIN if z > grasp_z + LOW else LOW_MARGIN
            if clear.gap(np.r_[xy, z], u, margin) < margin:
                return False
        return True

    v = np.array([-np.sin(yaw), np.cos(yaw)])
    along = corners[:, :2] @ v - centre @ v
    u = np.array([np.cos(yaw), np.sin(yaw)])
    if np.ptp(along) < ELONGATED * np.ptp(corners[:, :2] @ u):
        return None  # about as wide every way (a can): the centre, as before
    if free(centre, yaw, exact=True):  # the exact hand passes (as `panda_beside.beside`)
        return None
    reach = min(-along.min(), along.max()) - PAD_IN
    shifts = np.arange(0.0, max(reach, 0.0) + 1e-9, ALONG_STEP)
    cands = [  # each sign once (0 and -0 are one), the least moved first
        (t / ALONG_STEP + np.rad2deg(turn) / TURN_COST, st, yaw + sa)
        for t in shifts
        for turn in TURNS
        for sa in dict.fromkeys((turn, -turn))
        for st in dict.fromkeys((t, -t))
    ]
    cands.sort(key=lambda c: c[0])
    for _, t, a in cands:
        u = np.array([np.cos(a), np.sin(a)])
        if np.ptp(corners[:, :2] @ u) > OPEN_USE:
            continue
        if free(centre + t * v, a):
            return centre + t * v, float(a)
    return None


def exit_shift(m, d, obj_geoms, others, carried: float, on_other: bool) -> np.ndarray:
    """The shortest xy shift along ±x / ±y that takes the held object's outline
    `OVERHANG_CLEAR` clear of every geom of `others` over it below the height its top reaches
    when carried (its bottom at `carried`); zeros when nothing overhangs it, no such shift
    clears all, or the object rested on another object or fixture when the fingers closed
    (`on_other`: a bowl in a drawer, which a slide would push into the drawer's walls)."""
    if on_other:
        return np.zeros(2)
    pts = geom_corners(d, m, obj_geoms)
    lo, hi = pts.min(0), pts.max(0)
    top = carried + (hi[2] - lo[2])
    boxes = []
    for geoms in others:
        for g in geoms:
            e = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
            glo, ghi = d.geom_xpos[g] - e, d.geom_xpos[g] + e
            if hi[2] - 0.005 <= glo[2] < top:
                boxes.append((glo[:2], ghi[:2]))

    def over(shift):
        a, b = lo[:2] + shift - OVERHANG_CLEAR, hi[:2] + shift + OVERHANG_CLEAR
        return [(p, q) for p, q in boxes if (p < b).all() and (q > a).all()]

    now = over(np.zeros(2))
    if not now:
        return np.zeros(2)
    best = None
    for axis in (0, 1):
        for sign in (-1.0, 1.0):
            need = [
                (q[axis] - lo[axis] if sign > 0 else hi[axis] - p[axis]) + OVERHANG_CLEAR
                for p, q in now
            ]
            shift = np.zeros(2)
            shift[axis] = sign * (max(need) + 1e-3)
            if not over(shift) and (best is None or abs(shift).sum() < abs(best).sum()):
                best = shift
    return np.zeros(2) if best is None else best
