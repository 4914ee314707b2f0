"""An object with a handle carried into an enclosed region (a microwave) by LIBERO's Panda.

From above, the hand does not fit: the microwave is 14.4 cm high inside and its mug 10.3 cm
tall, and the Panda's hand needs about 12 cm over what it holds (`panda_door.no_room_above`).
`PandaInsert` takes the object by its handle with the hand pointing into the opening
(`planner_insert.enclosure`'s opening normal, reversed) and pitched `PITCH` down from
horizontal (held level, its wrist came down on the mug beside), the fingers closing across the
handle's width at the middle of its height; so only the fingers come near the opening and the
hand stays outside it. The stage: turn the hand above the way in, come down in front of the
handle, move in onto it, close, lift the object's bottom just over the inside floor (moved
sideways where the owner's parts beside the way, a door, would meet the hand: `_side`), carry
it in straight (the step scaled as a whole, not clipped per axis) to the floating planner's end
point (`Enclosure.final`), release, withdraw along the normal, rise. Where no sideways start
clears a door opened too little, the door is first pushed wider (`door_room_atom`, a stage of
its own before this one). A handle that does not point out of the opening (within `FACING`)
would have to be turned on the way: refused, with the reason, as is an object without a
handle or a region `enclosure` finds no way into.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero.panda_door import shut_and_open
from coda.libero.panda_outline import body_geoms
from coda.libero.planner_insert import FLOOR_GAP, enclosure, handle_parts, object_geoms

FACING = np.cos(np.deg2rad(30.0))  # the handle's direction within 30° of the opening's normal
TIP_INSET = 0.007  # m: the grasp site inside the handle's outer end (the fingertips 5 mm more)
STAND_OFF = 0.02  # m: the grasp site in front of the handle before moving in onto it
PITCH = np.deg2rad(40.0)  # the hand's tilt down from horizontal (its wrist clears what is low)
HIGH = 0.22  # m: the grasp site's height while the hand turns to point into the opening
DROPPED = 0.03  # m: the object this far from where the hand took it is no longer held
WITHDRAW = 0.2  # m: how far the open hand goes back out along the normal
# the pitched hand's box around the grasp site, carrying: along the normal (out of the opening)
# from HAND_FRONT to HAND_BACK, PA.HAND_SPAN either side across it, HAND_Z below and above
HAND_FRONT, HAND_BACK, HAND_Z = 0.03, 0.15, (0.05, 0.15)
SIDE_MARGIN = 0.01  # m: kept between that box and the region owner's parts beside the way
SIDE_MAX = 0.05  # m: the most the carry's start moves sideways to keep that margin


class PandaInsert(PA._Replanned):
    """A handle-held object into an enclosed region along its opening's normal (module doc)."""

    n_phases = 9

    def __init__(self, env, atom: tuple, d: mujoco.MjData):
        super().__init__(env, atom)
        self._plan(env, d)

    def _plan(self, env, d: mujoco.MjData) -> None:
        """The grasp and carry from the state `d`; ValueError with the reason if not possible."""
        atom, m, names = self.atom, env.model, env.pt.layout.body_names
        what = f"{names[atom[1]]} into {names[atom[2]]}"
        enc = enclosure(PA.compiled_view(env, d), atom)
        if enc is None:
            raise ValueError(f"{what}: no handle to hold it by, or no way in under the roof")
        obj = m.body(names[atom[1]]).id
        cs, es = object_geoms(m, d, obj)
        axis, far, h, _, _, out, lat, _ = handle_parts(cs, es)
        rot = d.xmat[obj].reshape(3, 3)
        u = np.array([*enc.opening, 0.0])  # out of the opening, horizontal
        h_world = rot[:, :2] @ h
        if float(h_world[:2] @ u[:2]) < FACING:
            raise ValueError(
                f"{what}: its handle points {np.degrees(np.arctan2(h_world[1], h_world[0])):.0f}°,"
                " not out of the opening; turning it on the way is not scripted for the Panda"
            )
        zlo = float(np.min(cs[far, 2] - es[far, 2]))
        zhi = float(np.max(cs[far, 2] + es[far, 2]))
        t = np.array([-h[1], h[0]])
        g = np.r_[axis + h * (out - TIP_INSET) + t * lat, (zlo + zhi) / 2]  # object frame
        self.obj = obj
        self.grasp = d.xpos[obj] + rot @ g
        owner = m.body(names[atom[2]]).id
        c = d.xpos[owner] + d.xmat[owner].reshape(3, 3) @ np.asarray(atom[3])
        # the object's origin carried: over the inside floor, then at the end (`Enclosure`)
        z = enc.floor + FLOOR_GAP - float(enc.box_lo[2])
        self.carried = np.r_[d.xpos[obj][:2], z]
        self.inside = np.r_[c[:2] + np.asarray(enc.final), z]
        self.u = u
        self.approach = -u * np.cos(PITCH) - PA.UP * np.sin(PITCH)  # in, pitched down
        self.closing = np.cross(PA.UP, u)  # across the handle's width
        tcp0 = self.grasp + (self.carried - d.xpos[obj])  # the grasp site once lifted
        side = self._side(env, d, names[atom[2]], tcp0, self.inside - self.carried)
        self.blocked = side is None  # no start within SIDE_MAX keeps the hand clear
        self.carried = self.carried + self.closing * (side or 0.0)

    def _side(self, env, d: mujoco.MjData, owner: str, tcp0: np.ndarray, way: np.ndarray):
        """How far (m, along the closing axis) the carry's start moves sideways so that the
        hand's box stays `SIDE_MARGIN` clear of the region owner's parts all along the straight
        way in (`tcp0` its start, `way` its displacement): a door opened less than 90° reaches
        across the way of a hand 20 cm wide. The smallest such move within `SIDE_MAX`, else 0."""
        m, lat, u = env.model, self.closing, self.u
        grid = np.stack(np.meshgrid(*[np.linspace(-1.0, 1.0, 6)] * 3), -1).reshape(-1, 3)
        pts = []  # points over each part's own (oriented) box: a door at an angle is thin
        for g in body_geoms(m, owner):
            c, h = m.geom_aabb[g, :3], m.geom_aabb[g, 3:]
            pts.append(d.geom_xpos[g] + (c + grid * h) @ d.geom_xmat[g].reshape(3, 3).T)
        pts = np.concatenate(pts)
        pl, pu, pz = pts @ lat, pts @ u, pts[:, 2]

        def hits(shift: float) -> bool:
            for tau in np.linspace(0.0, 1.0, 21)[:-1]:  # the end is the same for every shift
                p = tcp0 + lat * shift * (1.0 - tau) + way * tau
                hs, hu = float(p @ lat), float(p @ u)
                inside = (
                    (np.abs(pl - hs) < PA.HAND_SPAN + SIDE_MARGIN)
                    & (pu > hu + HAND_FRONT - SIDE_MARGIN)
                    & (pu < hu + HAND_BACK)
                    & (pz > p[2] - HAND_Z[0])
                    & (pz < p[2] + HAND_Z[1])
                )
                if inside.any():
                    return True
            return False

        for shift in sorted(np.arange(-SIDE_MAX, SIDE_MAX + 1e-9, 0.005), key=abs):
            if not hits(float(shift)):
                return float(shift)
        return None

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        run = self.runs[b]
        if run.phase in (4, 5):  # carried: the object must stay where the hand took it
            rel = d.site_xpos[env.idx.site] - d.xpos[self.obj]
            held = run.fixed.setdefault("held", rel.copy())
            if np.linalg.norm(rel - held) > DROPPED:  # lost on the way: back out
                run.phase, run.count = 7, 0
        return super().step(env, b, d)

    def _phase(self, env, b, d, run):
        a, cl, g = self.approach, self.closing, self.grasp
        tcp = d.site_xpos[env.idx.site]
        front = g + self.u * STAND_OFF
        if run.phase <= 3:
            steps = (  # (target, grip, tolerance, steps held)
                (np.r_[front[:2], max(HIGH, front[2])], PA.OPEN, PA.REACHED, 0),
                (front, PA.OPEN, PA.REACHED, 0),
                (g, PA.OPEN, PA.FINE, 0),
                (g, PA.CLOSE, PA.FINE, PA.GRIP_STEPS),
            )
            target, grip, tol, hold = steps[run.phase]
        elif run.phase <= 5:  # the object where it should be: the hand moves by its error,
            # scaled as a whole to one step's reach (OSC_POSE clips each axis alone: the short
            # axes would finish first, and the hand leave the straight way `_side` kept clear)
            want = self.carried if run.phase == 4 else self.inside
            err = want - d.xpos[self.obj]
            err = err * min(1.0, PA.OSCConfig.max_delta_pos / max(float(np.abs(err).max()), 1e-9))
            target, grip, tol, hold = tcp + err, PA.CLOSE, PA.REACHED, 0
        elif run.phase == 6:  # let go where the hand is
            target = run.fixed.setdefault("release", tcp.copy())
            grip, tol, hold = PA.OPEN, PA.REACHED, PA.GRIP_STEPS
        else:  # back out along the normal, then up
            out = run.fixed.setdefault("out", tcp + self.u * WITHDRAW)
            target = out if run.phase == 7 else np.r_[out[:2], max(HIGH, out[2])]
            grip, tol, hold = PA.OPEN, PA.REACHED, 0
        return target, grip, a, cl, tol, hold


