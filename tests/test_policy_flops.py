"""Analytic FLOPs agree with XLA's HLO cost analysis (at depth 1: scan bodies count once)."""

import jax
import jax.numpy as jnp
import pytest

from coda.policy import get_config, get_policy
from coda.policy.flops import pi05_forward_flops, pi05_train_flops_per_sample


def _depth1(name):
    c = get_config(name)
    c.vlm.depth = c.expert.depth = 1
    c.siglip.depth = 1
    return c


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_analytic_flops_match_xla(name):
    policy = get_policy(_depth1(name))
    c = policy.config
    x = jax.ShapeDtypeStruct((1, c.action_horizon, c.action_dim), jnp.float32)
    t = jax.ShapeDtypeStruct((1,), jnp.float32)
    lowered = jax.jit(policy.velocity).lower(policy.param_shapes(), policy.dummy_obs(1), x, t)
    # Unoptimised-HLO cost analysis: counts every dot (the CPU backend's compiled analysis
    # misses dots lowered to library calls) but a scan body only once, hence depth 1.
    cost = lowered.cost_analysis()
    ours = pi05_forward_flops(c)["total"]
    assert abs(ours - cost["flops"]) / cost["flops"] < 0.1, (ours, cost["flops"])


def test_full_config_flops_are_sane():
    f = pi05_forward_flops(get_config("pi05"))
    # ~2 FLOPs per parameter per token dominates: Gemma 2B over ~968 prefix tokens.
    assert 3e12 < f["total"] < 8e12
    assert pi05_train_flops_per_sample(get_config("pi05")) == 3 * f["total"]
