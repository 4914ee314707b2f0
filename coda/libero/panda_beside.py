"""Coming down beside an overhang to take an object under it (LIBERO's Panda).

Kitchen scene 10's pudding lies on the table under the open top drawer of the cabinet beside
it: the hand, 22 cm long along its fingers' closing axis and ~12.5 cm tall over its grasp
site, fits under the drawer only at the grasp's height, and coming straight down it met the
drawer and stopped 3 cm over the pudding (9 of 10 states failed). `beside` finds the shift
across the closing axis (the hand's thin side) that puts the hand's footprint clear of every
overhanging part: `panda_planner.PandaPickPlace` then comes down there, moves in at the grasp's
height (the open fingers pass either side of the object), and closes. None when nothing
overhangs the grasp, or when no shift within `BESIDE_MAX` is clear, or the hand at the grasp
would not fit under the overhang (the straight descent is kept then).
"""

from __future__ import annotations

import numpy as np

from coda.libero.geoms import geom_half_extents

HAND_TOP = 0.125  # m: the hand's top over the grasp site (its housing's box, pointing down)
BESIDE_STEP, BESIDE_MAX = 0.01, 0.25  # m: the shifts tried across the closing axis
BESIDE_MARGIN = 0.01  # m: kept between the hand and an overhang beside it
UNDER_MARGIN = 0.005  # m: between the hand's top at the grasp and an overhang over it


def _boxes(env, d, body_names) -> list[tuple[np.ndarray, np.ndarray]]:
    """(lo [3], hi [3]) of each collision geom of the named bodies and their parts (per geom:
    a cabinet's open drawer overhangs where its base does not)."""
    from coda.libero.panda_planner import body_geoms

    m, out = env.model, []
    for name in body_names:
        for g in body_geoms(m, name):
            ext = geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))
            out.append((d.geom_xpos[g] - ext, d.geom_xpos[g] + ext))
    return out


def _under(lo, hi, c: np.ndarray, u: np.ndarray, v: np.ndarray, half_u, half_v) -> bool:
    """Whether the box's xy overlaps the rectangle at c with half sides half_u along u and
    half_v along v (the box's corners against the rectangle's axes, and the rectangle's
    corners against the box: separating axes of the two)."""
    corners = np.array([[x, y] for x in (lo[0], hi[0]) for y in (lo[1], hi[1])]) - c
    for axis, half in ((u, half_u), (v, half_v)):
        p = corners @ axis
        if p.min() > half or p.max() < -half:
            return False
    rect = np.array([su * half_u * u + sv * half_v * v for su in (-1, 1) for sv in (-1, 1)]) + c
    return not ((rect[:, 0] > hi[0]).all() or (rect[:, 0] < lo[0]).all()
                or (rect[:, 1] > hi[1]).all() or (rect[:, 1] < lo[1]).all())  # fmt: skip


def beside(stage, env, d, gxy: np.ndarray, closing: np.ndarray, grasp_z: float, top: float):
    """The xy shift [2] (across `closing`, horizontal) to come down at, or None (module doc).
    `top`: the object's top; `stage`: the `PandaPickPlace` (its object and hand sizes)."""
    from coda.libero import panda_planner as PP

    u = np.asarray(closing[:2], float) / max(float(np.linalg.norm(closing[:2])), 1e-9)
    v = np.array([-u[1], u[0]])
    p = env.pt.task.problem
    boxes = _boxes(env, d, [n for n, _ in p.objects + p.fixtures if n != stage.plans[0].obj])
    hand_top = grasp_z + HAND_TOP
    high = top + PP.CLEAR + HAND_TOP  # the hand's top where a straight descent starts
    over = [(lo, hi) for lo, hi in boxes if top < lo[2] < high]
    low = [(lo, hi) for lo, hi in boxes if lo[2] <= top and hi[2] > grasp_z - PP.FINGER_BELOW]
    thick = PP.HAND_THICK + BESIDE_MARGIN

    def hit(c) -> bool:
        return any(_under(lo, hi, c, u, v, PP.HAND_HALF, thick) for lo, hi in over)

    def blocked(c) -> bool:  # the hand's way in at the grasp's height, from c to the grasp
        for t in np.linspace(0.0, 0.9, 10):  # (at the grasp itself: as a straight descent)
            q = c + t * (gxy - c)
            for lo, hi in low:  # the fingers low, the palm over the grasp site
                reach = PP.HAND_HALF if hi[2] > grasp_z + PP.PALM_ABOVE else PP.FINGER_REACH
                if _under(lo, hi, q, u, v, reach, PP.HAND_THICK):
                    return True
        return False

    if not hit(gxy):
        return None
    under = [lo for lo, hi in over if _under(lo, hi, gxy, u, v, PP.HAND_HALF, thick)]
    if any(lo[2] < hand_top + UNDER_MARGIN for lo in under):
        return None  # the hand at the grasp does not fit under it
    for s in np.arange(BESIDE_STEP, BESIDE_MAX + 1e-9, BESIDE_STEP):
        for sign in (1.0, -1.0):
            c = gxy + sign * s * v
            if not hit(c) and not blocked(c):
                return c - gxy
    return None


def shift_for(stage, env, d, gxy: np.ndarray, turn: float, grasp_z: float, top: float):
    """`beside` for the hand turned by `turn` (rad, about the vertical) from now; zeros [2]
    where it comes straight down."""
    a = float(np.arctan2(*d.xaxis[stage.finger_joint][1::-1])) + turn
    shift = beside(stage, env, d, gxy, np.array([np.cos(a), np.sin(a)]), grasp_z, top)
    return np.zeros(2) if shift is None else shift
