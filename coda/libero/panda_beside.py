"""Coming down beside an overhang to take an object under it (LIBERO's Panda).

Kitchen scene 10's pudding lies on the table under the open top drawer of the cabinet beside
it. Coming straight down, the hand met the drawer's front, rolled 24° and stopped 3 cm over the
2.7 cm box; the fingers closed over it (21 of 30 states failed). `Clearance` tests the hand's
own collision geoms (the gripper's housing and open fingers, their convex meshes, by
`mujoco.mj_geomDistance`) placed at a planned pose, pointing down, against every other body's
geoms. `beside` then finds the shift across the closing axis (the hand's thin side) where the
hand comes down clear and moves in at the grasp's height clear: `panda_planner.PandaPickPlace`
comes down there, moves in (the open fingers pass either side of the object) and closes.

A first version (98e31c5, reverted) tested the hand as a box 22 × 8 cm: the open drawer's
handle in kitchen scene 1 overlapped that box by 1–2 cm at its end, the hand came down beside
and lost 3 of 10 episodes, while the real hand passes the handle. The exact meshes tell the
two apart. None when the straight descent is clear, when the hand at the grasp itself is not,
or when no shift within `MAX_SHIFT` is.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda as PD
from coda.libero.geoms import collision_geoms
from coda.libero.panda_env import hand_axes
from coda.libero.panda_outline import CORNER_SIGNS

ARM_LINKS = ("link6",)  # the arm's links tested beside the hand (robosuite's names)
MARGIN = 0.005  # m: kept between the hand and another body along a way found for it
LOW, LOW_MARGIN = 0.01, 0.002  # m: within LOW of the grasp's height, this margin only
STEP, MAX_SHIFT = 0.01, 0.25  # m: the shifts tried across the closing axis
LEVELS = 8  # hand heights tested along a descent, the grasp's to the approach's
PATH = 10  # hand positions tested along the move in at the grasp's height


def level(closing) -> np.ndarray:
    """[3]: a closing axis's horizontal part, unit length."""
    u = np.array([closing[0], closing[1], 0.0])
    return u / max(float(np.linalg.norm(u)), 1e-9)


