"""`coda.libero.panda_lean`: a bowl's rim taken leaning, under the drawer pulled open over it
(libero_goal's own initial states)."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda as PD
from coda.libero import panda_chain as PC
from coda.libero import panda_lean as PL
from coda.libero import panda_planner as PP
from coda.libero import panda_reach as PR
from coda.libero import suites
from coda.libero.panda_outline import geom_corners, grasp_of
from tests.panda_episodes import batch

pytestmark = pytest.mark.usefixtures("libero_data")

DRAWER_BOWL = "open_the_top_drawer_and_put_the_bowl_inside"
BOWL_PLATE = "put_the_bowl_on_the_plate"
BOWL_DRAWER_K5 = "KITCHEN_SCENE5_put_the_black_bowl_in_the_top_drawer_of_the_cabinet"
BOWL_PLATE_K5 = "KITCHEN_SCENE5_put_the_black_bowl_on_the_plate"


def _touches(env, d, ours: tuple, prefix: str) -> bool:
    """Whether a geom of a body named with one of `ours` touches a body whose name starts with
    `prefix`."""
    m = env.model
    for c in d.contact[: d.ncon]:
        names = [m.body(int(m.geom_bodyid[g])).name for g in (c.geom1, c.geom2)]
        mine = [n.startswith(ours) for n in names]
        if any(mine) and not all(mine) and names[mine.index(False)].startswith(prefix):
            return True
    return False


def test_the_bowl_under_the_open_drawer_is_taken_leaning_without_touching_the_drawer():
    """libero_goal "open the top drawer and put the bowl inside", state 3: the pulled drawer
    overhangs the bowl. Before, the hand came straight down onto the open drawer (contact from
    step ~190 on), joint 6 ran to its limit and the bowl was taken too late (300 steps, a
    failure). Now the straight descent is found blocked, the hand leans (rolled about its
    closing axis) and comes in along its pointing: the gripper touches no part of the cabinet
    from the bowl stage's start until the fingers close, the wrist's joint stays inside its
    range and the episode succeeds within the suite's cap."""
    env = batch("libero_goal", DRAWER_BOWL, (3,))
    plan = PC.PandaPlanner(env)
    pick = plan.stages[1]
    assert isinstance(pick, PP.PandaPickPlace)
    m, d = env.model, env.datas[0]
    j7 = m.joint(PD.ARM_JOINTS[-1]).id
    lo, hi = (float(v) for v in m.jnt_range[j7])
    touched, done, q7 = False, False, []
    for _ in range(suites.step_cap("libero_goal")):
        p = pick.plans[0]
        if plan.chains[0].k == 1 and not plan.chains[0].transit and 1 <= p.phase <= 3:
            touched |= _touches(env, d, (PD.GRIPPER_PREFIX,), "wooden_cabinet_1")
            q7.append(float(d.qpos[m.jnt_qposadr[j7]]))
        done = bool(env.step(plan.act(env))[1][0])
        if done:
            break
    lean = pick.plans[0].lean
    assert lean is not None and lean.approach[2] < -0.7  # leaning, still pointing down-ish
    tilt = np.degrees(np.arccos(-lean.approach[2]))
    assert 10.0 < tilt < 45.0
    assert not touched
    assert lo + 0.1 < min(q7) and max(q7) < hi - 0.1
    assert done


def test_a_bowl_with_a_clear_way_down_is_taken_straight():
    """libero_goal "put the bowl on the plate", state 0: nothing overhangs the bowl, so the
    hand comes straight down (no lean, no shift beside), as before `panda_lean`."""
    env = batch("libero_goal", BOWL_PLATE, (0,))
    plan = PC.PandaPlanner(env)
    pick = plan.stages[0]
    for _ in range(40):  # past the settle into the way down (phase 2)
        env.step(plan.act(env))
    p = pick.plans[0]
    assert p.phase >= 2 and p.lean is None and p.beside is not None and not p.beside.any()


