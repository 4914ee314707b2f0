"""`coda.libero.placement`: fixtures where LIBERO's seeded reset puts them, checked against the
reference environment's own placements (committed by benchmarks/libero_fixture_placement.py)."""

import json
import math
import os

import numpy as np
import pytest

from coda.libero import panda as PD
from coda.libero import placement as PL
from coda.libero import scene as S
from coda.libero import suites

RESULTS = os.path.join(
    os.path.dirname(__file__), "..", "benchmarks", "results", "libero_fixture_placement.json"
)


@pytest.fixture(scope="module")
def reference_rows(libero_data):
    with open(RESULTS) as f:
        return json.load(f)["rows"]


def test_replay_matches_the_reference_placements(reference_rows):
    """Every fixture of every traced task and seed, position and yaw, as LIBERO placed it."""
    tasks = {}
    for r in reference_rows:
        key = (r["suite"], r["task"])
        if key not in tasks:
            tasks[key] = S.load_task(*key)
        got = PL.fixture_placements(tasks[key], r["seed"], r["reset"])[r["fixture"]]
        np.testing.assert_allclose(got.pos, r["ref_pos"], atol=1e-6, err_msg=str(key))
        dyaw = (got.yaw - r["ref_yaw"] + math.pi) % (2 * math.pi) - math.pi
        assert abs(dyaw) < 1e-6, (key, r["fixture"], got.yaw, r["ref_yaw"])
        assert r["ref_tilt"] < 1e-9  # LIBERO's fixtures turn about z only, as the replay does
    assert len(tasks) >= 10


def test_seeds_move_fixtures_inside_their_regions(libero_data):
    task = S.load_task("libero_spatial", suites.tasks("libero_spatial")[0])
    a, b = PL.fixture_placements(task, 0), PL.fixture_placements(task, 1)
    assert set(a) == {n for n, c in task.fixtures}
    for name in a:
        assert a[name].pos != b[name].pos
        centre = S.fixture_pose(task, name, task.problem.category(name), True)
        x, y = a[name].pos[0] + S.ORIGIN_X - task.workspace.offset[0], a[name].pos[1]
        # the regions are 2 cm wide: within 1 cm (per axis) of the centre
        assert abs(x - centre["x"]) <= 0.01 + 1e-9 and abs(y - centre["y"]) <= 0.01 + 1e-9


def test_place_fixtures_moves_only_the_fixtures(libero_data):
    pt = PD.compile_panda_task("libero_goal", suites.tasks("libero_goal")[0])
    before = pt.model.body_pos.copy()
    placed = PL.place_fixtures(pt.model, pt.task, 7)
    np.testing.assert_array_equal(pt.model.body_pos, before)  # the cached model is untouched
    fixtures = PL.fixture_placements(pt.task, 7)
    moved = {placed.body(b).name for b in np.flatnonzero(np.any(placed.body_pos != before, 1))}
    assert moved and moved <= set(fixtures)
    for name, p in fixtures.items():
        b = placed.body(name).id
        np.testing.assert_allclose(
            PD.to_libero(placed.body_pos[b], pt.task.workspace), p.pos, atol=1e-6
        )
        w, z = placed.body_quat[b][[0, 3]]
        assert abs(2 * math.atan2(z, w) - p.yaw) % (2 * math.pi) < 1e-6


def test_rejection_retries_an_overlapping_object():
    """robosuite's overlap test: near in the plane and not above the other's top."""
    size = PL.Size(radius=0.03, top=0.04, bottom=-0.04)
    other = PL.Placed("a", (0.0, 0.0, 0.9), 0.0, size)
    assert not PL._valid(0.05, 0.0, 0.9, size, [other])  # 5 cm apart < 6 cm of radii
    assert PL._valid(0.07, 0.0, 0.9, size, [other])
    assert PL._valid(0.0, 0.0, 0.99, size, [other])  # above the other's top


def test_panda_env_and_evaluation_take_the_fixture_seed(libero_data, tmp_path):
    from coda.libero import evaluate_panda as EP
    from coda.libero import panda_env as E

    name = suites.tasks("libero_goal")[0]
    env = E.PandaEnv("libero_goal", name, n_envs=1, fixture_seed=7)
    want = PL.place_fixtures(env.pt.model, env.pt.task, 7)
    np.testing.assert_array_equal(env.model.body_pos, want.body_pos)
    assert E.PandaEnv("libero_goal", name, n_envs=1).model is env.pt.model  # -1: centres
    cfg = _panda_config(tmp_path)
    res = EP.evaluate(cfg, tmp_path)
    assert res["fixture_seed"] == 7 and res["episodes"] == 1


