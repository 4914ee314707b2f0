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
