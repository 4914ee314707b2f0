"""Planted flaws (`coda.sim.flaws`): the library's coverage, that a flawed expert departs from the
scripted planner only in its named phase and only under its condition, and a flaw's validity
(plain >= 90 %, flawed <= 20 % under the condition, >= 80 % outside it) on a tiny n; the full
library's validity at n = 16 is slow."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from coda.sim.compile import compile_scene
from coda.sim.flaw_check import check_flaw
from coda.sim.flaws import FACTORS, FLAWS, get_flaw, task_phase_of
from coda.sim.planner import planner_for
from coda.sim.rollout import make_buckets
from coda.sim.scene import resample
from coda.sim.sdk import exec_program
from coda.sim.tasks import get_family

NUM_CHUNKS = 14

# one pick-and-place structure; the cube's mass and y are set per scene
PROGRAM = """
add_object("cube", role="target", instance="cube_red")
set_attributes("target", mass={mass})
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
set_layout("target", x=0.4, y={y}, yaw=0.3)
set_layout("goal", x=0.58, y=0.0)
"""


def _scene(mass: float, y: float, seed: int = 0):
    return exec_program(PROGRAM.format(mass=mass, y=y), seed, isolation="inprocess")


def test_library_covers_families_phases_and_factors():
    assert len(FLAWS) >= 8
    assert len({f.name for f in FLAWS}) == len(FLAWS)
    assert len({f.family for f in FLAWS}) >= 3
    assert len({f.phase for f in FLAWS}) >= 3
    assert {f.factor for f in FLAWS} == set(FACTORS)
    for f in FLAWS:
        planner = {p.name for p in get_family(f.family).planner_phases({})}
        assert set(f.planner_phases) <= planner, f.name
        params = {"action": f.phase} if f.family == "articulated" else {}
        if f.family == "stack_or_insert":
            params = {"mode": "stack"}
        # every departing planner phase serves the ground-truth task phase
        assert {task_phase_of(f.family, params, p) for p in f.planner_phases} == {f.phase}
        assert f.ground_truth == (f.condition.factor, f.phase)
        assert get_flaw(f.name) is f


def test_condition_reads_one_factor():
    flaw = get_flaw("lift_slack_heavy")  # attributes: mass > 0.13
    heavy, light = _scene(0.2, 0.1), _scene(0.05, 0.1)
    assert flaw.holds(heavy) and not flaw.holds(light)
    for seed in range(3):  # a layout or task change never changes an attribute condition
        assert flaw.holds(resample(heavy, "layout", seed))


def test_departs_only_in_its_phase_and_only_under_its_condition(native_backend):
    """Same bucket, same key: the lift_slack_heavy expert's actions equal the planner's on the
    light (condition-false) rows everywhere, and on the heavy rows up to the first step of its
    planner phase (lift), where they differ."""
    flaw = get_flaw("lift_slack_heavy")
    scenes = [_scene(0.05, 0.15, 0), _scene(0.2, 0.1, 0), _scene(0.05, -0.15, 1)]
    (bucket,) = make_buckets([compile_scene(s) for s in scenes])
    policy = flaw.policy(bucket)
    assert policy.cond.tolist() == [False, True, False]
    key = jax.random.PRNGKey(0)
    plain = native_backend.rollout(bucket, planner_for(bucket), None, key, NUM_CHUNKS)
    flawed = native_backend.rollout(bucket, policy, None, key, NUM_CHUNKS)
    a0, a1 = np.asarray(plain.actions), np.asarray(flawed.actions)  # [B, C, H, 7]
    for row in (0, 2):
        np.testing.assert_array_equal(a0[row], a1[row])
        assert bool(flawed.success[row]) == bool(plain.success[row])
    # the heavy row: identical steps until the first step of lift, different from there on
    lift = planner_for(bucket).phase_names.index("lift")
    labels = np.asarray(flawed.info["phase"])[1].reshape(-1)  # [C * H] planner phase per step
    start = int(np.argmax(labels == lift))
    assert start > 0 and labels[start] == lift
    f0, f1 = a0[1].reshape(-1, 7), a1[1].reshape(-1, 7)
    np.testing.assert_array_equal(f0[:start], f1[:start])
    differ = np.flatnonzero(np.any(f0 != f1, axis=-1))
    assert differ[0] == start, (differ[:3], start)
    assert bool(plain.success[1]) and not bool(flawed.success[1])


def test_one_flaw_is_valid_on_a_tiny_n(native_backend):
    flaw = get_flaw("lift_slack_heavy")
    true = [compile_scene(_scene(m, y, s)) for s, (m, y) in enumerate([(0.18, 0.1), (0.2, -0.1)])]
    false = [compile_scene(_scene(m, y, s)) for s, (m, y) in enumerate([(0.06, 0.1), (0.1, -0.1)])]
    v = check_flaw(flaw, native_backend, scenes=(true, false), num_chunks=NUM_CHUNKS, pad=4)
    assert (v.n_true, v.n_false) == (2, 2)
    assert v.valid, v


@pytest.mark.slow
@pytest.mark.parametrize("name", [f.name for f in FLAWS])
def test_every_flaw_is_valid(native_backend, name):
    v = check_flaw(get_flaw(name), native_backend, n=16, num_chunks=NUM_CHUNKS)
    print(v.to_json())
    assert v.valid, v
