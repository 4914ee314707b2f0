"""Scripted stages for LIBERO's Panda beyond pick-and-place: drawers, knobs, pushed plates.

Each stage makes one goal atom true, closed loop on the simulator's state, one OSC_POSE action
per 20 Hz step, with the hand's full orientation under control (`pose_action`: the position
error over OSC_POSE's 5 cm and the rotation that takes the hand's approach / closing axes to
the wanted ones, over its 0.5 rad). The geometry is read from the model at the stage's start
(the joint, its axis and range, the part's geoms); the moving part's pose is read every step.

  PandaDrawer  a drawer (slide joint). Opened: the hand turned horizontal, pointing into the
               drawer's front, the fingers closing vertically round the handle bar between its
               stand-offs (when an object stands in the straight way down, the hand crosses
               above it and comes down from farther out along the drawer's axis); pulled
               along the joint's axis past LIBERO's threshold; let go, back.
               A handle too low for the hand across it (the hand spans ~10 cm either side of
               its fingers' closing axis): a drawer already pulled out is pushed further from
               inside (the closed fingers down behind its front wall, then outwards); one that
               is not is refused (`LowHandle`; `panda_drag` drags it by friction). Closed:
               the closed fingers lowered in front of the handle, the hand tilted towards
               the cabinet, and pushed along the axis past the goal
               (the joint's limit stops the drawer), on the front above the handle where it
               leaves room, else on the handle. A push ends once the joint is past its bound.
  PandaKnob    a knob (hinge about the vertical): the fingers close across its ridge (its
               tallest geom, along its longest horizontal side) over the axis, then the hand
               turns about the vertical by the angle to LIBERO's threshold (plus a margin), the
               grasp point carried round the axis; let go, up. The hand is first turned to the
               closing direction on the side opposite the turn, so the wrist's range holds.
  PandaPush    a plate onto a level region (`planner_push.pushable`): the closed fingers come
               down into its middle and move to the region's centre, pushing its rim on the far
               side; the push is re-aimed every step.

Every stage has `begin(env, b)` (start over in environment b) and `step(env, b, d)` ->
(action [7], finished); `panda_chain.PandaPlanner` chains them with pick-and-place.
"""

from __future__ import annotations

import dataclasses
import types

import mujoco
import numpy as np

from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero.geoms import collision_geoms, geom_half_extents
from coda.libero.osc import OSCConfig
from coda.libero.panda_env import hand_axes  # the hand's axes, read where the env is
from coda.libero.panda_wrist import turn_to, wrist_sign
from coda.libero.planner_articulated import goal_q
from coda.libero.planner_geometry import object_box
from coda.libero.planner_push import pushable

