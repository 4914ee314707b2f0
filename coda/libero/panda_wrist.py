"""The Panda hand's orientation goals and the sign of its fingers' closing axis.

A closing axis is a line: its two signs put the hand in the same place with its last joint
(the flange's roll) half a turn apart. Which one a turn takes decides whether that joint stays
inside its range on the way; a turn that runs it onto its limit stalls the arm there.
"""

from __future__ import annotations

import mujoco
import numpy as np

from coda.libero import panda as PD
from coda.libero.panda_env import hand_axes
from coda.libero.panda_outline import wrap

UP = np.array([0.0, 0.0, 1.0])
WRIST_MARGIN = 0.3  # rad: a turn ends the hand's last joint this far inside its range
QUARTER_TIE = np.deg2rad(15.0)  # rad: a turn about the vertical this near a quarter turn is
# about as large as its other sign's (the closing line reached the other way round)


def _pick(env, d: mujoco.MjData, sizes, ks, middle: bool = False) -> int:
    """Of candidate turns (`sizes`: how large; `ks`: the last joint's change each makes), the
    smallest that leaves that joint `WRIST_MARGIN` inside its range, else (or when `middle`)
    the one that ends it nearest its middle."""
    m = env.model
    j = m.joint(PD.ARM_JOINTS[-1]).id
    q = float(d.qpos[m.jnt_qposadr[j]])
    lo, hi = (float(v) for v in m.jnt_range[j])
    ends = [q + k for k in ks]
    inside = [i for i, e in enumerate(ends) if lo + WRIST_MARGIN <= e <= hi - WRIST_MARGIN]
    if inside and not middle:
        return min(inside, key=lambda i: abs(sizes[i]))
    return int(np.argmin([abs(e - (lo + hi) / 2) for e in ends]))


def wrist_turn(env, d: mujoco.MjData, turns) -> float:
    """Of candidate turns about the vertical (rad; a closing line's two signs differ by pi),
    the smallest that leaves the hand's last joint `WRIST_MARGIN` inside its range, else the
    one that ends it nearest its middle (a turn past the limit stalls the arm there)."""
    k = _last_change(env, d)
    return float(turns[_pick(env, d, turns, [k * t for t in turns])])


def quarter_sign(env, d: mujoco.MjData, turn: float) -> float:
    """For a turn about the vertical (rad, in [-pi/2, pi/2)) within `QUARTER_TIE` of a quarter
    turn, the sign (+1 / -1) of the way round, of `turn` and `turn - sign(turn) pi`, that ends
    the hand's last joint nearest the middle of its range; 0 for a smaller turn (it is taken).
    The nearer way decided such a tie by a degree or two, and the two end in different arm
    postures: in libero_spatial's bowl fallen off the ramekin near the robot, the one that
    turned the last joint towards its limit came down with the wrist (joint 6) on its limit
    and the fingers 2 cm off the rim."""
    if abs(turn) < np.pi / 2 - QUARTER_TIE:
        return 0.0
    ways, k = [turn, turn - np.copysign(np.pi, turn)], _last_change(env, d)
    return float(np.sign(ways[_pick(env, d, ways, [k * t for t in ways], middle=True)]))


def way_round(env, d: mujoco.MjData, plan, turn: float) -> float:
    """The turn (rad) to a closing yaw `turn` away (modulo pi): the nearer way round, but
    about a quarter turn away the way `quarter_sign` takes at the plan's first step (kept in
    `plan.way`), until the hand is past the quarter."""
    turn = wrap(turn)
    if plan.way is None:
        plan.way = quarter_sign(env, d, turn)
    if plan.way and np.sign(turn) != plan.way and abs(turn) > np.pi / 2 - QUARTER_TIE:
        turn += plan.way * np.pi
    return turn


def _last_change(env, d: mujoco.MjData) -> float:
    """The hand's last joint's change per rad of turn about +z."""
    return float(d.xaxis[env.model.joint(PD.ARM_JOINTS[-1]).id] @ UP)


def wrist_closing(env, d: mujoco.MjData, closing: np.ndarray) -> np.ndarray:
    """Of ±closing (a horizontal line), the sign `wrist_turn` takes from the hand's now."""
    _, c_c = hand_axes(env, d)
    turns = [float(np.arctan2(np.cross(c_c, c)[2], c_c @ c)) for c in (closing, -closing)]
    return closing if wrist_turn(env, d, turns) == turns[0] else -closing


def turn_to(
    env, d: mujoco.MjData, approach: np.ndarray, closing: np.ndarray, signed: bool = False
) -> np.ndarray:
    """Axis-angle [3] (world) that turns the hand to point along `approach` with its fingers
    closing along `closing` (a line: of its two signs, the nearer; `signed`: as given)."""
    a_c, c_c = hand_axes(env, d)
    c_d = closing if signed or closing @ c_c >= 0 else -closing
    now = np.stack([a_c, c_c, np.cross(a_c, c_c)], 1)
    want = np.stack([approach, c_d, np.cross(approach, c_d)], 1)
    q, v = np.zeros(4), np.zeros(3)
    mujoco.mju_mat2Quat(q, (want @ now.T).ravel())
    mujoco.mju_quat2Vel(v, q, 1.0)
    return v


def wrist_sign(
    env, d: mujoco.MjData, approach: np.ndarray, closing: np.ndarray, middle: bool = False
) -> np.ndarray:
    """Of ±closing, the one whose turn to (approach, closing) from the hand's pose now leaves
    its last joint inside its range, the smaller turn first (`wrist_turn`'s rule, for any
    turn: the joint's change is the turn's component along its axis); `middle`: the one that
    ends the joint nearest its middle. For a hand whose closing axis is about perpendicular to
    both (pointing down, to be turned horizontal with the fingers closing vertically)
    `turn_to`'s nearer sign is a tie, decided by a few degrees."""
    axis = d.xaxis[env.model.joint(PD.ARM_JOINTS[-1]).id]
    turns = [turn_to(env, d, approach, c, signed=True) for c in (closing, -closing)]
    sizes = [float(np.linalg.norm(v)) for v in turns]
    i = _pick(env, d, sizes, [float(v @ axis) for v in turns], middle)
    return closing if i == 0 else -closing
