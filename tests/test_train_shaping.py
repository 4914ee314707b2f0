"""Shaping: exact policy invariance in a finite MDP, the reward convention, n-step backups."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda.sim.state import SimState
from coda.train.shaping import (
    ChunkRewards,
    endpoint_potential,
    mc_returns,
    n_step_targets,
    shaped_rewards,
    sparse_rewards,
)


def _random_mdp(rng: np.random.Generator, n_states: int = 7, n_actions: int = 3):
    """States 0..S-2 live, S-1 absorbing goal. P [S-1, A, S], R [S-1, A, S] in [0, 1]."""
    p = rng.random((n_states - 1, n_actions, n_states)) ** 3
    p /= p.sum(-1, keepdims=True)
    r = rng.random((n_states - 1, n_actions, n_states))
    return p, r


def _solve(p, r_fn, big_gamma, n_states, tol=1e-13):
    """Value iteration on the chunk-level MDP; r_fn(s, a, s') gives the (shaped) chunk reward
    and the goal state is absorbing (done)."""
    live = n_states - 1
    n_actions = p.shape[1]
    done = np.zeros(n_states, bool)
    done[-1] = True
    rew = np.array(
        [
            [[r_fn(s, a, s2) for s2 in range(n_states)] for a in range(n_actions)]
            for s in range(live)
        ]
    )
    v = np.zeros(n_states)
    for _ in range(100000):
        q = np.sum(p * (rew + big_gamma * np.where(done, 0.0, v)[None, None]), -1)  # [S-1, A]
        v_new = np.concatenate([q.max(-1), [0.0]])
        if np.max(np.abs(v_new - v)) < tol:
            v = v_new
            break
        v = v_new
    q = np.sum(p * (rew + big_gamma * np.where(done, 0.0, v)[None, None]), -1)
    return q, q - q.max(-1, keepdims=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shaping_preserves_optimal_advantages_exactly(seed):
    """Chunk-level shaping as implemented (`shaped_rewards`) leaves A* and the greedy policy of
    a random finite MDP unchanged. Each action is one chunk, Γ = γ^H is the per-decision
    discount, Φ(goal) is replaced by 0 because the goal terminates (see coda.train.shaping)."""
    rng = np.random.default_rng(seed)
    n_states, horizon, gamma = 7, 10, 0.97
    big_gamma = gamma**horizon
    p, r = _random_mdp(rng, n_states)
    phi = rng.uniform(0.0, 1.0, n_states)  # random bounded potential, non-zero at the goal too
    beta = float(rng.uniform(0.5, 5.0))

    def sparse(s, a, s2):
        return r[s, a, s2]

    def shaped(s, a, s2):
        cr = ChunkRewards(
            reward=np.array([[r[s, a, s2]]]),
            done=np.array([[s2 == n_states - 1]]),
            mask=np.array([[True]]),
            phi=np.array([[phi[s], phi[s2]]]),
        )
        return shaped_rewards(cr, beta, big_gamma)[0, 0]

    q, adv = _solve(p, sparse, big_gamma, n_states)
    q_s, adv_s = _solve(p, shaped, big_gamma, n_states)
    np.testing.assert_allclose(adv_s, adv, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(np.argmax(q_s, -1), np.argmax(q, -1))
    # The shaped values are the unshaped ones shifted by -βΦ(s), as the docstring claims.
    np.testing.assert_allclose(q_s, q - beta * phi[:-1, None], atol=1e-6)


def test_wrong_terminal_potential_breaks_invariance():
    """Control: keeping Φ(goal) ≠ 0 at termination changes the optimal advantages, so the
    invariance test above is sensitive to the terminal handling."""
    rng = np.random.default_rng(3)
    n_states, big_gamma, beta = 7, 0.9, 3.0
    p, r = _random_mdp(rng, n_states)
    phi = rng.uniform(0.0, 1.0, n_states)
    phi[-1] = 1.0

    def naive(s, a, s2):
        return r[s, a, s2] + beta * (big_gamma * phi[s2] - phi[s])

    _, adv = _solve(p, lambda s, a, s2: r[s, a, s2], big_gamma, n_states)
    _, adv_n = _solve(p, naive, big_gamma, n_states)
    assert np.max(np.abs(adv_n - adv)) > 1e-3


def test_sparse_reward_convention():
    nu = np.array(
        [
            [0, 0, 1, 1, 0],  # first true at endpoint 2 -> chunk 1 rewarded, terminates
            [0, 0, 0, 0, 0],  # never: truncated
            [0, 0, 0, 0, 1],  # failed variant: no transitions
            [0, 1, 0, 0, 0],  # padding
        ],
        bool,
    )
    valid = np.array([True, True, True, False])
    failed = np.array([False, False, True, False])
    reward, done, mask = sparse_rewards(nu, valid, failed, gamma=0.9, horizon=3)
    np.testing.assert_array_equal(mask[0], [True, True, False, False])
    np.testing.assert_array_equal(done[0], [False, True, False, False])
    np.testing.assert_allclose(reward[0], [0.0, 0.9**2, 0.0, 0.0], atol=1e-6)
    assert mask[1].all() and not done[1].any() and reward[1].sum() == 0
    assert not mask[2].any() and not mask[3].any() and reward[2:].sum() == 0


def test_shaped_reward_formula_and_terminal_zero():
    cr = ChunkRewards(
        reward=np.array([[0.0, 0.5]]),
        done=np.array([[False, True]]),
        mask=np.array([[True, True]]),
        phi=np.array([[0.2, 0.6, 0.9]]),
    )
    r = shaped_rewards(cr, beta=2.0, big_gamma=0.8)
    np.testing.assert_allclose(r, [[2.0 * (0.8 * 0.6 - 0.2), 0.5 + 2.0 * (0.0 - 0.6)]], atol=1e-6)
    np.testing.assert_allclose(
        shaped_rewards(cr, 0.0, 0.8), cr.reward, atol=1e-6
    )  # sparse-only mode


def _brute_n_step(r, done, mask, g, n):
    b, c = r.shape
    ret, idx, disc = np.zeros((b, c)), np.zeros((b, c), int), np.zeros((b, c))
    for i in range(b):
        for t in range(c):
            if not mask[i, t]:
                idx[i, t], disc[i, t] = t, 1.0
                continue
            acc, k, term = 0.0, 0, False
            while k < n and t + k < c and mask[i, t + k]:
                acc += g**k * r[i, t + k]
                k += 1
                if done[i, t + k - 1]:
                    term = True
                    break
            ret[i, t], idx[i, t], disc[i, t] = acc, t + k, 0.0 if term else g**k
    return ret, idx, disc


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_n_step_targets_match_brute_force(n):
    rng = np.random.default_rng(n)
    nu = rng.random((6, 8)) < 0.15
    _, done, mask = sparse_rewards(nu, np.ones(6, bool), np.zeros(6, bool), 0.99, 4)
    r = rng.normal(size=done.shape)
    ret, idx, disc = n_step_targets(r, done, mask, 0.9, n)
    bret, bidx, bdisc = _brute_n_step(r, done, mask, 0.9, n)
    np.testing.assert_allclose(ret[mask], bret[mask], atol=1e-12)
    np.testing.assert_array_equal(idx[mask], bidx[mask])
    np.testing.assert_allclose(disc[mask], bdisc[mask], atol=1e-12)


def test_n_step_with_infinite_n_equals_mc_return():
    rng = np.random.default_rng(0)
    nu = rng.random((5, 9)) < 0.2
    reward, done, mask = sparse_rewards(nu, np.ones(5, bool), np.zeros(5, bool), 0.99, 4)
    ret, _, disc = n_step_targets(reward, done, mask, 0.9, 100)
    np.testing.assert_allclose(ret[mask], mc_returns(reward, mask, 0.9)[mask], atol=1e-6)
    # Bootstrap only where the rollout was truncated (no ν before the end).
    trunc = mask & ~np.logical_or.accumulate(done[:, ::-1], 1)[:, ::-1]
    assert np.all(disc[mask & ~trunc] == 0.0) and np.all(disc[trunc] > 0.0)


def _states(b, t, nb=2, nj=1):
    k = jax.random.split(jax.random.key(0), 3)
    return SimState(
        ee_pos=jax.random.normal(k[0], (b, t, 3)),
        ee_quat=jnp.zeros((b, t, 4)).at[..., 0].set(1.0),
        finger=jnp.full((b, t, 2), 0.02),
        body_pos=jax.random.normal(k[1], (b, t, nb, 3)),
        body_quat=jnp.zeros((b, t, nb, 4)).at[..., 0].set(1.0),
        joint_pos=jnp.zeros((b, t, nj)),
        contact=jnp.zeros((b, t, nb + 3, nb + 3)),
        body_half=jnp.full((b, t, nb, 3), 0.02),
        inner=jnp.zeros((b, t, nb, 4)),
        joint_range=jnp.zeros((b, t, nj, 2)),
    )


def test_endpoint_potential_once_per_endpoint():
    """Φ written for a batch [B] is evaluated on [B, C+1] endpoint states, once per endpoint."""
    states = _states(3, 5)
    calls = []

    def phi(s):  # a [B]-batched potential
        calls.append(s.ee_pos.shape)
        return jax.nn.sigmoid(-jnp.linalg.norm(s.ee_pos - s.body_pos[:, 0], axis=-1))

    out = endpoint_potential(phi, states)
    assert out.shape == (3, 5)
    assert calls == [(3, 3)]  # traced once with the per-endpoint batch shape
    ref = jax.nn.sigmoid(-jnp.linalg.norm(states.ee_pos - states.body_pos[:, :, 0], axis=-1))
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="non-finite"):
        endpoint_potential(lambda s: s.ee_pos[:, 0] / 0.0 * 0.0, states)


def test_endpoint_potential_compiled_once_per_program():
    """Φ's endpoint program is traced once per training program and endpoint shape: repeated
    calls, and a second `Potential` compiled from the same source for the same symbol table,
    reuse it; a new shape traces again (jit's own shape cache)."""
    from coda.potentials import compile_program
    from coda.sim.state import SymbolTable
    from coda.train.shaping import endpoint_program, potential_key

    sym = SymbolTable(bodies=(("target", 0), ("goal", 1)))
    src = """
SUBGOALS = [{"name": "reach", "tool": "bc"}]


def subgoal_0_done(s, sym):
    return ee_distance(s, sym.body("target")) < 0.05


def subgoal_0_potential(s, sym):
    return distance_progress(ee_distance(s, sym.body("target")), 0.2)
"""
    pot_a, pot_b = compile_program(src, sym), compile_program(src, sym)
    assert potential_key(pot_a.phi) == potential_key(pot_b.phi)
    fn = endpoint_program(pot_a.phi)
    states = _states(3, 5)
    out = endpoint_potential(pot_a.phi, states)
    np.testing.assert_allclose(endpoint_potential(pot_b.phi, states), out, atol=0)
    assert endpoint_program(pot_b.phi) is fn and fn._cache_size() == 1
    endpoint_potential(pot_a.phi, _states(2, 5))
    assert fn._cache_size() == 2
    other = compile_program(src.replace("0.2)", "0.3)"), sym)  # another program: its own Φ
    assert endpoint_program(other.phi) is not fn

    traces = []

    def phi(s):  # a plain callable is keyed by itself
        traces.append(s.ee_pos.shape)
        return s.ee_pos[:, 0]

    for _ in range(3):
        endpoint_potential(phi, states)
    assert traces == [(3, 3)]


def test_progress_prefix_mask_keeps_successes_and_progress_prefixes():
    from coda.train.shaping import progress_prefix_mask

    stage = np.array(
        [
            [0, 1, 2, 3, 3],  # success: every chunk
            [0, 1, 2, 1, 0],  # failed after reaching stage 2 at endpoint 2: chunks 0, 1
            [0, 0, 0, 0, 0],  # no progress: nothing
            [1, 1, 1, 1, 1],  # starts at stage 1 and never beats it: nothing
            [0, 1, 1, 2, 2],  # failed, best stage 2 first at endpoint 3: chunks 0..2
            [0, 3, 3, 3, 3],  # padding row: nothing
        ]
    )
    success = np.array([1, 0, 0, 0, 0, 1], bool)
    keep = np.array([1, 1, 1, 1, 1, 0], bool)
    got = progress_prefix_mask(stage, success, keep)
    want = np.array(
        [
            [1, 1, 1, 1],
            [1, 1, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
            [1, 1, 1, 0],
            [0, 0, 0, 0],
        ],
        bool,
    )
    np.testing.assert_array_equal(got, want)
    # min_stage: a failed episode must complete at least that many subgoals to count
    got2 = progress_prefix_mask(stage, success, keep, min_stage=3)
    np.testing.assert_array_equal(got2[1:5], np.zeros((4, 4), bool))
    with pytest.raises(ValueError, match="stage must be"):
        progress_prefix_mask(stage[:, :1], success, keep)


def test_group_success_weights_is_the_positive_group_advantage():
    from coda.train.shaping import group_success_weights

    # layout 7: 1 of 4 succeeds; layout 3: 3 of 4 (one dropped row); layout 5: always; 9: never
    group = np.array([7, 7, 7, 7, 3, 3, 3, 3, 3, 5, 5, 9, 9])
    success = np.array([1, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0], bool)
    keep = np.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1], bool)
    got = group_success_weights(success, keep, group)
    want = np.array([0.75, 0, 0, 0, 0.25, 0.25, 0.25, 0, 0, 0, 0, 0, 0])
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert got.shape == (13,)
