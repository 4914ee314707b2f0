"""Strategy registry: every entry is selected by `configs/coda.py` + `strategy`, validates, and
plans its round budget (cheap); each one runs a one-round smoke loop end to end (slow)."""

import importlib.util
import os
import types

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
        "coda", "zero_shot", "sft", "domain_randomization", "uniform_variants",
        "success_rate_guided", "no_memory", "single_store", "skill_library", "sparse_only",
        "taskdesc_potential", "no_refinement", "frozen_policy",
    }  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_strategy_config_validates_and_plans_its_budget(name):
    """Every variant of configs/coda.py validates with it; the allocation step spends exactly B
    (or nothing, zero-shot)."""
    from coda.loop import rounds
    from coda.loop.state import RunState
    from coda.memory import MEMORY_MODES

    s = get_strategy(name)
    for arg in (None, "smoke", "gpu", "selfimit"):
        cfg = _config(name, arg)
        assert cfg.strategy == name
        runconfig.validate(cfg)
    assert s.learner_mode in ("shaped", "sparse", "frozen_policy")
    memory = MEMORY_MODES[s.memory](":memory:" if s.memory != "none" else None)
    # one validated mode with a parent, so mode-based allocations have something to split
    a = memory.add_diagnosis(round=0, factor="spatial", phase="grasp", cause="target blocked")
    memory.set_mode_status(a.mode_id, "validated", round=0)
    pool = [types.SimpleNamespace(scene=types.SimpleNamespace(program=f"p{i}")) for i in range(3)]
    ctx = types.SimpleNamespace(strategy=s, config=cfg, memory=memory, pool=pool)
    state = RunState(mode_parents={a.mode_id: [{}]})
    reqs, record = rounds.plan(ctx, state, 1)
    total = sum(n for _, _, n in reqs)
    assert total == (0 if s.allocation == "none" else cfg.loop.budget)
    kinds = {k for k, _, _ in reqs}
    expect = {
        "ucb": {"targeted", "novel"},
        "uniform_modes": {"targeted", "novel"},
        "novel": {"novel"},
        "success_rate": {"resample"},
        "domain_randomization": {"resample"},
        "none": set(),
    }[s.allocation]
    assert kinds <= expect and (kinds or s.allocation == "none")
    memory.close()


def test_no_mode_budget_pool_resamples_the_pool_until_a_mode_is_usable():
    """loop.no_mode_budget: with nothing validated the UCB share goes to fresh seeded tasks
    ("novel", the default) or to resampled pool scenes ("pool"), ε novel either way; once a mode
    is usable the allocator decides as before."""
    from coda.loop import rounds
    from coda.loop.state import RunState
    from coda.memory import MEMORY_MODES

    cfg = _config("coda")
    cfg.loop.budget, cfg.loop.epsilon = 12, 0.25
    memory = MEMORY_MODES["full"](":memory:")
    pool = [types.SimpleNamespace(scene=types.SimpleNamespace(program=f"p{i}")) for i in range(3)]
    ctx = types.SimpleNamespace(strategy=get_strategy("coda"), config=cfg, memory=memory, pool=pool)
    assert rounds.plan(ctx, RunState(), 1)[0] == [("novel", None, 12)]
    cfg.loop.no_mode_budget = "pool"
    runconfig.validate(cfg)
    reqs, record = rounds.plan(ctx, RunState(), 1)
    assert reqs == [("resample", 0, 3), ("resample", 1, 3), ("resample", 2, 3), ("novel", None, 3)]
    assert record == {"pool0": 3, "pool1": 3, "pool2": 3, "novel": 3}
    a = memory.add_diagnosis(round=0, factor="spatial", phase="grasp", cause="target blocked")
    state = RunState(mode_parents={a.mode_id: [{}]})  # a candidate with parents: not allocated
    assert rounds.plan(ctx, state, 1)[0] == reqs
    memory.set_mode_status(a.mode_id, "validated", round=0)
    reqs, _ = rounds.plan(ctx, state, 1)
    assert {k for k, _, _ in reqs} <= {"targeted", "novel"} and sum(n for *_, n in reqs) == 12
    cfg.loop.no_mode_budget = "poool"
    with pytest.raises(runconfig.ConfigError, match="no_mode_budget='poool' is unknown"):
        runconfig.validate(cfg)
    memory.close()


def test_validation_bases_pool_first_then_parents():
    """loop.validation_bases: "pool" edits the pool's scenes of the parents' families first
    (the parents if none bind), "parents" the diagnosed failures only; typos fail."""
    from coda.loop import rounds

    cfg = _config("coda")
    assert cfg.loop.validation_bases == "pool" and cfg.loop.validation_control == "resample"

    def scene(fam, name):
        return types.SimpleNamespace(task={"family": fam}, name=name)

    pool = [types.SimpleNamespace(scene=scene(f, f"{f}{i}")) for f in ("a", "b") for i in (0, 1)]
    ctx = types.SimpleNamespace(config=cfg, pool=pool)
    parents = [scene("b", "fail")]
    got = rounds.validation_bases(ctx, parents)
    assert [[s.name for s in b] for b in got] == [["b0", "b1"], ["fail"]]
    assert [[s.name for s in b] for b in rounds.validation_bases(ctx, [scene("c", "x")])] == [["x"]]
    cfg.loop.validation_bases = "parents"
    assert rounds.validation_bases(ctx, parents) == [parents]
    for field in ("validation_bases", "validation_control"):
        setattr(cfg.loop, field, "nope")
        with pytest.raises(runconfig.ConfigError, match=f"{field}='nope' is unknown"):
            runconfig.validate(cfg)
        setattr(cfg.loop, field, "pool" if field == "validation_bases" else "matched")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_strategy_runs_one_round_of_the_smoke_loop(name, tmp_path):
    from coda import loop

    cfg = _config(name)
    cfg.loop.rounds = 1
    summary = loop.run(cfg, str(tmp_path))
    assert [h["round"] for h in summary["history"]] == [0, 1]
    assert summary["history"][-1]["suites"]["id"]["n"] == cfg.eval.episodes
    if get_strategy(name).update == "none":
        assert summary["history"][-1]["budgets"]["policy_updates"] == 0
