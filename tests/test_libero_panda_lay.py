"""`coda.libero.panda_lay` (an object too tall to stand in its drawer, laid down) and
`geoms.region_axes` (region sites LIBERO turns on end), on LIBERO-90's own initial states."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import panda_chain as PC
from coda.libero import panda_outline as PO
from coda.libero import panda_planner as PP
from coda.libero.geoms import region_axes
from coda.libero.panda_lay import PandaLayDown
from tests.panda_episodes import all_succeed, batch

pytestmark = pytest.mark.usefixtures("libero_data")

KETCHUP = "KITCHEN_SCENE5_put_the_ketchup_in_the_top_drawer_of_the_cabinet"


def _in_stages(env, b: int = 0) -> list:
    atoms, stages = PC.PandaPlanner(env).per_env[b]
    return [s for a, s in zip(atoms, stages, strict=True) if a[0] == "in_region"]


def test_the_ketchup_is_laid_down_in_the_drawer_and_the_goal_holds():
    """The 14.6 cm bottle, its origin 7.2 cm over its bottom, into a 6 cm tall drawer region:
    put in standing, its origin stays over the region (the goal false). From states 0 and 5
    (both failed before): placed at the drawer's far end, pushed over towards the near one,
    it lies with its origin inside the region and the goal holds within the step cap."""
    env = batch("libero_90", KETCHUP, (0, 5))
    planner = PC.PandaPlanner(env)
    stage = [[s for s in planner.per_env[b][1] if isinstance(s, PandaLayDown)] for b in (0, 1)]
    assert [len(s) for s in stage] == [1, 1]
    assert all_succeed(env, planner, "libero_90")
    assert all(stage[b][0].runs[b].phase >= 2 for b in (0, 1))  # by the push, not by chance
    m = env.model
    for d in env.datas:
        lo, _ = PO.world_box(d, m, PO.body_geoms(m, "ketchup_1"))
        assert d.body("ketchup_1").xpos[2] - lo[2] < 0.06  # standing, 7.2 cm


def test_the_laid_object_goes_to_the_far_end_and_is_pushed_along_the_drawer():
    """The placement's spot is moved along the drawer's width (perpendicular to its pull),
    away from the push's direction, and the push points away from the hand's start."""
    env = batch("libero_90", KETCHUP, (0,))
    d = env.datas[0]
    stage = next(s for s in _in_stages(env) if isinstance(s, PandaLayDown))
    place = stage.place
    assert abs(place.shift) > 0.03
    plan = place.plans[0]
    spot = place._in_drawer(env, d, plan)
    centre = d.site(plan.target).xpos[:2]
    assert float((spot - centre) @ stage.u[:2]) < -0.03  # the far end from the push
    assert abs(float(stage.u[2])) < 1e-9
    assert float(stage.u[:2] @ (centre - d.site_xpos[env.idx.site][:2])) > 0


@pytest.mark.parametrize(
    "task",
    [
        "KITCHEN_SCENE10_put_the_black_bowl_in_the_top_drawer_of_the_cabinet",
        "KITCHEN_SCENE4_put_the_wine_bottle_in_the_bottom_drawer_of_the_cabinet",
    ],
)
def test_objects_whose_origin_fits_the_drawer_are_not_laid(task):
    """A bowl (5 cm) and the wine bottle (15.7 cm, but its origin at its bottom) fit the
    region standing: a plain pick-and-place, its spot not moved."""
    env = batch("libero_90", task, (0,))
    stages = _in_stages(env)
    assert stages and all(type(s) is PP.PandaPickPlace and s.shift == 0.0 for s in stages)


def test_region_axes_reads_a_site_turned_on_end():
    """A cabinet drawer's region site has its x axis pointing down: half sizes
    (0.03, 0.076, 0.102) in its frame are 0.102 along world x and 0.076 along world y. The
    two horizontal axes come back as unit xy columns with those half extents."""
    env = batch("libero_90", KETCHUP, (0,))
    d, m = env.datas[0], env.model
    site = m.site("white_cabinet_1_top_region").id
    half = m.site_size[site]
    axes, reach = region_axes(d, site, half)
    np.testing.assert_allclose(np.abs(axes.T @ np.array([1.0, 0.0])), [0.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(sorted(reach), sorted([half[1], half[2]]), atol=1e-6)
    np.testing.assert_allclose(np.abs(axes.T @ axes), np.eye(2), atol=1e-6)
    flat = m.site("kitchen_table_ketchup_init_region").id  # an upright site: its x, y
    axes, reach = region_axes(d, flat, m.site_size[flat])
    np.testing.assert_allclose(reach, m.site_size[flat][:2], atol=1e-6)
    np.testing.assert_allclose(axes, d.site_xmat[flat].reshape(3, 3)[:2, :2], atol=1e-6)