OPEN, CLOSE = -1.0, 1.0
DOWN = np.array([0.0, 0.0, -1.0])
UP = np.array([0.0, 0.0, 1.0])
REACHED = 0.01  # m: a waypoint is reached
FINE = 0.005  # m: a waypoint the fingers must hit closely (a handle, a knob's ridge)
TURNED = np.deg2rad(2.0)  # the hand's orientation is reached within this
GRIP_STEPS = 12  # steps holding still while the fingers close / open
MAX_MOVE = 90  # steps a move may take before the stage moves on
STALL_STEPS, STALL_POS, STALL_ROT = 10, 0.002, np.deg2rad(1.0)  # a move this long that got
# less than this much nearer its position and orientation has stalled
FRONT = 0.12  # m: the tcp in front of a handle (along the drawer's outward axis): going in, leaving
APPROACH = 0.10  # m: farther out than FRONT, where the hand starts its way down to the handle's
# height when an object is in the straight way (from where it turned, a line down to the front
# point dragged a bowl beside libero_goal's cabinet in front of it with the lower finger)
WAY_WIDTH = 0.06  # m: objects this near the hand's straight way (xy) are in it
HOVER = 0.10  # m: above a handle / knob before coming down
HAND_SPAN = 0.10  # m: the hand's half extent along its closing axis (a horizontal hand's reach
# below its fingers)
FLOOR_CLEAR = 0.01  # m: the horizontal hand's lowest point above the surface under the drawer
PUSH_GAP = 0.03  # m: the closed fingers' centre in front of a handle before a drawer push
PUSH_OVER = 0.01  # m: a drawer push's end past the goal (the joint's limit stops the drawer)
PUSH_CLEAR = 0.008  # m: a closing push's fingertips over the handle bar's top, on the front above
# it (pushed at the bar, the low bottom drawer of libero_10's cabinet brought the arm's wrist onto
# the cabinet's top edge 6 cm before it was shut)
PUSH_TILT = np.deg2rad(45.0)  # the pushing hand's tilt from pointing down, towards the cabinet:
# its wrist stays back (pointing down, the wrist's housing met the cabinet's top edge)
PUSH_CONTACT = 0.015  # m: the front above the bar must leave the fingers this much to press
PUSHED_PAST = 0.003  # m: a push ends this far past its atom's bound
INSIDE_ROOM = 0.06  # m: pulled out at least this far, a drawer is pushed open from inside
INSIDE_GAP = 0.01  # m: between the closed fingers and the front wall's inner face, going down
INSIDE_TIPS = 0.02  # m: the grasp site above the drawer's floor at the push from inside
FINGER_HALF = 0.01  # m: the closed fingers' half thickness along their push
KNOB_BELOW_TOP = 0.02  # m: the tcp under a knob ridge's top at the grasp
KNOB_STEP = 0.1  # rad per step along a knob's turn
KNOB_REACH = 0.08  # m: a part about a vertical hinge reaching farther from it is a door
PLATE_PAD = 0.002  # m: the closed fingers' lowest point above a pushed plate's floor, coming down
PLATE_PRESS = 0.015  # m: the push's aim under the floor: pressed on the floor, the fingers drag
# the plate and meet its rim at the root (its pieces slope outwards: a finger above the floor
# rides up over them)
PUSH_SPEED = 0.5  # a plate push's largest xy action (of OSC_POSE's 1): z is held while it moves
PLATE_HIGH = 0.08  # m: above a plate's top before coming down into it


def pose_action(env, d, target, grip, approach=None, closing=None, signed=False):
    """(action [7], position error (m), rotation error (rad)) towards the grasp site at
    `target` with the hand along (approach, closing) — or its orientation held, when None
    (`signed`: the closing axis's sign as given, `turn_to`)."""
    err = np.asarray(target) - d.site_xpos[env.idx.site]
    out = np.zeros(7)
    out[:3] = np.clip(err / OSCConfig.max_delta_pos, -1.0, 1.0)
    rot = 0.0
    if approach is not None:
        v = turn_to(env, d, approach, closing, signed) / OSCConfig.max_delta_rot
        out[3:6] = v / max(1.0, float(np.abs(v).max()))
        rot = float(np.linalg.norm(v)) * OSCConfig.max_delta_rot
    out[6] = grip
    return out, float(np.linalg.norm(err)), rot


def horizontal(v: np.ndarray) -> np.ndarray:
    v = np.array([v[0], v[1], 0.0])
    return v / max(float(np.linalg.norm(v)), 1e-9)


@dataclasses.dataclass
class _Run:
    """One environment's progress through a stage."""

    phase: int = 0
    count: int = 0
    fixed: dict = dataclasses.field(default_factory=dict)  # values set once per phase
    trail: list = dataclasses.field(default_factory=list)  # (position, rotation) errors, a move


class _Stage:
    """Phase bookkeeping: `_phase(env, b, d, run)` -> (target, grip, approach, closing, tol,
    hold) of the current phase; a phase ends when reached (after `hold` steps) or after
    MAX_MOVE steps; the stage finishes after its last phase."""

    n_phases = 0
    stall = False  # a move ends once it stalls (`STALL_STEPS`): drawers and knobs
    signed = False  # the closing axis's sign as `_phase` gives it (else the nearer one)

    def __init__(self, env, atom: tuple):
        self.atom = atom
        self.runs = [_Run() for _ in range(env.n_envs)]

    def begin(self, env, b: int, again: bool = False) -> None:
        self.runs[b] = _Run()

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        run = self.runs[b]
        if run.phase >= self.n_phases:
            return pose_action(env, d, d.site_xpos[env.idx.site].copy(), OPEN)[0], True
        target, grip, approach, closing, tol, hold = self._phase(env, b, d, run)
        act, err, rot = pose_action(env, d, target, grip, approach, closing, self.signed)
        run.count += 1
        done = run.count > hold and err < tol and rot < TURNED
        if self.stall and hold == 0:  # a move that has stopped getting nearer has stalled
            # (MAX_MOVE wasted ~90 steps: a drawer pulled to its limit, the hand then held
            # where it cannot go)
            run.trail.append((err, rot))
            if len(run.trail) > STALL_STEPS:
                e0, r0 = run.trail[-STALL_STEPS - 1]
                done |= e0 - err < STALL_POS and r0 - rot < STALL_ROT
        if done or run.count >= MAX_MOVE:
            run.phase, run.count, run.trail = run.phase + 1, 0, []
        return act, run.phase >= self.n_phases

    def _phase(self, env, b, d, run):
        raise NotImplementedError

    def _take(self, run: _Run, grasp: np.ndarray, site: np.ndarray, closing: np.ndarray):
        """Phases 0-2 of a stage that takes a point from above, the fingers down: over it
        (`HOVER`), down onto it, close; None after them."""
        if run.phase == 0:
            return grasp + UP * HOVER, OPEN, DOWN, closing, REACHED, 0
        if run.phase == 1:
            return grasp, OPEN, DOWN, closing, FINE, 0
        if run.phase == 2:
            return run.fixed.setdefault("at", site), CLOSE, DOWN, closing, REACHED, GRIP_STEPS
        return None


