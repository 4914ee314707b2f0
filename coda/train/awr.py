"""Policy improvement: advantage-weighted regression and behaviour cloning on planner demos.

Both feed the policy's weighted loss (`policy.loss(params, Batch(obs, actions, weights), rng)`),
which is linear in the weights: AWR reweights samples by exp(A/λ); BC is the same step with all
weights 1. Weights are computed as exp((A − max A)/λ) (overflow-safe), normalised to mean 1 over
the valid samples and clipped at `max_weight`, so all-equal advantages give weights of exactly 1
and the AWR step coincides with the BC step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from coda.policy.base import Batch, Observation
from coda.sim.observe import ImageSpec, policy_images
from coda.train.agent import ObsNorm, state_features


def awr_weights(
    adv: jax.Array,
    temperature: float = 1.0,
    max_weight: float = 20.0,
    mask: jax.Array | None = None,
    positive_only: bool = False,
) -> jax.Array:
    """exp(A/λ) normalised to mean 1 over valid samples, clipped at `max_weight`: [B].

    `positive_only` gives rows with A <= 0 weight exactly 0 (advantage filtering, as in CRR's
    binary filter / filtered BC): the policy never imitates a chunk the critic rates no better
    than its own average, however flat exp(A/λ) is. The kept rows carry the whole batch's
    weight (mean 1 over *all* valid rows: exp(A/λ) normalised over the kept rows and clipped,
    then scaled by valid / kept), so the rows' share of a mixed batch does not shrink with how
    few are kept; a batch without any gives all-zero weights (no update).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    adv = jnp.asarray(adv, jnp.float32)
    m = jnp.ones_like(adv, bool) if mask is None else jnp.asarray(mask, bool)
    if positive_only:
        n_valid = jnp.maximum(jnp.sum(m), 1)
        keep = m & (adv > 0)
        w = awr_weights(adv, temperature, max_weight, keep)  # mean 1 over the kept rows
        return jnp.where(keep, w, 0.0) * (n_valid / jnp.maximum(jnp.sum(keep), 1))  # none: 0
    top = jnp.max(jnp.where(m, adv, -jnp.inf))
    w = jnp.where(m, jnp.exp((adv - top) / temperature), 0.0)
    w = w / (jnp.sum(w) / jnp.maximum(jnp.sum(m), 1))
    return jnp.minimum(w, max_weight)


def awr_batch(
    obs: Observation,
    actions: jax.Array,
    adv: jax.Array,
    temperature: float = 1.0,
    max_weight: float = 20.0,
    positive_only: bool = False,
) -> Batch:
    """Batch(obs [B], actions [B, H, A], weights exp(A/λ) normalised and clipped)."""
    w = awr_weights(adv, temperature, max_weight, positive_only=positive_only)
    return Batch(obs, actions, w)


def bc_batch(obs: Observation, actions: jax.Array) -> Batch:
    return Batch(obs, actions, jnp.ones((actions.shape[0],), jnp.float32))


def demo_batch(
    result,
    tokens: np.ndarray,
    token_mask: np.ndarray,
    norm: ObsNorm,
    max_state_dim: int,
    only_success: bool = True,
    spec: ImageSpec | None = None,
) -> Batch:
    """Planner demos D_t as a BC batch: every chunk of each (successful, valid) demo rollout.

    Chunks after ν first holds are kept: the policy must also learn to release and retreat
    without disturbing the result (success is ν at the last endpoint). When the demos were
    collected with perturbed execution (`coda.sim.planner.Perturbed`), the clean expert chunk in
    `info["label"]` is the target, not the executed one. `spec` (image-mode policies): rows
    carry the frames of `result.images` at each chunk start.
    """
    keep = np.asarray(result.valid, bool) & ~np.asarray(result.failed, bool)
    if only_success:
        keep &= np.asarray(result.success, bool)
    rows = np.nonzero(keep)[0]
    if rows.size == 0:
        raise ValueError("no successful demos to clone")
    c = result.actions.shape[1]
    x, xm = state_features(result.states, norm, max_state_dim)  # [B, C+1, D]
    x = np.asarray(x)[rows, :c].reshape(-1, x.shape[-1])
    xm = np.asarray(xm)[rows, :c].reshape(-1, xm.shape[-1])
    tok = np.repeat(np.asarray(tokens)[rows], c, 0)
    tm = np.repeat(np.asarray(token_mask)[rows], c, 0)
    acts = result.info["label"] if "label" in result.info else result.actions  # [B, C, H, A]
    actions = np.asarray(acts)[rows].reshape((-1,) + acts.shape[2:])
    obs = Observation(jnp.asarray(tok, jnp.int32), jnp.asarray(tm), jnp.asarray(x), jnp.asarray(xm))
    if spec is not None:  # image-mode policy: the chunk-start frames, uint8 (coda.sim.observe)
        if getattr(result, "images", None) is None:
            raise ValueError("an image-mode policy's demos need RolloutResult.images (with_images)")
        frames = np.asarray(result.images)[rows, :c]  # [R, C, n_cam, S, S, 3]
        frames = jnp.asarray(frames.reshape((-1,) + frames.shape[2:]))
        images, masks = policy_images(frames, spec)
        obs = obs.replace(images=images, image_masks=masks)
    return bc_batch(obs, jnp.asarray(actions, jnp.float32))


def take(batch: Batch, idx: jax.Array) -> Batch:
    """Rows `idx` of a batch (for minibatches)."""
    return jax.tree.map(lambda x: x[idx], batch)


def concat_batches(parts: list[Batch]) -> Batch:
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, 0), *parts)
