"""Sparse chunk rewards from ν, potential-based shaping at chunk endpoints, n-step transitions.

Reward convention (the only task reward anywhere; ν decides success):

* ν is observed at chunk endpoints only. The chunk t (from endpoint t to t+1) earns the sparse
  reward on the chunk where ν *first* becomes true at its endpoint, and the episode terminates
  there (`done_t = 1`); later chunks are not transitions (`mask = 0`). As a per-step reward this
  is r = 1 on the last control step of that chunk, so Σ_{k<H} γ^k r_{t+k} = γ^{H-1}.
* Variants that are padding or failed (non-finite / exploded physics) contribute no transitions.
* A rollout that ends (after C chunks) without ν is truncated, not terminated: its last
  transitions bootstrap from V.

Shaping (§3.5), evaluated once per chunk endpoint on the rollout's states, never per physics
step:

    r̃_t = Σ_{k<H} γ^k r_{t+k} + β (Γ Φ(s_{t+1}) − Φ(s_t)),    Γ = γ^H,

with Φ(s_{t+1}) := 0 when chunk t terminates. At the chunk level the problem is a discrete MDP
with discount Γ per decision, and this is exactly Ng et al.'s potential-based shaping F = ΓΦ(s')
− Φ(s) in it, with the absorbing state's potential fixed to 0: for any policy, Q̃(s, a) = Q(s, a)
− βΦ(s) and Ṽ(s) = V(s) − βΦ(s), so advantages (and the greedy / AWR-weighted policy) are
unchanged. Truncated episodes stay invariant because the bootstrap Ṽ(s_C) carries the −βΦ(s_C).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from coda import lifetime
from coda.sim.state import SimState
from coda.train.agent import ObsNorm, state_features
from coda.train.critic import Transitions


@struct.dataclass
class ChunkRewards:
    reward: np.ndarray  # [B, C] sparse chunk reward Σ_{k<H} γ^k r_{t+k}
    done: np.ndarray  # [B, C] bool: the episode terminates at the end of chunk t (ν first true)
    mask: np.ndarray  # [B, C] bool: chunk t is a transition of the episode
    phi: np.ndarray  # [B, C+1] potential at every endpoint (zeros when unshaped)


def chunk_discount(gamma: float, horizon: int) -> float:
    """Γ = γ^H: the discount across one chunk."""
    return float(gamma) ** int(horizon)


def endpoint_success(result, success_fn, sym) -> np.ndarray:
    """ν at every endpoint: [B, C+1] bool."""
    nu = jax.vmap(lambda s: success_fn(s, sym), in_axes=1, out_axes=1)(result.states)
    return np.asarray(nu, bool)


PHI_CACHE_SIZE = 64  # compiled Φ programs kept (least recently used dropped)
# emptied when a run ends (coda.lifetime.release)
_PHI_PROGRAMS = lifetime.RunCache("train.phi_programs", maxsize=PHI_CACHE_SIZE)


def potential_key(phi_fn: Callable[[SimState], jax.Array]) -> Hashable:
    """What identifies a Φ for caching its compiled endpoint program.

    A compiled training program (`coda.potentials.Potential`, or one of its bound methods) is
    keyed by its source text's hash, its symbol table (role indices are baked in) and the
    method: every `Potential` compiled from the same program for the same scene structure
    shares one compiled Φ. Any other callable is keyed by itself (identity / its own equality).
    """
    owner = getattr(phi_fn, "__self__", phi_fn)
    source = getattr(owner, "source", None)
    sym = getattr(owner, "sym", None)
    if isinstance(source, str) and sym is not None:
        name = getattr(phi_fn, "__name__", "__call__")
        digest = hashlib.sha256(source.encode()).hexdigest()
        try:
            hash(sym)
            sym_key = sym
        except TypeError:
            sym_key = repr(sym)
        return ("program", digest, sym_key, name)
    return ("callable", phi_fn)


def endpoint_program(phi_fn: Callable[[SimState], jax.Array]) -> Callable[[SimState], jax.Array]:
    """The jitted endpoint Φ (states [B, C+1] -> [B, C+1]) for `phi_fn`, built once per
    training program; jit's own cache then keys it by the states' static shapes."""
    return _PHI_PROGRAMS.get(
        potential_key(phi_fn), lambda: jax.jit(jax.vmap(phi_fn, in_axes=1, out_axes=1))
    )


def endpoint_potential(phi_fn: Callable[[SimState], jax.Array], states: SimState) -> np.ndarray:
    """Φ once per chunk endpoint: states [B, C+1] -> [B, C+1] (vmapped over the time axis).

    Compiled once per training program and endpoint shape (`endpoint_program`), not per call.
    """
    phi = endpoint_program(phi_fn)(states)
    phi = np.asarray(phi, np.float64)
    if not np.all(np.isfinite(phi)):
        raise ValueError("potential returned non-finite values on rollout states")
    return phi


def sparse_rewards(
    nu: np.ndarray,
    valid: np.ndarray,
    failed: np.ndarray,
    gamma: float,
    horizon: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ν [B, C+1] -> (reward [B, C], done [B, C], mask [B, C]) per the module's convention."""
    nu = np.asarray(nu, bool)
    seen = np.logical_or.accumulate(nu, axis=1)  # [B, C+1] ν true at or before endpoint t
    alive = ~seen[:, :-1]  # chunk t starts before ν was ever true
    done = alive & nu[:, 1:]
    ok = (np.asarray(valid, bool) & ~np.asarray(failed, bool))[:, None]
    mask = alive & ok
    done = done & ok
    reward = done.astype(np.float64) * float(gamma) ** (int(horizon) - 1)
    return reward, done, mask


