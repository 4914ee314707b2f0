"""`coda.libero.panda_shelve`: a standing book turned on its fore-edge and slid into a shelf's
layer from the side, on LIBERO-90's own initial states."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda_chain as PC
from tests.panda_episodes import all_succeed, batch

pytestmark = pytest.mark.usefixtures("libero_data")

MIDDLE = "STUDY_SCENE4_pick_up_the_book_in_the_middle_and_place_it_on_the_cabinet_shelf"
UNDER = "STUDY_SCENE4_pick_up_the_book_on_the_right_and_place_it_under_the_cabinet_shelf"


def test_the_book_goes_into_the_layer_on_its_fore_edge():
    """'The book in the middle onto the cabinet shelf' from states 0 and 1: the 13.4 cm book in
    the 13.5 cm layer, refused before (0 of 50), succeeds within LIBERO-90's step cap; the book
    ends lying on its edge (its height horizontal, pointing into the shelf), its origin inside
    the region."""
    env = batch("libero_90", MIDDLE, (0, 1))
    plan = PC.PandaPlanner(env)
    assert all(type(st[1][0]).__name__ == "PandaShelve" for st in plan.per_env)
    stage = plan.per_env[0][1][0]
    book = env.model.body("black_book_1").id
    assert all_succeed(env, plan, "libero_90")
    for d in env.datas:
        height = d.xmat[book].reshape(3, 3) @ np.array([0.0, 0.0, 1.0])  # the book's own up
        assert abs(height[2]) < 0.2 and float(height @ stage.u) > 0.9  # top edge faces out


def test_the_book_under_the_shelf_is_laid_down_and_pushed_in():
    """'The book on the right under the cabinet shelf' from states 0 and 1: the 7 cm under the
    lower board take the book only lying on its face. Set down standing in front of the
    opening, tipped over and pushed in by its near edge (`panda_tip`), it succeeds within
    LIBERO-90's step cap (refused before: 0 of 50) and ends lying, under the board."""
    env = batch("libero_90", UNDER, (0, 1))
    plan = PC.PandaPlanner(env)
    assert all(type(st[1][0]).__name__ == "PandaTipIn" for st in plan.per_env)
    book = env.model.body("yellow_book_1").id
    assert all_succeed(env, plan, "libero_90")
    for d in env.datas:
        face = d.xmat[book].reshape(3, 3)[:, 2]  # the book's own up: now lying along the table
        assert abs(face[2]) < 0.2 and d.xpos[book][2] < 0.03
