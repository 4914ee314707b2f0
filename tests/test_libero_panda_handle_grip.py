"""A solid object taken by its handle (a moka pot) is gripped near its body
(`panda_outline.handle_grip`), so its weight's lever about the pads' closing axis is short; on
libero_10's "put both moka pots on the stove", LIBERO's states 7 and 11, where the pot taken at
its handle's middle pivoted about 30 degrees in the pads as it was lifted. And a coarsely
modelled mug's handle is found (`panda_outline.HANDLE_GEOMS`)."""

import numpy as np
import pytest

from coda.libero import panda_chain as PC
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero import suites
from tests.panda_episodes import all_succeed, batch

pytestmark = pytest.mark.usefixtures("libero_data")
TASK = suites.tasks("libero_10")[8]
LIFT_STEPS = 80  # the first pot is grasped by step ~50 and carried by ~70
UPRIGHT = 10.0  # degrees: the pot's axis from the vertical while carried (it was ~30)


@pytest.fixture(scope="module")
def env():
    return batch("libero_10", TASK, [7, 11])


def _first_pot(planner, b: int):
    stage = next(s for s in planner.per_env[b][1] if isinstance(s, PP.PandaPickPlace))
    return stage, stage.geoms[stage.plans[b].obj]


def test_the_grip_is_near_the_body_with_both_pads_on_the_handle(env):
    planner = PC.PandaPlanner(env)
    for b, d in enumerate(env.datas):
        stage, geoms = _first_pot(planner, b)
        part, _, solid = PO.handle_of(d, env.model, geoms, stage._yaw(d))
        assert solid
        lo, hi = PO.world_box(d, env.model, part)
        mid = (lo[:2] + hi[:2]) / 2
        grip = PO.handle_grip(d, env.model, geoms, part)
        body = int(env.model.geom_bodyid[geoms[0]])
        axis = d.xipos[body][:2]  # the pot's mass, in the plane
        u = (grip - mid) / np.linalg.norm(grip - mid)
        # towards the body, by more than a centimetre
        assert np.linalg.norm(axis - grip) < np.linalg.norm(axis - mid) - 0.01
        assert u @ (axis - mid) > 0.9 * np.linalg.norm(axis - mid)
        # the pads' edge inside the handle's inner end, by `PAD_INSET`
        inner = float(((PO.geom_corners(d, env.model, part)[:, :2] - mid) @ u).max())
        edge = float((grip - mid) @ u) + PO.PAD_HALF
        np.testing.assert_allclose(inner - edge, PO.PAD_INSET, atol=1e-6)


def test_a_lone_handle_at_the_core_is_gripped_at_its_centre(env):
    """A handle whose centre is the core's (no direction to move) is taken at its centre."""
    d, m = env.datas[0], env.model
    planner = PC.PandaPlanner(env)
    _, geoms = _first_pot(planner, 0)
    one = geoms[:1]
    lo, hi = PO.world_box(d, m, one)
    np.testing.assert_allclose(PO.handle_grip(d, m, one, one), (lo[:2] + hi[:2]) / 2, atol=1e-9)


def test_the_pot_stays_upright_as_it_is_lifted_by_its_handle():
    env = batch("libero_10", TASK, [7, 11])
    planner = PC.PandaPlanner(env)
    for _ in range(LIFT_STEPS):
        env.step(planner.act(env))
    for b, d in enumerate(env.datas):
        _, geoms = _first_pot(planner, b)
        body = int(env.model.geom_bodyid[geoms[0]])
        tilt = np.degrees(np.arccos(np.clip(d.xmat[body].reshape(3, 3)[2, 2], -1.0, 1.0)))
        assert d.xipos[body][2] > 0.15  # lifted off the table (its mass was at 0.07)
        assert tilt < UPRIGHT


def test_a_coarsely_modelled_mug_has_its_handle_found():
    """The red coffee mug is 11 geoms, its handle 3 of them: more than the 15 % share a hollow
    object's handle may have (a tilted bowl's raised side is 9 of 40), within `HANDLE_GEOMS`.
    Its handle is found, off the body on one side, so its rim grasp keeps to the body's walls."""
    env = batch("libero_90", suites.tasks("libero_90")[65], [11])
    d, m = env.datas[0], env.model
    mug = PO.body_geoms(m, "red_coffee_mug_1")
    assert len(mug) * PO.HOLLOW_HANDLE_SHARE < PO.HANDLE_GEOMS
    part, _, solid = PO.handle_of(d, m, mug, 0.0)
    assert not solid and 0 < len(part) <= PO.HANDLE_GEOMS
    lo, hi = PO.world_box(d, m, part)
    body_lo, body_hi = PO.world_box(d, m, np.setdiff1d(mug, part))
    centre = (body_lo[:2] + body_hi[:2]) / 2
    assert np.linalg.norm((lo[:2] + hi[:2]) / 2 - centre) > 0.03  # out to one side


@pytest.mark.parametrize(
    "k, mug", [(65, "red_coffee_mug_1"), (68, "white_yellow_mug_1"), (67, "porcelain_mug_1")]
)
def test_a_mug_without_its_handle_is_round(k, mug):
    """Every handle piece is in the handle (`HOLLOW_HANDLE_REACH`): what is left, the body the
    rim grasp's sides are read from, is as wide as it is deep (a piece left behind made the
    red and the yellow-and-white mugs' outline 2-3 cm longer towards the handle, and a rim
    grasp took that piece for the wall)."""
    env = batch("libero_90", suites.tasks("libero_90")[k], [5])
    d, m = env.datas[0], env.model
    geoms = PO.body_geoms(m, mug)
    part, _, solid = PO.handle_of(d, m, geoms, 0.0)
    assert not solid
    lo, hi = PO.world_box(d, m, np.setdiff1d(geoms, part))
    width, depth = sorted((hi - lo)[:2])
    assert depth - width < 0.008


@pytest.mark.slow
def test_the_red_mug_is_placed_from_states_it_was_knocked_over_in():
    """LIBERO-90 "put the red mug on the left plate", states 10 and 11: the rim grasp on the
    handle's side knocked the mug over while the handle was not recognised."""
    env = batch("libero_90", suites.tasks("libero_90")[65], [10, 11])
    assert all_succeed(env, PC.PandaPlanner(env), "libero_90")
