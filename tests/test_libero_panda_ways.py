"""`coda.libero.panda_ways`: the hand's way across over a tall neighbour, and a flat box taken
off its centre where the way down there meets one (libero_10's own initial states)."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda_chain as PC
from coda.libero import panda_planner as PP
from coda.libero import panda_ways as W
from coda.libero import suites
from coda.libero.panda_beside import Clearance
from coda.libero.panda_outline import geom_corners, grasp_of
from tests.panda_episodes import batch

pytestmark = pytest.mark.usefixtures("libero_data")

CHEESE_BUTTER = "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket"


def test_the_clipped_way_drops_before_it_is_across():
    """OSC_POSE's per-axis clipped action, from libero_10 cream-cheese state 11's start to
    above the box: the site is within 1.5 cm of the approach height with over 30 % of the way
    across still to go (the milk carton stands there); every move is at most one trace step
    along each axis and the way ends over the goal."""
    start, goal = np.array([0.433, 0.0, 0.239]), np.array([0.595, -0.201, 0.118])
    way = W.clipped_way(start, goal)
    steps = np.abs(np.diff(way, axis=0))
    assert (steps <= W.TRACE_STEP + 1e-9).all()
    assert np.linalg.norm(way[-1][:2] - goal[:2]) < W.NEAR
    low = np.flatnonzero(way[:, 2] < goal[2] + 0.015)[0]
    assert np.linalg.norm(way[low][:2] - goal[:2]) > 0.3 * np.linalg.norm(start[:2] - goal[:2])


def test_the_hand_crosses_over_the_milk_carton_and_takes_the_cream_cheese():
    """States 11 and 17: the milk carton (13.1 cm) stands between the hand's start and the
    cream-cheese box. Before, the open fingers swept through it at site height 0.13 on the
    way to above the box, it fell onto the box and all three tries failed. Now the way
    crosses higher (`pass_z` over the approach height), the carton stays where it stood
    until the box is lifted, and both episodes succeed within the suite's cap."""
    env = batch("libero_10", CHEESE_BUTTER, (11, 17))
    plan = PC.PandaPlanner(env)
    pick = plan.stages[0]
    assert isinstance(pick, PP.PandaPickPlace) and pick.plans[0].obj == "cream_cheese_1"
    start = [d.body("milk_1").xpos.copy() for d in env.datas]
    moved = np.zeros(2)
    done = np.zeros(2, bool)
    for _ in range(suites.step_cap("libero_10")):
        done |= env.step(plan.act(env))[1]
        for b, d in enumerate(env.datas):
            p = plan.per_env[b][1][0].plans[b]
            if plan.chains[b].k == 0 and plan.chains[b].tries == 0 and p.phase <= 4:
                moved[b] = max(moved[b], np.linalg.norm(d.body("milk_1").xpos - start[b]))
        if done.all():
            break
    for b in range(2):
        p = plan.per_env[b][1][0].plans[b]
        assert p.pass_z > 0.13  # crossed over the carton, not at the approach height (0.118)
    assert (moved < 0.01).all(), moved
    assert done.all()


def test_a_box_whose_way_down_meets_the_carton_is_taken_off_its_centre():
    """State 4: at the box's centre the hand's housing (10 cm along the closing axis) comes
    down onto the milk carton beside it. The grasp moves along the box's length and turns,
    and the exact hand is clear (by `MARGIN`) along the straight way down there; the box
    stays within the fingers' reach (inside its ends, at most `OPEN_USE` across them)."""
    env = batch("libero_10", CHEESE_BUTTER, (4,))
    plan = PC.PandaPlanner(env)
    pick, d = plan.stages[0], env.datas[0]
    for _ in range(20):  # the settle, then the way's first step (the grasp chosen)
        env.step(plan.act(env))
    p = pick.plans[0]  # (the stage's `begin` made it)
    gxy, turn, rim = pick._grasp(env, d, p)
    geoms = pick.geoms["cream_cheese_1"]
    corners = geom_corners(d, env.model, geoms)
    centre, yaw, _ = grasp_of(corners, pick._yaw(d))
    assert not rim and p.along is not None
    shift, turned = p.along
    assert abs(shift) > 0.004 or abs(turned) > np.deg2rad(4.0)
    clear = Clearance(env, d, set(geoms.tolist()))
    z = pick._grasp_z(env, d, p, float(corners[:, 2].min()), float(corners[:, 2].max()), False)
    top = float(corners[:, 2].max()) + PP.CLEAR

    def gap(xy, a, h):
        return clear.gap(np.r_[xy, h], np.array([np.cos(a), np.sin(a), 0.0]), 0.02)

    heights = np.linspace(z, top, 8)
    assert min(gap(centre, yaw, h) for h in heights) < 0.0  # the housing meets the carton
    a = pick._yaw(d) + turn
    assert min(gap(gxy, a, h) for h in heights[1:]) >= W.MARGIN
    u = np.array([np.cos(a), np.sin(a)])
    assert np.ptp(corners[:, :2] @ u) <= W.OPEN_USE
    v = np.array([-u[1], u[0]])
    along = corners[:, :2] @ v - gxy @ v
    assert min(-along.min(), along.max()) >= W.PAD_IN - 1e-6


def test_a_clear_way_is_unchanged():
    """libero_object's first task, state 0: nothing tall stands on the way or beside the
    object, so the hand goes as before: no crossing height, the grasp at the centre."""
    name = suites.tasks("libero_object")[0]
    env = batch("libero_object", name, (0,))
    plan = PC.PandaPlanner(env)
    for _ in range(15):
        env.step(plan.act(env))
    p = plan.stages[0].plans[0]
    assert p.phase == 1 and p.pass_z == 0.0 and p.along == (0.0, 0.0)


def test_a_can_is_taken_at_its_centre_even_where_its_way_down_is_tight():
    """libero_10 "alphabet soup and cream cheese in the basket", state 3: the exact hand at
    the soup can's centre touches a neighbour, but a can is as wide every way: moved 5 mm
    and turned 20° (the first version), the fingers pushed it away (11 of the task's 50
    states lost). It keeps the centre and the narrowest direction, as before."""
    name = "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_basket"
    env = batch("libero_10", name, (3,))
    plan = PC.PandaPlanner(env)
    for _ in range(15):
        env.step(plan.act(env))
    p = plan.stages[0].plans[0]
    assert p.obj == "alphabet_soup_1" and p.phase == 1 and p.along == (0.0, 0.0)
