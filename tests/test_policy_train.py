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
from coda.policy.base import fit_prompt, prompt_width, token_bucket
from coda.policy.train import make_scan_train_step
from coda.train.replay import Replay


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


@pytest.mark.slow  # a learning check (24 s on a fresh clone): the suite's 10-minute budget
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


@pytest.mark.slow  # compiles the k-step scan and the single step
def test_scan_of_k_updates_equals_k_single_steps():
    """K updates in one jitted lax.scan, minibatches drawn from a device buffer inside it, give
    the same train state as K jitted single steps on the same draws (float32 tolerance)."""
    policy = get_policy("small_tiny")
    pool = _synthetic_batch(policy, 16)
    buf = Replay.from_rows(pool)
    cfg = train_config(peak_lr=1e-3, warmup_steps=2, decay_steps=20, ema_decay=0.9)
    params = policy.init(jax.random.key(0))
    k = 3
    keys = jax.random.split(jax.random.key(1), k)
    scan = make_scan_train_step(policy, cfg, lambda data, key: data.sample(key, 4))
    s_scan, m_scan = scan(init_train_state(params, cfg), buf, keys)
    step = make_train_step(policy, cfg)
    state = init_train_state(params, cfg)
    for key in keys:
        k_batch, k_loss = jax.random.split(key)
        state, m = step(state, buf.sample(k_batch, 4), k_loss)
    assert int(s_scan.step) == int(state.step) == k
    for a, b in zip(jax.tree.leaves(s_scan), jax.tree.leaves(state), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(m_scan["loss"]), float(m["loss"]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["small_tiny", "oft_tiny"])
def test_prompt_cut_to_needed_width_leaves_the_loss_unchanged(name):
    """Padded prompt columns are masked keys: cutting them (32-style fixed width -> the bucket
    the batch needs) leaves every sample's loss unchanged up to float tolerance."""
    policy = get_policy(name)
    c = policy.config
    batch = _synthetic_batch(policy, 4)  # 8 prompt tokens, all valid
    rows = np.arange(8)[None, :] < np.array([[5], [8], [3], [6]])  # ragged prompts [4, 8]
    tok = np.where(rows, np.asarray(batch.obs.tokens), 0)
    full_tok, full_mask = fit_prompt(tok, rows, c.max_token_len)  # padded to max_token_len
    assert full_tok.shape[1] == 16 and prompt_width(full_mask) == 8
    width = token_bucket(prompt_width(full_mask), c.max_token_len)
    assert width == 8
    cut_tok, cut_mask = fit_prompt(full_tok, full_mask, width)

    @jax.jit
    def loss(tokens, mask):  # per-sample losses [4]
        obs = batch.obs.replace(tokens=tokens, token_mask=mask)
        return policy.per_sample_loss(params, batch.replace(obs=obs), rng)

    params, rng = policy.init(jax.random.key(0)), jax.random.key(3)
    full, cut = loss(full_tok, full_mask), loss(cut_tok, cut_mask)
    np.testing.assert_allclose(np.asarray(cut), np.asarray(full), rtol=1e-5, atol=1e-6)
    assert token_bucket(1, 32) == 8 and token_bucket(9, 32) == 16 and token_bucket(30, 32) == 32
    with pytest.raises(ValueError, match="cannot cut"):
        fit_prompt(full_tok, full_mask, 4)


@pytest.mark.parametrize("name", ["small", "oft"])
def test_flops_at_the_needed_prompt_width_match_xla(name):
    """The analytic count used for utilisation (pi0.5 and OFT, at a cut prompt width) agrees
    with XLA's unoptimised-HLO cost analysis (depth 1: scan bodies count once)."""
    from coda.policy import get_config
    from coda.policy.flops import oft_forward_flops, pi05_forward_flops

    c = get_config(name)
    c.vlm.depth = c.expert.depth = 1
    policy = get_policy(c)
    obs = policy.dummy_obs(1)
    obs = obs.replace(tokens=obs.tokens[:, :16], token_mask=obs.token_mask[:, :16])
    if name == "oft":
        lowered = jax.jit(policy.predict).lower(policy.param_shapes(), obs)
        ours = oft_forward_flops(c, token_len=16)["total"]
    else:
        x = jax.ShapeDtypeStruct((1, c.action_horizon, c.action_dim), jnp.float32)
        t = jax.ShapeDtypeStruct((1,), jnp.float32)
        lowered = jax.jit(policy.velocity).lower(policy.param_shapes(), obs, x, t)
        ours = pi05_forward_flops(c, token_len=16)["total"]
    xla = lowered.cost_analysis()["flops"]
    assert ours == pytest.approx(xla, rel=0.05, abs=0.0)


def test_two_phase_schedule_bc_then_finetune():
    """BC decays over `finetune_start` steps alone, then a second warmup-cosine at finetune_lr:
    the BC phase is the same whatever the fine-tuning phase is set to."""
    from coda.policy.train import make_schedule

    bc = train_config(peak_lr=1e-3, end_lr=1e-4, warmup_steps=10, decay_steps=100)
    two = train_config(
        peak_lr=1e-3,
        end_lr=1e-4,
        warmup_steps=10,
        decay_steps=100_000,  # ignored once finetune_start is set: BC decays over 100 steps
        finetune_start=100,
        finetune_lr=3e-4,
        finetune_warmup=5,
        finetune_decay_steps=50,
    )
    a, b = make_schedule(bc), make_schedule(two)
    for t in (0, 5, 10, 50, 99):
        np.testing.assert_allclose(float(a(t)), float(b(t)), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(float(b(100)), 0.0, atol=1e-9)  # warmup of the second phase
    np.testing.assert_allclose(float(b(105)), 3e-4, rtol=1e-5, atol=1e-9)  # its peak
    np.testing.assert_allclose(float(b(150)), 3e-5, rtol=1e-5, atol=1e-9)  # its floor
    with pytest.raises(ValueError, match="finetune_lr"):
        make_schedule(train_config(finetune_start=10))


def test_finetune_ema_decay_takes_over_at_finetune_start():
    """Before `finetune_start` the EMA decays at ema_decay (the BC phase is unchanged); from it
    on at finetune_ema_decay: 0 makes the EMA the raw weights."""
    policy = get_policy("small_tiny")
    batch = _synthetic_batch(policy, 4)
    kw = dict(peak_lr=1e-3, warmup_steps=1, decay_steps=10, ema_decay=0.9, finetune_start=2)
    kw.update(finetune_lr=1e-3, finetune_decay_steps=4)
    params = policy.init(jax.random.key(0))
    plain = make_train_step(policy, train_config(**kw))
    raw = make_train_step(policy, train_config(**kw, finetune_ema_decay=0.0))
    s_plain = init_train_state(params, train_config(**kw))  # two: each step donates its state
    s_raw = init_train_state(params, train_config(**kw))
    for i in range(3):
        k = jax.random.key(10 + i)
        s_plain, _ = plain(s_plain, batch, k)
        s_raw, _ = raw(s_raw, batch, k)
        leaves = zip(
            jax.tree.leaves(s_plain.ema_params), jax.tree.leaves(s_raw.ema_params), strict=True
        )
        if i < 2:  # the BC phase: the same EMA
            for a, b in leaves:
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    for e, p in zip(jax.tree.leaves(s_raw.ema_params), jax.tree.leaves(s_raw.params), strict=True):
        np.testing.assert_allclose(np.asarray(e), np.asarray(p), atol=1e-6)
    gap = max(
        float(np.abs(np.asarray(e) - np.asarray(p)).max())
        for e, p in zip(
            jax.tree.leaves(s_plain.ema_params), jax.tree.leaves(s_plain.params), strict=True
        )
    )
    assert gap > 1e-4  # at 0.9 the EMA lags the weights
    with pytest.raises(ValueError, match="finetune_ema_decay"):
        make_train_step(policy, train_config(**kw, finetune_ema_decay=1.5))
