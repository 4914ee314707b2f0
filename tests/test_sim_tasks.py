"""Task families: ν false at start, true after the scripted planner; geometry helpers."""

import ast
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.sim import geometry as G
from coda.sim import tasks
from coda.sim.planner import Perturbed, planner_for
from coda.sim.sdk import exec_program
from coda.sim.state import SimState

NUM_CHUNKS = 14  # = conftest.PLANNER_DEMO_CHUNKS, the length of the shared demos


def _outcomes(demos):
    """[(ν at t=0, success, failed)] per variant of [(bucket, rollout)]."""
    results = []
    for bucket, r in demos:
        # ν over [B, T] as the rollout computed it (jitted once per bucket), at t = 0
        nu0 = np.asarray(bucket.success_over_time(r.states))[:, 0]
        for i in range(len(bucket.variants)):
            results.append((bool(nu0[i]), bool(r.success[i]), bool(r.failed[i])))
    return results


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_nu_false_at_start_and_true_after_planner(family, planner_demos):
    results = _outcomes(planner_demos[family])
    assert not any(start for start, _, _ in results), "ν already true at t=0"
    assert not any(failed for _, _, failed in results)
    rate = np.mean([ok for _, ok, _ in results])
    assert rate >= 0.9, f"{family}: planner success {rate:.2f} < 0.9 ({results})"


def test_random_policy_rarely_succeeds(random_demos):
    results = _outcomes([random_demos[f] for f in sorted(random_demos)])
    assert np.mean([ok for _, ok, _ in results]) <= 0.25


def test_planner_emits_phase_labels(planner_demos):
    bucket, r = planner_demos["pick_place"][0]
    planner = planner_for(bucket)
    phases = np.asarray(r.info["phase"][0]).reshape(-1)  # [C*H] of the first variant
    chex.assert_shape(r.actions, (bucket.batch_size, NUM_CHUNKS, planner.horizon, 7))
    assert np.all(np.diff(phases) >= 0), "phases must advance monotonically"
    assert set(planner.phase_names[p] for p in phases) >= {"approach", "grasp", "lift", "release"}
    assert np.all(np.abs(np.asarray(r.actions)) <= 1.0)


def test_perturbed_planner_labels_clean_chunks_and_recovers(cube_plate_bucket, native_backend):
    """DART collection: executed = clip(clean + noise) on the arm dims only, the clean chunk is the
    label, and the planner (closed-loop on the observed setpoint) still succeeds under noise."""
    from coda.train.agent import ObsNorm
    from coda.train.awr import demo_batch

    planner = planner_for(cube_plate_bucket)
    r = native_backend.rollout(
        cube_plate_bucket, Perturbed(planner, 0.1), None, jax.random.PRNGKey(3), NUM_CHUNKS
    )
    label, executed = np.asarray(r.info["label"]), np.asarray(r.actions)
    chex.assert_shape(label, executed.shape)
    assert np.abs(executed[..., :6] - label[..., :6]).mean() > 0.03  # perturbed
    np.testing.assert_array_equal(executed[..., 6], label[..., 6])  # gripper untouched
    assert np.all(np.abs(executed) <= 1.0)
    assert np.asarray(r.success).all(), r.success
    b = cube_plate_bucket.batch_size
    batch = demo_batch(
        r, np.zeros((b, 4), np.int32), np.ones((b, 4), bool), ObsNorm.identity(64), 64
    )
    np.testing.assert_allclose(
        np.asarray(batch.actions), label.reshape(-1, *label.shape[2:]), atol=1e-6
    )


def test_expert_labels_execute_the_learner_and_record_the_expert(cube_plate_bucket, native_backend):
    """DAgger collection: the random policy's chunks are executed, the planner's chunk for the
    very same state is the label (checked against the planner acting on the recorded states)."""
    from coda.sim.planner import ExpertLabels, RandomPolicy

    planner = planner_for(cube_plate_bucket)
    agent = ExpertLabels(RandomPolicy(planner.horizon), planner)
    r = native_backend.rollout(cube_plate_bucket, agent, None, jax.random.PRNGKey(5), 2)
    label, executed = np.asarray(r.info["label"]), np.asarray(r.actions)  # [B, C, H, 7]
    chex.assert_shape(label, executed.shape)
    assert np.abs(executed - label).mean() > 0.1  # random actions, not the planner's
    s0 = jax.tree.map(lambda x: x[:, 0], r.states)  # the state the first chunk was chosen in
    want, _, _ = planner.act(None, s0, planner.init(executed.shape[0], None), None)
    np.testing.assert_allclose(label[:, 0], np.asarray(want), atol=1e-5)


def test_registry_lookup_errors_list_the_valid_names():
    for lookup in (lambda n: tasks.FAMILIES[n], tasks.get_family):
        with pytest.raises(KeyError, match="valid: .*pick_place"):
            lookup("juggle")
    assert "juggle" not in tasks.FAMILIES and tasks.FAMILIES.get("juggle") is None


@pytest.mark.parametrize("family", sorted(tasks.FAMILIES))
def test_each_family_is_one_module(family):
    """One family, one module: the class lives in coda/sim/tasks/<name>.py and answers every
    question the planner, verify and the potentials ask of it."""
    fam = tasks.FAMILIES[family]
    assert type(fam).__module__ == f"coda.sim.tasks.{family}"
    src = fam.propose(np.random.default_rng(0))
    assert f'set_task("{family}"' in src
    task = exec_program(src, seed=0, isolation="inprocess").task
    params = task["params"]
    names = [w.name for w in fam.planner_phases(params)]
    assert len(set(names)) == len(names) >= 3
    assert fam.task_phases(task)[-1].done.func is fam.success_fn(task).func  # last phase is ν
    tpl = fam.potential_template(task)
    assert set(tpl.phase_to_subgoal) >= set(names)  # every planner label maps to a stage
    assert all(s in tpl.stages for level in tpl.levels.values() for s in level)


