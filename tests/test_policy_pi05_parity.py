"""pi0.5 parity with openpi: full-config param tree and the tiny numerical fixture."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict
from openpi_fixtures import FIX, load_parity

from coda.policy.configs import OPENPI_CAMERAS, get_config
from coda.policy.pi05 import Pi05Model, Pi05Policy, cached_suffix_layout, posemb_sincos

NPZ = os.path.join(FIX, "pi05_tiny_parity.npz")
pytestmark = pytest.mark.skipif(not os.path.exists(NPZ), reason="openpi fixtures not available")

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(scope="module")
def fx():
    params, inp, out, obs = load_parity()
    return _Jitted(Pi05Policy(get_config("tiny"))), params, inp, out, obs


class _Jitted:
    """The policy with its entry points jitted (eager op-by-op dispatch is slow on CPU)."""

    def __init__(self, policy):
        self.policy = policy
        self.velocity = jax.jit(policy.velocity)
        self.step_losses = jax.jit(policy.step_losses)
        self.sample_actions = jax.jit(policy.sample_actions, static_argnums=3)
        self.apply = jax.jit(policy.apply, static_argnames="method")
        self.model = policy.model

    def __getattr__(self, name):
        return getattr(self.policy, name)


@pytest.mark.parametrize("name", ["pi05", "pi05_libero"])
def test_full_param_tree_matches_openpi(name):
    ref = json.load(open(os.path.join(FIX, f"{name}_param_shapes.json")))
    shapes = Pi05Policy(get_config(name)).param_shapes()  # eval_shape: nothing allocated
    flat = flatten_dict(shapes, sep="/")
    assert all(isinstance(v, jax.ShapeDtypeStruct) for v in flat.values())
    got = {k: (list(v.shape), str(v.dtype)) for k, v in flat.items()}
    want = {k: (v["shape"], v["dtype"]) for k, v in ref["params"].items()}
    assert got == want
    assert sum(int(np.prod(v.shape)) for v in flat.values()) == ref["total_param_count"]


def test_tiny_param_tree_matches_fixture(fx):
    policy, params, *_ = fx
    ours = {k: v.shape for k, v in flatten_dict(policy.param_shapes(), sep="/").items()}
    ref = {k: v.shape for k, v in flatten_dict(params, sep="/").items()}
    assert ours == ref
    assert sum(int(np.prod(s)) for s in ours.values()) == 161544


def test_primary_targets(fx):
    policy, params, inp, out, obs = fx
    t = inp["time"][:, None, None]
    np.testing.assert_allclose(t * inp["noise"] + (1 - t) * inp["actions"], out["x_t"], **TOL)
    np.testing.assert_allclose(inp["noise"] - inp["actions"], out["u_t"], **TOL)
    v_t = policy.velocity(params, obs, jnp.asarray(out["x_t"]), jnp.asarray(inp["time"]))
    np.testing.assert_allclose(v_t, out["v_t"], **TOL)
    loss = policy.step_losses(
        params,
        obs,
        jnp.asarray(inp["actions"]),
        jnp.asarray(inp["noise"]),
        jnp.asarray(inp["time"]),
    )
    np.testing.assert_allclose(loss, out["loss"], **TOL)
    sample = policy.sample_actions(
        params, obs, jnp.asarray(inp["sample_noise"]), int(inp["num_sample_steps"])
    )
    np.testing.assert_allclose(sample, out["sample_actions"], **TOL)


def test_loss_from_rng(fx):
    policy, params, inp, out, obs = fx
    actions = jnp.asarray(inp["actions"])
    noise, time = policy.draw_noise_time(jax.random.key(int(inp["loss_rng_seed"])), actions.shape)
    # Our RNG path reproduces openpi's draws; the stored draws are checked independently too.
    np.testing.assert_allclose(noise, out["rng_noise"], **TOL)
    np.testing.assert_allclose(time, out["rng_time"], **TOL)
    loss = policy.step_losses(params, obs, actions, noise, time)
    np.testing.assert_allclose(loss, out["loss_from_rng"], **TOL)
    t = jnp.asarray(out["rng_time"])[:, None, None]
    x_t = t * out["rng_noise"] + (1 - t) * actions
    v_t = policy.velocity(params, obs, x_t, jnp.asarray(out["rng_time"]))
    np.testing.assert_allclose(v_t, out["v_t_from_rng_noise_time"], **TOL)
    loss2 = policy.step_losses(
        params, obs, actions, jnp.asarray(out["rng_noise"]), jnp.asarray(out["rng_time"])
    )
    np.testing.assert_allclose(loss2, out["loss_from_rng"], **TOL)


def test_intermediates(fx):
    policy, params, inp, out, obs = fx
    for cam in OPENPI_CAMERAS:
        tok = policy.apply(params, jnp.asarray(inp[f"images/{cam}"]), method=Pi05Model.image_tokens)
        np.testing.assert_allclose(tok, out[f"siglip_tokens/{cam}"], **TOL)
    emb = policy.apply(params, obs.tokens, method=Pi05Model.embed_text)
    np.testing.assert_allclose(emb, out["text_embeddings"], **TOL)
    np.testing.assert_allclose(
        posemb_sincos(jnp.asarray(inp["time"]), 32), out["time_sincos"], **TOL
    )

    d, inter = jax.jit(policy.model.apply, static_argnames=("method", "mutable"))(
        {"params": params},
        obs,
        jnp.asarray(out["x_t"]),
        jnp.asarray(inp["time"]),
        method=Pi05Model.joint_forward,
        mutable=("intermediates",),
    )
    for k in ("prefix_mask", "prefix_ar_mask", "suffix_ar_mask", "input_mask", "attn_mask"):
        np.testing.assert_array_equal(d[k], out[k])
    np.testing.assert_array_equal(d["positions"], out["positions"])
    for k in ("prefix_tokens", "suffix_tokens", "adarms_cond", "suffix_out", "v_t"):
        np.testing.assert_allclose(d[k], out[k], **TOL)
    valid = out["prefix_mask"]  # rows without a valid key are undefined (see fixture README)
    np.testing.assert_allclose(d["prefix_out"][valid], out["prefix_out"][valid], **TOL)
    full_valid = out["input_mask"]
    for k in ("kv_cache_k", "kv_cache_v"):
        np.testing.assert_allclose(d[k][:, full_valid], out[k][:, full_valid], **TOL)
    hidden = inter["intermediates"]["PaliGemma"]["llm"]["layers"]["hidden"][0]
    p_hid, s_hid = hidden  # [depth, B, S, W0], [depth, B, H, W1]
    np.testing.assert_allclose(p_hid[:, valid], out["prefix_hidden_per_layer"][:, valid], **TOL)
    np.testing.assert_allclose(s_hid, out["suffix_hidden_per_layer"], **TOL)


def test_kv_cached_sampler_steps(fx):
    policy, params, inp, out, obs = fx
    (k, v), pmask = policy.apply(params, obs, method=Pi05Model.prefix_cache)
    valid = out["prefix_mask"]
    np.testing.assert_allclose(k[:, valid], out["sample_prefix_kv_cache_k"][:, valid], **TOL)
    np.testing.assert_allclose(v[:, valid], out["sample_prefix_kv_cache_v"][:, valid], **TOL)
    full, pos = cached_suffix_layout(pmask, jnp.ones((2, 4), bool), out["suffix_ar_mask"])
    np.testing.assert_array_equal(full, out["sample_suffix_full_attn_mask"])
    np.testing.assert_array_equal(pos, out["sample_suffix_positions"])
    x = jnp.asarray(inp["sample_noise"])
    n = int(inp["num_sample_steps"])
    t = jnp.float32(1.0)
    dt = -1.0 / n
    for i in range(n):
        np.testing.assert_allclose(t, out["sample_step_times"][i], rtol=0, atol=1e-7)
        np.testing.assert_allclose(x, out["sample_step_x_t"][i], **TOL)
        vt = policy.apply(
            params, (k, v), pmask, x, jnp.full((2,), t), method=Pi05Model.cached_velocity
        )
        np.testing.assert_allclose(vt, out["sample_step_v_t"][i], **TOL)
        x = x + dt * vt
        t = t + jnp.float32(dt)
    np.testing.assert_allclose(x, out["sample_actions"], **TOL)
    np.testing.assert_allclose(
        out["joint_v_t_at_t1_on_sample_noise"], out["sample_step_v_t"][0], atol=1e-5
    )


def test_invariances(fx):
    """Masked camera, padded token ids and the state do not change v_t."""
    policy, params, inp, out, obs = fx
    x_t, time = jnp.asarray(out["x_t"]), jnp.asarray(inp["time"])
    v_ref = policy.velocity(params, obs, x_t, time)
    imgs = dict(obs.images)
    imgs["right_wrist_0_rgb"] = jax.random.uniform(
        jax.random.key(3), imgs["right_wrist_0_rgb"].shape
    )
    toks = jnp.where(obs.token_mask, obs.tokens, 7)
    obs2 = obs.replace(images=imgs, tokens=toks, state=jnp.ones((2, 8)))
    np.testing.assert_array_equal(policy.velocity(params, obs2, x_t, time), v_ref)
    masks = dict(obs.image_masks)
    masks["right_wrist_0_rgb"] = jnp.ones((2,), bool)
    v3 = policy.velocity(params, obs.replace(image_masks=masks), x_t, time)
    assert np.max(np.abs(v3 - v_ref)) > 1e-3


def test_bfloat16_compute_runs_close(fx):
    """openpi's default compute dtype (bf16) is not fixtured; check it stays near the f32 truth."""
    _, params, inp, out, obs = fx
    policy = Pi05Policy(get_config("tiny", dtype="bfloat16"))
    v_t = jax.jit(policy.velocity)(params, obs, jnp.asarray(out["x_t"]), jnp.asarray(inp["time"]))
    assert v_t.dtype == jnp.float32
    np.testing.assert_allclose(v_t, out["v_t"], atol=5e-2)