def chunk_rewards(
    result,
    success_fn,
    sym,
    *,
    gamma: float,
    horizon: int,
    phi_fn: Callable[[SimState], jax.Array] | None = None,
) -> ChunkRewards:
    """Rewards, termination and (optionally) Φ at endpoints for one `RolloutResult`."""
    nu = endpoint_success(result, success_fn, sym)
    reward, done, mask = sparse_rewards(nu, result.valid, result.failed, gamma, horizon)
    if phi_fn is None:
        phi = np.zeros(nu.shape, np.float64)
    else:
        phi = endpoint_potential(phi_fn, result.states)
    return ChunkRewards(reward, done, mask, phi)


def shaped_rewards(cr: ChunkRewards, beta: float, big_gamma: float) -> np.ndarray:
    """r̃ = r + β(Γ Φ(s_{t+1}) (1 − done) − Φ(s_t)): [B, C]. β = 0 is sparse-only."""
    phi_next = np.where(cr.done, 0.0, cr.phi[:, 1:])
    return cr.reward + beta * (big_gamma * phi_next - cr.phi[:, :-1])


def n_step_targets(
    rewards: np.ndarray, done: np.ndarray, mask: np.ndarray, big_gamma: float, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step chunk backups: (ret [B, C], boot_index [B, C], boot_disc [B, C]).

    ret_t = Σ_{i<m} Γ^i r_{t+i}; the backup stops early at termination (boot_disc = 0) or at the
    end of the rollout (m = C − t, bootstrap from the last endpoint).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    b, c = rewards.shape
    t = np.arange(c)[None, :].repeat(b, 0)
    ret = np.zeros((b, c))
    disc = np.ones((b, c))
    going = mask.astype(bool).copy()  # still accumulating
    ended = np.zeros((b, c), bool)  # terminated inside the backup
    m = np.zeros((b, c), np.int64)
    rows = np.arange(b)[:, None]
    for i in range(n):
        idx = t + i
        inside = going & (idx < c)
        ii = np.minimum(idx, c - 1)
        ret = ret + np.where(inside, disc * rewards[rows, ii], 0.0)
        m = m + inside
        disc = np.where(inside, disc * big_gamma, disc)
        term = inside & done[rows, ii]
        ended |= term
        going = inside & ~term
    boot_disc = np.where(ended, 0.0, disc)
    return ret, t + m, boot_disc


def mc_returns(rewards: np.ndarray, mask: np.ndarray, big_gamma: float) -> np.ndarray:
    """Discounted return to the end of the episode (or rollout): [B, C]."""
    b, c = rewards.shape
    out = np.zeros((b, c))
    acc = np.zeros(b)
    for t in range(c - 1, -1, -1):
        acc = np.where(mask[:, t], rewards[:, t] + big_gamma * acc, 0.0)
        out[:, t] = acc
    return out


def chunk_transitions(
    result,
    cr: ChunkRewards,
    *,
    tokens: np.ndarray,
    token_mask: np.ndarray,
    norm: ObsNorm,
    max_state_dim: int,
    beta: float,
    gamma: float,
    horizon: int,
    n_step: int = 3,
    source: np.ndarray | None = None,
) -> Transitions:
    """Flat transitions [N] (masked chunks only) with shaped n-step returns for the critic;
    with the chunk-start frames when the rollout recorded them (`RolloutResult.images`);
    `source` [B]: each variant's data-source id, copied to its rows (None: left unset)."""
    big_gamma = chunk_discount(gamma, horizon)
    r = shaped_rewards(cr, beta, big_gamma)
    ret, boot_idx, boot_disc = n_step_targets(r, cr.done, cr.mask, big_gamma, n_step)
    x, xm = state_features(result.states, norm, max_state_dim)  # [B, C+1, D]
    x, xm = np.asarray(x), np.asarray(xm)
    sel = np.nonzero(cr.mask)  # (rows, cols)
    rows, cols = sel
    tokens = np.asarray(tokens)
    token_mask = np.asarray(token_mask)
    images = getattr(result, "images", None)  # [B, C, n_cam, S, S, 3] uint8 (image policies)
    if images is not None:
        images = jnp.asarray(np.asarray(images)[rows, cols])
    return Transitions(
        state=jnp.asarray(x[rows, cols], jnp.float32),
        state_mask=jnp.asarray(xm[rows, cols]),
        tokens=jnp.asarray(tokens[rows], jnp.int32),
        token_mask=jnp.asarray(token_mask[rows]),
        actions=jnp.asarray(np.asarray(result.actions)[rows, cols], jnp.float32),
        ret=jnp.asarray(ret[rows, cols], jnp.float32),
        boot_state=jnp.asarray(x[rows, boot_idx[rows, cols]], jnp.float32),
        boot_disc=jnp.asarray(boot_disc[rows, cols], jnp.float32),
        mc=jnp.asarray(mc_returns(r, cr.mask, big_gamma)[rows, cols], jnp.float32),
        success=jnp.asarray(np.asarray(result.success, np.float32)[rows], jnp.float32),
        images=images,
        source=None if source is None else jnp.asarray(np.asarray(source)[rows], jnp.int32),
    )


def concat_transitions(parts: list[Transitions]) -> Transitions:
    parts = [p for p in parts if p is not None and p.size > 0]
    if not parts:
        raise ValueError("no transitions to concatenate")
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, 0), *parts)


