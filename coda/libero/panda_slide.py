"""An object with a handle slid along its support into a low In region by LIBERO's Panda.

"Put the frying pan under the cabinet shelf" (LIBERO-90, kitchen scene 9): the region lies on
the table under the shelf's lower board, 9 cm above the table; the pan is 6 cm tall with its
handle, its handle 26 cm long. Lowered from above it lands on the board; a hand cannot go in
with it. But the pan already stands on the region's floor (the table), so it need not be lifted:
`PandaSlide` takes the end of its handle, the fingers pointing down and closing across it, and
drags it along the table (`LIFT` up, so part of its weight is on the hand) until its origin is
at the region's centre, the hand staying out from under the board; let go, up.

"Put the frying pan on the cabinet shelf" (kitchen scene 9): the region's floor is the shelf's
lower board, 9 cm over the table, and the layer over it 13.5 cm high: no room for a hand over
the pan. `PandaLiftIn` takes the handle with the fingers pointing down, as near the pan's body
as leaves the hand out from under the board above at the end (nearer the body, the pan's
weight turns it less in the fingers, and the grasp is nearer the arm's base: taken by the
handle's end, the hand could not come down to the handle at the arm's reach and took only its
top), lifts the pan until its bottom is `LIFT_GAP` over the board, carries it in until its
origin is over the region's centre, lets go, and rises. `lift_in(env, atom, d)` returns it.

`slide_in(env, atom, d)` returns the stage when that is the way: an In region of a body that
has a ceiling over the region's centre, no floor of its own under the centre above the object's
bottom (the object stands on the region's floor: "on the cabinet shelf", the board, is not
the pan's), room under the ceiling for the object, a
handle to hold (`panda_planner.handle_of`), and the hand's end point out from under the ceiling
by the hand's half thickness. Else None (the other stages are tried, or the reason is given).
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero.geoms import floor_ceiling

LIFT = 0.005  # m: the handle lifted this much before the drag (the object's weight on the hand)
HANDLE_INSET = 0.015  # m: the grasp point inside the handle's outer end
UNDER_CLEAR = 0.01  # m: between the object's top and the ceiling it goes under
SAME_FLOOR = 0.01  # m: an owner geom's top this far over the object's bottom is a floor between
SLID = 0.01  # m: the drag ends with the object's origin this near the region's centre (xy)
LIFT_GAP = 0.02  # m: a lifted object's bottom over the region's floor while carried in


def _region(env, atom: tuple, d: mujoco.MjData):
    """(owner body id, region centre [3], world) of an In atom."""
    names = env.pt.layout.body_names
    owner = env.model.body(names[atom[2]]).id
    return owner, d.xpos[owner] + d.xmat[owner].reshape(3, 3) @ np.asarray(atom[3])


def _setting(env, atom: tuple, d: mujoco.MjData):
    """For an In atom whose region has an owner body: (object geoms, its box lo / hi, and the
    owner's floor, ceiling and roof over the region's centre, `geoms.floor_ceiling`); else
    None."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    m, names = env.model, env.pt.layout.body_names
    owner, c = _region(env, atom, d)
    geoms = PO.body_geoms(m, names[atom[1]])
    lo, hi = PO.world_box(d, m, geoms)
    return (geoms, lo, hi, *floor_ceiling(m, d, owner, c))


def _handle_end(d: mujoco.MjData, part, obj: int) -> tuple[int, np.ndarray]:
    """(the handle's geom farthest from the object's origin, the horizontal way out to it)."""
    far = max(part, key=lambda g: float(np.linalg.norm(d.geom_xpos[g][:2] - d.xpos[obj][:2])))
    return far, PA.horizontal(d.geom_xpos[far] - d.xpos[obj])


def slide_in(env, atom: tuple, d: mujoco.MjData) -> PandaSlide | None:
    """A `PandaSlide` when an In atom is done by sliding its object under a ceiling (module
    doc), else None."""
    setting = _setting(env, atom, d)
    if setting is None:
        return None
    geoms, lo, hi, floor, ceiling, roof = setting
    m = env.model
    if floor > lo[2] + SAME_FLOOR:
        return None  # the region's floor is not what the object stands on
    if ceiling < hi[2] + UNDER_CLEAR:
        return None  # no room under the ceiling
    handle = PO.handle_of(d, m, geoms, 0.0)
    if roof is None or handle is None:
        return None
    stage = PandaSlide(env, atom, d, handle[0], handle[1])
    end = stage.grasp[:2] + stage.offset  # the hand's end point: out from under the roof
    if (np.abs(end - roof[0][:2]) < roof[1][:2] + PP.HAND_THICK).all():
        return None
    return stage


