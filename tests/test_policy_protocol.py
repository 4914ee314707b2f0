"""The policy protocol, checked identically on both backbones (pi0.5 and OFT) at test size."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.policy import (
    BACKBONES,
    Batch,
    get_config,
    get_policy,
    init_train_state,
    make_observation,
    make_train_step,
    restore_train_state,
    save_train_state,
    train_config,
)

# small_tiny in the default tier; oft_tiny (the other action head) in the slow tier
NAMES = ["small_tiny", pytest.param("oft_tiny", marks=pytest.mark.slow)]
B, A_ENV = 3, 7


@functools.cache
def _setup(name):
    policy = get_policy(name)
    params = policy.init(jax.random.key(0))
    rng = np.random.default_rng(0)
    c = policy.config
    obs = make_observation(
        rng.integers(4, 900, (B, 10)),
        np.arange(10)[None, :] < np.array([[10], [6], [3]]),
        state=rng.normal(size=(B, 11)).astype(np.float32),
        max_state_dim=c.max_state_dim,
    )
    actions = jnp.asarray(0.5 * rng.normal(size=(B, c.action_horizon, A_ENV)), jnp.float32)
    sample = jax.jit(policy.sample_chunks, static_argnames="num_candidates")
    grad = jax.jit(jax.grad(lambda p, b, r: policy.loss(p, b, r)[0]))
    loss = jax.jit(lambda p, b, r: policy.loss(p, b, r)[0])
    return policy, params, obs, actions, sample, grad, loss


@pytest.mark.parametrize("name", NAMES)
def test_sample_shapes_and_determinism(name):
    policy, params, obs, _, sample, *_ = _setup(name)
    h = policy.config.action_horizon
    for j in (1, 4):
        out = sample(params, obs, jax.random.key(1), num_candidates=j)
        chex.assert_shape(out, (B, j, h, A_ENV))
        chex.assert_tree_all_finite(out)
    a = sample(params, obs, jax.random.key(1), num_candidates=4)
    b = sample(params, obs, jax.random.key(1), num_candidates=4)
    c = sample(params, obs, jax.random.key(2), num_candidates=4)
    np.testing.assert_array_equal(a, b)
    assert np.max(np.abs(np.asarray(a) - np.asarray(c))) > 1e-4
    # the j candidates of one observation differ from each other
    assert np.max(np.abs(np.asarray(a[:, 0]) - np.asarray(a[:, 1]))) > 1e-4


def _flat(tree):
    return np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])


@pytest.mark.parametrize("name", NAMES)
def test_zero_weight_contributes_exactly_nothing(name):
    policy, params, obs, actions, _, grad, _ = _setup(name)
    rng = jax.random.key(3)
    w = jnp.array([0.0, 1.0, 2.0])
    g = _flat(grad(params, Batch(obs, actions, weights=w), rng))
    # Replace sample 0 by garbage: with weight 0 the gradient must not change at all.
    garbage = actions.at[0].set(100.0)
    state = obs.state.at[0].set(-50.0)
    g2 = _flat(grad(params, Batch(obs.replace(state=state), garbage, weights=w), rng))
    np.testing.assert_array_equal(g, g2)
    assert np.any(g != 0)
    g0 = _flat(grad(params, Batch(obs, actions, weights=jnp.zeros(3)), rng))
    assert np.all(g0 == 0)


@pytest.mark.parametrize("name", NAMES)
def test_weights_scale_linearly(name):
    policy, params, obs, actions, _, grad, loss = _setup(name)
    rng = jax.random.key(4)
    wa, wb = jnp.array([1.0, 0.0, 0.5]), jnp.array([0.0, 2.0, 0.25])
    la = loss(params, Batch(obs, actions, weights=wa), rng)
    lb = loss(params, Batch(obs, actions, weights=wb), rng)
    lab = loss(params, Batch(obs, actions, weights=wa + wb), rng)
    l3 = loss(params, Batch(obs, actions, weights=3.0 * wa), rng)
    np.testing.assert_allclose(lab, la + lb, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l3, 3.0 * la, rtol=1e-5, atol=1e-6)
    ga = _flat(grad(params, Batch(obs, actions, weights=wa), rng))
    gb = _flat(grad(params, Batch(obs, actions, weights=wb), rng))
    gab = _flat(grad(params, Batch(obs, actions, weights=wa + wb), rng))
    np.testing.assert_allclose(gab, ga + gb, rtol=1e-4, atol=1e-6)
    # ones == no weights
    np.testing.assert_allclose(
        loss(params, Batch(obs, actions, weights=jnp.ones(3)), rng),
        loss(params, Batch(obs, actions), rng),
        rtol=1e-6,
        atol=1e-6,
    )


@pytest.mark.parametrize("name", NAMES)
def test_padded_action_dims_are_masked(name):
    policy, params, obs, actions, _, grad, loss = _setup(name)
    rng = jax.random.key(5)
    mask = jnp.array([True] * 5 + [False] * 2)  # e.g. a robot without rotation-z and gripper
    changed = actions.at[..., 5:].set(37.0)
    l1 = loss(params, Batch(obs, actions, action_mask=mask), rng)
    l2 = loss(params, Batch(obs, changed, action_mask=mask), rng)
    np.testing.assert_array_equal(l1, l2)
    assert not np.allclose(
        loss(params, Batch(obs, changed), rng), loss(params, Batch(obs, actions), rng), atol=1e-6
    )
    with pytest.raises(ValueError, match="exceeds the model action_dim"):
        loss(params, Batch(obs, jnp.zeros((B, policy.config.action_horizon, 9))), rng)


@pytest.mark.parametrize("name", NAMES)
def test_train_step_and_bit_exact_checkpoint(name, tmp_path):
    policy, params, obs, actions, *_ = _setup(name)
    cfg = train_config(peak_lr=1e-3, warmup_steps=2, decay_steps=20, ema_decay=0.9)
    state = init_train_state(params, cfg)
    step = make_train_step(policy, cfg)
    batch = Batch(obs, actions, weights=jnp.array([1.0, 0.5, 2.0]))
    for i in range(3):
        state, metrics = step(state, batch, jax.random.key(i))
    assert int(state.step) == 3
    # warmup-cosine: step 2 is the end of the 2-step warmup -> peak lr
    np.testing.assert_allclose(float(metrics["lr"]), 1e-3, rtol=1e-6, atol=1e-6)
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
    # EMA moved towards params but is not equal to them
    d_ema = _flat(state.ema_params) - _flat(params)
    assert np.any(d_ema != 0) and np.any(_flat(state.ema_params) != _flat(state.params))
    save_train_state(tmp_path / "ckpt", state)
    target = jax.tree.map(jnp.zeros_like, state)
    restored = restore_train_state(tmp_path / "ckpt", target)
    assert jax.tree.structure(restored) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # training continues identically from the restored state
    s1, m1 = step(state, batch, jax.random.key(7))
    s2, m2 = step(restored, batch, jax.random.key(7))
    np.testing.assert_array_equal(_flat(s1.params), _flat(s2.params))


def test_state_only_errors_and_registry():
    policy, params, obs, *_ = _setup("small_tiny")
    with pytest.raises(ValueError, match="obs.state is None"):
        policy.sample_chunks(params, obs.replace(state=None), jax.random.key(0))
    with pytest.raises(ValueError, match="max_state_dim"):
        make_observation(obs.tokens, obs.token_mask, state=np.zeros((B, 99)), max_state_dim=16)
    with pytest.raises(ValueError, match="unknown policy config .*; valid: pi05, "):
        get_policy("nope")
    with pytest.raises(ValueError, match="unknown config field"):
        get_config("small", widht=3)
    assert set(BACKBONES) == {"pi05", "oft"}
    img = make_observation(
        obs.tokens, obs.token_mask, images={"base_0_rgb": np.full((B, 4, 4, 3), 255, np.uint8)}
    ).images["base_0_rgb"]
    assert img.dtype == jnp.float32 and float(img.min()) == 1.0
    # a rendered-mode observation is required when cameras are configured
    tiny = get_policy("tiny")
    with pytest.raises(ValueError, match="expects images"):
        tiny.param_shapes() and jax.eval_shape(
            tiny.velocity,
            tiny.param_shapes(),
            tiny.dummy_obs(1).replace(images=None),
            jnp.zeros((1, 4, 8)),
            jnp.ones((1,)),
        )


@pytest.mark.parametrize("name", ["pi05", "small", "oft", "small_cam"])
def test_named_configs_shape_only(name):
    if name == "small_cam":  # rendered mode of the small model: one camera + state tokens
        policy = get_policy("small", camera_names=("base_0_rgb",))
        name = "small"
    else:
        policy = get_policy(name)
    shapes = policy.param_shapes()
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    if name in ("small", "oft"):
        assert 1_000_000 < n < 10_000_000  # CPU-trainable: a few million parameters
    # Shape-evaluate sampling and the loss (the full config never allocates here).
    c = policy.config
    obs = policy.dummy_obs(2)
    out = jax.eval_shape(
        functools.partial(policy.sample_chunks, num_candidates=8), shapes, obs, jax.random.key(0)
    )
    assert out.shape == (2, 8, c.action_horizon, c.env_action_dim)
    batch = Batch(obs, jnp.zeros((2, c.action_horizon, c.env_action_dim)), weights=jnp.ones(2))
    loss = jax.eval_shape(lambda p: policy.loss(p, batch, jax.random.key(0))[0], shapes)
    assert loss.shape == ()
