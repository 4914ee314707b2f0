"""`coda.libero.panda_drag`: a closed drawer whose handle is too low to take, dragged open by
friction on the bar's top, on LIBERO-90's own initial states."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda_articulate as PA
from coda.libero import panda_chain as PC
from coda.libero import suites
from coda.libero.planner_geometry import execution_atoms
from tests.panda_episodes import batch

pytestmark = pytest.mark.usefixtures("libero_data")

TASK = "KITCHEN_SCENE1_open_the_bottom_drawer_of_the_cabinet"
BOTTOM, MIDDLE = "wooden_cabinet_1_bottom_level", "wooden_cabinet_1_middle_level"


def test_the_low_bottom_drawer_is_refused_by_the_handle_and_dragged_open_by_friction():
    """Kitchen 1's bottom drawer from states 0 and 1: `PandaDrawer` refuses it (`LowHandle`,
    naming the handle's height), the chain drags it instead, and the episode succeeds within
    LIBERO-90's step cap (0 of 50 states before). The fingers stay closed (the bar is moved by
    friction, never held); the hand touches the cabinet only on the bottom drawer: its housing
    passes under the middle drawer's bar, 5.3 cm over the bottom one's, and that drawer does not
    move (set on the bar's middle instead of its front edge, the housing pushed it in 1.7 mm)."""
    env = batch("libero_90", TASK, (0, 1))
    m, lay, d0 = env.model, env.pt.layout, env.datas[0]
    atom = execution_atoms(
        tuple(env.pt.success.keywords["atoms"]), m, lay.body_names, lay.joint_names
    )[0]
    with pytest.raises(PA.LowHandle, match="handle is 0.04"):
        PA.PandaDrawer(env, atom, d0)
    plan = PC.PandaPlanner(env)
    assert all(type(st[1][0]).__name__ == "PandaDrag" for st in plan.per_env)
    bottom = int(m.jnt_bodyid[m.joint(BOTTOM).id])
    middle = m.jnt_qposadr[m.joint(MIDDLE).id]
    q0 = [float(d.qpos[middle]) for d in env.datas]
    robot = {b for b in range(m.nbody) if m.body(b).name.startswith(("robot0", "gripper0"))}
    cabinet = {b for b in range(m.nbody) if m.body(b).name.startswith("wooden_cabinet_1")}
    touched, done = set(), np.zeros(2, bool)
    for _ in range(suites.step_cap("libero_90")):
        action = plan.act(env)
        assert np.all(action[:, 6] == PA.CLOSE)
        done |= env.step(action)[1]
        for d in env.datas:
            for c in d.contact[: d.ncon]:
                pair = {int(m.geom_bodyid[c.geom1]), int(m.geom_bodyid[c.geom2])}
                if pair & robot and pair & cabinet:
                    touched |= pair & cabinet
        if done.all():
            break
    assert done.all()
    assert touched == {bottom}
    np.testing.assert_allclose([d.qpos[middle] for d in env.datas], q0, atol=1e-4)
