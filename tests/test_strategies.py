"""Strategy registry: every entry is selected by `configs/coda.py` + `strategy`, validates, and
plans its round budget (cheap); each one runs a one-round smoke loop end to end (slow)."""

import dataclasses
import importlib.util
import os
import types

import numpy as np
import pytest

from coda import runconfig
from coda.loop.strategies import STRATEGIES, get_strategy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = list(STRATEGIES)


def _config(name, arg="smoke"):
    """`configs/coda.py:<arg>` with `strategy=name` (what `--config.strategy=name` selects)."""
    path = os.path.join(ROOT, "configs", "coda.py")
    spec = importlib.util.spec_from_file_location("cfg_coda", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config(arg)
    cfg.strategy = name
    if getattr(get_strategy(name).allocator, "where", ""):  # the focused experiment's arms
        cfg.sim.hard_regions = ("object.y > 0.15",)
    return cfg


def test_unknown_strategy_lists_the_valid_names():
    with pytest.raises(KeyError, match="valid: coda, zero_shot"):
        get_strategy("codaa")
    cfg = _config("coda")
    cfg.strategy = "codaa"
    with pytest.raises(runconfig.ConfigError, match="strategy='codaa' is unknown"):
        runconfig.validate(cfg)


def test_registry_has_the_issue_strategies():
    assert set(NAMES) == {
        "coda", "zero_shot", "sft", "fresh_task_bc", "domain_randomization", "uniform_variants",
        "success_rate_guided", "coda_selfimit", "no_memory", "single_store", "skill_library", "sparse_only",
        "taskdesc_potential", "no_refinement", "frozen_policy", "nominal_only", "oracle_regions",
        "coda_demos", "domain_randomization_demos", "nominal_only_demos", "oracle_regions_demos",
        "uniform_variants_demos",
    }  # fmt: skip


def _expected_kinds(s) -> set[str]:
    """The request kinds each allocator may make."""
    from coda.loop import allocators as A

    return {
        A.UCBModes: {"targeted", "novel"},
        A.UniformModes: {"targeted", "novel"},
        A.NovelTasks: {"novel"},
        A.PoolResample: {"resample"},
        A.NoScenes: set(),
    }[type(s.allocator)]


@pytest.mark.parametrize("name", NAMES)
def test_strategy_config_validates_and_plans_its_budget(name):
    """Every variant of configs/coda.py validates with it; the allocation step spends exactly B
    (or nothing, zero-shot)."""
    from coda.loop.state import RunState

    s = get_strategy(name)
    for arg in (None, "smoke", "gpu", "selfimit"):
        cfg = _config(name, arg)
        assert cfg.strategy == name
        runconfig.validate(cfg)
    assert s.learner_mode in ("shaped", "sparse", "frozen_policy")
    memory = s.memory.open(":memory:")
    # one validated mode with a parent, so mode-based allocations have something to split
    a = memory.add_diagnosis(round=0, factor="spatial", phase="grasp", cause="target blocked")
    memory.set_mode_status(a.mode_id, "validated", round=0)
    pool = [types.SimpleNamespace(scene=types.SimpleNamespace(program=f"p{i}")) for i in range(3)]
    svc = types.SimpleNamespace(strategy=s, config=cfg, memory=memory, pool=pool)
    state = RunState(mode_parents={a.mode_id: [{}]})
    plan = s.allocator.plan(svc, state, 1)
    total = sum(n for _, _, n in plan.requests)
    kinds = {k for k, _, _ in plan.requests}
    assert total == (cfg.loop.budget if kinds else 0)
    assert kinds <= _expected_kinds(s) and (kinds or not _expected_kinds(s))
    assert state.times_allocated == {}  # the plan is a value; the state is not touched
    memory.close()


def test_a_strategy_s_own_advantage_overrides_the_loop_s():
    """`coda` learns by loop.advantage (the chunk critic's, by default); `coda_selfimit` is the
    same strategy with success-filtered self-imitation."""
    from coda.loop.services import learner_config

    cfg = _config("coda", None)  # the default config
    assert cfg.loop.advantage == "critic" and cfg.loop.num_candidates > 1
    for name, want in (("coda", "critic"), ("coda_selfimit", "success")):
        recipe = get_strategy(name).update
        assert learner_config(cfg, "shaped", recipe.advantage)[0].advantage == want
    coda, selfimit = get_strategy("coda"), get_strategy("coda_selfimit")
    assert dataclasses.replace(selfimit, name="coda", kind="method", description="") == (
        dataclasses.replace(coda, update=selfimit.update, description="")
    )


def test_success_rate_guided_splits_the_budget_by_failure_rate_where_dr_is_uniform():
    """The paper's success-rate-guided baseline: more of B on the seed tasks that fail more;
    domain randomization spreads B uniformly whatever the success; equal rates give equal
    splits in both."""
    from coda.loop.state import RunState

    cfg = _config("success_rate_guided")
    cfg.loop.budget = 40
    pool = [types.SimpleNamespace(scene=types.SimpleNamespace(program=f"p{i}")) for i in range(4)]
    svc = types.SimpleNamespace(config=cfg, pool=pool)
    srg, dr = get_strategy("success_rate_guided"), get_strategy("domain_randomization")

    def split(s, rates):
        plan = s.allocator.plan(svc, RunState(program_success=rates), 1)
        return [plan.record.get(f"pool{i}", 0) for i in range(4)]

    rates = {"p0": 0.95, "p1": 0.6, "p2": 0.2, "p3": 0.0}
    got = split(srg, rates)
    assert sum(got) == 40 and got == sorted(got) and got[3] > 3 * got[0]
    assert split(dr, rates) == [10, 10, 10, 10]
    assert split(srg, {f"p{i}": 0.5 for i in range(4)}) == [10, 10, 10, 10]
    assert srg.allocator.factors == ("layout", "attributes", "task")  # variants of any factor
    assert dr.allocator.factors == ("layout", "attributes")  # the hand-set ranges


def test_no_mode_budget_pool_resamples_the_pool_until_a_mode_is_usable():
    """loop.no_mode_budget: with nothing validated the UCB share goes to fresh seeded tasks
    ("novel", the default) or to resampled pool scenes ("pool"), ε novel either way; once a mode
    is usable the allocator decides as before."""
    from coda.loop.state import RunState
    from coda.memory import MEMORY_MODES

    cfg = _config("coda")
    cfg.loop.budget, cfg.loop.epsilon = 12, 0.25
    memory = MEMORY_MODES["full"](":memory:")
    pool = [types.SimpleNamespace(scene=types.SimpleNamespace(program=f"p{i}")) for i in range(3)]
    svc = types.SimpleNamespace(strategy=get_strategy("coda"), config=cfg, memory=memory, pool=pool)
    ucb = svc.strategy.allocator
    assert ucb.plan(svc, RunState(), 1).requests == (("novel", None, 12),)
    cfg.loop.no_mode_budget = "pool"
    runconfig.validate(cfg)
    plan = ucb.plan(svc, RunState(), 1)
    reqs = plan.requests
    assert reqs == (("resample", 0, 3), ("resample", 1, 3), ("resample", 2, 3), ("novel", None, 3))
    assert plan.record == {"pool0": 3, "pool1": 3, "pool2": 3, "novel": 3}
    assert plan.factors == ("layout", "attributes")
    a = memory.add_diagnosis(round=0, factor="spatial", phase="grasp", cause="target blocked")
    state = RunState(mode_parents={a.mode_id: [{}]})  # a candidate with parents: not allocated
    assert ucb.plan(svc, state, 1).requests == reqs
    memory.set_mode_status(a.mode_id, "validated", round=0)
    plan = ucb.plan(svc, state, 1)
    assert {k for k, _, _ in plan.requests} <= {"targeted", "novel"}
    assert sum(n for *_, n in plan.requests) == 12
    assert plan.times_allocated == {a.mode_id: 1} and state.times_allocated == {}
    cfg.loop.no_mode_budget = "poool"
    with pytest.raises(runconfig.ConfigError, match="no_mode_budget='poool' is unknown"):
        runconfig.validate(cfg)
    memory.close()


def test_validation_bases_pool_first_then_parents():
    """loop.validation_bases: "pool" edits the pool's scenes of the parents' families first
    (the parents if none bind), "parents" the diagnosed failures only; typos fail."""
    from coda.loop.steps.generate import validation_bases

    cfg = _config("coda")
    assert cfg.loop.validation_bases == "pool" and cfg.loop.validation_control == "outside"

    def scene(fam, name):
        return types.SimpleNamespace(task={"family": fam}, name=name)

    pool = [types.SimpleNamespace(scene=scene(f, f"{f}{i}")) for f in ("a", "b") for i in (0, 1)]
    svc = types.SimpleNamespace(config=cfg, pool=pool)
    parents = [scene("b", "fail")]
    got = validation_bases(svc, parents)
    assert [[s.name for s in b] for b in got] == [["b0", "b1"], ["fail"]]
    assert [[s.name for s in b] for b in validation_bases(svc, [scene("c", "x")])] == [["x"]]
    cfg.loop.validation_bases = "parents"
    assert validation_bases(svc, parents) == [parents]
    for field in ("validation_bases", "validation_control"):
        setattr(cfg.loop, field, "nope")
        with pytest.raises(runconfig.ConfigError, match=f"{field}='nope' is unknown"):
            runconfig.validate(cfg)
        setattr(cfg.loop, field, "pool" if field == "validation_bases" else "matched")


def test_targeted_variants_come_from_the_first_bases_that_give_any(monkeypatch):
    """A validated mode whose program makes no verified variant on the pool's scenes (every
    edit impossible there) is generated from its parents, as its test was, instead of its
    whole budget falling to novel tasks (measured in the focused experiment's seed 0)."""
    from coda.engine import kinds
    from coda.loop.state import RunState
    from coda.loop.steps import generate as G

    cfg = _config("coda")
    scene = types.SimpleNamespace(task={"family": "pick_place"}, name="pool0")
    svc = types.SimpleNamespace(
        config=cfg,
        pool=[types.SimpleNamespace(scene=scene)],
        memory=types.SimpleNamespace(get_mode=lambda m: types.SimpleNamespace(phase="reach")),
        engine=None,
    )
    parent = {"name": "fail", "task": {"family": "pick_place"}}
    monkeypatch.setattr(G.Scene, "from_dict", lambda d: types.SimpleNamespace(
        task={"family": "pick_place"}, name=d["name"]))  # fmt: skip
    seen = []

    def fake(mode, program, bases, n, seed, eps, **kw):
        seen.append([b.name for b in bases])
        made = [] if bases[0].name == "pool0" else [types.SimpleNamespace(compiled=b, factor="spatial") for b in bases]  # fmt: skip
        return types.SimpleNamespace(variants=made, attempted=4 * n)

    monkeypatch.setattr(kinds, "generate_targeted", fake)  # our families' kind calls it
    state = RunState(mode_parents={7: [parent]})
    gens, tried = G._targeted(svc, state, 7, 3, np.random.default_rng(0))
    assert seen == [["pool0"], ["fail"]] and tried == 24
    assert [(g.kind, g.mode_id, g.factor) for g in gens] == [("targeted", 7, "spatial")]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_strategy_runs_one_round_of_the_smoke_loop(name, tmp_path):
    from coda import loop

    cfg = _config(name)
    cfg.loop.rounds = 1
    summary = loop.run(cfg, str(tmp_path))
    assert [h["round"] for h in summary["history"]] == [0, 1]
    assert summary["history"][-1]["suites"]["id"]["n"] == cfg.eval.episodes
    s, h0, h1 = get_strategy(name), summary["history"][0], summary["history"][-1]
    if not s.update.trains:
        assert h1["budgets"]["policy_updates"] == 0
    if name == "sft":  # the seed demonstrations only: no scene, the same K_π updates
        assert h1["generated"] == 0 and h1["update"]["demo_rows"] == {"start": h0["demo_rows"]}
        bc_start = h0["budgets"]["policy_updates"]
        assert h1["budgets"]["policy_updates"] - bc_start == cfg.loop.policy_updates


def test_best_of_j_waits_for_a_critic_that_ranks_better_than_the_gate():
    """`loop.select_min_auc`: best-of-j at collection only while the critic's last held-out AUC
    (by return) reaches the gate; unmeasured or below it, the policy's own sample (j = 1)."""
    from coda.loop.steps.rollouts import candidates, last_auc

    def row(auc):
        return {"update": {"critic_ranking": {"auc_return": auc, "chunks": 10.0}}}

    assert candidates(4, 0.0, []) == 4  # the default: always
    assert candidates(4, 0.55, []) == 1  # nothing measured yet
    hist = [{"round": 0}, row(0.42), {"round": 2, "update": {}}]
    assert last_auc(hist) == pytest.approx(0.42, abs=1e-9) and candidates(4, 0.55, hist) == 1
    assert candidates(4, 0.55, hist + [row(0.61)]) == 4
    assert candidates(4, 0.55, [row(0.9), row(float("nan"))]) == 4  # NaN: not a measurement
    assert candidates(1, 0.55, [row(0.9)]) == 1
    cfg = _config("coda")
    cfg.loop.select_min_auc = 1.5
    with pytest.raises(runconfig.ConfigError, match="select_min_auc=1.5 must be in \\[0, 1\\]"):
        runconfig.validate(cfg)


def test_a_resampled_scenes_success_counts_for_its_pool_program():
    """A redrawn scene has no program of its own (`coda.sim.scene.resample`), so step 3 counts
    its rollouts for the pool scene it was drawn from: success_rate_guided's weights
    (`RunState.program_success`) then see the pool's programs fail or succeed."""
    from coda.loop.steps.generate import Gen
    from coda.loop.steps.rollouts import _Tally

    tally = _Tally()
    tally.add(Gen(None, None, "resample", "layout", "-", "p0"), "", 1, 4)
    tally.add(Gen(None, None, "resample", "task", "-", "p0"), "", 2, 4)
    tally.add(Gen(None, None, "novel", None, "-"), "p9", 4, 4)
    assert dict(tally.per_program) == {"p0": [3, 8], "p9": [4, 4]}
