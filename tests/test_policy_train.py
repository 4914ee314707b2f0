"""Learning checks: the flow-matching policy overfits a fixed batch of synthetic chunks."""

import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.policy import (
    Batch,
    get_policy,
    init_train_state,
    make_observation,
    make_train_step,
    train_config,
)


def _synthetic_batch(policy, b, seed=0):
    """Chunks that depend on the state (so the observation matters), 7-dim actions."""
    c = policy.config
    rng = np.random.default_rng(seed)
    state = rng.normal(size=(b, 12)).astype(np.float32)
    tokens = rng.integers(4, 900, (b, 8))
    obs = make_observation(
        tokens, np.ones((b, 8), bool), state=state, max_state_dim=c.max_state_dim
    )
    h = c.action_horizon
    ramp = np.linspace(0.0, 1.0, h, dtype=np.float32)[None, :, None]
    actions = np.tanh(state[:, None, :7] * (0.5 + ramp))  # [b, H, 7]
    return Batch(obs, jnp.asarray(actions))


def _overfit(name, b, steps, lr):
    policy = get_policy(name)
    batch = _synthetic_batch(policy, b)
    cfg = train_config(peak_lr=lr, warmup_steps=10, decay_steps=steps, end_lr=lr / 10)
    state = init_train_state(policy.init(jax.random.key(0)), cfg)
    step = make_train_step(policy, cfg)
    eval_loss = jax.jit(lambda p, r: policy.loss(p, batch, r)[0])
    keys = [jax.random.key(10_000 + i) for i in range(16)]  # same noise/time draws before/after
    before = np.mean([float(eval_loss(state.params, k)) for k in keys])
    t0 = time.time()
    for i in range(steps):
        state, metrics = step(state, batch, jax.random.key(i))
    assert np.isfinite(float(metrics["loss"]))
    after = np.mean([float(eval_loss(state.params, k)) for k in keys])
    after_ema = np.mean([float(eval_loss(state.ema_params, k)) for k in keys])
    return before, after, after_ema, time.time() - t0


def test_small_structure_overfits_fixed_batch():
    before, after, after_ema, _ = _overfit("small_tiny", b=8, steps=300, lr=3e-3)
    assert before / after >= 10.0, (before, after)
    assert after_ema < before


@pytest.mark.slow
def test_small_overfits_fixed_batch():
    before, after, _, _ = _overfit("small", b=16, steps=300, lr=1e-3)
    assert before / after >= 10.0, (before, after)


@pytest.mark.slow
def test_oft_overfits_fixed_batch():
    before, after, _, _ = _overfit("oft", b=16, steps=300, lr=1e-3)
    assert before / after >= 5.0, (before, after)  # L1 loss: a 5x drop is a 25x drop in L2
