"""`coda.libero.panda_chain`: a transit from a hand left tilted far from down (a drawer's pull)
retracts with its orientation held before it turns the hand down (`PandaPlanner._transit`)."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda as PD
from coda.libero import panda_chain as PC
from coda.libero import suites
from coda.libero.panda_env import PandaEnv
from tests.panda_episodes import NOOP

pytestmark = pytest.mark.usefixtures("libero_data")

DRAWER_BOWL = "open_the_top_drawer_and_put_the_bowl_inside"


def test_after_a_drawer_pull_the_hand_retracts_and_the_elbow_stays_off_its_limit():
    """openpi's second episode of the task (seed 7, one reset per episode): its cabinet stands 1
    cm farther out than at the first reset. Turned down where the pull ended, the arm
    straightened its elbow onto joint 4's limit and the transit never got back (the episode
    failed at the step cap); retracting first keeps the elbow bent and the transit arrives, so
    the bowl's stage starts (the episode then succeeds: `libero_panda_planner_goal_chain_
    retract_r45`)."""
    env = PandaEnv("libero_goal", DRAWER_BOWL, n_envs=1, fixture_seed=7, fixture_reset=2,
                   fixture_chained=True)  # fmt: skip
    env.reset([1])
    for _ in range(10):  # LIBERO's protocol: no-op steps first
        env.step(NOOP)
    planner = PC.PandaPlanner(env)
    j4 = env.model.joint(PD.ARM_JOINTS[3]).id
    upper = env.model.jnt_range[j4, 1]
    retracted, straightest, ch = 0, -np.inf, planner.chains[0]
    for _ in range(suites.step_cap("libero_goal")):
        env.step(planner.act(env))
        retracted += ch.retract
        straightest = max(straightest, env.datas[0].qpos[env.model.jnt_qposadr[j4]])
        if ch.k == 1 and ch.started:  # the pull done, the transit arrived
            break
    assert ch.k == 1 and ch.started and env.atoms_hold(planner.atoms)[0][0]
    assert retracted > 5, retracted  # the transit after the pull retracted for several steps
    assert straightest < upper - 0.2, (straightest, upper)  # the elbow never near straight
