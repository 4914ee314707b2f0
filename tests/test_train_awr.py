"""AWR weights, AWR == BC with equal advantages, routing and refinement decisions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.policy import get_policy, init_train_state, make_train_step, train_config
from coda.train.awr import awr_batch, awr_weights, bc_batch
from coda.train.routing import RoutingConfig, refinement_report, route


def test_equal_advantages_give_unit_weights_exactly():
    for a in (0.0, 1.3, -7.25, 1e4):
        w = awr_weights(jnp.full((17,), a), temperature=0.37)
        np.testing.assert_array_equal(np.asarray(w), np.ones(17, np.float32))


def test_larger_advantage_larger_weight():
    adv = jnp.array([0.0, 0.1, -0.2, 0.3])
    w0 = awr_weights(adv, temperature=0.5)
    w1 = awr_weights(adv.at[1].add(0.4), temperature=0.5)
    assert w1[1] > w0[1]
    assert np.all(np.asarray(w1)[[0, 2, 3]] < np.asarray(w0)[[0, 2, 3]])  # mass moves to it
    # Monotone in the advantage; mean 1 before clipping; clipped at max_weight.
    assert np.all(np.diff(np.asarray(awr_weights(jnp.arange(5.0), 1.0))) > 0)
    np.testing.assert_allclose(float(jnp.mean(w0)), 1.0, rtol=1e-6, atol=1e-6)
    wc = awr_weights(jnp.array([0.0, 0.0, 0.0, 10.0]), temperature=0.1, max_weight=2.0)
    assert float(wc.max()) == 2.0
    # Masked samples get zero weight and do not enter the normalisation.
    wm = awr_weights(jnp.array([1.0, 1.0, 50.0]), 1.0, mask=jnp.array([True, True, False]))
    np.testing.assert_array_equal(np.asarray(wm), [1.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="temperature"):
        awr_weights(adv, temperature=0.0)


@pytest.mark.slow  # two train-step compiles
def test_awr_update_with_equal_advantages_equals_bc_step():
    policy = get_policy("small_tiny")
    cfg = train_config(peak_lr=1e-3, init_lr=1e-3, warmup_steps=1, ema_decay=None)
    params = policy.init(jax.random.key(0))
    step = make_train_step(policy, cfg)
    obs = policy.dummy_obs(4)
    k = jax.random.split(jax.random.key(1), 2)
    obs = obs.replace(state=jax.random.normal(k[0], obs.state.shape))
    actions = jax.random.uniform(k[1], (4, 4, 7), minval=-1, maxval=1)
    rng = jax.random.key(2)

    bc_state, bc_m = step(init_train_state(params, cfg), bc_batch(obs, actions), rng)
    awr = awr_batch(obs, actions, jnp.full((4,), 0.731), temperature=0.2)
    awr_state, awr_m = step(init_train_state(params, cfg), awr, rng)
    np.testing.assert_array_equal(
        np.asarray(awr.weights), np.asarray(bc_batch(obs, actions).weights)
    )
    for a, b in zip(
        jax.tree.leaves(awr_state.params), jax.tree.leaves(bc_state.params), strict=True
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-7)
    np.testing.assert_allclose(float(awr_m["loss"]), float(bc_m["loss"]), rtol=1e-6, atol=1e-6)
    moved = max(
        float(jnp.max(jnp.abs(a - b)))
        for a, b in zip(jax.tree.leaves(awr_state.params), jax.tree.leaves(params), strict=True)
    )
    assert moved > 0.0  # the step did something


def test_routing_by_success_band():
    cfg = RoutingConfig(band=(0.1, 0.9), zero_tol=0.02, reeval_every=3)
    r = route(
        {"reach": 0.95, "grasp": 0.5, "lift": 0.0, "place": 0.0, "release": 0.05},
        has_demo={"lift": True},
        cfg=cfg,
        round_index=3,
    )
    assert r.tools == {
        "reach": "reeval",
        "grasp": "awr",
        "lift": "bc",
        "place": "none",
        "release": "none",
    }
    assert not r.lower_importance
    assert route({"reach": 0.95}, cfg=cfg, round_index=1).tools["reach"] == "none"
    out = route({"a": 0.0, "b": 1.0}, has_demo={"a": True}, cfg=cfg)
    assert out.lower_importance and out.keys_for("bc") == ["a"]
    with pytest.raises(ValueError):
        route({"a": 1.5})
    with pytest.raises(ValueError):
        RoutingConfig(band=(0.5, 0.2))
    with pytest.raises(ValueError, match="unknown tool"):
        out.keys_for("dagger")


def test_refinement_flags_unhelpful_potentials():
    steps = [10, 20, 30, 40]
    good = refinement_report(steps, [0.5, 0.2, 0.1, 0.05], [0.9, 0.7, 0.4, 0.1], threshold=0.15)
    assert good.useful and good.speedup > 1.5 and good.steps_with < good.steps_without
    bad = refinement_report(steps, [0.9, 0.8, 0.5, 0.2], [0.5, 0.2, 0.1, 0.05])
    assert not bad.useful and bad.speedup < 1.0
    with pytest.raises(ValueError):
        refinement_report(steps, [0.1], [0.2, 0.3, 0.1, 0.1])


def test_positive_only_weights_drop_non_positive_advantages():
    adv = jnp.array([0.3, -0.2, 0.0, 0.1])
    w = awr_weights(adv, temperature=0.1, max_weight=100.0, positive_only=True)
    assert np.asarray(w)[[1, 2]] == pytest.approx([0.0, 0.0], abs=0.0)
    # kept rows: exp(A/λ) ratio e^2, mean 1 over the kept pair, then x 4 valid / 2 kept: the
    # kept rows carry the batch's whole weight (mean 1 over the 4 rows)
    e = np.exp(2.0)
    assert np.asarray(w)[[0, 3]] == pytest.approx([4 * e / (1 + e), 4 / (1 + e)], abs=1e-4)
    assert float(np.sum(w)) == pytest.approx(4.0, abs=1e-4)
    none = awr_weights(jnp.array([-0.1, 0.0]), 0.1, positive_only=True)
    assert np.asarray(none) == pytest.approx([0.0, 0.0], abs=0.0)  # no NaN, no update
    masked = awr_weights(
        adv, 0.1, 100.0, mask=jnp.array([False, True, True, True]), positive_only=True
    )
    assert np.asarray(masked) == pytest.approx([0.0, 0.0, 0.0, 3.0], abs=1e-5)
