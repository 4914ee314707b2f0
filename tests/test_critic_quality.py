"""The chunk critic's held-out ranking (`coda.train.critic_quality`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.policy import get_policy
from coda.policy.base import Observation
from coda.train.critic import ChunkCritic
from coda.train.critic_quality import auc, newest_rows, ranking
from coda.train.replay import Replay, insert
from tests.test_train_learner import synthetic_transitions


def test_auc_is_mann_whitney_with_ties_half():
    assert auc(np.array([0.1, 0.4, 0.35, 0.8]), np.array([0, 0, 1, 1])) == pytest.approx(
        0.75, abs=1e-12
    )
    assert auc(np.array([1.0, 2.0]), np.array([0, 1])) == pytest.approx(1.0, abs=1e-12)
    assert auc(np.array([2.0, 1.0]), np.array([0, 1])) == pytest.approx(0.0, abs=1e-12)
    assert auc(np.ones(6), np.array([0, 1, 0, 1, 1, 0])) == pytest.approx(0.5, abs=1e-12)
    assert np.isnan(auc(np.arange(3.0), np.ones(3)))


def test_newest_rows_follow_the_ring_and_ranking_scores_them():
    """The rows written last (wrapped around the ring), oldest first; a critic whose Q is the
    observed return would rank them perfectly, and the AUCs are in [0, 1]."""
    policy = get_policy("small_tiny")
    data = synthetic_transitions(policy, 12, seed=3)
    data = data.replace(mc=jnp.arange(12.0), success=(jnp.arange(12) >= 6).astype(jnp.float32))
    buf = insert(Replay.create(data, 8), data)  # capacity 8: rows 4..11 kept
    rows = newest_rows(buf, 5)
    np.testing.assert_allclose(np.asarray(rows.mc), [7, 8, 9, 10, 11], atol=0)
    critic = ChunkCritic.for_policy(policy, hidden=16)
    params = critic.init(jax.random.key(0))
    all8 = newest_rows(buf, 8)
    got = ranking(critic, params, all8, token_len=8)
    obs = Observation(all8.tokens[:, :8], all8.token_mask[:, :8], all8.state, all8.state_mask)
    q = np.asarray(critic.q_min(params, obs, jnp.asarray(all8.actions)))
    assert got["chunks"] == 8
    assert got["auc_success"] == pytest.approx(auc(q, np.asarray(all8.success) > 0.5), abs=1e-6)
    assert got["auc_return"] == pytest.approx(auc(q, np.asarray(all8.mc) > 7.5), abs=1e-6)
