"""`coda.libero.panda_reach`: an arm pulled past its elbow's peak reach (a far object taken
low, or come down to beside one) moves its hand out first, so that its wrist can come back in
(`panda_reach.unfold`, asked by `panda_planner.PandaPickPlace` at every step)."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from coda.libero import panda as PD
from coda.libero import panda_chain as PC
from coda.libero import panda_planner as PP
from coda.libero import panda_reach as PR
from coda.libero.panda_env import PandaEnv
from tests.panda_episodes import all_succeed, batch

pytestmark = pytest.mark.usefixtures("libero_data")

FRONT = "KITCHEN_SCENE2_put_the_black_bowl_at_the_front_on_the_plate"
BACK = "KITCHEN_SCENE2_put_the_black_bowl_at_the_back_on_the_plate"
PUDDING = "KITCHEN_SCENE10_put_the_chocolate_pudding_in_the_top_drawer_of_the_cabinet_and_close_it"


def _succeeded_plans(task: str, inits: tuple[int, ...]) -> list[PP.Plan]:
    """The planner's episodes of `task` from `inits` (LIBERO's protocol); each must succeed.
    Each environment's own pick-and-place plans, as they ended."""
    env = batch("libero_90", task, inits)
    planner = PC.PandaPlanner(env)
    assert all_succeed(env, planner, "libero_90")
    return [
        st.plans[b]
        for b, (_, stages) in enumerate(planner.per_env)
        for st in stages
        if hasattr(st, "plans")
    ]


def test_the_elbows_peak_is_where_the_model_has_it():
    """ELBOW_PEAK is the elbow angle of the longest shoulder-to-wrist distance, and the joint's
    limit lies past it (the trap `unfold` gets out of)."""
    env = PandaEnv("libero_90", BACK, n_envs=1)
    m, d = env.model, env.datas[0]
    adr = env.idx.qpos[PR.ELBOW]
    angles = np.linspace(-1.0, float(m.jnt_range[m.joint(PD.ARM_JOINTS[PR.ELBOW]).id][1]), 200)

    def reach(q4: float) -> float:
        d.qpos[:] = 0.0
        d.qpos[adr] = q4
        mujoco.mj_kinematics(m, d)
        return float(np.linalg.norm(d.body("robot0_link6").xpos - d.body(PR.SHOULDER).xpos))

    lengths = [reach(a) for a in angles]
    assert abs(angles[int(np.argmax(lengths))] - PR.ELBOW_PEAK) < 0.05
    assert PR.ELBOW_UNFOLDED > PR.ELBOW_PEAK and PR.ELBOW_TRAPPED > PR.ELBOW_UNFOLDED
    assert lengths[-1] < max(lengths) - 0.01  # at the limit the wrist is > 1 cm in from the peak


def test_a_bowl_taken_at_the_tables_far_edge_is_carried_back():
    """The front bowl lies at the arm's reach: taken low, the elbow passes its peak and reaches
    its limit. Carried back from there, OSC pressed the elbow on its limit and the hand stayed
    put (states 13 and 15 failed). Moved out first, both succeed."""
    inits = (13, 15)
    plans = _succeeded_plans(FRONT, inits)
    assert len(plans) == len(inits) and all(p.unfold > 0 for p in plans)


def test_a_bowl_within_reach_never_moves_out():
    plans = _succeeded_plans(BACK, (0, 1))
    assert len(plans) == 2 and all(p.unfold == -1 and p.reach_unfold == -1 for p in plans)


def test_a_box_taken_from_beside_an_overhang_at_the_arms_reach():
    """Kitchen 10's pudding lies under the open top drawer: the hand comes down beside it,
    6-7 cm farther out (`panda_beside`), and moves in at the grasp's height. Down there the
    elbow reached its limit and the hand could not come in; the fingers closed beside the box
    and the episode ran out on a second try (states 2 and 13 failed). Moved out first on the
    way down, both succeed."""
    inits = (2, 13)
    plans = _succeeded_plans(PUDDING, inits)
    assert len(plans) == len(inits) and all(p.reach_unfold > 0 for p in plans)
