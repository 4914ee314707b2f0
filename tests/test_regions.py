"""Declared hard regions (`sim.hard_regions`, coda.sim.regions): the focused experiment's
setting. The text parses or fails in one line; the pool and round 0's demos are nominal, the
ood_hard suite lies inside the regions, and the arms' resamples land where they say."""

from __future__ import annotations

import importlib.util
import os
import types

import numpy as np
import pytest

from coda import runconfig
from coda.loop.allocators import PoolResample
from coda.loop.sources import FamilySource
from coda.sim.regions import RegionError, accept_for, factor_of, parse_regions, which
from coda.sim.sdk import exec_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"cfg_{name}", f"{ROOT}/configs/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FOCUSED = _load("focused")
REGIONS = parse_regions(FOCUSED.HARD_REGIONS)


def _scene(seed: int, k: int = 0):
    return exec_program(FOCUSED.PROGRAMS[k], seed, "train", isolation="inprocess")


def test_region_text_parses_into_clauses_of_one_factor():
    (r,) = parse_regions(("object.y > 0.15 & destination.x <= 0.5",))
    assert r.factor == "layout" and [c.key for c in r.clauses] == ["y", "x"]
    assert [r.factor for r in REGIONS] == ["layout", "layout", "attributes"]
    assert factor_of(REGIONS, "hard:2") == "attributes" and factor_of(REGIONS, "nominal") is None


@pytest.mark.parametrize(
    "bad, why",
    [
        ("", "is not a region"),
        ("object.y >> 0.1", "is not '<role>.<key>"),
        ("object.colour > 1", "unknown key 'colour'"),
        ("object.y > 0.1 & object.mass > 0.2", "mixes layout and attribute"),
        ("__import__('os').system('x')", "is not '<role>.<key>"),
        ("object.y > 1e", "is not a number"),
    ],
)
def test_hostile_or_malformed_region_text_is_one_line_naming_the_form(bad, why):
    with pytest.raises(RegionError, match=why) as e:
        parse_regions((bad,))
    assert "\n" not in str(e.value)
    with pytest.raises(RegionError, match="must be a tuple"):
        parse_regions("object.y > 0.1")


def test_membership_reads_the_scene_and_a_missing_role_is_outside():
    rng = np.random.default_rng(0)
    for _ in range(40):
        s = _scene(int(rng.integers(2**31)))
        y = s.layout[s.task["roles"]["target"]]["y"]
        assert (s in REGIONS[0]) == (y > 0.15)
        i = which(REGIONS, s)
        assert accept_for(REGIONS, "nominal")(s) == (i < 0)
        assert i < 0 or accept_for(REGIONS, f"hard:{i}")(s)
    (ghost,) = parse_regions(("drawer.x > 0",))
    assert s not in ghost
    with pytest.raises(ValueError, match="valid '', 'nominal', 'hard:<i>' with i < 3"):
        accept_for(REGIONS, "hard:3")


def _focused_config(episodes: int = 12):
    c = FOCUSED.get_config("smoke").study.base
    c.sim.seeds_per_program = 6
    c.loop.demo_seeds = 3
    c.eval.episodes = episodes
    return c


@pytest.fixture(scope="module")
def source_and_pool():
    src = FamilySource(_focused_config())
    pool, _, _, _ = src.seed_pool()
    return src, pool


def test_pool_and_demos_are_nominal_and_ood_hard_is_inside_each_region(source_and_pool):
    src, pool = source_and_pool
    assert len(pool) == 12 and all(which(REGIONS, c.scene) < 0 for c in pool)
    demos = src.demo_scenes(pool)
    assert demos and all(which(REGIONS, c.scene) < 0 for c in demos)
    suites = src.build_suites(pool, [])
    assert list(suites) == ["id", "ood_layouts", "ood_hard"]  # eval.suites' order
    hard = suites["ood_hard"]
    taken = {int(c.scene.seed) for c in pool}
    assert len(hard.programs) == 12 and not taken & set(hard.seeds)
    scenes = [exec_program(p, s, "train") for p, s in zip(hard.programs, hard.seeds, strict=True)]
    # a third in each region, in turn (regions may overlap: a scene can be in two)
    assert all(s in REGIONS[k % 3] for k, s in enumerate(scenes))
    assert set(hard.programs) == set(FOCUSED.PROGRAMS)


