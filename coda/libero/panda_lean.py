"""Coming in leaning to a bowl's rim under an overhang (LIBERO's Panda).

libero_goal's "open the top drawer and put the bowl inside": the pulled drawer overhangs the
bowl that is to go into it. Pointing straight down, the hand (its housing spans about 10 cm
either side along the fingers' closing axis) meets the open drawer on its way down at every
rim side of the bowl; the arm pressed on, joint 6 ran onto its limit and the bowl was taken
late or not at all. Turned about the closing axis, the housing leans away from the drawer
while the fingers reach the rim under it.

`lean_in` finds, when the straight descent at the chosen rim side is not clear, the first
rim side (nearest the hand's start) and the smallest roll at which the hand's own collision
geoms and the forearm's (links 5 and 6; `panda_beside.Clearance`, exact meshes) are clear at
the grasp and along the straight way back out along the hand's pointing, up to the
approach's height, and from there straight up to the height the hand travels at, with the
wrist within `WRIST_REACH` of the shoulder at the grasp and at the way's start.
`panda_planner.PandaPickPlace` asks at the grasp's first step and again once the hand has
turned above the rim (the turn moves the forearm: kitchen 1's link 6 came 3 cm nearer the
open drawer and met it), then turns the hand at that way's start, comes in along it, closes
on the rim and rights the hand while it carries. A rim grasp comes in leaning rather than
down beside (`panda_beside`): there the housing, moving in at the grasp's height, pushed the
bowl along (libero_goal's bowl, into the wine bottle). Where the straight descent is clear
nothing changes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from coda.libero import panda_reach as PR
from coda.libero.osc import axis_angle_matrix
from coda.libero.panda_beside import LEVELS, LOW, LOW_MARGIN, MARGIN, Clearance, level
from coda.libero.panda_outline import RIM_SIDES, geom_corners, grasp_of, handle_of
from coda.libero.panda_wrist import wrist_sign

LEANS = np.deg2rad((15.0, 20.0, 25.0, 30.0, 35.0, 40.0))  # rolls tried, the smallest first
WAY = 10  # hand positions tested along the way in
DOWN = np.array([0.0, 0.0, -1.0])
LINKS = ("link5", "link6")  # the arm's links tested with the hand: the forearm too
WRIST = "robot0_link6"  # the body whose origin is the wrist (`panda_reach`)
WRIST_REACH = 0.68  # m: the shoulder-to-wrist distance a leaning way may need: the arm's peak
# is 0.7193 (`panda_reach`); a far rim's leaning start estimated at 0.699 stretched the elbow
# onto its limit (the arm stood 0.708 from it)


@dataclasses.dataclass(frozen=True)
class Lean:
    """The leaning hand: its pointing, its fingers' closing axis (horizontal) and where its
    grasp site starts the way in [3 each]."""

    approach: np.ndarray
    closing: np.ndarray
    start: np.ndarray


class Reach:
    """The shoulder-to-wrist distance a leaning hand pose needs, the wrist (link 6's origin)
    kept as it stands in the world and moved with the site, turned with the hand's tilt (as
    `Clearance` moves the forearm): read once at `d`."""

    def __init__(self, env, d):
        self.wrist = d.body(WRIST).xpos - d.site_xpos[env.idx.site]
        self.shoulder = d.body(PR.SHOULDER).xpos.copy()

    def need(self, p: np.ndarray, tilt: np.ndarray) -> float:
        """The distance (m) for the grasp site at `p`, the hand turned by `tilt` [3, 3]."""
        return float(np.linalg.norm(p + tilt @ self.wrist - self.shoulder))


def straight(clear: Clearance, gxy, closing, grasp_z: float, high: float) -> bool:
    """Whether the hand pointing straight down comes down clear from `high` to the grasp."""
    u = level(closing)
    return all(clear.gap(np.r_[gxy, z], u, 0.0) >= 0.0 for z in np.linspace(grasp_z, high, LEVELS))


def lean(
    clear: Clearance, reach: Reach, gxy, closing, grasp_z: float, high: float, travel: float
) -> Lean | None:
    """The leaning way in to the grasp at (gxy, grasp_z) with the fingers closing along
    `closing`, from `high` (the approach's height) and above it from `travel`, its grasp and
    start within `WRIST_REACH`; None when no roll in `LEANS` has one."""
    u = level(closing)
    grasp = np.r_[gxy, grasp_z]

    def free(p, tilt) -> bool:  # near the grasp's height the fingertips are ~4 mm over the
        margin = MARGIN if p[2] > grasp_z + LOW else LOW_MARGIN  # table
        return clear.gap(p, u, margin, tilt=tilt) >= margin

    for angle in LEANS:
        for sign in (1.0, -1.0):
            tilt = axis_angle_matrix((u * sign * angle)[None])[0]
            a = tilt @ DOWN
            start = grasp - a * (high - grasp_z) / float(np.cos(angle))
            if max(reach.need(grasp, tilt), reach.need(start, tilt)) > WRIST_REACH:
                continue
            way = [grasp + t * (start - grasp) for t in np.linspace(0.0, 1.0, WAY)]
            rise = [np.r_[start[:2], z] for z in np.linspace(start[2], travel, LEVELS)[1:]]
            if all(free(p, tilt) for p in way + (rise if travel > start[2] else [])):
                return Lean(a, u, start)
    return None


def rim_order(corners: np.ndarray, current: float, home_xy, reach=None) -> list[int]:
    """The rim sides (`RIM_SIDES`), nearest the hand's start first: a far wall stretches the
    arm, and the near wall of a bowl close to the robot folds it to its joints' limits.
    `reach` ((xy) -> the shoulder-to-wrist distance the hand pointing down needs there): the
    sides needing more than `WRIST_REACH` after the others (libero_spatial's bowl on the
    cabinet: the wall nearest the start, 0.695 from the shoulder, left the hand 2 cm over
    the rim with the elbow at its peak; the one beside it needs 0.67)."""

    def key(i: int) -> tuple:
        xy = grasp_of(corners, current, i)[0]
        return reach is not None and reach(xy) > WRIST_REACH, float(np.linalg.norm(xy - home_xy))

    return sorted(range(len(RIM_SIDES)), key=key)


def lean_in(
    env, d, geoms: np.ndarray, current: float, side: int, home_xy, clear: Clearance, heights
) -> tuple[int, Lean] | None:
    """(rim side, way) of `lean` when the hand cannot come `straight` down at the chosen rim
    `side`: at the first side in `rim_order` (nearest the hand's start) that has one. The
    closing axis's sign is the one that ends the wrist's joint nearest the middle of its range
    (`panda_wrist.wrist_sign`; the turn to a leaning pose took that joint ~0.5 rad past the
    estimate, onto its limit). `current`: the fingers' closing yaw now; `heights`: (grasp,
    approach, travel) z. None for an object with a handle (a mug: its wall is taken, beside
    the handle), when the straight descent is clear, or when no side has a way."""
    if handle_of(d, env.model, geoms, current) is not None:
        return None
    corners = geom_corners(d, env.model, geoms)
    xy, want, _ = grasp_of(corners, current, side)
    if straight(clear, xy, np.array([np.cos(want), np.sin(want)]), *heights[:2]):
        return None
    reach = Reach(env, d)
    for i in rim_order(corners, current, home_xy):
        xy, want, _ = grasp_of(corners, current, i)
        way = lean(clear, reach, xy, np.array([np.cos(want), np.sin(want)]), *heights)
        if way is not None:
            signed = wrist_sign(env, d, way.approach, way.closing, middle=True)
            return i, dataclasses.replace(way, closing=signed)
    return None
