"""Chunk critic: heads, target network, n-step transitions, and a tiny learning sanity check."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.policy.base import Observation
from coda.train.critic import (
    ChunkCritic,
    Transitions,
    critic_loss,
    init_critic_state,
    make_critic_fit,
    make_critic_train_step,
)

D, L, H, A = 8, 6, 4, 7


def _critic(**kw) -> ChunkCritic:
    return ChunkCritic(vocab_size=32, max_state_dim=D, horizon=H, max_token_len=L, **kw)


def _obs(b: int, key) -> Observation:
    k1, k2 = jax.random.split(key)
    return Observation(
        tokens=jax.random.randint(k1, (b, L), 1, 32),
        token_mask=jnp.arange(L)[None].repeat(b, 0) < 4,
        state=jax.random.normal(k2, (b, D)),
        state_mask=jnp.ones((b, D), bool),
    )


def test_heads_shapes_and_candidate_scores():
    critic = _critic(num_heads=3, hidden=16)
    params = critic.init(jax.random.key(0))
    obs = _obs(5, jax.random.key(1))
    acts = jax.random.uniform(jax.random.key(2), (5, H, A), minval=-1, maxval=1)
    q = critic.q(params, obs, acts)
    chex.assert_shape(q, (3, 5))
    chex.assert_shape(critic.v(params, obs), (5,))
    np.testing.assert_allclose(critic.q_min(params, obs, acts), q.min(0), rtol=1e-6, atol=1e-6)
    assert float(jnp.std(q[0] - q[1])) > 0  # independent heads
    np.testing.assert_allclose(
        critic.advantage(params, obs, acts), q.min(0) - critic.v(params, obs), rtol=1e-5, atol=1e-6
    )
    cands = jax.random.uniform(jax.random.key(3), (5, 4, H, A), minval=-1, maxval=1)
    s = critic.score_candidates(params, obs, cands)
    chex.assert_shape(s, (5, 4))
    np.testing.assert_allclose(
        s[:, 2], critic.q_min(params, obs, cands[:, 2]), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match=">= 2 heads"):
        _critic(num_heads=1)


def _transitions(n: int, key) -> Transitions:
    k = jax.random.split(key, 3)
    obs = _obs(n, k[0])
    acts = jax.random.uniform(k[1], (n, H, A), minval=-1, maxval=1)
    # Return depends on the first action dim of the chunk: +1 if positive, else 0; terminal.
    ret = (acts[:, :, 0].mean(-1) > 0).astype(jnp.float32)
    return Transitions(
        obs.state,
        obs.state_mask,
        obs.tokens,
        obs.token_mask,
        acts,
        ret,
        jax.random.normal(k[2], (n, D)),
        jnp.zeros((n,)),
        ret,
        ret,
    )


def test_target_network_polyak_and_bootstrap():
    critic = _critic(hidden=16)
    state = init_critic_state(critic, jax.random.key(0))
    chex.assert_trees_all_equal(state.params, state.target_params)
    tau = 0.25
    step = make_critic_train_step(critic, lr=1e-2, tau=tau)
    batch = _transitions(16, jax.random.key(1))
    new, metrics = step(state, batch)
    assert int(new.step) == 1 and np.isfinite(metrics["loss"])
    for t_new, t_old, p_new in zip(
        jax.tree.leaves(new.target_params),
        jax.tree.leaves(state.target_params),
        jax.tree.leaves(new.params),
        strict=True,
    ):
        np.testing.assert_allclose(t_new, (1 - tau) * t_old + tau * p_new, rtol=1e-5, atol=1e-6)
    # The bootstrap goes through the *target* V scaled by boot_disc: changing online params
    # alone leaves the TD target unchanged.
    boot = batch.replace(boot_disc=jnp.full((16,), 0.5))
    _, m1 = critic_loss(critic, state.params, state.target_params, boot)
    _, m2 = critic_loss(critic, state.params, new.params, boot)
    assert float(m1["td_error"]) != float(m2["td_error"])


@pytest.mark.slow  # a learning test (~16 s)
def test_critic_learns_chunk_values():
    """Tiny sanity check: Q separates good from bad chunks, V tracks the mean return."""
    critic = _critic(hidden=64)
    data = _transitions(256, jax.random.key(4))
    state = init_critic_state(critic, jax.random.key(5), lr=3e-3)
    fit = make_critic_fit(critic, lr=3e-3, tau=0.05, batch_size=64)
    _, m0 = critic_loss(critic, state.params, state.target_params, data)
    state, _ = fit(state, data, jax.random.split(jax.random.key(6), 400))
    _, m1 = critic_loss(critic, state.params, state.target_params, data)
    assert float(m1["q_loss"]) < 0.25 * float(m0["q_loss"])
    q = critic.q_min(state.params, data.obs(), data.actions)
    good = np.asarray(data.ret) > 0.5
    assert float(q[good].mean()) - float(q[~good].mean()) > 0.5
    v = critic.v(state.params, data.obs())
    assert abs(float(v.mean()) - float(data.ret.mean())) < 0.2
