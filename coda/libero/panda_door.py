"""A hinged door (a microwave's) pushed shut or pulled open by LIBERO's Panda.

`PandaDoor` makes a ("joint", ...) atom of a door true by pushing the door's face, the closed
fingers pointing down, along the arc the door turns on: the push point sits a fixed share of
the door's width out from the hinge and, each step, a little ahead of where the door is
(`LEAD`), on the side it moves away from. A door already open `PUSH_OPEN_FROM` or more is
pushed wider the same way, by its inner face (`panda_insert.door_room_atom`). `PandaDoorOpen`
opens a shut one by its vertical handle bar: the fingers, pointing down, close on the bar
across the door's radius (below the bar's upper stand-off, the palm over its top), then the
grasp point is carried round the hinge a little ahead of the door's angle (`OPEN_LEAD`), the
hand turning with the door, until the atom holds; let go, up. A door without such a bar is
refused with the reason (`door_stage`). `no_room_above` says when an object cannot be carried
into an enclosed region from above (a microwave: 14 cm high inside, a 10 cm mug held from
above does not fit); `panda_insert` then carries it in by its handle, the hand pointing into
the opening.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero.geoms import collision_geoms, floor_ceiling, geom_half_extents
from coda.libero.panda_wrist import wrist_turn
from coda.libero.planner_articulated import _door_bar

PUSH_AT = 0.6  # the push point's distance from the hinge, as a share of the door's width
LEAD = 0.25  # rad: the push point's lead over the door's angle along the turn
DOOR_GAP = 0.01  # m: between the closed fingers and the door's face, coming down
PAST = 0.02  # rad: a push ends this far past the atom's bound (or at the joint's limit)
OPEN_LEAD = 0.12  # rad: the held bar's target ahead of the door's angle, opening


def _rz(a: float) -> np.ndarray:
    return np.array([[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0], [0, 0, 1.0]])


class PandaDoor(PA._Stage):
    """A door about a vertical hinge pushed towards its goal (module doc)."""

    n_phases = 4

    def __init__(self, env, atom: tuple, d: mujoco.MjData):
        super().__init__(env, atom)
        m = env.model
        self.jid, self.qadr, body = PA._joint_of(env, atom)
        self.q_goal = PA._q_goal(env, atom, self.jid)
        self.q0 = float(d.qpos[self.qadr])
        self.sign = float(np.sign(d.xaxis[self.jid][2]))  # +1: q grows turning about +z
        self.turn = float(np.sign(self.q_goal - self.q0)) * self.sign  # about +z, to the goal
        self.range = tuple(float(v) for v in m.jnt_range[self.jid])
        if _opens(m, self.jid, self.q_goal, self.q0) and not _ajar(m, self.jid, self.q0):
            raise ValueError(
                f"door {m.joint(self.jid).name}: PandaDoor pushes a door shut; "
                "opening one is PandaDoorOpen's (door_stage)"
            )
        self.anchor = d.xanchor[self.jid].copy()
        boxes = [g for g in collision_geoms(m, body) if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_BOX]
        if not boxes:
            raise ValueError(f"door {m.joint(self.jid).name}: no panel to push")
        panel = max(boxes, key=lambda g: float(np.prod(m.geom_size[g][:3])))
        centre = d.geom_xpos[panel] - self.anchor
        rot = d.geom_xmat[panel].reshape(3, 3)
        i = int(np.argmax(m.geom_size[panel][:3] * np.linalg.norm(rot[:2], axis=0)))
        along = PA.horizontal(rot[:, i])  # the panel's long horizontal side: from the hinge
        self.radial0 = along if along @ centre >= 0 else -along
        half = geom_half_extents(m, panel, rot)  # world-aligned: its top
        width = 2.0 * float(self.radial0 @ centre)
        motion = self.turn * np.cross(PA.UP, self.radial0)
        self.thick = float(min(m.geom_size[panel][:3]))  # the panel's half thickness
        self.off = float(motion @ centre)  # the panel's middle, across it, from the hinge line
        self.r = PUSH_AT * width
        self.z = float(d.geom_xpos[panel][2])
        self.top = float(d.geom_xpos[panel][2] + half[2])

    def _point(self, q: float) -> tuple[np.ndarray, np.ndarray]:
        """(where the closed fingers' centre goes with the door at angle q, the closing axis)."""
        rot = _rz(self.sign * (q - self.q0))
        radial = rot @ self.radial0
        motion = self.turn * np.cross(PA.UP, radial)
        back = self.off - self.thick - PA.FINGER_HALF - DOOR_GAP  # behind the face it leaves
        p = self.anchor + radial * self.r + motion * back
        return np.r_[p[:2], self.z], radial

    def _past(self, d: mujoco.MjData) -> bool:
        q = float(d.qpos[self.qadr])
        past = PA.past_bound(self.atom, q)
        return past > PAST or abs(q - self.q_goal) < 0.01 or (past > 0 and self._at_limit(q))

    def _at_limit(self, q: float) -> bool:
        return min(abs(q - self.range[0]), abs(q - self.range[1])) < 0.005

    def _phase(self, env, b, d, run):
        q = float(d.qpos[self.qadr])
        p, radial = self._point(q)
        if run.phase == 0:
            return np.r_[p[:2], self.top + PA.HOVER], PA.CLOSE, PA.DOWN, radial, PA.REACHED, 0
        if run.phase == 1:
            return p, PA.CLOSE, PA.DOWN, radial, PA.REACHED, 0
        if run.phase == 2:  # ahead of the door along its turn
            ahead, radial = self._point(q + self.turn * self.sign * LEAD)
            run.fixed["last"] = (ahead, radial)
            return ahead, PA.CLOSE, PA.DOWN, radial, PA.REACHED, 10**6
        ahead, radial = run.fixed.get("last", (p, radial))
        return ahead + PA.UP * PA.HOVER, PA.CLOSE, PA.DOWN, radial, PA.REACHED, 0

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        run = self.runs[b]
        if run.phase == 2 and self._past(d):
            run.phase, run.count, run.trail = 3, 0, []
        return super().step(env, b, d)


def door_stage(env, atom: tuple, d: mujoco.MjData) -> PA._Stage:
    """The stage of a door's atom: pushed shut (`PandaDoor`) or opened by its handle bar."""
    jid = PA._joint_of(env, atom)[0]
    q0 = float(d.qpos[env.model.jnt_qposadr[jid]])
    if _opens(env.model, jid, PA._q_goal(env, atom, jid), q0) and not _ajar(env.model, jid, q0):
        return PandaDoorOpen(env, atom, d)
    return PandaDoor(env, atom, d)


PUSH_OPEN_FROM = np.deg2rad(45.0)  # rad: a door open this far is pushed wider by its inner face


def shut_and_open(m: mujoco.MjModel, jid: int) -> tuple[float, float]:
    """(q shut, q fully open) of a door: its joint's limits, the one nearer 0 shut (LIBERO's
    doors are shut at q = 0)."""
    lo, hi = (float(v) for v in m.jnt_range[jid])
    return (lo, hi) if abs(lo) < abs(hi) else (hi, lo)


def _ajar(m: mujoco.MjModel, jid: int, q0: float) -> bool:
    """Whether a door stands open far enough that its inner face can be pushed (a wider opening:
    `panda_insert.door_room_atom`)."""
    return abs(q0 - shut_and_open(m, jid)[0]) >= PUSH_OPEN_FROM


def _opens(m: mujoco.MjModel, jid: int, q_goal: float, q0: float) -> bool:
    """Whether a door's goal lies farther from shut than where it is now."""
    closed = shut_and_open(m, jid)[0]
    return abs(q_goal - closed) > abs(q0 - closed)


class PandaDoorOpen(PA._Stage):
    """A door about a vertical hinge pulled open by its handle bar (module doc)."""

    n_phases = 6
    signed = True  # the closing sign chosen for the whole turn (`_closing`)

    def __init__(self, env, atom: tuple, d: mujoco.MjData):
        super().__init__(env, atom)
        m = env.model
        self.jid, self.qadr, body = PA._joint_of(env, atom)
        self.q_goal = PA._q_goal(env, atom, self.jid)
        self.q0 = float(d.qpos[self.qadr])
        self.sign = float(np.sign(d.xaxis[self.jid][2]))  # +1: q grows turning about +z
        self.anchor = d.xanchor[self.jid].copy()
        bar = _door_bar(m, d, body, self.anchor, PP.PALM_ABOVE + PP.PALM_CLEAR)
        if bar is None:
            raise ValueError(
                f"door {m.joint(self.jid).name}: opening needs a vertical handle bar to hold; "
                "this door has none"
            )
        self.grasp = bar
        self.closing0 = PA.horizontal(bar - self.anchor)  # across the bar: along the radius
        self.range = tuple(float(v) for v in m.jnt_range[self.jid])

    def _turned(self, d) -> float:
        """The door's turn about +z since the stage began (rad)."""
        return (float(d.qpos[self.qadr]) - self.q0) * self.sign

    def _closing(self, env, d, run) -> np.ndarray:
        """Of ±closing0, the one whose hand turn, the door's whole turn added, leaves the
        wrist inside its range (`wrist_turn`)."""
        if "c" not in run.fixed:
            _, c_c = PA.hand_axes(env, d)
            total = (self.q_goal - float(d.qpos[self.qadr])) * self.sign
            cs = (self.closing0, -self.closing0)
            turns = [float(np.arctan2(np.cross(c_c, c)[2], c_c @ c)) + total for c in cs]
            run.fixed["c"] = cs[turns.index(wrist_turn(env, d, turns))]
        return run.fixed["c"]

    def _past(self, d: mujoco.MjData) -> bool:
        q = float(d.qpos[self.qadr])
        past = PA.past_bound(self.atom, q)
        at_limit = min(abs(q - self.range[0]), abs(q - self.range[1])) < 0.005
        return past > PAST or (past > 0 and at_limit)

    def _phase(self, env, b, d, run):
        c = self._closing(env, d, run)
        site = d.site_xpos[env.idx.site].copy()
        if (took := self._take(run, self.grasp, site, c)) is not None:
            return took
        if run.phase == 3:  # the bar round the hinge, ahead of the door, the hand turning with it
            toward = float(np.sign(self.q_goal - self.q0)) * self.sign
            rz = _rz(self._turned(d) + toward * OPEN_LEAD)
            p = self.anchor + rz @ (self.grasp - self.anchor)
            p[2] = self.grasp[2]
            run.fixed["end"] = (site, rz @ c)
            return p, PA.CLOSE, PA.DOWN, rz @ c, PA.REACHED, 10**6
        p, ce = run.fixed.get("end", (site, c))
        if run.phase == 4:
            return p, PA.OPEN, PA.DOWN, ce, PA.REACHED, PA.GRIP_STEPS
        return p + PA.UP * PA.HOVER, PA.OPEN, PA.DOWN, ce, PA.REACHED, 0

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        run = self.runs[b]
        if run.phase == 3 and self._past(d):
            run.phase, run.count, run.trail = 4, 0, []
        return super().step(env, b, d)


ENCLOSED_CLEAR = 0.12  # m: a hand from above needs this much over the object it carries


def no_room_above(env, atom: tuple, d: mujoco.MjData) -> str | None:
    """Why an In placement into a region under its owner's own ceiling cannot be done with the
    hand above the object, else None. Over the region's centre, the owner body's geoms below
    the centre are its floor, those above its ceiling; a gap under `ENCLOSED_CLEAR` plus the
    object's height leaves no room for a hand above it (a microwave: 14 cm inside, a 10 cm
    mug)."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    m, names = env.model, env.pt.layout.body_names
    owner = m.body(names[atom[2]]).id
    rb = d.xmat[owner].reshape(3, 3)
    c = d.xpos[owner] + rb @ np.asarray(atom[3])
    floor, ceiling, _ = floor_ceiling(m, d, owner, c)
    lo, hi = PO.world_box(d, m, PO.body_geoms(m, names[atom[1]]))
    room = ceiling - max(floor, c[2] - float((np.abs(rb) @ np.asarray(atom[5]))[2]))
    if room >= float(hi[2] - lo[2]) + ENCLOSED_CLEAR:
        return None
    return (
        f"{names[atom[1]]} into {names[atom[2]]}: {room:.3f} m under its ceiling, a hand "
        "from above needs more"
    )