WIDEN_STEP = np.deg2rad(2.5)  # rad: the door angles tried, opening wider, for a clear way in
WIDEN_PAST = np.deg2rad(5.0)  # rad: the door pushed this far past the first clear angle


def door_room_atom(env, atom: tuple, d: mujoco.MjData) -> tuple | None:
    """For an In placement `PandaInsert` carries (`atom`) whose way in no sideways start keeps
    clear of its region owner's door (opened less than about 80°, the door reaches across the
    way of a hand 20 cm wide), the atom of that door opened `WIDEN_PAST` past the first angle,
    tried every `WIDEN_STEP` towards its open limit, at which the way is clear: ("joint", op,
    q, (j,), True), pushed there by `panda_door.PandaDoor` before the carry (libero_10's mug
    into the microwave, `benchmarks/results/INDEX.md`); else None."""
    if atom[0] != "in_region" or atom[2] < 0:
        return None
    try:
        if not PandaInsert(env, atom, d).blocked:
            return None
    except ValueError:  # not carried in by its handle: nothing to widen for
        return None
    m, lay = env.model, env.pt.layout
    root = m.body_rootid[m.body(lay.body_names[atom[2]]).id]
    for j, name in enumerate(lay.joint_names):
        jid = m.joint(name).id
        if m.body_rootid[m.jnt_bodyid[jid]] != root or not PA.is_door(env, jid, d):
            continue
        adr = int(m.jnt_qposadr[jid])
        shut, wide = shut_and_open(m, jid)
        way = float(np.sign(wide - shut))
        at = mujoco.MjData(m)
        at.qpos[:] = d.qpos
        for q in np.arange(float(d.qpos[adr]), wide, way * WIDEN_STEP):
            at.qpos[adr] = q
            mujoco.mj_kinematics(m, at)
            try:
                clear = not PandaInsert(env, atom, at).blocked
            except ValueError:
                clear = False
            if clear:
                bound = float(np.clip(q + way * WIDEN_PAST, min(shut, wide), max(shut, wide)))
                return ("joint", "<" if way < 0 else ">", bound, (j,), True)
    return None


__all__ = ["PandaInsert", "door_room_atom"]
