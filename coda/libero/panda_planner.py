"""The scripted pick-and-place of LIBERO's Panda under OSC_POSE (one stage of a goal's chain,
`panda_chain.PandaPlanner`).

`PandaPickPlace`, closed loop on the simulator's state (object poses, the grasp site), one
20 Hz action per step: wait for the stored state's objects to drop (LIBERO's protocol: 10
no-op steps), move above the object while turning the hand about the vertical so the fingers
close across the object's narrowest horizontal width, descend to its middle (no lower than the
fingertips allow over the table, and with the palm kept over a tall object's top), close, lift,
carry the object's centre above the target (a site: a region, a drawer's pulled-out part, a
surface's free point; or a body: the top of a plate, with the object's origin as it hangs over
the plate's, which ν's On reads) high enough that the hanging object clears
everything near the way, lower until it touches, open, lift. An object wider than the fingers
open everywhere is taken by its handle when solid (a moka pot), else by its wall, 2.5 cm under
the rim (a bowl; a mug by its body's wall, the handle left out), the fingers straddling it on
the first side (nearest the hand's start first) where the hand and the open fingers clear the
neighbours. Position actions point at the
phase's waypoint (`(target - site) / 0.05`, clipped: OSC_POSE's goal lands on the waypoint
once within 5 cm); rotation actions turn the hand about the world's vertical only; the gripper
command is the phase's. Where the hand's exact shape would meet an overhang on the way down
(an opened drawer's handle over the object), it comes down beside it and moves in at the
grasp's height (`panda_beside`). The way to above the object crosses over what stands in it,
and a flat box whose way down meets a neighbour is taken off its centre (`panda_ways`). Not
handled: a bowl lying tilted against what it slid off.

Used for recorded episodes that succeed (`benchmarks/libero_reference/scripted_episodes.py`):
the fidelity benchmark replays them in LIBERO itself and compares success.
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from coda.libero import panda as PD
from coda.libero import panda_reach as PR
from coda.libero.geoms import between_walls, collision_geoms, region_axes
from coda.libero.osc import OSCConfig
from coda.libero.panda_beside import Clearance, beside
from coda.libero.panda_env import hand_axes
from coda.libero.panda_lean import LINKS as LEAN_LINKS
from coda.libero.panda_lean import Lean, Reach, lean_in, rim_order
from coda.libero.panda_outline import (
    body_geoms,
    centre_xy,
    extent,
    geom_corners,
    grasp_of,
    handle_grip,
    handle_of,
    narrowest,
    near_segment,
    swinging_geoms,
    world_box,
    wrap,
)
from coda.libero.panda_ways import along_grasp, exit_shift, pass_height
from coda.libero.panda_wrist import turn_to, way_round
from coda.libero.planner_geometry import drawer_limits

OPEN, CLOSE = -1.0, 1.0
SETTLE_STEPS = 10  # LIBERO's evaluation waits this many no-op steps
CLEAR = 0.10  # m above the object / target before descending
LIFT = 0.15  # m above the target the grasp site carries at least
CARRY_MARGIN = 0.03  # m between the hanging object's bottom and anything it passes over
CORRIDOR = 0.03  # m beside the carry's straight line within which bodies count as passed over
TIP_MARGIN = 0.004  # m between the fingertips' lowest point and the table at the grasp
STALL = (5, 0.001)  # a descent that moved less than 1 mm over 5 steps met the object's top
PLACE_ABOVE = 0.0  # m above the target the object's bottom is released
REACHED = 0.01  # m: a waypoint is reached
DOWN_TILT = np.deg2rad(10.0)  # the hand this near straight down reads its way beside an overhang
ALIGNED = np.deg2rad(2.0)  # the hand's yaw is aligned within this
LEAN_TURNED = np.deg2rad(3.0)  # the hand is turned to its leaning pose within this
GRIP_STEPS = 10  # steps holding still while the fingers close / open (robosuite: 8 to close)
MAX_MOVE = 80  # steps a move may take before the plan gives up
DRAWER_MARGIN = 0.01  # m: kept between an object placed in a drawer and what bounds it
SWING = 0.08  # m: a held object's origin swings at most this far from where it was taken
ORIGIN_MARGIN = 0.02  # m: a placed object's origin this far inside its region's extent
EXIT_RISE = 0.01  # m: the held object's slide out from under an overhang, this far up
RIM_BELOW_TOP = 0.025  # m: the grasp site under the rim for a rim grasp
SPOT_NEAR = 0.05  # m: an object this near a region's extent stands in it (takes room)
SPOT_USE = 0.8  # the share of a region's half extent a placement may move off its centre
HAND_HALF = 0.11  # m: the hand's half length along the fingers' closing axis
HAND_THICK = 0.04  # m: the hand's half thickness across it (with a margin)
PALM_ABOVE = 0.03  # m: the palm's underside above the grasp site
PALM_CLEAR = 0.008  # m: the palm over a tall object's top at the grasp
FINGER_REACH = 0.055  # m: the open fingers' outer faces from the grasp site
FINGER_HALF = 0.015  # m: the fingers' half width across the closing axis (with a margin)
FINGER_BELOW = 0.02  # m: the fingertips' reach under the grasp site (with a margin)


@dataclasses.dataclass
class Plan:
    obj: str
    target: str
    target_is_site: bool
    phase: int = 0
    count: int = 0
    done: bool = False
    grasp_z: float = 0.0
    hang: float = 0.0  # grasp site z - the object's bottom, measured once it is held
    carry_z: float = 0.0  # the grasp site's z while carrying
    heights: list = dataclasses.field(default_factory=list)  # the site's z along the descent
    offset: np.ndarray | None = None  # grasp site xy - the object's centre xy, once held
    side: int | None = None  # the rim grasp's wall (`RIM_SIDES`), chosen once
    travel_z: float = 0.0  # a later stage's start: the height it crosses over to the object at
    handle_z: float = 0.0  # the grasp's z when the object is taken by its handle
    spot: np.ndarray | None = None  # the target's xy in its region, chosen once
    exit: np.ndarray | None = None  # the held object's xy shift out from under an overhang
    exit_from: np.ndarray | None = None  # the grasp site where that shift starts
    exited: bool = False  # that shift is done
    on_other: bool | None = None  # it touched another object or fixture when the fingers closed
    home_xy: np.ndarray | None = None  # the hand's xy at its environment's first step
    turned: bool = False  # the hand turned the held object to fit its container
    origin: np.ndarray | None = None  # grasp site xy - the object's origin xy, once held
    beside: np.ndarray | None = None  # the shift to come down at beside an overhang (`beside`)
    inside: bool = False  # down beside it: moving in at the grasp's height
    unfold: int = -1  # steps spent moving out to bring the elbow back (`panda_reach`); -1: never
    reach_unfold: int = -1  # the same on the way down to the grasp (phase 2)
    aim: np.ndarray | None = None  # phase 2's site target at its last step
    lean: Lean | None = None  # the hand's way in, leaning, to a rim under an overhang
    rechecked: bool = False  # the straight way down tested again once the hand has turned
    pass_z: float | None = None  # the site's height across to the object (0: as OSC takes it)
    along: tuple | None = None  # (shift along the box, turn) of its grasp (`along_grasp`)
    way: float | None = None  # the turn to the grasp's yaw: its way round (`quarter_sign`)


def _drawer_of(m: mujoco.MjModel, site: str) -> tuple[int, int, int] | None:
    """(joint, qpos address, body) when the site rides on a drawer (one slide joint)."""
    body = int(m.site_bodyid[m.site(site).id])
    if m.body_jntnum[body] != 1:
        return None
    jid = int(m.body_jntadr[body])
    if m.jnt_type[jid] != mujoco.mjtJoint.mjJNT_SLIDE:
        return None
    return jid, int(m.jnt_qposadr[jid]), body


def goal_of(task) -> tuple[str, str] | None:
    """(object, target) of a single In / On goal over a movable object, else None."""
    goal = task.problem.goal
    movable = {n for n, _ in task.problem.objects}
    if len(goal) != 1 or goal[0][0] not in ("in", "on") or goal[0][1] not in movable:
        return None
    return goal[0][1], goal[0][2]


class PandaPickPlace:
    """One plan per environment of a `PandaEnv`; `act(env)` -> actions [B, 7]."""

    def __init__(self, env, goal: tuple[str, str] | None = None, settle: bool = True):
        goal = goal or goal_of(env.pt.task)
        if goal is None:
            raise ValueError(f"{env.pt.task.name}: no single In / On goal over a movable object")
        obj, target = goal
        self.first = 0 if settle else 1  # the phase a plan starts at (0: the settle)
        m = env.model
        is_site = target in [m.site(i).name for i in range(m.nsite)]
        self.geoms = {n: body_geoms(m, n) for n in (obj, target) if not (n == target and is_site)}
        p = env.pt.task.problem
        others = [n for n, _ in p.objects + p.fixtures if n != obj]
        self.others = [g for g in (body_geoms(m, n) for n in others) if len(g)]
        movable = [n for n, _ in p.objects if n != obj]
        self.movable = [g for g in (body_geoms(m, n) for n in movable) if len(g)]
        self._movable = np.concatenate(self.movable) if self.movable else np.zeros(0, int)
        # the boxes `_hand_clear` keeps the hand off: one round each movable object (small,
        # compact), one round each geom of a fixture (large, its parts at many heights: one box
        # round a microwave with its door open blocked every side of a mug beside it, and the
        # fallback side was the one under the door)
        fixed = np.setdiff1d(np.concatenate(self.others), self._movable) if self.others else ()
        self._outlines = self.movable + [np.array([g]) for g in fixed]
        # what the way across to the object passes over (`pass_height`): what the hand would
        # push, movable objects and hinged fixture parts (an open door it swung into a mug)
        self._pushed = np.union1d(self._movable, swinging_geoms(m, fixed))
        self.fingertips = _finger_geoms(m)
        self.finger_joint = m.joint(PD.FINGER_JOINTS[0]).id
        self.plans = [Plan(obj, target, is_site, phase=self.first) for _ in env.datas]
        self.drawer = _drawer_of(m, target) if is_site else None
        self.atom = None  # the goal atom, when a `PandaPlanner` stage
        self.slot: tuple = ()  # (x, y) in the region's frame: its place in a shared region
        self.shift = 0.0  # m: a drawer spot moved along the drawer's width (`panda_lay`)

    def begin(self, env, b: int, again: bool = False) -> None:
        """Start (`again`: over, without the settle) in environment b (a `PandaPlanner` stage)."""
        p = self.plans[b]
        first = max(self.first, 1) if again else self.first
        self.plans[b] = Plan(p.obj, p.target, p.target_is_site, phase=first, home_xy=p.home_xy)
        if again:  # from where an earlier stage left the hand (an open drawer below): across
            # at its height, then down
            self.plans[b].travel_z = float(env.datas[b].site_xpos[env.idx.site][2])

    def _target(self, env, d: mujoco.MjData, plan: Plan) -> tuple[np.ndarray, float]:
        if plan.target_is_site:
            p = d.site(plan.target).xpos.copy()
            if plan.spot is None:  # chosen once, at the carry's start
                if self.drawer is not None and self.atom is not None:
                    plan.spot = self._in_drawer(env, d, plan)
                else:
                    plan.spot = self._free_spot(env, d, plan, p)
            p[:2] = plan.spot
            return p[:2], float(p[2])
        xy, _, top = extent(d, env.model, self.geoms[plan.target])
        return xy, top

    def _free_spot(self, env, d: mujoco.MjData, plan: Plan, p: np.ndarray) -> np.ndarray:
        """The stage's slot when the goal puts several objects on its region (`slot`), else the
        region's centre, or, for a surface (an On region) where objects already stand, its
        point farthest from them within its extent. Into a container (an In region: a basket)
        objects go to the middle (moved towards a wall, they land on its rim)."""
        site = d.site(plan.target)
        if self.slot:
            return p[:2] + site.xmat.reshape(3, 3)[:2, :2] @ np.asarray(self.slot)
        if self.atom is None or self.atom[0] != "on_region":  # an In region: between its walls
            inside = self.atom is not None and self.atom[0] == "in_region"
            return (
                between_walls(env.model, d, site.id, np.asarray(self.atom[5]))
                if inside
                else p[:2].copy()
            )
        rot, half = region_axes(d, site.id, np.asarray(self.atom[5]))  # some stand on end
        taken = []
        for geoms in self.movable:
            lo, hi = world_box(d, env.model, geoms)
            c = (lo[:2] + hi[:2]) / 2
            if (np.abs(rot.T @ (c - p[:2])) <= half + SPOT_NEAR).all():
                taken.append(c)
        if not taken or not half.any():
            return p[:2].copy()
        grid = np.stack(np.meshgrid(*[np.linspace(-h, h, 7) for h in half * SPOT_USE]), -1)
        cand = p[:2] + grid.reshape(-1, 2) @ rot.T
        gap = np.min([np.linalg.norm(cand - c, axis=1) for c in taken], axis=0)
        score = gap - 1e-3 * np.linalg.norm(cand - p[:2], axis=1)  # ties: nearer the centre
        return cand[int(np.argmax(score))]

    def _in_drawer(self, env, d: mujoco.MjData, plan: Plan) -> np.ndarray:
        """A drawer region's point where the object comes down clear of what overhangs the
        drawer and of its front wall (`planner_geometry.drawer_limits`): the region's centre
        when it leaves `DRAWER_MARGIN` to both, else midway between them (the centre can lie
        under the cabinet's front or the handle of the drawer above: the object then meets it
        on the way down, or sticks up and stops the drawer from closing); xy [2]. The stage's
        atom gives the region (`panda_chain` pulls a drawer that leaves too little room)."""
        jid, _, body = self.drawer
        obj = env.model.body(plan.obj).id
        c, o, face, wall, _ = drawer_limits(env.model, d, jid, body, obj, self.atom)
        pts = geom_corners(d, env.model, self.geoms[plan.obj]) @ o
        r = float(pts.max() - pts.min()) / 2
        lo, hi = face + r, wall - r  # the centre's limits along o, from c
        if lo + 2 * DRAWER_MARGIN <= hi:
            t = float(np.clip(0.0, lo + DRAWER_MARGIN, hi - DRAWER_MARGIN))
        else:
            t = (lo + hi) / 2 if np.isfinite(lo + hi) else 0.0
        return (c + o * t + np.array([-o[1], o[0], 0.0]) * self.shift)[:2]

    def _grasp(self, env, d: mujoco.MjData, plan: Plan) -> tuple[np.ndarray, float, bool]:
        """`grasp_of` the object now, and the turn (rad, about the vertical) to its yaw; a
        rim grasp on the first wall where the hand clears the neighbours (`_hand_clear`)."""
        current = self._yaw(d)
        geoms = self.geoms[plan.obj]
        corners = geom_corners(d, env.model, geoms)
        handle = handle_of(d, env.model, geoms, current) if grasp_of(corners, current)[2] else None
        if handle is not None and handle[2]:  # too wide to close on: a solid one by its
            lo, hi = world_box(d, env.model, handle[0])  # handle (a hollow one by its wall),
            plan.handle_z = float(lo[2] + hi[2]) / 2  # near its core (`handle_grip`)
            xy = handle_grip(d, env.model, geoms, handle[0])
            return xy, way_round(env, d, plan, handle[1] - current), False
        own = []  # a rim grasp's fingers stay off the object's own handle (a pan's)
        if handle is not None:  # a mug: the walls of its body (the handle's side is air)
            corners = geom_corners(d, env.model, np.setdiff1d(geoms, handle[0]))
            own = [np.array([g]) for g in handle[0]]
        if plan.side is None:
            z = corners[:, 2].max() - RIM_BELOW_TOP
            wrist = Reach(env, d)  # the rim's sides the arm reaches pointing down first
            order = rim_order(corners, current, plan.home_xy,
                              lambda xy: wrist.need(np.r_[xy, z], np.eye(3)))  # fmt: skip
            plan.side = order[0]
            for i in order:
                xy, want, rim = grasp_of(corners, current, i)
                if not rim or self._hand_clear(env, d, xy, want, z, outer=own):
                    plan.side = i
                    break
        xy, want, rim = grasp_of(corners, current, plan.side)
        if not rim:  # off the centre and turned where the way down there meets a neighbour
            xy, want = self._along(env, d, plan, corners, xy, want)
        return xy, way_round(env, d, plan, want - current), rim

    def _along(self, env, d, plan: Plan, corners, xy, want: float) -> tuple[np.ndarray, float]:
        """The grasp moved along the box and turned (`panda_ways.along_grasp`, chosen at the
        first step, kept relative to the box's centre and closing direction)."""
        v = np.array([-np.sin(want), np.cos(want)])  # along the box
        if plan.along is None:
            bottom, top = float(corners[:, 2].min()), float(corners[:, 2].max())
            z = self._grasp_z(env, d, plan, bottom, top, False)
            clear = Clearance(env, d, set(self.geoms[plan.obj].tolist()))
            found = along_grasp(clear, corners, xy, want, z, top + CLEAR)
            plan.along = (0.0, 0.0) if found is None else ((found[0] - xy) @ v, found[1] - want)
        t, turn = plan.along
        return xy + t * v, want + turn

    def _hand_clear(self, env, d, xy: np.ndarray, yaw: float, z: float, outer=()) -> bool:
        """Whether the hand, its site at (xy, z) and its fingers closing along `yaw`, is clear
        of every other body (`_outlines`): the palm of their tops, the open fingers of their
        sides; and the outer finger of a rim grasp (`yaw` points out of the object) of the
        `outer` geoms (the object's own handle: a pan's, which the finger came down on; a mug's
        beside it)."""
        u = np.array([np.cos(yaw), np.sin(yaw)])
        tip = xy + (FINGER_REACH - FINGER_HALF) * u  # the outer finger (`grasp_of`: u outwards)
        for g in outer:
            lo, hi = world_box(d, env.model, g)
            if hi[2] > z - FINGER_BELOW and near_segment(lo[:2], hi[:2], tip, tip, FINGER_HALF):
                return False
        parts = (
            (HAND_HALF, HAND_THICK, z + PALM_ABOVE),  # the palm
            (FINGER_REACH, FINGER_HALF, z - FINGER_BELOW),  # the open fingers
        )
        for geoms in self._outlines:
            lo, hi = world_box(d, env.model, geoms)
            for reach, half, low in parts:
                if hi[2] > low and near_segment(
                    lo[:2], hi[:2], xy - reach * u, xy + reach * u, half
                ):
                    return False
        return True

    def _grasp_z(self, env, d, plan: Plan, bottom: float, top: float, rim: bool) -> float:
        """The object's middle (under the rim for a rim grasp, the handle's middle for a
        handle), no lower than the fingertips allow over the table (a tall object's top meets
        the palm before: the descent then stalls, `STALL`)."""
        site_z = d.site_xpos[env.idx.site][2]
        tips = site_z - geom_corners(d, env.model, self.fingertips)[:, 2].min()  # under the site
        z = top - RIM_BELOW_TOP if rim else plan.handle_z or (bottom + top) / 2
        if not rim and not plan.handle_z:  # the palm stays over a tall object's top (met
            z = max(z, top - PALM_ABOVE - PALM_CLEAR)  # off its axis, it tips a bottle over)
        return max(z, bottom + tips + TIP_MARGIN)

    def _carry_z(self, env, d: mujoco.MjData, plan: Plan) -> float:
        """The grasp site's z that carries the hanging object over everything within
        `CORRIDOR` of the straight line to the target (LIFT above the target at least)."""
        txy, tz = self._target(env, d, plan)
        pts = geom_corners(d, env.model, self.geoms[plan.obj])[:, :2]
        here = pts.mean(axis=0)
        r = float(np.linalg.norm(pts - here, axis=1).max()) + CORRIDOR
        tops = [tz]
        for geoms in self.others:
            lo, hi = world_box(d, env.model, geoms)
            if near_segment(lo[:2], hi[:2], here, txy, r):
                tops.append(float(hi[2]))
        return max(tz + LIFT, max(tops) + plan.hang + CARRY_MARGIN)

    def _touches_other(self, d: mujoco.MjData, plan: Plan) -> bool:
        """Whether the object is in contact with another object or fixture (not the table)."""
        mine = set(self.geoms[plan.obj].tolist())
        others = set(np.concatenate(self.others).tolist()) if self.others else set()
        pairs = [{c.geom1, c.geom2} for c in d.contact[: d.ncon]]
        return any(p & mine and p & others for p in pairs)

    def _waypoint(self, env, d: mujoco.MjData, plan: Plan) -> tuple[np.ndarray, float, float]:
        """(site target [3], gripper command, turn about the vertical) of the plan's phase;
        the hand turns only on the way to above the object."""
        _, bottom, top = extent(d, env.model, self.geoms[plan.obj])
        site = d.site_xpos[env.idx.site]
        if plan.phase in (1, 2):
            gxy, yaw, rim = self._grasp(env, d, plan)
            plan.grasp_z = self._grasp_z(env, d, plan, bottom, top, rim)
            if plan.beside is None and self._points_down(env, d):  # an overhang over the
                plan.beside = self._beside(env, d, plan, gxy, yaw, top, rim)  # grasp: beside
            shift = np.zeros(2) if plan.beside is None else plan.beside
            if plan.phase == 2 and rim and not plan.rechecked and not shift.any():
                plan.rechecked = True  # turned above the rim: the arm as it stands now
                if plan.lean is None and self._lean(env, d, plan, top):
                    plan.phase, plan.count = 1, 0
            if plan.lean is not None:  # to the way's start, then in along the hand's pointing
                start = plan.lean.start
                far = np.linalg.norm(start[:2] - site[:2]) > REACHED
                plan.aim = np.r_[gxy, plan.grasp_z]
                if plan.phase == 1:
                    return np.r_[start[:2], max(start[2], plan.travel_z * far)], OPEN, 0.0
                return plan.aim, OPEN, 0.0
            if plan.phase == 1:  # above the object (or beside it), across over what stands
                far = np.linalg.norm(gxy - site[:2]) > REACHED  # on the way (`panda_ways`)
                over = np.r_[gxy + shift, max(top + CLEAR, plan.travel_z)]
                if plan.pass_z is None:  # over what the fingers would push (`_pushed`)
                    hand = Clearance(env, d, set(self.geoms[plan.obj].tolist()), ())
                    hand.others = np.intersect1d(hand.others, self._pushed)
                    now = self._yaw(d)
                    plan.pass_z = pass_height(hand, site, over, (now, now + yaw))
                return (
                    np.r_[gxy + shift, max(top + CLEAR, max(plan.travel_z, plan.pass_z) * far)],
                    OPEN,
                    yaw,
                )
            down = np.r_[gxy + shift, plan.grasp_z]  # down to the grasp (beside it, then in)
            plan.inside |= bool(shift.any()) and np.linalg.norm(down - site) < REACHED
            plan.aim = down if shift.any() and not plan.inside else np.r_[gxy, plan.grasp_z]
            return plan.aim, OPEN, 0.0
        yaw = self._align_yaw(env, d, plan) if plan.phase == 5 else 0.0
        plan.turned |= yaw != 0.0
        return (*self._move(env, d, plan, site, bottom), yaw)

    @staticmethod
    def _points_down(env, d: mujoco.MjData) -> bool:
        """The hand points within `DOWN_TILT` of straight down (not turning out of a pull)."""
        return float(-hand_axes(env, d)[0][2]) > np.cos(DOWN_TILT)

    def _beside(self, env, d, plan: Plan, gxy, turn: float, top: float, rim: bool = False):
        """`panda_beside.beside` for the hand turned by `turn` (rad) from now: the shift [2]
        to come down at, zeros where it comes straight down. A rim grasp with no way straight
        down or beside it comes in leaning (`panda_lean`: `plan.lean`, the closing axis's sign
        the one that keeps the wrist inside its range)."""
        if rim and self._lean(env, d, plan, top):
            return np.zeros(2)
        a = self._yaw(d) + turn
        clear = Clearance(env, d, set(self.geoms[plan.obj].tolist()))
        shift = beside(clear, gxy, np.array([np.cos(a), np.sin(a)]), plan.grasp_z, top + CLEAR)
        return np.zeros(2) if shift is None else shift

    def _yaw(self, d: mujoco.MjData) -> float:
        """The fingers' closing axis's yaw now (rad)."""
        return float(np.arctan2(*d.xaxis[self.finger_joint][1::-1]))

    def _lean(self, env, d, plan: Plan, top: float) -> bool:
        """Whether a rim grasp comes in leaning (`panda_lean.lean_in`, the forearm tested too):
        then `plan.side` and `plan.lean` are set."""
        arm = Clearance(env, d, set(self.geoms[plan.obj].tolist()), LEAN_LINKS)
        found = lean_in(env, d, self.geoms[plan.obj], self._yaw(d), plan.side, plan.home_xy,
                        arm, (plan.grasp_z, top + CLEAR, plan.travel_z))  # fmt: skip
        if found is not None:
            plan.side, plan.lean = found
        return found is not None

    def _align_yaw(self, env, d: mujoco.MjData, plan: Plan) -> float:
        """The turn (rad, about the vertical) that lays a held object's long side along an In
        region's long axis, when it is longer than the region is wide (a book over a caddy's
        narrow compartment, carried at the yaw it stood at); else 0. The nearer of the two
        closing directions across the region."""
        if self.atom is None or self.atom[0] != "in_region":
            return 0.0
        half = np.abs(d.site(plan.target).xmat.reshape(3, 3)) @ np.asarray(self.atom[5])
        c = d.xaxis[self.finger_joint][:2]
        corners = geom_corners(d, env.model, self.geoms[plan.obj])
        # the object's own thin direction as it hangs, not the fingers' (a book taken 10°
        # off its thickness came down 10° turned onto a wall of a compartment 8 mm longer)
        now, _ = narrowest(corners, float(np.arctan2(c[1], c[0])))
        along = np.array([-np.sin(now), np.cos(now)])
        short = int(np.argmin(half[:2]))
        if np.ptp(corners[:, :2] @ along) <= 2 * half[short] or half[1 - short] < 1.2 * half[short]:
            return 0.0
        want = 0.0 if short == 0 else np.pi / 2  # its thin side across the short axis
        turns = [wrap(want - now), wrap(want + np.pi - now)]
        return min(turns, key=abs)

    def _move(self, env, d: mujoco.MjData, plan: Plan, site: np.ndarray, bottom: float):
        """(site target [3], gripper command) of the phases without a turn."""
        if plan.phase == 0:  # settle
            return site.copy(), OPEN
        if plan.phase == 3:  # close
            plan.hang = float(site[2] - bottom)
            if plan.on_other is None:  # what it stands on, before the fingers take its weight
                plan.on_other = self._touches_other(d, plan)
            plan.offset = site[:2] - centre_xy(geom_corners(d, env.model, self.geoms[plan.obj]))
            plan.origin = site[:2] - d.body(plan.obj).xpos[:2]
            return site.copy(), CLOSE
        txy, tz = self._target(env, d, plan)
        held = site[2] - bottom < plan.hang + SWING  # lifted with the hand
        if plan.phase == 5 and (plan.turned or (plan.lean is not None and held)):
            # the centre as it hangs while the hand turns it to fit a container (`_align_yaw`)
            # or rights it (taken leaning), then kept for the descent (a tilt on the way down
            # moves the outline's centre, not the object); not for a leaning grasp that missed
            # (its object's place ran away with the hand, which chased it off the table)
            plan.offset = site[:2] - centre_xy(geom_corners(d, env.model, self.geoms[plan.obj]))
            plan.origin = site[:2] - d.body(plan.obj).xpos[:2]
        if plan.target_is_site:
            txy = self._origin_inside(d, plan, txy + plan.offset)  # the centre over the target's
        else:  # ν's On over an object reads the two origins (within 3 cm): origin over origin
            # as it hangs now (a mug held by its wall hangs tilted, its origin ~4 cm off); as
            # at the grasp when it does not follow the hand (a missed grasp: chased, the
            # object's place ran away with the hand)
            now = site[:2] - d.body(plan.obj).xpos[:2]
            held = np.linalg.norm(now - plan.origin) < SWING
            txy = d.body(plan.target).xpos[:2] + (now if held else plan.origin)
        if plan.phase == 4:  # lift (out from under an overhang first, just off the table)
            plan.carry_z = plan.carry_z or self._carry_z(env, d, plan)
            if plan.exit is None:
                plan.exit = exit_shift(env.model, d, self.geoms[plan.obj], self.others,
                                       plan.carry_z - plan.hang, plan.on_other)  # fmt: skip
                plan.exit_from = site.copy()
            if plan.exit.any() and not plan.exited:
                out = plan.exit_from + np.r_[plan.exit, EXIT_RISE]
                if np.linalg.norm(out - site) >= REACHED:
                    return out, CLOSE
                plan.exited = True
            return np.r_[plan.exit_from[:2] + plan.exit, plan.carry_z], CLOSE
        if plan.phase == 5:  # above the target
            return np.r_[txy, plan.carry_z], CLOSE
        if plan.phase == 6:  # lower until the object's bottom is just above the target
            return np.r_[txy, tz + plan.hang + PLACE_ABOVE], CLOSE
        if plan.phase == 7:  # open
            return site.copy(), OPEN
        return np.r_[txy, plan.carry_z], OPEN  # lift away and wait

    def _origin_inside(self, d: mujoco.MjData, plan: Plan, sxy: np.ndarray) -> np.ndarray:
        """The grasp site's xy `sxy` (the outline's centre over the target), moved as little as
        puts the object's origin `ORIGIN_MARGIN` inside a region atom's extent: ν reads the
        origin, which a long handle takes far from the centre (a frying pan's, 8 cm: it came
        down centred on the stove's 15 cm region, its origin outside)."""
        if self.atom is None or self.atom[0] not in ("on_region", "in_region"):
            return sxy
        rot, reach = region_axes(d, d.site(plan.target).id, np.asarray(self.atom[5]))
        half = np.maximum(reach - ORIGIN_MARGIN, 0.0)
        local = rot.T @ (sxy - plan.origin - d.site(plan.target).xpos[:2])
        return sxy + rot @ (np.clip(local, -half, half) - local)

    def act(self, env) -> np.ndarray:
        """Actions [B, 7] of every environment's plan."""
        return np.stack([self.step(env, b, d)[0] for b, d in enumerate(env.datas)])

    def step(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        """(action [7], finished: lifted away from the released object) of environment b."""
        plan = self.plans[b]
        if plan.home_xy is None:
            plan.home_xy = d.site_xpos[env.idx.site][:2].copy()
        out = np.zeros(7)
        if (outward := PR.unfold(env, d, plan)) is not None:  # the elbow past its peak
            out[:3] = outward
            out[6] = OPEN if plan.phase in (2, 8) else CLOSE
            return out, False
        target, grip, yaw = self._waypoint(env, d, plan)
        err = target - d.site_xpos[env.idx.site]
        out[:3] = np.clip(err / OSCConfig.max_delta_pos, -1.0, 1.0)
        if (plan.turned or plan.lean is not None) and plan.phase in (5, 6):  # turned to fit a
            # narrow container, or taken leaning: the hand is righted too (the held object
            # hangs as the hand points)
            out[3:5] = np.clip(_untilt(env, d)[:2] / OSCConfig.max_delta_rot, -1.0, 1.0)
        out[5] = np.clip(yaw / OSCConfig.max_delta_rot, -1.0, 1.0)
        out[6] = grip
        turned = abs(yaw) < ALIGNED
        if plan.lean is not None and plan.phase in (1, 2):  # turned to the leaning pose; in
            # along its pointing (the position's action scaled as one, not clipped per axis)
            v = turn_to(env, d, plan.lean.approach, plan.lean.closing, signed=True)
            out[3:6] = v / max(float(np.abs(v).max()), OSCConfig.max_delta_rot)
            turned = float(np.linalg.norm(v)) < LEAN_TURNED
            out[:3] = err / max(float(np.abs(err).max()), OSCConfig.max_delta_pos)
        plan.count += 1
        waiting = plan.phase in (0, 3, 7)
        limit = SETTLE_STEPS if plan.phase == 0 else GRIP_STEPS if waiting else MAX_MOVE
        reached = np.linalg.norm(err) < REACHED and turned
        if plan.phase in (2, 6) and not plan.inside:  # a descent ends where it stalls too:
            # the palm on a tall object's top; a carried object on what is under it (a drawer)
            plan.heights.append(float(d.site_xpos[env.idx.site][2]))
            n, tol = STALL
            reached |= len(plan.heights) > n and plan.heights[-n - 1] - plan.heights[-1] < tol
        moved = (not waiting and reached) or plan.count >= limit
        finished = plan.phase == 8 and moved
        if moved and plan.phase < 8:
            plan.phase, plan.count, plan.heights = plan.phase + 1, 0, []
        return out, finished


def _untilt(env, d: mujoco.MjData) -> np.ndarray:
    """Axis-angle [3] (world) that turns the hand from its pointing now to straight down.
    OSC_POSE's delta rotation is about the hand's present orientation, so a hand tipped by a
    contact or an off-centre load stays tipped unless turned back (a book held 8° tipped came
    down onto the wall of a caddy's compartment 3 mm longer than it). Righting every carry
    lost episodes: near a cabinet the arm, straightened, could not reach the carry height."""
    a = hand_axes(env, d)[0]
    down = np.array([0.0, 0.0, -1.0])
    axis = np.cross(a, down)
    sin = float(np.linalg.norm(axis))
    if sin < 1e-9:
        return np.zeros(3)
    return axis / sin * float(np.arctan2(sin, float(a @ down)))


def _finger_geoms(m: mujoco.MjModel) -> np.ndarray:
    """Colliding geoms of the gripper's finger bodies (fingers and their tips)."""
    names = [m.body(b).name for b in range(m.nbody)]
    tips = [b for b, n in enumerate(names) if n.startswith(PD.GRIPPER_PREFIX) and "finger" in n]
    return np.concatenate([collision_geoms(m, b) for b in tips])


def lowest_point(env, d: mujoco.MjData) -> np.ndarray:
    """The fingers' lowest point (world): their meshes' vertices (a mesh's bounding box
    reaches ~4 mm below the finger), other geoms' box corners."""
    m = env.model
    low = None
    for g in _finger_geoms(m):
        if m.geom_type[g] == mujoco.mjtGeom.mjGEOM_MESH:
            k = int(m.geom_dataid[g])
            a, n = int(m.mesh_vertadr[k]), int(m.mesh_vertnum[k])
            pts = d.geom_xpos[g] + m.mesh_vert[a : a + n] @ d.geom_xmat[g].reshape(3, 3).T
        else:
            pts = geom_corners(d, m, np.array([g]))
        p = pts[int(np.argmin(pts[:, 2]))]
        low = p if low is None or p[2] < low[2] else low
    return np.asarray(low, np.float64)


def tips_below(env, d: mujoco.MjData) -> float:
    """The fingers' lowest point under the grasp site (m, `lowest_point`)."""
    return float(d.site_xpos[env.idx.site][2] - lowest_point(env, d)[2])
