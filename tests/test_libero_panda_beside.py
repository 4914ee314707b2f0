"""`coda.libero.panda_beside`: the hand's exact clearance at a planned pose, and coming down
beside an overhang, on LIBERO-90's own initial states."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda_chain as PC
from coda.libero import panda_planner as PP
from coda.libero import suites
from coda.libero.panda_beside import Clearance
from tests.panda_episodes import all_succeed, batch

pytestmark = pytest.mark.usefixtures("libero_data")

PUDDING = "KITCHEN_SCENE10_put_the_chocolate_pudding_in_the_top_drawer_of_the_cabinet_and_close_it"
BOWL_IN = "KITCHEN_SCENE1_open_the_top_drawer_of_the_cabinet_and_put_the_bowl_in_it"


def test_clearance_reads_the_hand_where_it_is_and_where_it_is_not():
    """Placed where it stands, the hand's gap to the scene is its true one (clear of
    everything at the start); moved 2 cm into the table it meets the table; the gap does not
    depend on the closing axis's sign."""
    env = batch("libero_90", PUDDING, (0,))
    d = env.datas[0]
    clear = Clearance(env, d, set())
    site = d.site_xpos[env.idx.site].copy()
    closing = Clearance.frame(env, d)[:2, 0]
    assert clear.gap(site, closing, 0.01) > 0.0
    low = site.copy()
    low[2] = -0.02 + clear.below  # the fingertips 2 cm into the table
    assert clear.gap(low, closing, 0.0) < -0.01
    gap, flipped = clear.gap(low, closing, 0.0), clear.gap(low, -closing, 0.0)
    np.testing.assert_allclose(gap, flipped, atol=1e-4)


def test_the_pudding_under_the_open_drawer_is_taken_from_beside():
    """The pudding lies under the open top drawer's handle. From states 0 and 3 (both failed
    when the hand came straight down and rolled on the handle), the hand comes down beside the
    handle, moves in at the grasp's height, and the goal (in the drawer, drawer shut) holds."""
    env = batch("libero_90", PUDDING, (0, 3))
    planner = PC.PandaPlanner(env)
    assert all_succeed(env, planner, "libero_90")
    for b in (0, 1):
        place = next(s for s in planner.per_env[b][1] if isinstance(s, PP.PandaPickPlace))
        assert np.linalg.norm(place.plans[b].beside) > 0.03


def test_a_way_beside_that_the_forearm_cannot_take_keeps_the_straight_descent():
    """Kitchen 1: after the planner pulls the top drawer open, the bowl's straight descent
    meets the drawer's handle with the hand's side (the drawer gives way), and every way
    beside it takes the forearm into the drawer: the descent stays straight (9 / 10 as
    before; a box model of the hand came down beside and lost 3)."""
    env = batch("libero_90", BOWL_IN, (0,))
    planner = PC.PandaPlanner(env)
    place = next(s for s in planner.per_env[0][1] if isinstance(s, PP.PandaPickPlace))
    for _ in range(suites.step_cap("libero_90")):
        env.step(planner.act(env))
        if place.plans[0].beside is not None:
            break
    assert place.plans[0].beside is not None
    np.testing.assert_allclose(place.plans[0].beside, 0.0, atol=1e-9)