class Clearance:
    """The hand's collision geoms in its grasp site's frame (closing, across, up), read once
    at the state `d` (fingers as they are: open before a grasp), and a scratch state whose
    other geoms stand where `d` has them."""

    def __init__(self, env, d: mujoco.MjData, obj: set[int], links: tuple = ARM_LINKS):
        m = self.m = env.model
        hand = [
            g
            for b in range(m.nbody)
            if m.body(b).name.startswith(PD.GRIPPER_PREFIX)
            for g in collision_geoms(m, b)
        ]
        frame = self.frame(env, d)
        site = d.site_xpos[env.idx.site]
        self.hand = [
            (g, frame.T @ (d.geom_xpos[g] - site), frame.T @ d.geom_xmat[g].reshape(3, 3))
            for g in hand
        ]
        box = m.geom_aabb  # per geom: its box's centre and half sizes, in its own frame
        self.below = -min(  # m: how far the hand reaches under its site, pointing down
            float((pos + (box[g, :3] + CORNER_SIGNS * box[g, 3:]) @ rot.T)[:, 2].min())
            for g, pos, rot in self.hand
        )
        # the forearm's last link, beside the wrist: kept as it stands in the world (the hand
        # turns about it), moved with the site (read with the hand pointing down)
        arm = [g for b in range(m.nbody) if m.body(b).name.endswith(links)
               for g in collision_geoms(m, b)]  # fmt: skip
        self.arm = [(g, d.geom_xpos[g] - site, d.geom_xmat[g].copy()) for g in arm]
        robot = {g for b in range(m.nbody) if m.body(b).name.startswith(("robot", "gripper"))
                 for g in collision_geoms(m, b)}  # fmt: skip
        self.others = np.array(
            [
                g
                for g in range(m.ngeom)
                if g not in robot
                and g not in obj
                and (m.geom_contype[g] or m.geom_conaffinity[g])
                and m.geom_rbound[g] > 0  # a plane (the floor) has none: never near a hand
            ],
            int,
        )
        self.obj = np.array(sorted(obj), int)  # the object to take (left out but on the way in)
        self.scratch = mujoco.MjData(m)
        self.scratch.geom_xpos[:] = d.geom_xpos
        self.scratch.geom_xmat[:] = d.geom_xmat

    @staticmethod
    def frame(env, d: mujoco.MjData) -> np.ndarray:
        """[3, 3] columns: the closing axis, across it, up (the hand pointing down)."""
        ap, cl = hand_axes(env, d)
        return np.stack([cl, np.cross(ap, cl), -ap], axis=1)

    def gap(self, p, closing, margin: float = MARGIN, obj: bool = False, tilt=None) -> float:
        """The hand's smallest distance to another body (up to `margin`; `obj`: to the object
        too), its site at `p`, pointing straight down, its fingers closing along `closing`
        (horizontal); `tilt` [3, 3]: that pose turned by this rotation about the site (the
        forearm's link with it)."""
        u = level(closing)
        up = np.array([0.0, 0.0, 1.0])
        frame = np.stack([u, np.cross(-up, u), up], axis=1)  # as `frame`: across = ap x cl
        if tilt is not None:
            frame = tilt @ frame
        s = self.scratch
        for g, pos, rot in self.hand:
            s.geom_xpos[g] = p + frame @ pos
            s.geom_xmat[g] = (frame @ rot).ravel()
        for g, pos, rot in self.arm:
            if tilt is None:
                s.geom_xpos[g], s.geom_xmat[g] = p + pos, rot
            else:
                s.geom_xpos[g] = p + tilt @ pos
                s.geom_xmat[g] = (tilt @ rot.reshape(3, 3)).ravel()
        best, rb = margin, self.m.geom_rbound
        others = np.concatenate([self.others, self.obj]) if obj else self.others
        for g, _, _ in self.hand + self.arm:
            near = np.linalg.norm(s.geom_xpos[others] - s.geom_xpos[g], axis=1)
            for o in others[near < rb[others] + rb[g] + margin]:
                best = min(best, mujoco.mj_geomDistance(self.m, s, g, int(o), margin, None))
        return best


def beside(clear: Clearance, gxy, closing, grasp_z: float, high: float) -> np.ndarray | None:
    """The xy shift [2] (across `closing`) to come down at, from `high` to `grasp_z`, then in
    to the grasp at `gxy`; None (module doc)."""
    u = np.asarray(closing[:2], float) / max(float(np.linalg.norm(closing[:2])), 1e-9)
    v = np.array([-u[1], u[0]])
    levels = np.linspace(grasp_z, high, LEVELS)

    def free(c, z, margin, obj=False) -> bool:  # near the grasp's height, the fingertips
        margin = margin if z > grasp_z + LOW else min(margin, LOW_MARGIN)  # are ~4 mm over
        return clear.gap(np.r_[c, z], u, margin, obj) >= margin  # the table

    if all(free(gxy, z, 0.0) for z in levels):  # the exact hand passes: straight down
        return None
    if not free(gxy, grasp_z, 0.0):
        return None  # the hand at the grasp itself meets something
    # the way in tests the object too: the open fingers pass either side of a box, but not
    # of a bowl's curved wall (a rim grasp then comes straight down, as before)
    for s in np.arange(STEP, MAX_SHIFT + 1e-9, STEP):
        for sign in (1.0, -1.0):
            c = gxy + sign * s * v
            way = [c + t * (gxy - c) for t in np.linspace(0.0, 1.0, PATH)[:-1]]
            if all(free(c, z, MARGIN) for z in levels) and all(
                free(q, grasp_z, MARGIN, obj=True) for q in way
            ):
                return c - gxy
    return None