class _Replanned(_Stage):
    """A stage planned from a state by `_plan(env, d)` (ValueError when it cannot be): a run
    again plans from where the object is now; one it cannot plan ends at once."""

    def _plan(self, env, d: mujoco.MjData) -> None:
        raise NotImplementedError

    def begin(self, env, b: int, again: bool = False) -> None:
        super().begin(env, b, again)
        if again:
            try:
                self._plan(env, env.datas[b])
            except ValueError:
                self.runs[b].phase = self.n_phases


def _joint_of(env, atom: tuple):
    """(joint id, qpos address, moving body id) of a ("joint", ...) atom."""
    name = env.pt.layout.joint_names[atom[3][0]]
    jid = env.model.joint(name).id
    return jid, int(env.model.jnt_qposadr[jid]), int(env.model.jnt_bodyid[jid])


def past_bound(atom: tuple, q: float) -> float:
    """How far joint position q is past a ("joint", op, bound, ...) atom's bound, towards
    making it true (negative: short of it)."""
    return (q - float(atom[2])) * (1.0 if atom[1] in (">", ">=") else -1.0)


def is_door(env, jid: int, d: mujoco.MjData) -> bool:
    """Whether joint `jid` is a door: a hinge about the vertical whose part reaches farther
    from it than a knob's (`KNOB_REACH`)."""
    m = env.model
    if m.jnt_type[jid] != mujoco.mjtJoint.mjJNT_HINGE or abs(d.xaxis[jid][2]) <= 0.9:
        return False
    anchor, body = d.xanchor[jid], int(m.jnt_bodyid[jid])
    far = [float(np.linalg.norm(d.geom_xpos[g][:2] - anchor[:2])) for g in collision_geoms(m, body)]
    return max(far) > KNOB_REACH


class LowHandle(ValueError):
    """`PandaDrawer` cannot take a closed drawer by its handle: too low for the hand."""


def _q_goal(env, atom: tuple, jid: int) -> float:
    lo, hi = (float(v) for v in env.model.jnt_range[jid])
    hinge = env.model.jnt_type[jid] == mujoco.mjtJoint.mjJNT_HINGE
    return goal_q(atom[1], float(atom[2]), lo, hi, bool(hinge))


