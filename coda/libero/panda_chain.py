"""A LIBERO goal as a chain of Panda stages.

`PandaPlanner` orders a goal's atoms (`planner_geometry.execution_atoms`: open / turn on first,
then placements, then close / turn off; a drawer that only closes is shut first, `closes_first`)
and runs one stage per atom: drawers, knobs and pushed plates (`panda_articulate`) or a pick-
and-place (`panda_planner.PandaPickPlace`). A stage whose atom already holds is skipped; one
that ends with its atom false runs again (`TRIES` in all); between two runs the hand goes back
to its start pose (the arm's posture recovers; a hand left about horizontal by a pull first
retracts, then turns down). An atom undone by a later stage (still false `REVISIT_WAIT` steps
after the last) is gone back to, once. An In placement into a drawer that leaves the object too
little room is preceded by a pull of that drawer (`room_atom`), one carried in past a door
opened too little by a push that opens it wider (`door_room_atom`). Each
environment builds its own atoms and stages from its own state, so an episode's plan does not
depend on the batch it runs in. A door is pushed shut or pulled open by its handle bar
(`panda_door`); a closed drawer whose handle is too low to take is dragged open by friction on
the bar's top (`panda_drag`). An object going into a region too low for a hand above it (a
microwave) is carried in by its handle with the hand pitched down from horizontal
(`panda_insert`); without a handle, a standing book is turned on its fore-edge into a shelf's
layer (`panda_shelve`) or laid down in front of a lower opening and pushed in (`panda_tip`);
else refused with the reasons. One already standing on the floor of a region under a shelf is
dragged in by its handle, one for a board under a ceiling lifted onto it by its handle
(`panda_slide`); one too tall to stand in its drawer with its origin inside the region is put at
one end and pushed over to lie (`panda_lay`).
"""

from __future__ import annotations

import dataclasses

import mujoco
import numpy as np

from coda.libero import panda_articulate as PA
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero.panda_door import door_stage, no_room_above
from coda.libero.panda_drag import PandaDrag
from coda.libero.panda_insert import PandaInsert, door_room_atom
from coda.libero.panda_lay import lay_down
from coda.libero.panda_shelve import shelve_stage
from coda.libero.panda_slide import lift_in, slide_in
from coda.libero.panda_tip import tip_stage
from coda.libero.panda_wrist import wrist_closing
from coda.libero.planner_articulated import goal_q
from coda.libero.planner_geometry import (
    drawer_limits,
    drawer_open_atom,
    execution_atoms,
    shared_slots,
)

SAFE_Z = 0.25  # m: the grasp site's height between two stages (above every fixture's handle)
TRIES = 3  # times a stage is run before the plan gives up on its atom
HOME_NEAR, HOME_TURNED = 0.03, np.deg2rad(5.0)  # between stages: near enough the start pose
ROOM_TOL = 0.002  # m: a drawer pulled for room aims this far inside its joint's limit
REVISIT_WAIT = 10  # steps the plan, its stages done, waits for an undone atom before going back
VERTICAL_CLOSING = 0.7  # the fingers' closing axis this near vertical (|z|): "about vertically"
RETRACT_TILT = np.deg2rad(70.0)  # a transit from a hand this far from down (about horizontal, as
# a pull leaves it; pushes and carries tilt it 35-50 deg) retracts first ...
RETRACT_NEAR = 0.10  # m: ... until this near its target, its orientation held; then turns


def _site_of(env, atom: tuple) -> str:
    """The model site of a region atom (its tracked body and position, `predicates.resolve`)."""
    m, names = env.model, env.pt.layout.body_names
    body, pos = atom[2], np.asarray(atom[3])
    for i in range(m.nsite):
        owner = m.body(int(m.site_bodyid[i])).name
        here = names.index(owner) if owner in names else -1
        if here == body and np.allclose(m.site_pos[i], pos, atol=1e-6):
            return m.site(i).name
    raise ValueError(f"no site for region atom {atom[:2]}")


