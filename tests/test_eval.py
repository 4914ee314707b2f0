"""Evaluation suites: held-out construction, determinism, and the planner / random references."""

from __future__ import annotations

import dataclasses
import math

import jax
import numpy as np
import pytest

from coda.eval import (
    SUITES,
    SuiteResult,
    evaluate,
    evaluate_all,
    heldout_category_programs,
    heldout_instance_programs,
    heldout_seeds,
    make_suites,
    planner_agent,
    policy_agent,
    pooled,
    program_objects,
    random_agent,
)
from coda.sim import assets

PICK = """add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_blue")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
STACK = """add_object("cube", role="top", instance="cube_red")
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
"""
CHUNKS = 14  # the planner needs the whole episode


def test_suite_result_se_and_pooling():
    r = SuiteResult.from_successes("s", [True, False, True, True])
    assert (r.n, r.successes) == (4, 3)
    assert r.rate == pytest.approx(0.75, abs=1e-12)
    assert r.se == pytest.approx(math.sqrt(0.75 * 0.25 / 4), abs=1e-12)
    p = pooled([r, SuiteResult.from_successes("s", [False] * 4)])
    assert (p.n, p.successes) == (8, 3)
    assert p.se == pytest.approx(math.sqrt(3 / 8 * 5 / 8 / 8), abs=1e-12)
    empty = SuiteResult.from_successes("s", [])
    assert empty.n == 0 and math.isnan(empty.rate)
    with pytest.raises(ValueError, match="different suites"):
        pooled([r, SuiteResult.from_successes("t", [True])])


def test_suite_results_keep_per_episode_outcomes_through_pooling():
    r = SuiteResult.from_successes("s", np.array([True, False, True]))
    assert r.outcomes == "101"
    assert pooled([r, SuiteResult.from_successes("s", [False, True])]).outcomes == "10101"
    counts_only = dataclasses.replace(r, outcomes="")  # e.g. a row of an older run
    p = pooled([r, counts_only])
    assert (p.n, p.successes, p.outcomes) == (6, 4, "")


def test_heldout_programs_swap_one_task_object_into_the_heldout_pool():
    inst = heldout_instance_programs(PICK)
    objs = [dict((role, (cat, i)) for cat, role, i in program_objects(p)) for p in inst]
    assert {o["target"] for o in objs} == {("cube", "cube_yellow"), ("cube", "cube_red")}
    assert {o["goal"] for o in objs} == {("plate", "plate_blue"), ("plate", "plate_oval")}
    for o in objs:  # exactly one object swapped, into a held-out instance
        swapped = [v for v in o.values() if assets.split_of(*v) == "heldout"]
        assert len(swapped) == 1
    cats = heldout_category_programs(PICK)
    assert cats and all(
        dict((r, c) for c, r, _ in program_objects(p))["target"] in assets.HELDOUT_CATEGORIES
        for p in cats
    )
    # stacking accepts only cubes / blocks: no held-out category fits, so that suite is empty
    assert heldout_category_programs(STACK) == []
    assert len(heldout_instance_programs(STACK)) == 2


def test_heldout_seeds_are_disjoint_and_deterministic():
    train = list(range(64))
    a, b = heldout_seeds(train, 50, seed=3), heldout_seeds(train, 50, seed=3)
    assert a == b and len(set(a)) == 50 and not set(a) & set(train)
    assert heldout_seeds(train, 50, seed=4) != a


def test_make_suites_shapes():
    suites = make_suites([PICK] * 3, [0, 1, 2], episodes=8, seed=0)
    assert list(suites) == list(SUITES)
    assert all(s.n == 8 for s in suites.values())
    assert suites["train_layouts"].seeds == [0, 1, 2, 0, 1, 2, 0, 1]
    assert not set(suites["heldout_layouts"].seeds) & {0, 1, 2}
    stack = make_suites([STACK], [0], episodes=4, names=("heldout_categories",))
    assert stack["heldout_categories"].n == 0
    with pytest.raises(ValueError, match="unknown suites"):
        make_suites([PICK], [0], names=("held_out",))


@pytest.fixture(scope="module")
def pick_suites():
    return make_suites([PICK] * 4, [0, 1, 2, 3], episodes=4, seed=0, batch_size=4)


def test_planner_succeeds_and_random_fails_on_heldout_layouts(pick_suites, native_backend):
    rng = jax.random.key(0)
    suite = pick_suites["heldout_layouts"]
    planner = evaluate(planner_agent, suite, native_backend, rng, CHUNKS)
    assert planner.n == 4 and planner.rate >= 0.75, planner
    rand = evaluate(random_agent, suite, native_backend, rng, CHUNKS)
    assert rand.n == 4 and rand.successes == 0
    one = evaluate(planner_agent, suite, native_backend, rng, CHUNKS, max_episodes=1)
    assert one.n == 4  # whole buckets: the first bucket already holds >= 1 episode


@pytest.mark.slow
def test_planner_succeeds_on_every_suite(pick_suites, native_backend):
    """~25 s (one planner compile per object structure): every held-out suite is solvable."""
    planner = evaluate_all(planner_agent, pick_suites, native_backend, jax.random.key(0), CHUNKS)
    for name, r in planner.items():
        assert r.n == 4, name
        assert r.rate >= 0.75, f"planner on {name}: {r}"


def test_suites_are_deterministic_and_compiled_once(pick_suites):
    again = make_suites([PICK] * 4, [0, 1, 2, 3], episodes=4, seed=0, batch_size=4)
    for name, s in pick_suites.items():
        assert (s.programs, s.seeds) == (again[name].programs, again[name].seeds), name
    suite = pick_suites["heldout_layouts"]
    assert suite.buckets is suite.buckets
    assert all(b.batch_size == 4 for b in suite.buckets)


def test_policy_agent_shares_one_compiled_agent_across_buckets(pick_suites):
    from coda.policy import get_policy
    from coda.train.agent import ObsNorm, bucket_prompts, instruction_tokens

    policy = get_policy("small_tiny", max_state_dim=32)
    # observe() reads no policy weights: None keeps this test free of an init
    agent_for = policy_agent(policy, None, ObsNorm.identity(policy.config.max_state_dim))
    b_pick = pick_suites["heldout_layouts"].buckets[0]
    b_inst = pick_suites["heldout_instances"].buckets[0]
    (a1, p1), (a2, p2) = agent_for(b_pick), agent_for(b_inst)
    assert a1 is a2  # one PolicyAgent per batch size: the jitted chunk step is reused
    for b, p in ((b_pick, p1), (b_inst, p2)):
        tok, mask = instruction_tokens(policy, bucket_prompts(b))
        np.testing.assert_array_equal(p.tokens[0], tok)
        np.testing.assert_array_equal(p.tokens[1], mask)
    obs = a1.observe(p2, _initial_state(b_inst))
    np.testing.assert_array_equal(np.asarray(obs.tokens), p2.tokens[0])


@pytest.mark.slow
def test_untrained_policy_evaluates_to_zero(pick_suites, native_backend):
    """~30 s (compiles the tiny policy's sampler): the full path with a neural policy."""
    from coda.policy import get_policy
    from coda.train.agent import ObsNorm

    policy = get_policy("small_tiny", max_state_dim=32)
    params = policy.init(jax.random.key(0))
    agent_for = policy_agent(policy, params, ObsNorm.identity(policy.config.max_state_dim))
    r = evaluate(agent_for, pick_suites["heldout_layouts"], native_backend, jax.random.key(1), 2)
    assert (r.n, r.successes) == (4, 0)  # untrained, two chunks: nothing placed


def _initial_state(bucket):
    from coda.sim.state import decode

    _, sens = bucket.initial_state()
    consts = {k: jax.numpy.asarray(v) for k, v in bucket.consts.items()}
    target = jax.numpy.asarray(bucket.init_ctrl[:, :6])
    return decode(jax.numpy.asarray(sens, jax.numpy.float32), bucket.layout, consts, target)


def test_split_over_hosts_gives_every_host_the_one_host_result(native_backend):
    """`evaluate(..., split=(i, 2, gather))`: two hosts each roll out every other bucket and both
    return exactly the single-host result (each bucket keeps its key). Simulated in one process:
    each host's contribution is captured first, then both run with the all-gathered values."""
    suite = make_suites([PICK] * 4, [0, 1, 2, 3], episodes=6, seed=0, batch_size=2)[
        "heldout_layouts"
    ]
    assert len(suite.buckets) == 3  # host 0 takes buckets 0, 2; host 1 bucket 1
    rng = jax.random.key(3)
    one = evaluate(planner_agent, suite, native_backend, rng, CHUNKS)
    assert 0 < one.successes  # a result with something to get right

    class Captured(Exception):
        pass

    values: list = [None, None]
    rolled: list[list[int]] = [[], []]

    def capture(h):
        def gather(value):
            values[h] = value
            raise Captured

        return gather

    def counting(h):
        def agent_for(bucket):
            rolled[h].append(suite.buckets.index(bucket))
            return planner_agent(bucket)

        return agent_for

    for h in (0, 1):
        with pytest.raises(Captured):
            evaluate(counting(h), suite, native_backend, rng, CHUNKS, split=(h, 2, capture(h)))
    assert rolled == [[0, 2], [1]]
    for h in (0, 1):
        r = evaluate(
            planner_agent, suite, native_backend, rng, CHUNKS, split=(h, 2, lambda v: list(values))
        )
        assert (r.n, r.successes, r.suite) == (one.n, one.successes, one.suite)
    with pytest.raises(ValueError, match="split index"):
        evaluate(planner_agent, suite, native_backend, rng, CHUNKS, split=(2, 2, None))
    with pytest.raises(RuntimeError, match="hosts returned buckets"):  # a host's share missing
        evaluate(planner_agent, suite, native_backend, rng, CHUNKS, split=(0, 2, lambda v: [v, []]))


def test_a_suite_counts_success_at_the_end_or_at_any_endpoint():
    """`Suite.success`: "final" (ours: ν at the last endpoint) or "any" (LIBERO's protocol: the
    goal held at some endpoint; a frozen, failed variant never counts); saved with the suite."""
    import types

    import jax
    import numpy as np

    from coda.eval import Suite, evaluate

    bucket = types.SimpleNamespace(valid=np.array([True, True, True, False]))
    res = types.SimpleNamespace(
        success=np.array([True, False, False, True]),
        success_any=np.array([True, True, True, True]),
        failed=np.array([False, False, True, False]),
    )
    backend = types.SimpleNamespace(rollout=lambda *a: res)
    for rule, want in (("final", 1), ("any", 2)):
        s = Suite("s", ["p"] * 3, [0, 1, 2], success=rule)
        s._buckets = [bucket]
        r = evaluate(lambda b: (None, None), s, backend, jax.random.key(0), 3)
        assert (r.n, r.successes) == (3, want), rule
    with pytest.raises(ValueError, match="valid: \\('final', 'any'\\)"):
        Suite("s", [], [], success="first")


def test_suites_json_keeps_the_success_rule(tmp_path):
    from coda.eval import Suite
    from coda.loop.evaluation import load_suites, save_suites

    path = str(tmp_path / "suites.json")
    save_suites({"id": Suite("id", ["p"], [3], "train", 4, "any")}, path)
    (s,) = load_suites(path).values()
    assert (s.programs, s.seeds, s.batch_size, s.success) == (["p"], [3], 4, "any")
    import json

    data = json.load(open(path))
    del data["id"]["success"]  # a run folder from before the rule was saved
    json.dump(data, open(path, "w"))
    assert load_suites(path)["id"].success == "final"