class PandaDrawer(_Stage):
    """A drawer opened by its handle bar (the hand horizontal) or pushed shut (module doc)."""

    stall = True

    def __init__(self, env, atom: tuple, d: mujoco.MjData):
        super().__init__(env, atom)
        m = env.model
        self.jid, self.qadr, body = _joint_of(env, atom)
        lo, hi = m.jnt_range[self.jid]
        axis = d.xaxis[self.jid].copy()
        self.outward = axis if abs(hi) >= abs(lo) else -axis  # the way the drawer opens
        self.q_goal = _q_goal(env, atom, self.jid)
        q0 = float(d.qpos[self.qadr])
        self.pull = (self.q_goal - q0) * float(axis @ self.outward) > 0
        self.n_phases = 8 if self.pull else 5
        self.signed = self.pull  # a pull's closing sign is chosen once (`_phase`)
        geoms = collision_geoms(m, body)
        self.handle = int(max(geoms, key=lambda g: float(d.geom_xpos[g] @ self.outward)))
        ext = geom_half_extents(m, self.handle, d.geom_xmat[self.handle].reshape(3, 3))
        self.depth = float(np.abs(self.outward) @ ext)  # the bar's half depth along the motion
        self.top = float(ext[2])
        self.along = np.cross(UP, horizontal(self.outward))  # the bar's direction
        objects = [PO.body_geoms(m, n) for n, _ in env.pt.task.problem.objects]
        self.movable = [g for g in objects if len(g)]
        self.inside = None  # the pull done by pushing the front wall from inside (a low handle)
        # a shutting push's height and contact face (from the handle's centre, along outward):
        # the handle, or the front above it where that leaves room
        self.push_z, self.face = float(d.geom_xpos[self.handle][2]), self.depth
        if not self.pull:
            _, outer, top, _ = self._front(env, d, geoms)
            bar_top = float(d.geom_xpos[self.handle][2]) + self.top
            if np.isfinite(top) and bar_top + PUSH_CLEAR <= top - PUSH_CONTACT:
                self.push_z = bar_top + PUSH_CLEAR + PP.tips_below(env, d)
                self.face = outer - float(d.geom_xpos[self.handle] @ self.outward)
        else:
            floor = min(d.geom_xpos[g][2] - geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))[2]
                        for g in geoms)  # fmt: skip
            low = float(d.geom_xpos[self.handle][2]) - HAND_SPAN
            if low < min(floor, 0.0) + FLOOR_CLEAR:
                self.inside = self._inside_point(env, d, geoms, q0)
                self.n_phases, self.signed = 4, False
                if self.inside is None:
                    self._too_low(m, d)

    def _too_low(self, m: mujoco.MjModel, d: mujoco.MjData) -> None:
        """A closed drawer's handle too low for the hand across it: refused here
        (`panda_drag.PandaDrag` drags it open instead)."""
        z = float(d.geom_xpos[self.handle][2])
        raise LowHandle(
            f"drawer {m.joint(self.jid).name}: its handle is {z:.3f} m high; the hand across "
            f"it needs {HAND_SPAN + FLOOR_CLEAR:.2f} m below, and the drawer is not open enough "
            "to push its front wall from inside"
        )

    def _front(self, env, d: mujoco.MjData, geoms) -> tuple[float, float, float, float]:
        """(inner face, outer face, top z, floor top z) of the drawer's front (its wall and
        panel: the geoms beyond its floor's middle along the motion, above the floor, and as
        wide as half the floor at least — not the handle bar or its stand-offs); faces along
        `outward` (world)."""
        m, out = env.model, self.outward
        boxes = [(d.geom_xpos[g], geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3)))
                 for g in geoms]  # fmt: skip
        bottom = min(boxes, key=lambda b: b[0][2] + b[1][2])  # the drawer's floor
        floor_top = float(bottom[0][2] + bottom[1][2])
        span = float(np.abs(self.along) @ bottom[1])
        front = [(float(c @ out), float(np.abs(out) @ e), float(c[2] + e[2])) for c, e in boxes
                 if float(c @ out) > float(bottom[0] @ out) and c[2] + e[2] > floor_top + 0.01
                 and float(np.abs(self.along) @ e) >= span / 2]  # fmt: skip
        if not front:
            return np.nan, np.nan, np.nan, floor_top
        inner = min(c - e for c, e, _ in front)
        outer = max(c + e for c, e, _ in front)
        return inner, outer, max(t for _, _, t in front), floor_top

    def _inside_point(self, env, d: mujoco.MjData, geoms, q0: float) -> np.ndarray | None:
        """Where the closed fingers push an open drawer's front wall outwards from inside, as
        an offset from the handle: behind the wall's inner face, the grasp site halfway down
        the wall; None when the drawer is pulled out less than `INSIDE_ROOM`."""
        inner, _, top, floor_top = self._front(env, d, geoms)
        if not np.isfinite(inner) or abs(q0) < INSIDE_ROOM:
            return None
        h = self._h(d)
        p = h + self.outward * (inner - float(h @ self.outward) - FINGER_HALF - INSIDE_GAP)
        p[2] = max((top + floor_top) / 2, floor_top + INSIDE_TIPS)
        return p - h

    def _h(self, d: mujoco.MjData) -> np.ndarray:
        return d.geom_xpos[self.handle].copy()

    def _pushed(self, d: mujoco.MjData) -> bool:
        """Whether a push has taken the joint past its atom's bound: by `PUSHED_PAST`, or to
        within 1 mm of the goal (a goal at the joint's limit leaves less than that past it)."""
        q = float(d.qpos[self.qadr])
        past = past_bound(self.atom, q)
        return past > 0 and (past >= PUSHED_PAST or abs(q - self.q_goal) < 0.001)

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        """`_Stage.step`; a push (from inside, or shutting) ends once `_pushed` (pressing on
        against the joint's limit until `MAX_MOVE` wasted ~90 steps of the episode)."""
        run = self.runs[b]
        if run.phase == 2 and (self.inside is not None or not self.pull) and self._pushed(d):
            run.phase, run.count, run.trail = 3, 0, []
        return super().step(env, b, d)

    def _in_the_way(self, env, d: mujoco.MjData, site: np.ndarray, front: np.ndarray) -> bool:
        """Whether a movable object stands within `WAY_WIDTH` of the straight line (xy) from
        the hand to the handle's front point, within `FRONT` of that point, and reaches higher
        than the horizontal hand's lowest point at the handle's height (`HAND_SPAN` under it).
        OSC_POSE's actions are clipped per axis, so the hand comes down first and crosses the
        last part of its way at about the handle's height; near its start it is still high (a
        wine bottle beside the start of libero_goal's way to the top drawer is passed above)."""
        low = float(self._h(d)[2]) - HAND_SPAN
        for geoms in self.movable:
            lo, hi = PO.world_box(d, env.model, geoms)
            if (
                hi[2] > low
                and PO.near_segment(lo[:2], hi[:2], front[:2], front[:2], FRONT)  # near the point
                and PO.near_segment(lo[:2], hi[:2], site[:2], front[:2], WAY_WIDTH)
            ):
                return True
        return False

    def _to_go(self, d: mujoco.MjData) -> float:
        """The handle's way still to go (m, along the drawer's motion towards the goal)."""
        q = float(d.qpos[self.qadr])
        return abs(self.q_goal - q)

    def _phase(self, env, b, d, run):
        h, out = self._h(d), self.outward
        site = d.site_xpos[env.idx.site].copy()
        if self.inside is not None:  # down behind the front wall, then outwards past the goal
            a, c = DOWN, self.along
            p = h + self.inside
            if run.phase == 0:
                return p + UP * HOVER, CLOSE, a, c, REACHED, 0
            if run.phase == 1:
                return p, CLOSE, a, c, REACHED, 0
            if run.phase == 2:
                to_go = self._to_go(d) + PUSH_OVER + REACHED  # within REACHED is past the goal
                end = run.fixed.setdefault("end", p + out * to_go)
                return end, CLOSE, a, c, REACHED, 0
            return run.fixed["end"] + UP * HOVER, CLOSE, a, c, REACHED, 0
        if self.pull:  # the fingers closing vertically: of ±UP, the sign whose turn from the
            # hand's start keeps its last joint in range (the nearer sign is a tie for a hand
            # pointing down; taken the wrong way, the joint ran onto its limit, the hand
            # stayed rolled and missed the handle)
            a = -horizontal(out)
            if "c" not in run.fixed:
                run.fixed["c"] = wrist_sign(env, d, a, UP)
            c = run.fixed["c"]
            front = h + out * FRONT
            if run.phase == 0:  # turn the hand horizontal where it is, above the handle
                high = run.fixed.setdefault("high", max(site[2], h[2] + 0.05))
                return np.r_[site[:2], high], OPEN, a, c, 0.03, 0
            if run.phase == 1:  # straight to the front point; or when an object stands in
                # that way, across at the turn's height to above a point farther out
                if "far" not in run.fixed:
                    far = h + out * (FRONT + APPROACH)
                    way = self._in_the_way(env, d, site, front)
                    run.fixed["far"] = np.r_[far[:2], run.fixed["high"]] if way else front
                return run.fixed["far"], OPEN, a, c, REACHED, 0
            if run.phase == 2:  # down (and in), to in front of the handle
                return front, OPEN, a, c, REACHED, 0
            if run.phase == 3:  # in along the drawer's axis, the fingers round the bar
                return h, OPEN, a, c, FINE, 0
            if run.phase == 4:
                return run.fixed.setdefault("at", site), CLOSE, a, c, REACHED, GRIP_STEPS
            if run.phase == 5:  # pull along the joint's axis
                end = run.fixed.setdefault("end", h + out * self._to_go(d))
                return end, CLOSE, a, c, REACHED, 0
            if run.phase == 6:
                return run.fixed.setdefault("let", site), OPEN, a, c, REACHED, GRIP_STEPS
            return front, OPEN, a, c, REACHED, 0
        # push: the closed fingers' wide face on the front, the hand tilted towards the cabinet
        a, c = DOWN * np.cos(PUSH_TILT) - horizontal(out) * np.sin(PUSH_TILT), self.along
        front = h + out * (self.depth + PUSH_GAP)
        front[2] = self.push_z
        if run.phase == 0:
            return np.r_[front[:2], h[2] + self.top + HOVER], CLOSE, a, c, REACHED, 0
        if run.phase == 1:
            return front, CLOSE, a, c, REACHED, 0
        if run.phase == 2:  # push along the axis past the goal
            to_go = self._to_go(d) + PUSH_OVER
            end = run.fixed.setdefault("end", h + out * (self.face + FINGER_HALF - to_go))
            end[2] = self.push_z
            return end, CLOSE, a, c, REACHED, 0
        back = h + out * (self.depth + 0.05)
        if run.phase == 3:
            return np.r_[back[:2], self.push_z], CLOSE, a, c, REACHED, 0
        return np.r_[back[:2], h[2] + self.top + HOVER], CLOSE, a, c, REACHED, 0


