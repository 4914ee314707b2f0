"""Φ for LIBERO goals (`coda.libero.potential`): the goal's roles in the symbol table, the
offline templates at every repair level, and the checks the loop applies on planner demos."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from coda.engine.kinds import kind_of
from coda.libero import scene as S
from coda.libero.planner import planner_for
from coda.potentials import compile_program, library
from coda.potentials.checks import Demos, check_program, episode_ends
from coda.sim import geometry as G
from coda.sim.rollout import Bucket
from coda.sim.state import SimState

pytestmark = pytest.mark.usefixtures("libero_data")

GOAL = "libero_goal"
BOWL_ON_PLATE = "put_the_bowl_on_the_plate"
DRAWER_IN = "open_the_top_drawer_and_put_the_bowl_inside"
STOVE_ON = "turn_on_the_stove"
BOWL_ON_STOVE = "put_the_bowl_on_the_stove"


def _goal_roles(c) -> dict:
    sym = c.sym
    pick = lambda rows: {k: v for k, v in rows if k.startswith("goal")}  # noqa: E731
    return {"bodies": pick(sym.bodies), "joints": pick(sym.joints), "sites": pick(sym.sites)}


def test_goal_roles_name_what_each_atom_asks():
    c = S.compile_task(GOAL, BOWL_ON_PLATE, 0)
    (a,) = c.success.keywords["atoms"]
    assert _goal_roles(c)["bodies"] == {"goal0.object": a[1], "goal0.support": a[3]}
    c = S.compile_task(GOAL, BOWL_ON_STOVE, 0)
    roles = _goal_roles(c)
    assert set(roles["sites"]) == {"goal0.on_region"} and set(roles["bodies"]) == {"goal0.object"}
    # "open the drawer and put the bowl inside" states only In: the drawer's Open comes first
    roles = _goal_roles(S.compile_task(GOAL, DRAWER_IN, 0))
    assert set(roles["joints"]) == {"goal0.open:cabinet_drawer"}
    assert set(roles["bodies"]) == {"goal0.part", "goal1.object"}
    assert set(roles["sites"]) == {"goal1.in_region"}
    assert set(_goal_roles(S.compile_task(GOAL, STOVE_ON, 0))["joints"]) == {
        "goal0.turnon:stove_knob"
    }


def test_site_helpers_follow_the_body_they_sit_on():
    c = S.compile_task(GOAL, DRAWER_IN, 0)
    site = c.sym.site("goal1.in_region")
    body = site[0]
    n = len(c.layout.body_names)
    q = np.tile(np.array([1.0, 0, 0, 0], np.float32), (1, n, 1))
    p = np.zeros((1, n, 3), np.float32)
    p[0, body] = (0.1, -0.2, 0.3)
    st = _state(p, q, n)
    np.testing.assert_allclose(
        np.asarray(G.site_pos(st, site))[0],
        np.array([0.1, -0.2, 0.3]) + np.asarray(site[1]),
        atol=1e-6,
    )
    inside = np.asarray(G.site_local(st, G.site_pos(st, site), site))
    np.testing.assert_allclose(inside, 0.0, atol=1e-6)
    ext = np.sort(np.asarray(G.site_extent(st, site))[0])
    np.testing.assert_allclose(ext, np.sort(np.asarray(site[3])), atol=1e-6)


def _state(p, q, n):
    z = np.zeros
    return SimState(
        ee_pos=z((1, 3), np.float32),
        ee_quat=np.array([[1.0, 0, 0, 0]], np.float32),
        finger=z((1, 2), np.float32),
        body_pos=p,
        body_quat=q,
        joint_pos=z((1, 4), np.float32),
        contact=z((1, n + 3, n + 3), np.float32),
        body_half=z((1, n, 3), np.float32),
        inner=z((1, n, 4), np.float32),
        joint_range=z((1, 4, 2), np.float32),
    )


@pytest.mark.parametrize("task", [BOWL_ON_PLATE, BOWL_ON_STOVE, DRAWER_IN, STOVE_ON])
def test_every_repair_level_compiles_for_the_task_s_symbols(task):
    c = S.compile_task(GOAL, task, 0)
    assert kind_of("libero").has_potential(c.scene.task)
    stages = []
    for level in range(library.REPAIR_LEVELS):
        pot = compile_program(library.subgoal_program(c.scene.task, level=level), c.sym)
        stages.append(pot.num_stages)
    assert stages[0] > stages[1] >= 1 and stages[2] == 1
    # a program for one goal shape does not compile for another's symbols
    other = S.compile_task(GOAL, STOVE_ON if task != STOVE_ON else BOWL_ON_PLATE, 0)
    with pytest.raises(Exception, match="role"):
        compile_program(library.subgoal_program(c.scene.task, level=0), other.sym)


def test_diagnosed_phase_maps_to_its_atom_s_stage():
    task = S.compile_task(GOAL, DRAWER_IN, 0).scene.task
    tpl = kind_of("libero").potential_template(task)
    # the critic's phases are the goal's own atom (the In), not the implicit Open before it
    assert tpl.phase_to_subgoal["grasp"] == "grasp_2" and tpl.levels[0][:2] == ("reach", "move")
    src = library.subgoal_program(task, phase="grasp", level=0)
    assert src.count('"reeval"') == 3  # reach, move, reach_2 already work


def test_planner_demo_passes_the_loop_s_checks(native_backend):
    """The level-0 program on the planner's demo of a compound goal (drawer, then bowl):
    Φ rises to success, completes wherever ν holds, and the loop's checks accept it."""
    vs = [S.compile_task(GOAL, DRAWER_IN, 0)]
    bucket = Bucket(vs)
    res = native_backend.rollout(bucket, planner_for(vs[0], 10), None, jax.random.PRNGKey(0), 24)
    demos = Demos.from_rollout(res, bucket, until_success=True)
    assert demos.success.all()
    pot = compile_program(library.subgoal_program(vs[0].scene.task, level=0), bucket.sym)
    rep = check_program(pot, demos.states, demos.success, demos.nu, until_success=True)
    assert rep.ok, rep.to_dict()
    assert rep.metrics["completion_rate"] == 1.0 and rep.metrics["rank_corr_mean"] >= 0.8
    # the whole rollout (success held to the cap) is what the flag exists for
    full = check_program(pot, demos.states, demos.success, demos.nu)
    ends = episode_ends(demos.nu)
    assert (
        ends[0] < demos.nu.shape[1]
        and full.metrics["rank_corr_mean"] < rep.metrics["rank_corr_mean"]
    )