def test_no_regions_leaves_the_pool_as_it_was():
    c = _focused_config()
    c.sim.hard_regions = ()
    c.eval.suites = ("id", "ood_layouts")
    pool, *_ = FamilySource(c).seed_pool()
    rng = np.random.default_rng(c.seed)  # one draw per pool scene, as before regions existed
    want = [int(rng.integers(2**31)) for _ in range(len(pool))]
    assert [int(p.scene.seed) for p in pool] == want


def test_resamples_land_where_the_arm_says(source_and_pool):
    src, pool = source_and_pool
    rng = np.random.default_rng(1)
    for where in ("nominal", "hard:0", "hard:1", "hard:2"):
        tried, made = src.resample(pool[0], ("layout", "attributes"), 4, rng, where)
        assert tried == 4 and len(made) >= 3  # verification may reject one
        assert all(accept_for(REGIONS, where)(c.scene) for c, _ in made)
        if where.startswith("hard"):
            assert {f for _, f in made} == {REGIONS[int(where[5:])].factor}


def test_oracle_splits_the_budget_evenly_over_the_regions_and_nominal_stays_outside():
    cfg = _focused_config()
    cfg.loop.budget = 10
    pool = [types.SimpleNamespace(scene=types.SimpleNamespace(program=p)) for p in "ab"]
    svc = types.SimpleNamespace(config=cfg, pool=pool)
    plan = PoolResample(where="hard").plan(svc, None, 1)
    assert plan.record == {"hard0": 4, "hard1": 3, "hard2": 3}
    assert sum(n for _, _, n in plan.requests) == 10 and len(plan.where) == len(plan.requests)
    assert sorted(set(plan.where)) == ["hard:0", "hard:1", "hard:2"]
    plan = PoolResample(where="nominal").plan(svc, None, 1)
    assert set(plan.where) == {"nominal"} and sum(n for _, _, n in plan.requests) == 10


def test_runconfig_refuses_regions_that_are_bad_missing_or_misplaced():
    cfg = _focused_config()
    runconfig.validate(cfg)
    cfg.sim.hard_regions = ("object.y >> 1",)
    assert any("is not '<role>.<key>" in p for p in runconfig.problems(cfg))
    cfg.sim.hard_regions = ()
    assert any("ood_hard but sim.hard_regions is empty" in p for p in runconfig.problems(cfg))
    cfg.eval.suites = ("id", "ood_layouts")
    cfg.strategy = "oracle_regions"
    assert any("'oracle_regions' resamples inside" in p for p in runconfig.problems(cfg))
    cfg.strategy = "coda"
    cfg.sim.hard_regions = FOCUSED.HARD_REGIONS
    cfg.sim.source = "libero:libero_spatial"
    assert any("apply to sim.source=families" in p for p in runconfig.problems(cfg))


def test_focused_study_config_loads_and_every_cell_validates():
    from coda import study
    from coda.sim import tasks

    for arg in (None, "v2", "v3", "v4", "smoke"):
        c = FOCUSED.get_config(arg)
        study.check_study(c)
        cells = study.cells(c)
        assert cells[: len(c.study.strategies)] == [(s, 0) for s in c.study.strategies]
        for strategy, seed in cells:
            runconfig.validate(study.cell_config(c, strategy, seed), families=tasks.FAMILIES)
    c = FOCUSED.get_config()
    assert len(cells) == 2 and c.study.seeds == (0, 1, 2, 3, 4)
    assert set(c.study.strategies) == {
        "coda", "domain_randomization", "nominal_only", "oracle_regions"
    }  # fmt: skip
    v2 = FOCUSED.get_config("v2").study.base.loop
    assert (v2.rounds, v2.select_min_auc) == (4, pytest.approx(0.55, abs=1e-9))
    assert FOCUSED.get_config("v3").study.base.loop.advantage == "success"
    v4 = FOCUSED.get_config("v4")  # v3's loop, the arms learning from their scenes' demos
    assert v4.study.base.to_dict() == FOCUSED.get_config("v3").study.base.to_dict()
    assert v4.study.strategies == tuple(f"{a}_demos" for a in FOCUSED.ARMS)
    with pytest.raises(ValueError, match="valid: '', 'v2', 'v3', 'v4', 'smoke'"):
        FOCUSED.get_config("big")