def _panda_config(tmp_path):
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "configs", "libero.py")
    spec = importlib.util.spec_from_file_location("_libero_cfg", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    c = mod.get_config()
    c.robot, c.policy, c.suite, c.tasks, c.init_states = "panda", "hold", "libero_goal", "0", 1
    c.panda.batch, c.panda.max_steps, c.panda.wait_steps, c.panda.fixture_seed = 1, 2, 0, 7
    c.gifs = 0
    return c


def test_reset_count_matters_only_with_articulated_states(libero_data):
    """LIBERO draws one joint value per articulated :init state per model load of the env, so
    the k-th reset's fixtures differ where a task has such states, and only there."""
    spatial = S.load_task("libero_spatial", suites.tasks("libero_spatial")[0])
    drawer = next(
        S.load_task("libero_10", n)
        for n in suites.tasks("libero_10")
        if PL.depends_on_reset(S.load_task("libero_10", n))
    )
    assert not PL.depends_on_reset(spatial)
    assert PL.fixture_placements(spatial, 7, 1) == PL.fixture_placements(spatial, 7, 3)
    assert PL.fixture_placements(drawer, 7, 1) != PL.fixture_placements(drawer, 7, 2)
    with pytest.raises(ValueError, match="the first reset of an env is 1"):
        PL.fixture_placements(drawer, 7, 0)


CHAIN = os.path.join(
    os.path.dirname(__file__), "..", "benchmarks", "results", "libero_fixture_chain.json"
)


def test_chained_replay_matches_the_reference_episodes(libero_data):
    """openpi's protocol (env.seed once per task, one reset per episode): every fixture of every
    traced task and episode as LIBERO placed it (benchmarks/libero_fixture_chain.py)."""
    with open(CHAIN) as f:
        res = json.load(f)
    assert all(r["same_draws"] for r in res["episodes"])
    tasks, later = {}, 0
    for r in res["rows"]:
        key = (r["suite"], r["task"])
        if key not in tasks:
            tasks[key] = S.load_task(*key)
        got = PL.fixture_placements(tasks[key], r["seed"], r["reset"], chained=True)
        np.testing.assert_allclose(got[r["fixture"]].pos, r["ref_pos"], atol=1e-6, err_msg=str(key))
        dyaw = (got[r["fixture"]].yaw - r["ref_yaw"] + math.pi) % (2 * math.pi) - math.pi
        assert abs(dyaw) < 1e-6, (key, r["fixture"])
        later += r["reset"] > 1 and r["unchained_err_m"] > 1e-3
    assert len(tasks) >= 80 and later > 100  # later episodes' fixtures do move


def test_chained_first_reset_is_the_seeded_one(libero_data):
    for suite in ("libero_goal", "libero_10"):
        for name in suites.tasks(suite):
            task = S.load_task(suite, name)
            assert PL.fixture_placements(task, 7, 1, chained=True) == PL.fixture_placements(
                task, 7, 1
            )
            assert PL.fixture_placements(task, 7, 2, chained=True) != PL.fixture_placements(
                task, 7, 2
            ) or not PL.fixture_placements(task, 7)


def test_evaluation_chains_fixtures_per_initial_state(libero_data, tmp_path):
    """fixture_chain: initial state s runs alone, with the (s + 1)-th reset's placement."""
    from coda.libero import evaluate_panda as EP

    cfg = _panda_config(tmp_path)
    cfg.panda.fixture_chain, cfg.init_states, cfg.init_offset, cfg.panda.batch = True, 2, 3, 10
    units = EP.task_units(cfg, 0, suites.tasks("libero_goal")[0], "libero_goal", [3, 4])
    assert [(u.indices, u.size) for u in units] == [((3,), 1), ((4,), 1)]
    env = EP._env(cfg, units[1])
    want = PL.place_fixtures(env.pt.model, env.pt.task, 7, 5, chained=True)
    np.testing.assert_array_equal(env.model.body_pos, want.body_pos)
    res = EP.evaluate(cfg, tmp_path)
    assert res["fixture_chain"] and [e["init"] for e in res["per_episode"]] == [3, 4]