def stage_for(env, atom: tuple, first: bool, d: mujoco.MjData):
    """The Panda stage of one goal atom: an articulation, a plate push or a pick-and-place."""
    if atom[0] == "joint":
        jid = PA._joint_of(env, atom)[0]
        if PA.is_door(env, jid, d):
            return door_stage(env, atom, d)
        try:
            return PA.articulation(env, atom, d)
        except PA.LowHandle:  # a closed drawer's handle too low to take: dragged by friction
            return PandaDrag(env, atom, d)
    slide = slide_in(env, atom, d) or lift_in(env, atom, d)  # under a ceiling, by a handle
    if slide is not None:
        return slide
    if no_room_above(env, atom, d) is not None:  # no room for a hand from above
        try:
            return PandaInsert(env, atom, d)  # by its handle, from the side
        except ValueError as by_handle:
            reasons = [str(by_handle)]
            # a book turned into a shelf's layer; else laid down in front and pushed in
            for how, make in (("turned", shelve_stage), ("laid down", tip_stage)):
                try:
                    stage = make(env, atom, d)
                except ValueError as e:
                    reasons.append(f"{how}: {e}")
                    continue
                if stage is not None:
                    return stage
            if len(reasons) == 1:
                raise  # the reason why not
            raise ValueError("; ".join(reasons)) from None
    push = PA.plate_push(env, atom, d, PP.tips_below(env, d))
    if push is not None:
        return push
    names = env.pt.layout.body_names
    if atom[0] == "on_obj":
        goal = (names[atom[1]], names[atom[3]])
    elif atom[0] in ("on_region", "in_region"):
        goal = (names[atom[1]], _site_of(env, atom))
    else:
        raise ValueError(f"no Panda stage for atom kind {atom[0]!r}")
    stage = PP.PandaPickPlace(env, goal, settle=first)
    stage.atom = atom
    return lay_down(env, atom, d, stage) or stage  # too tall to stand in its drawer: laid


def room_atom(env, atoms: tuple, atom: tuple, d: mujoco.MjData) -> tuple | None:
    """For an In placement into a drawer (`atom`) that would leave the object less than
    `DRAWER_MARGIN` either side between what overhangs the drawer and its front wall
    (`planner_geometry.drawer_limits`) once the goal's own opening is done, a pull of that
    drawer far enough, to its limit at most: ("joint", "<", q, (j,), True); else None
    (libero_10's bottom drawer and its bowl, `benchmarks/results/INDEX.md`)."""
    m, lay = env.model, env.pt.layout
    op = drawer_open_atom(m, lay.body_names, lay.joint_names, atom)
    if op is None:
        return None
    jid = m.joint(lay.joint_names[op[3][0]]).id
    adr = int(m.jnt_qposadr[jid])
    lo, hi = (float(v) for v in m.jnt_range[jid])
    opens = [goal_q(b[1], b[2], lo, hi, False) for b in atoms
             if b[0] == "joint" and b[3] == op[3] and b[1] in ("<", "<=")]  # fmt: skip
    q = min([float(d.qpos[adr])] + opens)  # where the drawer is when the placement starts
    at = mujoco.MjData(m)
    at.qpos[:] = d.qpos
    at.qpos[adr] = q
    mujoco.mj_kinematics(m, at)
    owner, obj = (m.body(lay.body_names[atom[i]]).id for i in (2, 1))
    _, o, face, wall, _ = drawer_limits(m, at, jid, owner, obj, atom)
    pts = PO.geom_corners(at, m, PO.body_geoms(m, lay.body_names[atom[1]])) @ o
    short = float(pts.max() - pts.min()) + 2 * PP.DRAWER_MARGIN - (wall - face)
    bound = max(q - short, lo + ROOM_TOL)  # the drawer opens towards q < 0 (drawer_limits)
    if not np.isfinite(short) or short <= 0 or bound >= q:
        return None
    return ("joint", "<", float(bound), op[3], True)


