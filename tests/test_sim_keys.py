"""Same key, same random actions: both backends derive per-chunk keys identically.

A stochastic policy's rollout must be reproducible across backends, so `NativeBackend` and
`MjxBackend` both split the rollout key with `rollout.episode_keys` (init key, then [C] chunk
keys). `RandomPolicy` ignores the state, so its actions depend on the keys alone and must match
exactly on both backends (the physics may differ by float reassociation; the keys may not).
"""

import jax
import numpy as np
import pytest

from coda.sim import robot
from coda.sim.planner import RandomPolicy
from coda.sim.rollout import MjxBackend, episode_keys

NUM_CHUNKS = 2  # the actions need no long episode; short keeps the MJX run cheap


def test_native_random_actions_follow_the_documented_key_derivation(
    cube_plate_bucket, native_backend
):
    policy = RandomPolicy()
    key = jax.random.PRNGKey(7)
    r = native_backend.rollout(cube_plate_bucket, policy, None, key, NUM_CHUNKS)
    _, keys = episode_keys(key, NUM_CHUNKS)  # [C, 2]
    b = cube_plate_bucket.batch_size
    for c in range(NUM_CHUNKS):
        want = jax.random.uniform(
            keys[c], (b, policy.horizon, robot.ACTION_DIM), minval=-1.0, maxval=1.0
        )  # [B, H, A]
        np.testing.assert_allclose(np.asarray(r.actions[:, c]), np.asarray(want), atol=1e-7)
    other = native_backend.rollout(
        cube_plate_bucket, policy, None, jax.random.PRNGKey(8), NUM_CHUNKS
    )
    assert not np.allclose(np.asarray(other.actions), np.asarray(r.actions), atol=1e-3)


def test_episode_keys_are_distinct_per_chunk():
    k0, keys = episode_keys(jax.random.PRNGKey(0), 4)
    rows = {tuple(np.asarray(k).tolist()) for k in [k0, *keys]}
    assert keys.shape[0] == 4 and len(rows) == 5


@pytest.fixture(scope="module")
def random_rollouts(cube_plate_bucket, native_backend):
    policy = RandomPolicy()
    key = jax.random.PRNGKey(3)
    m = MjxBackend().rollout(cube_plate_bucket, policy, None, key, NUM_CHUNKS)
    n = native_backend.rollout(cube_plate_bucket, policy, None, key, NUM_CHUNKS)
    return m, n


@pytest.mark.slow  # a fresh MJX episode compile: ~2 min on a shared 2-core CPU
def test_native_and_mjx_draw_the_same_random_actions(random_rollouts):
    m, n = random_rollouts
    assert m.actions.shape == n.actions.shape == (4, NUM_CHUNKS, 10, robot.ACTION_DIM)
    np.testing.assert_allclose(np.asarray(m.actions), np.asarray(n.actions), atol=1e-7)
    # and the physics they drive agrees (same actions in, same state layout out)
    np.testing.assert_allclose(np.asarray(m.states.ee_cmd), np.asarray(n.states.ee_cmd), atol=1e-5)