class PandaKnob(_Stage):
    """A knob turned by its ridge (module doc)."""

    stall = True

    n_phases = 6

    def __init__(self, env, atom: tuple, d: mujoco.MjData):
        super().__init__(env, atom)
        m = env.model
        self.jid, self.qadr, body = _joint_of(env, atom)
        self.q_goal = _q_goal(env, atom, self.jid)
        self.sign = float(np.sign(d.xaxis[self.jid][2]))  # +1: q grows turning about +z
        self.anchor = d.xanchor[self.jid].copy()

        def top(g):
            return d.geom_xpos[g][2] + geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))[2]

        ridge = int(max(collision_geoms(m, body), key=top))
        rot, half = d.geom_xmat[ridge].reshape(3, 3), m.geom_size[ridge]
        i = int(np.argmax(half * np.linalg.norm(rot[:2], axis=0)))  # longest horizontal side
        u = horizontal(rot[:, i])
        s = np.clip((self.anchor - d.geom_xpos[ridge])[:2] @ u[:2], -half[i] + 0.01, half[i] - 0.01)
        self.grasp = d.geom_xpos[ridge] + s * u  # the ridge's point nearest the axis
        self.grasp[2] = top(ridge) - KNOB_BELOW_TOP
        self.closing0 = np.cross(UP, u)  # across the ridge

    def _rz(self, ang: float) -> np.ndarray:
        c, s = np.cos(ang), np.sin(ang)
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])

    def _turn_total(self, d) -> float:
        return (self.q_goal - float(d.qpos[self.qadr])) * self.sign

    def _closing(self, env, d, run) -> np.ndarray:
        """The closing axis at the grasp: of ±closing0, the one whose hand turn from now is
        against the knob's turn (the wrist's excursion stays centred)."""
        if "c" not in run.fixed:
            _, c_c = hand_axes(env, d)
            turn = self._turn_total(d)
            best = None
            for c in (self.closing0, -self.closing0):
                dyaw = float(np.arctan2(np.cross(c_c, c)[2], c_c @ c))
                cost = abs(dyaw + turn / 2)
                if best is None or cost < best[0]:
                    best = (cost, c)
            run.fixed["c"] = best[1]
        return run.fixed["c"]

    def _phase(self, env, b, d, run):
        c = self._closing(env, d, run)
        site = d.site_xpos[env.idx.site].copy()
        if (took := self._take(run, self.grasp, site, c)) is not None:
            return took
        if run.phase == 3:  # turn: the grasp point round the axis, the hand with it
            total = run.fixed.setdefault("total", self._turn_total(d))
            ang = run.fixed["ang"] = min(abs(total), run.fixed.get("ang", 0.0) + KNOB_STEP)
            rz = self._rz(np.sign(total) * ang)
            p = self.anchor + rz @ (self.grasp - self.anchor)
            p[2] = self.grasp[2]
            run.fixed["end"] = (p, rz @ c)
            return p, CLOSE, DOWN, rz @ c, REACHED, int(abs(total) / KNOB_STEP)
        p, ce = run.fixed.get("end", (site, c))
        if run.phase == 4:
            return p, OPEN, DOWN, ce, REACHED, GRIP_STEPS
        return p + UP * HOVER, OPEN, DOWN, ce, REACHED, 0