FAMILY_MODULES = {f"coda/sim/tasks/{name}.py" for name in tasks.FAMILIES}


def test_no_family_name_switches_outside_the_family_modules():
    """No comparison with a family name, dict keyed by one or `match` on one in coda/ outside
    coda/sim/tasks/<family>.py (messages and docs may still name families)."""
    root = Path(__file__).resolve().parent.parent
    names = set(tasks.FAMILIES)

    def named(node) -> bool:
        return isinstance(node, ast.Constant) and node.value in names

    bad = []
    for path in sorted((root / "coda").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in FAMILY_MODULES or rel == "coda/registries.py":  # the registry names them once
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                elts = [
                    e
                    for o in operands
                    if isinstance(o, ast.Tuple | ast.List | ast.Set)
                    for e in o.elts
                ]
                hit = any(map(named, operands + elts))
            elif isinstance(node, ast.Dict):
                hit = any(k is not None and named(k) for k in node.keys)
            elif isinstance(node, ast.match_case):
                hit = any(named(n) for n in ast.walk(node.pattern))
            else:
                continue
            if hit:
                bad.append(f"{rel}:{node.lineno}")
    assert not bad, f"family-name switches outside the family modules: {bad}"


def _state(
    body_pos,
    body_quat=None,
    half=None,
    contact=None,
    joint_pos=(),
    joint_range=(),
    inner=None,
    finger=(0.02, 0.02),
):
    nb = len(body_pos)
    ne = 3 + nb
    return SimState(
        ee_pos=jnp.zeros(3),
        ee_quat=jnp.array([1.0, 0, 0, 0]),
        finger=jnp.array(finger),
        body_pos=jnp.array(body_pos, jnp.float32),
        body_quat=jnp.array(body_quat or [[1.0, 0, 0, 0]] * nb, jnp.float32),
        joint_pos=jnp.array(joint_pos, jnp.float32),
        contact=jnp.zeros((ne, ne)) if contact is None else jnp.array(contact, jnp.float32),
        body_half=jnp.array(half or [[0.02, 0.02, 0.02]] * nb, jnp.float32),
        inner=jnp.zeros((nb, 4)) if inner is None else jnp.array(inner, jnp.float32),
        joint_range=jnp.array(joint_range, jnp.float32).reshape(-1, 2),
    )


def test_geometry_relations():
    # body 0: cube resting on body 1 (a plate, top at z=0.012); body 2: far away
    s = _state(
        [[0.5, 0.0, 0.032], [0.5, 0.01, 0.006], [0.8, 0.3, 0.02]],
        half=[[0.02] * 3, [0.08, 0.08, 0.006], [0.02] * 3],
    )
    assert bool(G.on_top(s, 0, 1)) and not bool(G.on_top(s, 2, 1))
    assert bool(G.above(s, 0, 1)) and not bool(G.above(s, 1, 0))
    np.testing.assert_allclose(G.height(s, 0), 0.012, atol=1e-6)
    np.testing.assert_allclose(
        G.body_distance(s, 0, 2), np.sqrt(0.3**2 + 0.3**2 + 0.012**2), atol=1e-6
    )
    # container interior: body 1 as a bin with inner half extents 0.06 and floor at -0.006
    s2 = _state(
        [[0.5, 0.0, 0.03], [0.5, 0.0, 0.04]],
        half=[[0.02] * 3, [0.07, 0.07, 0.04]],
        inner=[[0, 0, 0, 0], [0.06, 0.06, 0.03, -0.035]],
    )
    assert bool(G.inside(s2, 0, 1))
    s3 = s2.replace(body_pos=s2.body_pos.at[0, 0].set(0.62))
    assert not bool(G.inside(s3, 0, 1))


def test_contacts_grasp_joint_fraction_and_alignment():
    c = np.zeros((5, 5))
    c[1, 3] = c[3, 1] = c[2, 3] = c[3, 2] = 1  # both fingers touch body 0
    s = _state(
        [[0.5, 0, 0.1], [0.6, 0, 0.02]], contact=c, joint_pos=[0.3], joint_range=[[0.0, 0.6]]
    )
    assert bool(G.grasped(s, 0)) and not bool(G.grasped(s, 1))
    np.testing.assert_allclose(G.joint_fraction(s, 0), 0.5, atol=1e-6)
    yaw = lambda a: jnp.array([np.cos(a / 2), 0, 0, np.sin(a / 2)])  # noqa: E731
    assert bool(G.aligned(yaw(0.1), yaw(0.1 + np.pi / 2)))  # square symmetry
    assert not bool(G.aligned(yaw(0.1), yaw(0.1 + np.pi / 4)))
    np.testing.assert_allclose(G.yaw_of(yaw(0.7)), 0.7, atol=1e-5)


def test_helpers_are_jittable_and_vmappable():
    s = _state([[0.5, 0.0, 0.032], [0.5, 0.01, 0.006]], half=[[0.02] * 3, [0.08, 0.08, 0.006]])
    batch = jax.tree_util.tree_map(lambda x: jnp.stack([x] * 5), s)
    out = jax.jit(jax.vmap(lambda st: G.on_top(st, 0, 1)))(batch)
    chex.assert_shape(out, (5,))
    assert bool(out.all())
