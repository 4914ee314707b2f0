"""`coda.libero.panda_wrist`: the sign of the fingers' closing axis a turn takes, chosen by the
hand's last joint, and the planner episodes it decided (LIBERO-90's own initial states)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from coda.libero import panda as PD
from coda.libero import panda_articulate as PA
from coda.libero import panda_chain as PC
from coda.libero import panda_wrist as PW
from coda.libero import suites
from tests.panda_episodes import batch

pytestmark = pytest.mark.usefixtures("libero_data")

CLOSE_OPEN = "KITCHEN_SCENE4_close_the_bottom_drawer_of_the_cabinet_and_open_the_top_drawer"
BOWL_IN = "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet_and_put_the_bowl_in_it"


def test_wrist_sign_keeps_the_last_joint_in_range_where_the_nearer_sign_is_a_tie():
    """A hand pointing down, to be turned horizontal with its fingers closing vertically: both
    signs of the vertical are a quarter turn from its closing axis (the nearer one is a tie).
    With the last joint near either end of its range, `wrist_sign` takes the sign whose turn
    ends the joint inside its range (by `WRIST_MARGIN`), and the other sign's turn would have
    ended it outside: the choice is the one that matters."""
    env = batch("libero_90", CLOSE_OPEN, (0,))
    m = env.model
    j = m.joint(PD.ARM_JOINTS[-1]).id
    lo, hi = (float(v) for v in m.jnt_range[j])
    d = mujoco.MjData(m)
    d.qpos[:] = env.datas[0].qpos
    approach = np.array([0.0, -1.0, 0.0])
    for q7 in (lo + 0.3, hi - 0.3):
        d.qpos[m.jnt_qposadr[j]] = q7
        mujoco.mj_kinematics(m, d)
        a, c = PA.hand_axes(env, d)
        assert a @ PA.DOWN > 0.95 and abs(c @ PA.UP) < 0.1  # pointing down, closing level
        got = PW.wrist_sign(env, d, approach, PA.UP)
        ends = {}
        for s in (1.0, -1.0):
            v = PW.turn_to(env, d, approach, s * PA.UP, signed=True)
            ends[s] = q7 + float(v @ d.xaxis[j])
        chosen = float(got @ PA.UP)
        assert lo + PW.WRIST_MARGIN <= ends[chosen] <= hi - PW.WRIST_MARGIN
        assert not lo <= ends[-chosen] <= hi


def test_the_top_drawer_is_pulled_with_the_wrist_in_range_after_the_bottom_one_is_shut():
    """Kitchen 4 "close the bottom drawer and open the top drawer", states 0 and 4 (failed
    before: the pull's closing sign, a tie, ran joint 7 onto its limit and the rolled hand
    missed the handle): both succeed within LIBERO-90's step cap and joint 7 stays 0.1 rad
    inside its range."""
    env = batch("libero_90", CLOSE_OPEN, (0, 4))
    m = env.model
    j = m.joint(PD.ARM_JOINTS[-1]).id
    adr, (lo, hi) = m.jnt_qposadr[j], m.jnt_range[j]
    plan = PC.PandaPlanner(env)
    done = np.zeros(2, bool)
    for _ in range(suites.step_cap("libero_90")):
        done |= env.step(plan.act(env))[1]
        assert all(lo + 0.1 < d.qpos[adr] < hi - 0.1 for d in env.datas)
        if done.all():
            break
    assert done.all()


def test_a_hand_left_horizontal_by_a_pull_gets_back_to_its_start_pose():
    """Kitchen 1 "open the top drawer and put the bowl in it", state 3: after the pull the
    fingers close vertically, and the transit's closing sign (by `wrist_closing`, a turn about
    the vertical that is undefined there) came out the other way: joint 6 wound onto its limit
    and the hand never got back, for the episode's last 280 steps. With the start pose's own
    sign it arrives home, the bowl's stage starts, and the episode succeeds."""
    env = batch("libero_90", BOWL_IN, (3,))
    plan = PC.PandaPlanner(env)
    assert [type(s).__name__ for s in plan.stages] == ["PandaDrawer", "PandaPickPlace"]
    started, done = False, False
    for _ in range(suites.step_cap("libero_90")):
        done = bool(env.step(plan.act(env))[1][0])
        started |= plan.chains[0].k == 1 and not plan.chains[0].transit
        if done:
            break
    assert started and done


RAMEKIN = "pick_up_the_black_bowl_on_the_ramekin_and_place_it_on_the_plate"


def test_quarter_sign_takes_the_way_round_that_ends_the_last_joint_nearer_its_middle():
    """A turn about a quarter turn either way: `quarter_sign` picks the way whose end leaves
    the last joint nearest the middle of its range (checked against the joint's change per
    rad of turn), whichever way is the nearer by a degree; a smaller turn is left alone."""
    env = batch("libero_spatial", RAMEKIN, (8,))
    m, d = env.model, env.datas[0]
    j = m.joint(PD.ARM_JOINTS[-1]).id
    q = float(d.qpos[m.jnt_qposadr[j]])
    lo, hi = (float(v) for v in m.jnt_range[j])
    k = float(d.xaxis[j] @ PW.UP)
    assert abs(k) > 0.9  # the hand points about straight down
    for turn in (np.pi / 2 - 0.02, -np.pi / 2 + 0.02, np.pi / 2 - 0.2, -(np.pi / 2 - 0.2)):
        other = turn - np.copysign(np.pi, turn)
        best = min((turn, other), key=lambda t: abs(q + k * t - (lo + hi) / 2))
        assert PW.quarter_sign(env, d, turn) == np.sign(best)
    assert PW.quarter_sign(env, d, np.pi / 2 - PW.QUARTER_TIE - 0.05) == 0.0


def test_the_bowl_off_the_ramekin_is_taken_with_the_wrist_in_range():
    """libero_spatial's bowl falls off the ramekin onto the table near the robot. Its rim
    grasp is a quarter turn from the hand's start; states 8 and 18 took the nearer way (by a
    degree), ended the wrist (joint 6) on its limit on the way down, landed a finger on the rim
    and failed. With the way round `quarter_sign` takes, they and state 1 (which took the
    other way already) succeed, and joint 6 stays inside its range on the way down."""
    env = batch("libero_spatial", RAMEKIN, (1, 8, 18))
    planner = PC.PandaPlanner(env)
    m = env.model
    j6 = m.jnt_qposadr[m.joint(PD.ARM_JOINTS[5]).id]
    hi6 = float(m.jnt_range[m.joint(PD.ARM_JOINTS[5]).id][1])
    done = np.zeros(env.n_envs, bool)
    top = np.full(env.n_envs, -np.inf)
    for _ in range(suites.step_cap("libero_spatial")):
        done |= env.step(planner.act(env))[1]
        for b, d in enumerate(env.datas):
            if planner.per_env[b][1][0].plans[b].phase == 2:  # on the way down to the grasp
                top[b] = max(top[b], float(d.qpos[j6]))
        if done.all():
            break
    assert done.all()
    assert (top < hi6 - 0.05).all(), top
