"""`coda.libero.panda_chain`: an atom undone by a later stage is gone back to (LIBERO-90's own
initial states)."""

from __future__ import annotations

import mujoco
import pytest

from coda.libero import panda_articulate as PA
from coda.libero import panda_chain as PC
from coda.libero import suites
from tests.panda_episodes import batch

pytestmark = pytest.mark.usefixtures("libero_data")

BOWL_IN = "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet_and_put_the_bowl_in_it"
BUMP = 0.01  # m: the drawer put back this far past its atom's bound


def test_a_drawer_bumped_shut_by_a_later_stage_is_pulled_open_again():
    """Kitchen 1 "open the top drawer and put the bowl in it", state 5, its drawer set open to
    its joint's limit (the plan skips the pull: its atom holds). At the bowl stage's start the
    drawer is put back 1 cm past LIBERO's bound, as the bowl's grasp once bumped it (before the
    grasp came in leaning, `panda_lean`, this state lost the drawer that way by itself), and
    the bowl ends inside a drawer no longer open. With the drawer's atom still false
    `REVISIT_WAIT` steps after the last stage, the plan goes back to that stage once, pulls the
    drawer again and the episode succeeds within LIBERO-90's step cap (before the revisit, the
    plan held still with its stages done: a failure). The drawer starts open so that the
    episode holds one pull, not two: with two, its 400 steps were used to the last 4 (and the
    retract after a pull, `PandaPlanner._transit`, took them)."""
    env = batch("libero_90", BOWL_IN, (5,))
    plan = PC.PandaPlanner(env)
    m, d = env.model, env.datas[0]
    atom = plan.atoms[0]
    jid, adr, _ = PA._joint_of(env, atom)
    opened = m.jnt_range[jid, 0 if atom[1] in ("<", "<=") else 1]
    d.qpos[adr], d.qvel[:] = opened, 0.0
    mujoco.mj_forward(m, d)
    assert env.atoms_hold(plan.atoms)[0][0]
    bumped = undone = done = False
    for _ in range(suites.step_cap("libero_90")):
        ch = plan.chains[0]
        if not bumped and ch.k == 1 and not ch.transit:
            d.qpos[adr], d.qvel[:] = atom[2] + BUMP, 0.0
            mujoco.mj_forward(m, d)
            bumped = True
        holds = env.atoms_hold(plan.atoms)[0]
        undone |= ch.k >= len(plan.stages) and not holds[0] and holds[1]
        done = bool(env.step(plan.act(env))[1][0])
        if done:
            break
    assert bumped and undone and plan.chains[0].revisited and done