class PandaSlide(PA._Stage):
    """An object dragged by its handle along its support into a region (module doc)."""

    n_phases = 7
    stall = True
    rise = LIFT  # m: the handle raised before the move (PandaLiftIn: over the board)

    def __init__(self, env, atom: tuple, d: mujoco.MjData, part: np.ndarray, yaw: float):
        super().__init__(env, atom)
        m, names = env.model, env.pt.layout.body_names
        self.obj = m.body(names[atom[1]]).id
        _, self.centre = _region(env, atom, d)
        far, out = _handle_end(d, part, self.obj)
        self.grasp = d.geom_xpos[far] + out * (
            float(np.abs(d.geom_xmat[far].reshape(3, 3) @ m.geom_size[far]) @ np.abs(out))
            - HANDLE_INSET
        )
        self.grasp[2] = float(d.geom_xpos[far][2])
        self.closing = np.array([np.cos(yaw), np.sin(yaw), 0.0])
        self.offset = self.centre[:2] - d.xpos[self.obj][:2]  # the drag, xy

    def _phase(self, env, b, d, run):
        site = d.site_xpos[env.idx.site].copy()
        c = self.closing
        if (took := self._take(run, self.grasp, site, c)) is not None:
            return took
        if run.phase == 3:
            return run.fixed["at"] + PA.UP * self.rise, PA.CLOSE, PA.DOWN, c, PA.REACHED, 0
        if run.phase == 4:  # the object's origin to the region's centre, re-aimed every step
            left = self.centre[:2] - d.xpos[self.obj][:2]
            p = site.copy()
            p[:2] += left
            p[2] = run.fixed["at"][2] + self.rise
            run.fixed["end"] = p
            return p, PA.CLOSE, PA.DOWN, c, PA.REACHED, 0 if np.linalg.norm(left) < SLID else 10**6
        p = run.fixed.get("end", site)
        if run.phase == 5:
            return p, PA.OPEN, PA.DOWN, c, PA.REACHED, PA.GRIP_STEPS
        return p + PA.UP * PA.HOVER, PA.OPEN, PA.DOWN, c, PA.REACHED, 0


def lift_in(env, atom: tuple, d: mujoco.MjData) -> PandaLiftIn | None:
    """A `PandaLiftIn` when an In atom's region is a board under a ceiling that leaves no room
    for a hand over the object but room for the object, and the object has a handle that
    leaves the hand out from under the ceiling (module doc), else None."""
    setting = _setting(env, atom, d)
    if setting is None:
        return None
    geoms, lo, hi, floor, ceiling, roof = setting
    m = env.model
    if roof is None or floor <= lo[2] + SAME_FLOOR:
        return None  # no ceiling, or the object already stands on the region's floor
    if floor + LIFT_GAP + (hi[2] - lo[2]) + UNDER_CLEAR > ceiling:
        return None  # no room for the object under the ceiling
    handle = PO.handle_of(d, m, geoms, 0.0)
    if handle is None:
        return None
    return PandaLiftIn.planned(env, atom, d, handle[0], handle[1], (floor - lo[2], roof))


class PandaLiftIn(PandaSlide):
    """An object lifted by its handle onto a board under a ceiling (module doc)."""

    @classmethod
    def planned(cls, env, atom, d, part, yaw, lift) -> PandaLiftIn | None:
        """The stage holding the handle as near the object's body as leaves the hand's end out
        from under the ceiling, or None if even the handle's end does not."""
        rise, roof = lift
        stage = cls(env, atom, d, part, yaw)
        stage.rise = float(rise) + LIFT_GAP
        far, out = _handle_end(d, part, stage.obj)
        size = np.abs(d.geom_xmat[far].reshape(3, 3) @ env.model.geom_size[far])
        reach = float(size @ np.abs(out))  # the handle's half length along it
        outer = stage.grasp.copy()  # the handle's end, HANDLE_INSET in
        for back in np.arange(2 * reach - 2 * HANDLE_INSET, -1e-9, -0.005):  # root first
            stage.grasp = outer - out * back
            end = stage.grasp[:2] + stage.offset
            if not (np.abs(end - roof[0][:2]) < roof[1][:2] + PP.HAND_THICK).all():
                return stage
        return None