def test_the_forearm_and_the_reach_choose_the_leaning_side():
    """Kitchen 5 "put the black bowl in the top drawer", state 0 (the drawer stands open beside
    the bowl): coming straight down, the forearm (link 5) met the open drawer and the hand
    stopped over the rim. With the forearm in the clearance test the hand leans; the first
    rim side with a way whose start the wrist reaches (a far rim's start had stretched the
    elbow onto its limit) is taken. No arm link or gripper part touches the cabinet from the
    stage's start until the fingers close, and the episode succeeds."""
    env = batch("libero_90", BOWL_DRAWER_K5, (0,))
    plan = PC.PandaPlanner(env)
    pick = next(s for s in plan.stages if isinstance(s, PP.PandaPickPlace))
    m, d = env.model, env.datas[0]
    elbow = m.jnt_qposadr[m.joint(PD.ARM_JOINTS[PR.ELBOW]).id]
    touched, done, bent = False, False, []
    for _ in range(suites.step_cap("libero_90")):
        if 1 <= pick.plans[0].phase <= 3:
            touched |= _touches(env, d, ("robot0_", PD.GRIPPER_PREFIX), "white_cabinet_1")
            bent.append(float(d.qpos[elbow]))
        done = bool(env.step(plan.act(env))[1][0])
        if done:
            break
    assert pick.plans[0].lean is not None
    assert max(bent) < PR.ELBOW_TRAPPED  # never past its peak reach
    assert not touched and done


def test_a_leaning_grasp_that_missed_is_not_chased():
    """Kitchen 5 "put the black bowl on the plate", state 31: the first leaning grasp closes
    on nothing (the forearm met the open drawer's side on the way in). Righting the hand
    while carrying re-read the held object's offset from the hand every step; with nothing
    held that offset grew with the hand's move, and the hand chased the bowl's place off the
    table (x -0.57, behind the robot's base) until joint 6 reached its limit. The offset is
    now re-read only while the object rises with the hand: the hand goes to the plate, the
    stage ends with its atom false, and the second try succeeds within the cap."""
    env = batch("libero_90", BOWL_PLATE_K5, (31,))
    plan = PC.PandaPlanner(env)
    d = env.datas[0]
    lowest_x, done = np.inf, False
    for _ in range(suites.step_cap("libero_90")):
        lowest_x = min(lowest_x, float(d.site_xpos[env.idx.site][0]))
        done = bool(env.step(plan.act(env))[1][0])
        if done:
            break
    assert lowest_x > 0.1 and done


ON_CABINET = "pick_up_the_black_bowl_on_the_wooden_cabinet_and_place_it_on_the_plate"


def test_rim_order_puts_the_sides_out_of_reach_last():
    """`rim_order` sorts by the distance from the hand's start; a side whose reach exceeds
    `WRIST_REACH` goes after every side within it, the rest keeping their order."""
    env = batch("libero_spatial", ON_CABINET, (28,))
    m, d = env.model, env.datas[0]
    corners = geom_corners(d, m, PP.body_geoms(m, "akita_black_bowl_1"))
    home = d.site_xpos[env.idx.site][:2]
    plain = PL.rim_order(corners, 0.0, home)
    first = grasp_of(corners, 0.0, plain[0])[0]
    far = PL.rim_order(
        corners, 0.0, home, lambda xy: 1.0 if np.allclose(xy, first, atol=1e-6) else 0.5
    )
    assert far == plain[1:] + plain[:1]
    assert PL.rim_order(corners, 0.0, home, lambda xy: 0.5) == plain


def test_the_bowl_on_the_cabinet_is_taken_at_a_side_the_arm_reaches():
    """libero_spatial's bowl on the wooden cabinet, states 28 and 37: the rim side nearest the
    hand's start needs the wrist ~0.695 m from the shoulder; there the elbow reached its peak
    2 cm over the rim, the fingers closed on air and both failed. The side taken now needs at
    most `WRIST_REACH`, and both succeed (state 0, whose nearest side is within reach, keeps
    it)."""
    env = batch("libero_spatial", ON_CABINET, (28, 37, 0))
    planner = PC.PandaPlanner(env)
    m = env.model
    need = []  # each environment's reach per rim side, at its start
    for d in env.datas:
        corners = geom_corners(d, m, PP.body_geoms(m, "akita_black_bowl_1"))
        z = float(corners[:, 2].max()) - PP.RIM_BELOW_TOP
        wrist = PL.Reach(env, d)
        rims = [grasp_of(corners, 0.0, i)[0] for i in range(len(PL.RIM_SIDES))]
        need.append([wrist.need(np.r_[xy, z], np.eye(3)) for xy in rims])
    done = np.zeros(env.n_envs, bool)
    for _ in range(suites.step_cap("libero_spatial")):
        done |= env.step(planner.act(env))[1]
        if done.all():
            break
    sides = [planner.per_env[b][1][0].plans[b].side for b in range(env.n_envs)]
    assert all(need[b][sides[b]] <= PL.WRIST_REACH for b in range(env.n_envs)), sides
    assert done.all()