def closes_first(env, atoms: tuple, d: mujoco.MjData) -> tuple:
    """`atoms` with the drawers that only close moved to the front: a closing push ends with
    the hand above the cabinet, a pull with it in front (after kitchen scene 4's pull of the
    top drawer, link 6 met the wine rack on the way back and the bottom drawer was never
    shut). A drawer another atom opens or places into keeps its order (open, place, close)."""
    m, lay = env.model, env.pt.layout

    def shuts(a) -> bool:
        if a[0] != "joint":
            return False
        jid = m.joint(lay.joint_names[a[3][0]]).id
        q = float(d.qpos[m.jnt_qposadr[jid]])
        return m.jnt_type[jid] == mujoco.mjtJoint.mjJNT_SLIDE and abs(
            PA._q_goal(env, a, jid)
        ) < abs(q)

    def used(a) -> bool:  # another atom opens this drawer or puts something in it
        for b in atoms:
            op = (
                drawer_open_atom(m, lay.body_names, lay.joint_names, b)
                if b[0] == "in_region"
                else None
            )
            if b is not a and (
                (b[0] == "joint" and b[3] == a[3]) or (op is not None and op[3] == a[3])
            ):
                return True
        return False

    first = [a for a in atoms if shuts(a) and not used(a)]
    return tuple(first + [a for a in atoms if all(a is not f for f in first)])


def with_room(env, atoms: tuple, d: mujoco.MjData) -> tuple:
    """`atoms` with a `room_atom` before each In placement into a drawer that needs one, and a
    `panda_insert.door_room_atom` before each carried in past a door opened too little."""
    out = []
    for a in atoms:
        room = room_atom(env, atoms, a, d) or door_room_atom(env, a, d)
        out += [a] if room is None else [room, a]
    return tuple(out)


@dataclasses.dataclass
class _Chain:
    """One environment's place in the stage list."""

    k: int = 0  # the stage running (len(stages): all done)
    tries: int = 0  # runs of stage k that finished with its atom false
    started: bool = False  # stage k has begun
    transit: bool = False  # between two runs: up to SAFE_Z, the hand turned down
    closing: np.ndarray | bool | None = None  # the transit's closing axis, fixed at its start
    # (False: chosen every step by `wrist_closing`; None: not started)
    idle: int = 0  # steps held still with every stage done and an atom false
    revisited: bool = False  # gone back to an atom undone after its stage
    retract: bool = False  # the transit's first part: back towards the start, not turning