class PandaPush(_Stage):
    """A plate pushed onto a level region from inside (module doc)."""

    n_phases = 4

    def __init__(self, env, atom: tuple, radius: float, floor: float, tips: float):
        """`floor`: the plate's floor top above its body origin (its lowest geom's top);
        `tips`: the closed fingers' lowest point under the grasp site (m)."""
        super().__init__(env, atom)
        self.obj = env.pt.layout.body_names[atom[1]]
        self.radius, self.floor, self.tips = radius, floor, tips

    def _target(self, env, d) -> np.ndarray:
        body, pos = self.atom[2], np.asarray(self.atom[3])
        if body < 0:
            return pos
        bid = env.model.body(env.pt.layout.body_names[body]).id
        return d.xpos[bid] + d.xmat[bid].reshape(3, 3) @ pos

    def _phase(self, env, b, d, run):
        po = d.xpos[env.model.body(self.obj).id]
        pt = self._target(env, d)
        u = horizontal(pt - po)
        site = d.site_xpos[env.idx.site]
        z = po[2] + self.floor + self.tips + PLATE_PAD
        c = np.cross(UP, u)  # the closed pads' wide face across the push
        if run.phase == 0:
            start = po - u * 0.005
            return np.r_[start[:2], z + PLATE_HIGH], CLOSE, DOWN, c, REACHED, 0
        if run.phase == 1:
            start = run.fixed.setdefault("start", po - u * 0.005)
            return np.r_[start[:2], z], CLOSE, DOWN, c, FINE, 0
        if run.phase == 2:  # the fingers' offset from the plate's centre kept along the push
            reach = float(np.clip((site - po)[:2] @ u[:2], 0.0, self.radius))
            end = pt + u * reach
            return np.r_[end[:2], z - PLATE_PAD - PLATE_PRESS], CLOSE, DOWN, c, REACHED, 0
        return np.r_[site[:2], z + PLATE_HIGH], CLOSE, DOWN, c, REACHED, 0

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        phase = self.runs[b].phase
        act, finished = super().step(env, b, d)
        if phase == 2:  # slower in xy, so OSC holds the fingers' height under the push
            act[:2] = act[:2] * PUSH_SPEED
        return act, finished


