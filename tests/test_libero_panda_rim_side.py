"""A rim grasp's side is checked against each geom of a fixture, not one box round the whole
fixture (`PandaPickPlace._outlines`): on LIBERO-90's "put the yellow and white mug to the front
of the white mug" (kitchen 6), the microwave's open door stands beside the mug, and one box round
the microwave blocked every side, so the fallback side put the outer finger on the door's top
edge, where the hand sat for the whole approach (LIBERO's state 11)."""

import numpy as np
import pytest

from coda.libero import panda_chain as PC
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero import suites
from tests.panda_episodes import all_succeed, batch

pytestmark = pytest.mark.usefixtures("libero_data")
TASK = suites.tasks("libero_90")[34]


@pytest.fixture(scope="module")
def env():
    return batch("libero_90", TASK, [11])


def _stage(planner) -> PP.PandaPickPlace:
    return next(s for s in planner.stages if isinstance(s, PP.PandaPickPlace))


def test_fixtures_are_outlined_geom_by_geom_and_objects_whole(env):
    stage = _stage(PC.PandaPlanner(env))
    m = env.model
    sizes = {m.body(m.geom_bodyid[g[0]]).name.split("/")[0]: len(g) for g in stage._outlines}
    assert sizes["porcelain_mug_1"] > 1  # the other mug: one box round all its geoms
    microwave = PO.body_geoms(m, "microwave_1")
    assert len(microwave) > 1
    outlined = np.concatenate([g for g in stage._outlines if len(g) == 1])
    assert set(microwave.tolist()) <= set(outlined.tolist())  # the microwave: one box per geom
    assert not set(stage.geoms[stage.plans[0].obj].tolist()) & set(
        np.concatenate(stage._outlines).tolist()
    )  # never the object itself


def test_the_side_under_the_open_door_is_refused_and_another_is_taken(env):
    stage = _stage(PC.PandaPlanner(env))
    d, plan = env.datas[0], stage.plans[0]
    plan.home_xy = d.site_xpos[env.idx.site][:2].copy()
    stage._grasp(env, d, plan)
    geoms = stage.geoms[plan.obj]
    handle, _, _ = PO.handle_of(d, env.model, geoms, stage._yaw(d))
    body = PO.geom_corners(d, env.model, np.setdiff1d(geoms, handle))
    z = body[:, 2].max() - PP.RIM_BELOW_TOP
    xy, want, rim = PO.grasp_of(body, stage._yaw(d), 0)  # the wall towards the robot
    assert rim and not stage._hand_clear(env, d, xy, want, z)  # its outer finger: the door
    assert plan.side != 0
    xy, want, _ = PO.grasp_of(body, stage._yaw(d), plan.side)
    own = [np.array([g]) for g in handle]
    assert stage._hand_clear(env, d, xy, want, z, outer=own)


@pytest.mark.slow
def test_the_mug_beside_the_open_door_is_placed():
    env = batch("libero_90", TASK, [11])
    assert all_succeed(env, PC.PandaPlanner(env), "libero_90")


def test_hinged_fixture_parts_count_as_pushed_on_the_way_across(env):
    """Of the scene's fixtures, the open door turns on a hinge (the table does not)."""
    m = env.model
    fixtures = [PO.body_geoms(m, n) for n, _ in env.pt.task.problem.fixtures]
    swinging = PO.swinging_geoms(m, np.concatenate(fixtures))
    names = {m.body(m.geom_bodyid[g]).name for g in swinging}
    assert names == {"microwave_1/microdoorroot"}
    stage = _stage(PC.PandaPlanner(env))
    assert set(swinging.tolist()) <= set(stage._pushed.tolist())
    assert set(stage._movable.tolist()) <= set(stage._pushed.tolist())


@pytest.mark.slow
def test_the_way_to_the_mugs_far_side_passes_over_the_open_door():
    """States 24 and 39: the hand crossed under the door's top edge and swung it into the mug."""
    env = batch("libero_90", TASK, [24, 39])
    assert all_succeed(env, PC.PandaPlanner(env), "libero_90")
