"""openpi checkpoint import (orbax, both key forms) and openpi norm stats."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.traverse_util import flatten_dict
from openpi_fixtures import FIX

from coda.policy import (
    NormStats,
    Observation,
    get_policy,
    load_norm_stats,
    load_openpi,
    save_norm_stats,
    save_params,
)
from coda.policy.configs import OPENPI_CAMERAS

ORBAX = os.path.join(FIX, "pi05_tiny_orbax", "params")
NPZ = os.path.join(FIX, "pi05_tiny_parity.npz")
needs_fixture = pytest.mark.skipif(not os.path.exists(NPZ), reason="openpi fixtures not available")
TOL = dict(rtol=1e-4, atol=1e-5)


@needs_fixture
def test_load_tiny_orbax_reproduces_fixture(tmp_path):
    z = np.load(NPZ)
    policy = get_policy("tiny")
    params = load_openpi(ORBAX, expected=policy.param_shapes())  # keys end in 'value' on disk
    flat = flatten_dict(params, sep="/")
    assert len(flat) == 51
    for k, v in flat.items():
        np.testing.assert_array_equal(v, z[f"params/{k}"])

    inp = {k[7:]: z[k] for k in z.files if k.startswith("inputs/")}
    out = {k[8:]: z[k] for k in z.files if k.startswith("outputs/")}
    obs = Observation(
        tokens=jnp.asarray(inp["tokenized_prompt"]),
        token_mask=jnp.asarray(inp["tokenized_prompt_mask"]),
        images={c: jnp.asarray(inp[f"images/{c}"]) for c in OPENPI_CAMERAS},
        image_masks={c: jnp.asarray(inp[f"image_masks/{c}"]) for c in OPENPI_CAMERAS},
    )
    dev = jax.tree.map(jnp.asarray, params)
    v_t = jax.jit(policy.velocity)(dev, obs, jnp.asarray(out["x_t"]), jnp.asarray(inp["time"]))
    np.testing.assert_allclose(v_t, out["v_t"], **TOL)
    loss = jax.jit(policy.step_losses)(
        dev, obs, jnp.asarray(inp["actions"]), jnp.asarray(inp["noise"]), jnp.asarray(inp["time"])
    )
    np.testing.assert_allclose(loss, out["loss"], **TOL)
    sample = jax.jit(policy.sample_actions, static_argnums=3)(
        dev, obs, jnp.asarray(inp["sample_noise"]), 3
    )
    np.testing.assert_allclose(sample, out["sample_actions"], **TOL)

    # The pure-dict form (no trailing 'value'), inside a checkpoint step dir, loads the same.
    save_params(tmp_path / "step" / "params", params)
    again = load_openpi(tmp_path / "step", expected=policy.param_shapes())
    for k, v in flatten_dict(again, sep="/").items():
        np.testing.assert_array_equal(v, flat[k])
    bf = load_openpi(ORBAX, dtype=jnp.bfloat16)
    assert all(v.dtype == jnp.bfloat16 for v in jax.tree.leaves(bf))


@needs_fixture
def test_load_openpi_errors(tmp_path):
    with pytest.raises(ValueError, match="shape_mismatch"):
        load_openpi(ORBAX, expected=get_policy("small").param_shapes())
    with pytest.raises(FileNotFoundError):
        load_openpi(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not an orbax"):
        load_openpi(tmp_path / "empty")


def test_norm_stats_quantile_roundtrip(tmp_path):
    d = {
        "norm_stats": {
            "state": {
                "mean": [0.0, 1.0, 2.0],
                "std": [1.0, 2.0, 0.5],
                "q01": [-1.0, 0.0, 1.0],
                "q99": [1.0, 4.0, 3.0],
            },
            "actions": {"mean": [0.1, 0.2], "std": [0.3, 0.4]},
        }
    }
    path = tmp_path / "norm_stats.json"
    path.write_text(json.dumps(d))
    stats = load_norm_stats(tmp_path)  # a directory holding norm_stats.json also works
    st = stats["state"]
    x = np.array([[-1.0, 0.0, 1.0], [1.0, 4.0, 3.0], [0.0, 2.0, 2.0]], np.float32)
    y = st.normalize(x)
    np.testing.assert_allclose(y[0], -1.0, atol=1e-5)  # q01 -> -1
    np.testing.assert_allclose(y[1], 1.0, atol=1e-5)  # q99 -> +1
    np.testing.assert_allclose(y[2], 0.0, atol=1e-5)
    np.testing.assert_allclose(st.unnormalize(y), x, atol=1e-5)
    # shorter data uses the leading dims (openpi slices the stats)
    np.testing.assert_allclose(st.normalize(x[:, :2]), y[:, :2], atol=1e-6)
    z = st.normalize(x, use_quantiles=False)
    np.testing.assert_allclose(z[:, 1], (x[:, 1] - 1.0) / (2.0 + 1e-6), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(st.unnormalize(z, use_quantiles=False), x, atol=1e-5)
    with pytest.raises(ValueError, match="q01 and q99"):
        stats["actions"].normalize(np.zeros((1, 2)))
    save_norm_stats(tmp_path / "again.json", stats)
    again = load_norm_stats(tmp_path / "again.json")
    np.testing.assert_array_equal(again["state"].q99, st.q99)
    assert isinstance(again["actions"], NormStats) and again["actions"].q01 is None
    (tmp_path / "bad.json").write_text(json.dumps({"norm_stats": {"state": {"mean": [1]}}}))
    with pytest.raises(ValueError, match="mean' and 'std"):
        load_norm_stats(tmp_path / "bad.json")