def compiled_view(env, d: mujoco.MjData):
    """The fields of a compiled task that `planner_geometry` / `planner_push` read, for the
    Panda's model at state `d`."""
    return types.SimpleNamespace(model=env.model, layout=env.pt.layout, init_qpos=d.qpos.copy())


def plate_push(env, atom: tuple, d: mujoco.MjData, tips: float) -> PandaPush | None:
    """A `PandaPush` when the atom is best done by pushing (`planner_push.pushable`)."""
    view = compiled_view(env, d)
    box = object_box(view, atom[1]) if atom[0] == "on_region" else ()
    radius = pushable(view, atom, box)
    if radius <= 0:
        return None
    m, bid = env.model, env.model.body(env.pt.layout.body_names[atom[1]]).id
    floor = min(
        d.geom_xpos[g][2] + geom_half_extents(m, g, d.geom_xmat[g].reshape(3, 3))[2]
        for g in collision_geoms(m, bid)
    )
    return PandaPush(env, atom, radius, float(floor - d.xpos[bid][2]), tips)


def articulation(env, atom: tuple, d: mujoco.MjData) -> _Stage:
    """The stage of a ("joint", ...) atom: a drawer or a knob; a clear error otherwise."""
    jid = _joint_of(env, atom)[0]
    m = env.model
    if m.jnt_type[jid] == mujoco.mjtJoint.mjJNT_SLIDE:
        return PandaDrawer(env, atom, d)
    if is_door(env, jid, d):
        raise ValueError(f"joint {m.joint(jid).name}: a door, `panda_door.PandaDoor`'s")
    if m.jnt_type[jid] == mujoco.mjtJoint.mjJNT_HINGE and abs(d.xaxis[jid][2]) > 0.9:
        return PandaKnob(env, atom, d)
    raise ValueError(f"joint {m.joint(jid).name}: only drawers and knobs are scripted")
