"""The Gemma stack's CPU-friendly layout (issue 12 §3, benchmarks/results/learner.md "v2"):
projections over 2-D rows, the MQA attention without transposed copies, an unrollable layer
scan. Same parameters, same numbers (the openpi fixture at scan_unroll = 0), and the compiled
train step keeps activation-sized transposes out."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from openpi_fixtures import PARITY_NPZ as NPZ
from openpi_fixtures import load_parity

from coda.policy import Batch, Observation, get_config, get_policy
from coda.policy.gemma import Einsum
from coda.policy.pi05 import Pi05Policy

B = 4


def _batch(policy, n: int = B) -> Batch:
    c = policy.config
    rng = np.random.default_rng(0)
    tok = rng.integers(4, 100, (n, c.max_token_len))
    mask = np.arange(c.max_token_len)[None, :] < np.array([[5], [9], [16], [3]])[:n]
    state = rng.normal(size=(n, c.max_state_dim)).astype(np.float32)
    obs = Observation(
        jnp.asarray(np.where(mask, tok, 0), jnp.int32),
        jnp.asarray(mask),
        jnp.asarray(state),
        jnp.ones((n, c.max_state_dim), bool),
    )
    act = jnp.asarray(np.tanh(rng.normal(size=(n, c.action_horizon, c.env_action_dim))))
    return Batch(obs, act.astype(jnp.float32), jnp.ones((n,), jnp.float32))


def _small_tiny(unroll: int):
    c = get_config("small_tiny", scan_unroll=unroll)
    c.vlm.depth = c.expert.depth = 2
    return get_policy(c)


@pytest.fixture(scope="module")
def grads():
    out = {}
    for unroll in (0, 1):
        policy = _small_tiny(unroll)
        params = policy.init(jax.random.key(0))
        f = jax.jit(
            jax.value_and_grad(lambda p, b, pol=policy: pol.loss(p, b, jax.random.key(1))[0])
        )
        out[unroll] = (params, *f(params, _batch(policy)))
    return out


@pytest.mark.slow  # two depth-2 train-step compiles: ~30 s of a CI worker
def test_unrolled_layers_same_params_loss_and_grads(grads):
    p0, l0, g0 = grads[0]
    p1, l1, g1 = grads[1]
    assert jax.tree.structure(p0) == jax.tree.structure(p1)
    for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(p1), strict=True):
        np.testing.assert_array_equal(a, b)  # same init: unrolling changes no parameter
    np.testing.assert_allclose(l0, l1, rtol=1e-6, atol=1e-7)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g1), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_scan_unroll_is_validated():
    policy = get_policy(get_config("small_tiny", scan_unroll=-1))
    with pytest.raises(ValueError, match="scan_unroll"):
        policy.init(jax.random.key(0))


def test_einsum_rejects_a_non_row_projection():
    with pytest.raises(ValueError, match="row projection"):
        Einsum((3, 4)).init(jax.random.key(0), "DB,DF->BF", jnp.zeros((3, 2)))


@pytest.mark.skipif(not os.path.exists(NPZ), reason="openpi fixtures not available")
def test_unrolled_tiny_matches_openpi_fixture():
    params, inp, out, obs = load_parity()
    policy = Pi05Policy(get_config("tiny", scan_unroll=0))
    v_t = jax.jit(policy.velocity)(params, obs, jnp.asarray(out["x_t"]), jnp.asarray(inp["time"]))
    np.testing.assert_allclose(v_t, out["v_t"], rtol=1e-4, atol=1e-5)
    sample = jax.jit(policy.sample_actions, static_argnums=3)(
        params, obs, jnp.asarray(inp["sample_noise"]), int(inp["num_sample_steps"])
    )
    np.testing.assert_allclose(sample, out["sample_actions"], rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # compiles a train step to read its HLO
def test_train_step_has_no_activation_sized_transposes():
    """The regression this layout fixes: weight gradients contracting over (batch, token) made
    XLA:CPU write [F, B*T] transposed copies of the backward's activations."""
    policy = _small_tiny(0)
    c = policy.config
    batch = _batch(policy)
    params = policy.init(jax.random.key(0))
    f = jax.jit(jax.grad(lambda p, b: policy.loss(p, b, jax.random.key(1))[0]))
    hlo = f.lower(params, batch).compile().as_text()
    prefix_rows = B * (c.num_state_tokens + c.max_token_len)
    floor = prefix_rows * c.vlm.width  # one [B*T, D] activation of the prefix expert
    sizes = [
        int(np.prod([int(d) for d in m.group(1).split(",")]))
        for m in re.finditer(r"= f32\[([0-9,]+)\]\{[0-9,]+\} transpose\(", hlo)
    ]
    assert sizes, "expected the small weight permutes to show up as transposes"
    assert max(sizes) < floor, (sorted(sizes)[-5:], floor)