def progress_prefix_mask(
    stage: np.ndarray, success: np.ndarray, keep: np.ndarray, min_stage: int = 1
) -> np.ndarray:
    """Chunks a stage-filtered self-imitation learner imitates. stage [B, C+1] -> [B, C] bool.

    The training program's subgoal stage k (`Potential.stage`, subgoals completed in order) at
    each chunk endpoint is what shaping adds to the sparse outcome. A successful episode keeps
    every chunk (the sparse filter). A failed one keeps its prefix up to the first endpoint
    where it reached its highest stage m, when m beats its starting stage and m >= `min_stage`:
    the chunks that made the most progress it achieved, not the ones that lost it afterwards
    (a dropped cube, a knocked-over base). Padding / failed-physics rows (`keep` False) keep
    nothing.
    """
    stage = np.asarray(stage)
    if stage.ndim != 2 or stage.shape[1] < 2:
        raise ValueError(f"stage must be [B, C+1] with C >= 1, got shape {stage.shape}")
    b, c = stage.shape[0], stage.shape[1] - 1
    success = np.asarray(success, bool).reshape(b)
    keep = np.asarray(keep, bool).reshape(b)
    best = stage[:, 1:].max(axis=1)  # [B] highest stage reached at an endpoint after the start
    first = np.argmax(stage[:, 1:] == best[:, None], axis=1)  # [B] chunk whose end first reaches it
    progressed = (best > stage[:, 0]) & (best >= int(min_stage))
    prefix = np.arange(c)[None, :] <= first[:, None]  # [B, C]
    out = np.where(success[:, None], True, prefix & progressed[:, None])
    return out & keep[:, None]


def group_success_weights(success: np.ndarray, keep: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Imitation weight of each episode under a per-layout (group) baseline. -> [B] float.

    Success-filtered BC follows the REINFORCE gradient with baseline 0, so layouts the policy
    already solves every time dominate its data. With several episodes per layout (`group` [B]:
    which layout each episode ran on) the baseline p̂(layout), the layout's success rate over its
    kept episodes, gives each success the advantage 1 - p̂ (GRPO's group-relative advantage with a
    binary reward; its positive part, since flow matching cannot push away from failures):
    successes on layouts the policy rarely solves weigh most, always-solved layouts weigh 0.
    Failures and dropped rows (`keep` False) weigh 0.
    """
    success = np.asarray(success, bool).reshape(-1)
    b = success.shape[0]
    keep = np.asarray(keep, bool).reshape(b)
    group = np.asarray(group).reshape(b)
    _, inv = np.unique(group, return_inverse=True)
    n = np.bincount(inv, weights=keep.astype(float))  # kept episodes per layout
    k = np.bincount(inv, weights=(keep & success).astype(float))  # successes per layout
    p = np.divide(k, n, out=np.zeros_like(k), where=n > 0)[inv]  # [B]
    return np.where(keep & success, 1.0 - p, 0.0)