class PandaPlanner:
    """A LIBERO goal's atoms as ordered Panda stages (module doc). `act(env)` -> [B, 7]."""

    def __init__(self, env):
        lay = env.pt.layout
        atoms = env.pt.success.keywords["atoms"]
        try:
            base = execution_atoms(tuple(atoms), env.model, lay.body_names, lay.joint_names)
            # each environment's atoms and stages from its own state: built from the batch's
            # first, an episode's plan (a plate push's height: that hand's fingertips) and so
            # its outcome depended on which initial states shared its batch
            self.per_env = []
            for d in env.datas:
                mine = with_room(env, closes_first(env, base, d), d)
                stages = [stage_for(env, a, k == 0, d) for k, a in enumerate(mine)]
                # several objects into one region: each to its own slot (the first of two
                # moka pots at the burner's centre left the second only its edge)
                for k, slot in shared_slots(PA.compiled_view(env, d), mine).items():
                    if isinstance(stages[k], PP.PandaPickPlace):
                        stages[k].slot = slot
                self.per_env.append((mine, stages))
        except ValueError as e:
            raise ValueError(f"{env.pt.task.name}: the Panda planner cannot script it: {e}") from e
        self.chains = [_Chain() for _ in env.datas]
        # where each hand starts (its site, closing axis): the pose between two stages
        self.home = [(dd.site_xpos[env.idx.site].copy(), PA.hand_axes(env, dd)[1])
                     for dd in env.datas]  # fmt: skip

    @property
    def atoms(self) -> tuple:
        """The first environment's atoms in execution order."""
        return self.per_env[0][0]

    @property
    def stages(self) -> list:
        """The first environment's stages, one per atom."""
        return self.per_env[0][1]

    @stages.setter
    def stages(self, stages: list) -> None:
        self.per_env[0] = (self.per_env[0][0], stages)

    def _transit(self, env, b: int, d: mujoco.MjData) -> tuple[np.ndarray, bool]:
        """Straight back to the start pose (every stage ends clear of what it moved, so the way
        back towards the robot is free): the arm's posture recovers before the next stage. A hand
        left tilted far from down (a drawer's or a door's pull) first retracts with its
        orientation held and turns down only near the start: turned down where the pull ended,
        the arm straightened its elbow onto the joint's limit, a singular pose the controller
        never left (a drawer's pull 1 cm farther out, under openpi's per-episode fixtures)."""
        home, closing = self.home[b]
        target = np.r_[home[:2], max(SAFE_Z, home[2])]
        ch = self.chains[b]
        if ch.closing is None:  # the transit's first step
            approach, now = PA.hand_axes(env, d)
            ch.retract = float(approach @ PA.DOWN) < np.cos(RETRACT_TILT)
            # fingers closing about vertically (a hand left horizontal by a drawer's pull): the
            # turn about the vertical that `wrist_closing` weighs is undefined there, and its
            # sign came out either way (the other way round, the arm wound joint 6 onto its
            # limit and never got home); the closing axis is then the start pose's, signed as
            # there, for the whole transit
            ch.closing = closing if abs(now[2]) > VERTICAL_CLOSING else False
        if ch.retract:
            act, err, _ = PA.pose_action(env, d, target, PA.OPEN)  # the orientation goal held
            ch.retract = err > RETRACT_NEAR
            if ch.retract:
                return act, False
        if ch.closing is False:
            closing = wrist_closing(env, d, closing)
        else:
            closing = ch.closing
        act, err, rot = PA.pose_action(env, d, target, PA.OPEN, PA.DOWN, closing, signed=True)
        return act, err < HOME_NEAR and rot < HOME_TURNED

    def _one(self, env, b: int, d: mujoco.MjData, holds: np.ndarray) -> np.ndarray:
        """Environment b's action [7]; `holds` [A]: each atom's truth now."""
        ch, stages = self.chains[b], self.per_env[b][1]
        n = len(stages)
        if ch.transit:
            act, arrived = self._transit(env, b, d)
            ch.transit = not arrived
            if arrived:
                ch.closing = None
            return act
        while ch.k < n and not ch.started and holds[ch.k]:  # already true: skipped
            ch.k, ch.tries = ch.k + 1, 0
        if ch.k >= n and not ch.revisited and not holds.all():  # done, an atom undone since
            # (the bowl's grasp bumped the drawer its stage had opened back past the bound):
            # after `REVISIT_WAIT` steps (things settle), once, back to the first such atom
            ch.idle += 1
            if ch.idle > REVISIT_WAIT:
                ch.k, ch.tries, ch.revisited = int(np.argmin(holds)), 0, True
        if ch.k >= n or ch.tries >= TRIES:  # done, or given up: hold still
            return PA.pose_action(env, d, d.site_xpos[env.idx.site].copy(), PA.OPEN)[0]
        stage = stages[ch.k]
        if not ch.started:
            stage.begin(env, b, again=ch.k > 0 or ch.tries > 0 or ch.revisited)
            ch.started = True
        act, finished = stage.step(env, b, d)
        if finished:
            ch.started, ch.transit = False, True
            if holds[ch.k]:
                ch.k, ch.tries = ch.k + 1, 0
            else:
                ch.tries += 1
        return act

    def act(self, env) -> np.ndarray:
        holds = {}  # each environment's atoms' truth [A] (one evaluation per distinct tuple)
        for atoms in {atoms for atoms, _ in self.per_env}:
            rows = env.atoms_hold(atoms)  # [B, A]
            holds.update({b: rows[b] for b, (mine, _) in enumerate(self.per_env) if mine == atoms})
        return np.stack([self._one(env, b, d, holds[b]) for b, d in enumerate(env.datas)])
