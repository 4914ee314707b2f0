"""`coda.libero.panda_planner`: an object turned to fit a narrow In region is turned by its own
outline, and the hand is righted while it goes in (study scene 3's front compartment)."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda_chain as PC
from coda.libero import panda_outline as PO
from coda.libero import suites
from tests.panda_episodes import batch

pytestmark = pytest.mark.usefixtures("libero_data")

FRONT = "STUDY_SCENE3_pick_up_the_book_and_place_it_in_the_front_compartment_of_the_caddy"


def test_the_book_goes_into_the_front_compartment_squared_and_upright():
    """The book (11.6 cm long, standing 13.4 cm) into a compartment 12.9 cm long: turned by the
    fingers' axis, it came down ~5° off; held 8° tipped, its footprint grew by ~2 cm. Both
    put it onto a wall (states 14 and 34 failed). Turned by its own outline, the hand righted,
    it goes in, its footprint within 2° of the compartment's axes on the way down."""
    inits = (14, 34)
    env = batch("libero_90", FRONT, inits)
    planner = PC.PandaPlanner(env)
    done = np.zeros(len(inits), bool)
    yaws: list[list[float]] = [[] for _ in inits]
    for _ in range(suites.step_cap("libero_90")):
        done |= env.step(planner.act(env))[1]
        for b, d in enumerate(env.datas):
            place = planner.per_env[b][1][0]
            if place.plans[b].phase == 6 and place.plans[b].turned:
                corners = PO.geom_corners(d, env.model, PO.body_geoms(env.model, "black_book_1"))
                yaws[b].append(PO.narrowest(corners, 0.0)[0])
        if done.all():
            break
    assert done.all()
    for ys in yaws:
        assert ys
        off = np.abs([PO.wrap(y) for y in ys])  # the thin side across x (the short axis)
        assert float(np.median(off)) < np.deg2rad(2.5)
