"""A mug carried into the microwave past a door opened too little (`panda_insert.door_room_atom`,
`PandaDoor` pushing an open door wider) and along a straight way in (the carry's step scaled as
a whole: OSC_POSE clips each axis alone), on libero_10's "put the yellow and white mug in the
microwave and close it", LIBERO's states 11 (door open 76°) and 36 (80°)."""

import mujoco
import numpy as np
import pytest

from coda.libero import panda_articulate as PA
from coda.libero import panda_chain as PC
from coda.libero import suites
from coda.libero.osc import OSCConfig
from coda.libero.panda_door import PandaDoor
from coda.libero.panda_insert import PandaInsert, door_room_atom
from tests.panda_episodes import all_succeed, batch

pytestmark = pytest.mark.usefixtures("libero_data")
TASK = suites.tasks("libero_10")[9]


@pytest.fixture(scope="module")
def env():
    return batch("libero_10", TASK, [11, 36])


def _door(env) -> tuple[int, int]:
    jid = env.model.joint("microwave_1_microjoint").id
    return jid, int(env.model.jnt_qposadr[jid])


def test_a_door_across_the_way_in_is_pushed_wider_first_and_only_then(env):
    planner = PC.PandaPlanner(env)
    atoms, stages = planner.per_env[0]
    assert [type(s).__name__ for s in stages] == ["PandaDoor", "PandaInsert", "PandaDoor"]
    widen, insert = atoms[0], atoms[1]
    jid, adr = _door(env)
    d = env.datas[0]
    q0 = float(d.qpos[adr])
    assert np.degrees(-q0) < 80.0 and widen[:2] == ("joint", "<") and widen[2] < q0
    assert PandaInsert(env, insert, d).blocked  # as the state is: no start keeps it clear
    at = mujoco.MjData(env.model)
    at.qpos[:] = d.qpos
    at.qpos[adr] = widen[2]
    mujoco.mj_kinematics(env.model, at)
    assert not PandaInsert(env, insert, at).blocked  # at the widening's bound: clear
    assert door_room_atom(env, insert, at) is None  # nothing more to widen there
    # pushed by its inner face, away from the way in (the door opens towards q < 0)
    push = stages[0]
    assert isinstance(push, PandaDoor) and push.q_goal < q0


def test_the_carry_in_keeps_to_a_straight_line(env):
    """Phase 5's target: the object's whole error scaled to one step's reach, so that no axis
    is clipped and the hand moves along the way `_side` checked."""
    planner = PC.PandaPlanner(env)
    insert = planner.per_env[1][1][0]  # state 36: wide enough, no push first
    assert [type(s).__name__ for s in planner.per_env[1][1]] == ["PandaInsert", "PandaDoor"]
    d = env.datas[1]
    run = PA._Run(phase=5)
    target = insert._phase(env, 1, d, run)[0]
    step = target - d.site_xpos[env.idx.site]
    want = insert.inside - d.xpos[insert.obj]
    assert float(np.abs(step).max()) == pytest.approx(OSCConfig.max_delta_pos, abs=1e-9)
    np.testing.assert_allclose(step / np.linalg.norm(step), want / np.linalg.norm(want), atol=1e-9)


def test_both_mugs_end_in_the_microwave_with_its_door_shut(env):
    """Both failed at r41 (the hand's box met the door's free edge: in state 11 on every start,
    in 36 once the clipped carry had finished its sideways part first)."""
    fresh = batch("libero_10", TASK, [11, 36])
    assert all_succeed(fresh, PC.PandaPlanner(fresh), "libero_10")
    _, adr = _door(fresh)
    assert all(abs(float(d.qpos[adr])) < 0.01 for d in fresh.datas)
