"""`coda.libero.panda_chain`: an atom undone by a later stage is gone back to (LIBERO-90's own
initial states)."""

from __future__ import annotations

import pytest

from coda.libero import panda_chain as PC
from coda.libero import suites
from tests.panda_episodes import batch

pytestmark = pytest.mark.usefixtures("libero_data")

BOWL_IN = "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet_and_put_the_bowl_in_it"


def test_a_drawer_bumped_shut_by_a_later_grasp_is_pulled_open_again():
    """Kitchen 1 "open the top drawer and put the bowl in it", state 5: the drawer is pulled
    open, then the bowl's grasp bumps it back past LIBERO's bound, and the bowl ends inside a
    drawer no longer open. Before, the plan held still with its stages done (a failure); now,
    with the drawer's atom still false `REVISIT_WAIT` steps later, it goes back to that stage
    once, pulls the drawer again and the episode succeeds within LIBERO-90's step cap."""
    env = batch("libero_90", BOWL_IN, (5,))
    plan = PC.PandaPlanner(env)
    undone = done = False
    for _ in range(suites.step_cap("libero_90")):
        holds = env.atoms_hold(plan.atoms)[0]
        undone |= plan.chains[0].k >= len(plan.stages) and not holds[0] and holds[1]
        done = bool(env.step(plan.act(env))[1][0])
        if done:
            break
    assert undone and plan.chains[0].revisited and done
