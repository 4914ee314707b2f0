"""An object laid down in a drawer by LIBERO's Panda: placed upright at one end, then tipped.

ν's In reads the object's origin inside the region's box, in height too. A drawer's region is
6 cm tall over its floor, and kitchen scene 5's ketchup bottle stands 14.6 cm with its origin
7.2 cm above its bottom: put in upright (the pick-and-place keeps the yaw-only hand), it stands
with its origin above the box and the goal stays false (0 / 10 by design; the episodes that
succeeded did so when the hand, going back, happened to knock it over).

`PandaLayDown` runs the pick-and-place (`panda_planner.PandaPickPlace`) with its spot moved to
one end of the region along the drawer's lateral axis, then pushes the bottle's top, 2.5 cm
under it, along that axis towards the other end: it tips over its bottom edge and lies along the
drawer, its origin inside. The push points away from the hand's start (the arm reaches over the
near side). `lay_down(env, atom, d, place)` returns the stage when it applies: an In region on a
drawer, an object whose origin would stand above the region's top when it stands on the floor,
and a drawer long enough for it lying (its standing height plus its width and a margin), else
None.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero.planner_geometry import drawer_limits

UNDER_TOP = 0.025  # m: the push's height under the object's top (the fingers' contact)
BESIDE = 0.025  # m: the closed fingers' centre this far off the object's outline before the push
PUSH = 0.10  # m: the push's length along the drawer
ABOVE_TOP = 0.005  # m: an origin this far over the region's top needs the object laid down


def lay_down(env, atom: tuple, d: mujoco.MjData, place: PP.PandaPickPlace) -> PandaLayDown | None:
    """A `PandaLayDown` round `place` when its object must lie in its drawer (module doc)."""
    if place.drawer is None or atom[0] != "in_region":
        return None
    m, names = env.model, env.pt.layout.body_names
    jid, _, body = place.drawer
    obj = m.body(names[atom[1]]).id
    c, o, _, _, _ = drawer_limits(m, d, jid, body, obj, atom)
    lat = np.array([-o[1], o[0], 0.0])
    site = d.site(place.plans[0].target)
    half = np.abs(site.xmat.reshape(3, 3)) @ np.asarray(atom[5])  # world-aligned
    half_l = float(half @ np.abs(lat))
    lo, hi = PO.world_box(d, m, place.geoms[names[atom[1]]])
    above = float(d.xpos[obj][2] - lo[2])  # the origin over the bottom, standing as it is
    if above <= 2 * half[2] + ABOVE_TOP:
        return None
    pts = PO.geom_corners(d, m, place.geoms[names[atom[1]]]) @ lat
    width = float(pts.max() - pts.min())
    height = float(hi[2] - lo[2])
    if height + width + 2 * PP.DRAWER_MARGIN > 2 * half_l:
        return None  # too long to lie in it
    start = d.site_xpos[env.idx.site]
    u = lat if float(lat[:2] @ (c[:2] - start[:2])) >= 0 else -lat  # away from the hand
    place.shift = -float(u @ lat) * (half_l - width / 2 - PP.DRAWER_MARGIN)
    return PandaLayDown(env, atom, place, u, obj)


class PandaLayDown(PA._Stage):
    """A pick-and-place into a drawer, then a push that lays the object down (module doc)."""

    n_phases = 4

    def __init__(self, env, atom: tuple, place: PP.PandaPickPlace, u: np.ndarray, obj: int):
        super().__init__(env, atom)
        self.place, self.u, self.obj = place, u, obj
        self.placed = [False] * env.n_envs

    def begin(self, env, b: int, again: bool = False) -> None:
        super().begin(env, b, again)
        self.place.begin(env, b, again)
        self.placed[b] = False

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        if not self.placed[b]:
            act, self.placed[b] = self.place.step(env, b, d)
            return act, False
        return super().step(env, b, d)

    def _phase(self, env, b, d, run):
        m, u = env.model, self.u
        if "p0" not in run.fixed:  # the object as it stands after the placement
            geoms = self.place.geoms[m.body(self.obj).name]
            lo, hi = PO.world_box(d, m, geoms)
            back = float((PO.geom_corners(d, m, geoms) @ u).min())
            p = d.xpos[self.obj].copy()
            p += u * (back - float(p @ u) - BESIDE)
            p[2] = hi[2] - UNDER_TOP
            run.fixed["p0"] = p
        p0 = run.fixed["p0"]
        if run.phase == 0:  # over the push's start, the fingers closing along the push
            return p0 + PA.UP * (UNDER_TOP + PP.CLEAR), PA.CLOSE, PA.DOWN, u, PA.REACHED, 0
        if run.phase == 1:  # down beside the top
            return p0, PA.CLOSE, PA.DOWN, u, PA.REACHED, 0
        if run.phase == 2:  # push it over
            return p0 + u * PUSH, PA.CLOSE, PA.DOWN, u, PA.REACHED, 0
        return p0 + u * PUSH + PA.UP * PP.CLEAR, PA.OPEN, PA.DOWN, u, PA.REACHED, 0
