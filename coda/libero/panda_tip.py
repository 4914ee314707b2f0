"""A standing book laid flat in front of a low opening and pushed in by LIBERO's Panda.

"Put the book under the cabinet shelf" (LIBERO-90, study scene 4): the region lies on the
table under the shelf's lower board, 7 cm high; the book stands 12.2 cm and is 9.8 cm wide, so
it goes in only lying on its face (2.4 cm). `PandaTipIn` takes it by its top edge, carries it
standing to a spot in front of the opening (its width along the opening's normal `u`, its
face towards the region's side), sets it down, lets go, pushes its top sideways with the closed
fingers so that it falls onto its face, then pushes its near edge along -u until its origin
(the middle of its bottom face, now at one end) is inside the region's box; up.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero import panda_shelve as SH
from coda.libero.panda_wrist import wrist_closing

STAND_OUT = 0.03  # m: the standing book's inner face outside the opening's front edge
SET_GAP = 0.004  # m: the book's bottom over the table when it is let go standing
TIP_BELOW = 0.02  # m: the closed fingertips this far under the standing book's top, tipping
TIP_PUSH = 0.05  # m: how far past the book's face the fingertips push its top
PUSH_CLEAR = 0.012  # m: the fingertips outside the lying book's near edge before pushing
ORIGIN_INSET = 0.006  # m: the origin this far inside the region's box along u, pushed
PUSH_Z = 0.5  # the fingertips' height over the table as a share of the lying book's thickness
HIGH = 0.05  # m: over the standing book's top, moving between the steps
PUSH_LEAN = np.deg2rad(40.0)  # the pushing hand's lean from pointing down, out of the opening
FINGERS_HALF = 0.012  # m: the closed fingers' half extent along their closing axis


class PandaTipIn(PA._Replanned):
    """A standing book set down, tipped onto its face, and pushed into a low region (module doc)."""

    n_phases = 15

    def __init__(self, env, atom: tuple, d: mujoco.MjData, layer: tuple):
        super().__init__(env, atom)
        self.layer = layer
        self._plan(env, d)

    def _plan(self, env, d: mujoco.MjData) -> None:
        atom, m, names = self.atom, env.model, env.pt.layout.body_names
        what = f"{names[atom[1]]} into {names[atom[2]]}"
        c, floor, roof, room, edge, size = self.layer
        obj = m.body(names[atom[1]]).id
        geoms = PO.body_geoms(m, names[atom[1]])
        axes, centre, half = SH._box(m, d, geoms)
        if axes[2, 0] < SH.UPRIGHT or half[0] < half[1] or 2 * half[2] > SH.MAX_THICK:
            raise ValueError(f"{what}: it is not a thin flat object standing on its short edge")
        if floor + 2 * half[2] > roof - SH.LAYER_MARGIN:
            raise ValueError(f"{what}: {2 * half[2]:.3f} m thick, it does not fit lying down")
        u2, _, lat2, lat_hi, lat_lo = room
        self.u, self.lat = np.r_[u2, 0.0], np.r_[lat2, 0.0]
        self.obj, self.c, self.edge, self.half = obj, c, edge, half
        self.reg_u = float(np.abs(size[:2]) @ np.abs(u2))
        self.table = float(PO.world_box(d, m, geoms)[0][2])  # what it stands on
        self.grasp = centre + axes[:, 0] * (half[0] - SH.GRIP_DEPTH)
        self.c0 = wrist_closing(env, d, PA.horizontal(axes[:, 2]))
        # it falls towards the region's centre: it stands on the side it falls away from
        self.tip = self.lat if lat_hi >= lat_lo else -self.lat
        stand = c[:2] + u2 * (edge + STAND_OUT + half[1]) - self.tip[:2] * half[0]
        length = 2 * float(half[0]) - SH.GRIP_DEPTH
        self.carry_z = SH._carry_z(SH._others(env, d, obj), self.grasp, length)
        rel = centre - self.grasp  # the book's centre from the grasp site (hanging, upright)
        self.set_at = np.r_[stand - rel[:2], self.table + SET_GAP + 2 * half[0] - SH.GRIP_DEPTH]
        self.stand = np.r_[stand, self.table]

    def _phase(self, env, b, d, run):
        g, down, up = self.grasp, PA.DOWN, PA.UP
        c0, lat, u = self.c0, self.lat, self.u
        tcp = d.site_xpos[env.idx.site]
        top_z = self.table + 2 * self.half[0]
        tips = PP.tips_below(env, d)
        if run.phase <= 6:
            steps = (  # (target, grip, approach, closing, tolerance, steps held)
                (g + up * PA.HOVER, PA.OPEN, down, c0, PA.REACHED, 0),
                (g, PA.OPEN, down, c0, PA.FINE, 0),
                (g, PA.CLOSE, down, c0, PA.REACHED, PA.GRIP_STEPS),
                (np.r_[g[:2], self.carry_z], PA.CLOSE, down, c0, PA.REACHED, 0),
                (np.r_[self.set_at[:2], self.carry_z], PA.CLOSE, down, lat, PA.REACHED, 0),
                (self.set_at, PA.CLOSE, down, lat, PA.REACHED, 0),
                (self.set_at, PA.OPEN, down, lat, PA.REACHED, PA.GRIP_STEPS),
            )
            return steps[run.phase]
        # tipping: the closed fingers (across the way they push) against the top of its face
        # away from the region
        face = self.stand[:2] - self.tip[:2] * (self.half[2] + FINGERS_HALF + 0.005)
        at = np.r_[face, top_z - TIP_BELOW + tips]
        if run.phase == 7:  # up off the book, then turned
            over = run.fixed.setdefault("over", np.r_[tcp[:2], top_z + HIGH + tips])
            return over, PA.OPEN, down, lat, PA.REACHED, 0
        if run.phase == 8:
            return np.r_[face, top_z + HIGH + tips], PA.CLOSE, down, lat, PA.REACHED, 0
        if run.phase == 9:
            return at, PA.CLOSE, down, lat, PA.REACHED, 0
        if run.phase == 10:
            push = at + self.tip * (2 * self.half[2] + TIP_PUSH)
            return push, PA.CLOSE, down, lat, PA.REACHED, 0
        # lying: its near edge pushed along -u until its origin is inside the region's box
        lo, hi = PO.world_box(d, env.model, PO.body_geoms(env.model, env.model.body(self.obj).name))
        corners = np.array([[x, y] for x in (lo[0], hi[0]) for y in (lo[1], hi[1])])
        near = float(((corners - self.c[:2]) @ u[:2]).max())
        mid = (lo[:2] + hi[:2]) / 2
        lat_mid = float((mid - self.c[:2]) @ lat[:2])
        origin_u = float((d.xpos[self.obj][:2] - self.c[:2]) @ u[:2])
        z = self.table + PUSH_Z * float(hi[2] - lo[2]) + tips
        behind = self.c[:2] + u[:2] * (near + PUSH_CLEAR + PP.FINGER_HALF) + lat[:2] * lat_mid
        # the hand leans out of the opening (its wrist, and the forearm over it, stay clear of
        # the shelf's top: pointing down, the forearm met its front edge)
        lean = down * np.cos(PUSH_LEAN) - u * np.sin(PUSH_LEAN)
        if run.phase == 11:
            return np.r_[behind, top_z + HIGH + tips], PA.CLOSE, lean, lat, PA.REACHED, 0
        if run.phase == 12:
            return np.r_[behind, z], PA.CLOSE, lean, lat, PA.REACHED, 0
        if run.phase == 13:
            left = origin_u - (self.reg_u - ORIGIN_INSET)
            target = np.r_[tcp[:2] - u[:2] * max(left, 0.0), z]
            hold = 0 if left <= 0 else 10**6
            return target, PA.CLOSE, lean, lat, PA.REACHED, hold
        last = run.fixed.setdefault("last", np.r_[tcp[:2], top_z + HIGH + tips])
        return last, PA.OPEN, down, lat, PA.REACHED, 0


def tip_stage(env, atom: tuple, d: mujoco.MjData) -> PandaTipIn | None:
    """The stage laying atom's object down in front of its region's low opening and pushing it
    in, or None when the region is not such an opening; ValueError with the reason for an
    object this way cannot take."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    layer = SH._layer(env, d, atom)
    if layer is None:
        return None
    return PandaTipIn(env, atom, d, layer)


__all__ = ["PandaTipIn", "tip_stage"]
