"""PolicyAgent inside the native batched rollout; best-of-j; one learner round per mode."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.policy import get_policy
from coda.sim import geometry as G
from coda.sim.compile import compile_scene
from coda.sim.planner import planner_for
from coda.sim.rollout import make_backend, make_buckets
from coda.sim.sdk import exec_program
from coda.sim.state import decode
from coda.train import (
    SOURCES,
    AgentParams,
    ChunkCritic,
    Learner,
    LearnerConfig,
    ObsNorm,
    PolicyAgent,
)
from coda.train.agent import snap_gripper

SCENE = """add_object("cube", role="top", instance="cube_red")
add_object("cube", role="base", instance="cube_blue")
set_task("stack_or_insert", mode="stack", top="top", base="base")
sample_layout()
"""


@pytest.fixture(scope="module")
def setup():
    compiled = [compile_scene(exec_program(SCENE, seed=s, isolation="inprocess")) for s in (0, 1)]
    (bucket,) = make_buckets(compiled, batch_size=3)  # one padding variant
    policy = get_policy("small_tiny", max_state_dim=32)  # 29-dim stack state
    return bucket, policy, make_backend("native")


def _phi(sym):
    top, base = sym.body("top"), sym.body("base")

    def phi(s):  # [B] -> [B] in [0, 1]: closer tcp-to-top and top-to-base is better
        d1 = jnp.linalg.norm(s.ee_pos - G.pos(s, top), axis=-1)
        d2 = jnp.linalg.norm(G.pos(s, top) - G.pos(s, base), axis=-1)
        return 0.5 * (jnp.exp(-5 * d1) + jnp.exp(-5 * d2))

    return phi


def test_agent_in_native_rollout_params_traced(setup):
    bucket, policy, backend = setup
    agent = PolicyAgent.for_bucket(policy, bucket)
    assert agent.horizon == 4 and agent.tokens.shape == (3, policy.config.max_token_len)
    norm = ObsNorm.identity(policy.config.max_state_dim)
    p0 = AgentParams(policy.init(jax.random.key(0)), norm)
    r0 = backend.rollout(bucket, agent, p0, jax.random.key(1), 2)
    assert r0.actions.shape == (3, 2, 4, 7)
    assert np.all(np.abs(np.asarray(r0.actions)) <= 1.0)
    assert r0.info["q"].shape == (3, 2)
    # Different params through the same compiled chunk step give different actions.
    p1 = AgentParams(policy.init(jax.random.key(5)), norm)
    r1 = backend.rollout(bucket, agent, p1, jax.random.key(1), 2)
    assert not np.allclose(np.asarray(r0.actions), np.asarray(r1.actions), atol=1e-6)
    with pytest.raises(ValueError, match="needs a critic"):
        PolicyAgent(policy, agent.tokens, agent.token_mask, num_candidates=3)


@pytest.mark.slow  # compiles a 2-candidate agent
def test_best_of_j_picks_the_critics_argmax(setup):
    bucket, policy, _ = setup
    critic = ChunkCritic.for_policy(policy, hidden=16)
    agent = PolicyAgent.for_bucket(policy, bucket, num_candidates=3, critic=critic)
    norm = ObsNorm.identity(policy.config.max_state_dim)
    params = AgentParams(policy.init(jax.random.key(0)), norm, critic.init(jax.random.key(1)))
    state = jax.tree.map(lambda x: x[:, 0], _initial_states(bucket))
    rng = jax.random.key(3)
    actions, carry, info = jax.jit(agent.act)(params, state, agent.init(3, rng), rng)
    obs = agent.observe(params, state)
    cands = jnp.clip(policy.sample_chunks(params.policy, obs, rng, num_candidates=3), -1, 1)
    scores = critic.score_candidates(params.critic, obs, cands)
    best = np.asarray(jnp.argmax(scores, 1))
    np.testing.assert_allclose(actions, np.asarray(cands)[np.arange(3), best], atol=1e-5)
    np.testing.assert_allclose(info["q"], scores.max(1), rtol=1e-5, atol=1e-6)
    assert int(carry[0]) == 1


def _initial_states(bucket):
    sens = np.stack([d.sensordata.copy() for d in bucket.initial_data()])[:, None]  # [B, 1, S]
    consts = {k: jnp.asarray(v) for k, v in bucket.consts.items()}
    cmd = jnp.asarray(bucket.init_ctrl[:, None, :6], jnp.float32)  # [B, 1, 6]
    return decode(jnp.asarray(sens, jnp.float32), bucket.layout, consts, cmd)


@pytest.mark.parametrize(
    "mode", [pytest.param("shaped", marks=pytest.mark.slow), "frozen_policy"]
)  # shaped: another learner compile; frozen_policy runs the same round in the default tier
def test_learner_round(setup, mode):
    bucket, policy, backend = setup
    cfg = LearnerConfig(
        mode=mode, num_candidates=2, critic_hidden=16, critic_batch=8, policy_batch=4, n_step=2
    )
    learner = Learner(policy, cfg, jax.random.key(0))
    demos = backend.rollout(bucket, planner_for(bucket, horizon=4), None, jax.random.key(0), 3)
    learner.fit_norm(demos.states)
    res = learner.rollout(backend, bucket, jax.random.key(1), 3)
    info = learner.add_rollout(res, bucket, phi_fn=_phi(bucket.sym))
    assert info["transitions"] == 2 * 3  # two valid variants, no success in 3 chunks
    before = jax.tree.map(np.asarray, learner.pstate.params)
    m = learner.update_critic(5, jax.random.key(2))
    assert np.isfinite(m["loss"])
    learner.update_policy_awr(1, jax.random.key(3))
    learner.update_policy_bc(
        learner.demo_batch(demos, bucket, only_success=False), 1, jax.random.key(4)
    )
    after = jax.tree.map(np.asarray, learner.pstate.params)
    changed = any(
        not np.array_equal(a, b)
        for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after), strict=True)
    )
    assert changed == (mode != "frozen_policy")
    assert learner.policy_updates == (0 if mode == "frozen_policy" else 2)
    with pytest.raises(ValueError, match="unknown learner mode"):
        LearnerConfig(mode="online")


def test_awr_batches_mix_in_demos(setup):
    """demo_fraction 0.5: half of each AWR batch is planner-demo rows with weight 1."""
    bucket, policy, backend = setup
    cfg = LearnerConfig(policy_batch=4, demo_fraction=0.5, critic_hidden=16, n_step=2)
    learner = Learner(policy, cfg, jax.random.key(0))
    demos = backend.rollout(bucket, planner_for(bucket, horizon=4), None, jax.random.key(0), 3)
    learner.fit_norm(demos.states)
    res = learner.rollout(backend, bucket, jax.random.key(1), 3, num_candidates=1)
    pool = SOURCES.index("pool")
    learner.add_rollout(res, bucket, source=np.full(bucket.batch_size, pool, np.int32))
    assert learner.awr_policy_batch(jax.random.key(2)).weights.shape == (4,)  # no demos yet
    d = learner.demo_batch(demos, bucket, only_success=False)
    learner.set_demos(d)
    b = learner.awr_policy_batch(jax.random.key(2))
    chex.assert_shape(b.actions, (4, 4, 7))
    np.testing.assert_array_equal(np.asarray(b.weights[2:]), 1.0)
    demo_rows = {np.asarray(a).tobytes() for a in np.asarray(d.actions)}
    assert all(np.asarray(a).tobytes() in demo_rows for a in np.asarray(b.actions[2:]))
    # each source's share of the batches' weight: own rows (all "pool" here) weigh mean 1, as
    # the demo rows do, so half and half
    shares = learner.weight_shares(jax.random.key(4), n_batches=3)
    assert shares["pool"] == pytest.approx(0.5, abs=1e-5)
    assert shares["demos"] == pytest.approx(0.5, abs=1e-5)
    assert shares["targeted"] == shares["novel"] == shares["other"] == 0.0
    learner.update_policy_awr(1, jax.random.key(3))
    with pytest.raises(ValueError, match="demo_fraction"):
        LearnerConfig(demo_fraction=1.0)


@pytest.mark.slow  # its own learner compile (policy_ema)
def test_learner_acts_with_ema_weights_when_enabled(setup):
    """policy_ema > 0: rollouts use the EMA of the weights (ema ← d·ema + (1−d)·params)."""
    bucket, policy, backend = setup
    cfg = LearnerConfig(policy_batch=4, policy_ema=0.5, policy_warmup=1)
    learner = Learner(policy, cfg, jax.random.key(0))
    p0 = jax.tree.map(np.asarray, learner.pstate.params)
    demos = backend.rollout(bucket, planner_for(bucket, horizon=4), None, jax.random.key(0), 2)
    learner.fit_norm(demos.states)
    # step 0 runs at the warmup's initial lr 0 (params unchanged), step 1 moves them
    learner.update_policy_bc(learner.demo_batch(demos, bucket, False), 2, jax.random.key(1))
    p1 = jax.tree.map(np.asarray, learner.pstate.params)
    acting = learner.agent_params().policy
    leaves = [jax.tree.leaves(t) for t in (acting, p0, p1)]
    for e, a, b in zip(*leaves, strict=True):
        np.testing.assert_allclose(np.asarray(e), 0.5 * a + 0.5 * b, rtol=1e-5, atol=1e-7)
    assert not all(np.array_equal(a, b) for a, b in zip(leaves[1], leaves[2], strict=True))
    off = Learner(policy, LearnerConfig(policy_batch=4), jax.random.key(0))
    assert off.agent_params().policy is off.pstate.params


def test_snap_gripper():
    a = jnp.array([[0.3, -0.2, 0.1, 0.0, 0.5, -0.5, 0.7], [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, -0.01]])
    out = snap_gripper(a)
    np.testing.assert_array_equal(out[:, :6], a[:, :6])
    np.testing.assert_array_equal(out[:, 6], [1.0, -1.0])


def test_awr_positive_only_zeroes_non_positive_rows(setup):
    """awr_positive_only: replay rows with A <= 0 get weight 0; the filtered learner compiles
    its own batch program (programs are shared across learners, keyed by the AWR settings)."""
    bucket, policy, backend = setup
    out = {}
    for pos in (False, True):
        cfg = LearnerConfig(policy_batch=8, critic_hidden=16, n_step=2, awr_positive_only=pos)
        learner = Learner(policy, cfg, jax.random.key(0))
        res = learner.rollout(backend, bucket, jax.random.key(1), 3, num_candidates=1)
        learner.add_rollout(res, bucket)
        b = learner.awr_policy_batch(jax.random.key(2))
        adv = learner.critic.advantage(learner.cstate.params, b.obs, b.actions)
        out[pos] = (np.asarray(b.weights), np.asarray(adv))
    (w0, a0), (w1, a1) = out[False], out[True]
    np.testing.assert_allclose(a0, a1, atol=1e-6)  # same critic init, same rows
    assert (a1 > 0).any() and (a1 <= 0).any()
    np.testing.assert_array_equal(w1[a1 <= 0], 0.0)
    assert (w1[a1 > 0] > 0).all() and (w0 > 0).all()
