"""The policy protocol shared by every CoDA backbone (pi0.5, OFT), and its data types.

Protocol (see ``Policy`` below) — everything the rest of CoDA touches:

* ``policy.init(rng) -> params``: a nested dict of arrays (openpi checkpoint layout for pi0.5).
* ``policy.sample_chunks(params, obs, rng, num_candidates=j) -> [B, j, H, A_env]``: ``j``
  candidate action chunks per observation; pure and jittable (``num_candidates`` static).
  Deterministic for a given ``rng``, different across ``rng``s.
* ``policy.loss(params, batch, rng) -> (scalar, metrics)``: the weighted training loss,
  ``mean_b(weights[b] * l_b)`` where ``l_b`` is the backbone's per-sample loss averaged over the
  valid action dims and the horizon. Linear in the weights, so a zero weight contributes exactly
  zero gradient (advantage-weighted regression). Padded action dims are masked out.
* ``policy.per_sample_loss(params, batch, rng) -> [B]``.

Observations come in two modes:

* **rendered**: images from up to 3 cameras (``images`` / ``image_masks``), prompt tokens and an
  optional proprio state;
* **state-only** (batched simulation without rendering): ``images=None``; the simulator's flat
  float32 state (object poses, gripper pose/opening, joints), padded to ``max_state_dim`` with a
  ``state_mask``, plus the tokenised instruction.

State-only design choice: a small MLP *state encoder* maps ``concat(state * mask, mask)`` to
``num_state_tokens`` prefix tokens (bidirectional with the prompt). We prefer it over writing the
discretised state into the prompt (pi0.5's ``discrete_state_input``) for the simulator because
(1) object poses need finer resolution than 256 bins over [-1, 1]; (2) a 64-dim state would cost
~200 extra prompt tokens per step (digits + separators), which dominates attention cost in large
batched rollouts, while the encoder costs a fixed handful of tokens; (3) the mask input makes
scenes with different state sizes share one model. The discretised-prompt route remains available
through the tokenizer (``discrete_state_input``) for openpi-compatible checkpoints.

Actions: the environment's action (7 for CoDA: Δxyz, Δrpy, gripper) is zero-padded to the
model's ``action_dim``; padded dims are masked out of the loss and sliced off the samples.
"""

from __future__ import annotations

from typing import Any, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

Params = Any


@struct.dataclass
class Observation:
    """Policy input. Any field may be absent (None) when the config does not use it."""

    tokens: jax.Array  # [B, L] int32 prompt tokens
    token_mask: jax.Array  # [B, L] bool
    state: jax.Array | None = None  # [B, D] float32, padded to max_state_dim
    state_mask: jax.Array | None = None  # [B, D] bool, False on padding
    # camera -> [B, S, S, 3] float32 in [-1, 1], or uint8 in [0, 255] (the model converts it)
    images: dict[str, jax.Array] | None = None
    image_masks: dict[str, jax.Array] | None = None  # camera -> [B] bool

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]


@struct.dataclass
class Batch:
    """One training batch; memory collected with any backbone trains any other."""

    obs: Observation
    actions: jax.Array  # [B, H, A_env] (A_env <= model action_dim)
    weights: jax.Array | None = None  # [B] per-sample loss weights (None = all ones)
    action_mask: jax.Array | None = None  # [B, A_env] or [A_env] bool (None = all valid)


class Policy(Protocol):
    config: Any

    def init(self, rng: jax.Array) -> Params: ...

    def sample_chunks(
        self, params: Params, obs: Observation, rng: jax.Array, num_candidates: int = 1
    ) -> jax.Array: ...

    def per_sample_loss(self, params: Params, batch: Batch, rng: jax.Array) -> jax.Array: ...

    def loss(
        self, params: Params, batch: Batch, rng: jax.Array
    ) -> tuple[jax.Array, dict[str, jax.Array]]: ...


def pad_state(state: np.ndarray | jax.Array, max_state_dim: int) -> tuple[jax.Array, jax.Array]:
    """Zero-pad a [B, D] state to [B, max_state_dim]; returns (state, mask)."""
    state = jnp.asarray(state, jnp.float32)
    if state.ndim != 2:
        raise ValueError(f"state must be [B, D], got shape {state.shape}")
    d = state.shape[-1]
    if d > max_state_dim:
        raise ValueError(f"state dim {d} exceeds the configured max_state_dim {max_state_dim}")
    mask = jnp.broadcast_to(jnp.arange(max_state_dim) < d, (state.shape[0], max_state_dim))
    return jnp.pad(state, ((0, 0), (0, max_state_dim - d))), mask


def make_observation(
    tokens: jax.Array,
    token_mask: jax.Array,
    *,
    state: jax.Array | None = None,
    max_state_dim: int | None = None,
    images: dict[str, jax.Array] | None = None,
    image_masks: dict[str, jax.Array] | None = None,
) -> Observation:
    """Build an Observation, padding the state to ``max_state_dim`` (with its mask)."""
    tokens = jnp.asarray(tokens, jnp.int32)
    token_mask = jnp.asarray(token_mask, bool)
    if tokens.shape != token_mask.shape or tokens.ndim != 2:
        raise ValueError(f"tokens {tokens.shape} and token_mask {token_mask.shape} must be [B, L]")
    state_mask = None
    if state is not None:
        state, state_mask = pad_state(state, max_state_dim or np.shape(state)[-1])
    if images is not None:
        images = {k: to_model_image(v) for k, v in images.items()}
    if images is not None and image_masks is None:
        image_masks = {k: jnp.ones((tokens.shape[0],), bool) for k in images}
    return Observation(tokens, token_mask, state, state_mask, images, image_masks)


def to_model_image(img) -> jax.Array:
    """uint8 [0, 255] -> float32 [-1, 1] (openpi's convention); float images pass through."""
    img = jnp.asarray(img)
    if img.dtype == jnp.uint8:
        return img.astype(jnp.float32) / 255.0 * 2.0 - 1.0
    return img.astype(jnp.float32)


def pad_actions(
    actions: jax.Array, action_mask: jax.Array | None, action_dim: int
) -> tuple[jax.Array, jax.Array]:
    """[B, H, A_env] -> ([B, H, action_dim], mask [B, action_dim]) with padded dims masked."""
    b, _, a = actions.shape
    if a > action_dim:
        raise ValueError(f"action dim {a} exceeds the model action_dim {action_dim}")
    mask = jnp.ones((b, a), bool) if action_mask is None else jnp.broadcast_to(action_mask, (b, a))
    mask = mask.astype(bool)
    # Masked dims are zeroed so they cannot reach the model through its inputs either.
    actions = jnp.where(mask[:, None, :], actions.astype(jnp.float32), 0.0)
    actions = jnp.pad(actions, ((0, 0), (0, 0), (0, action_dim - a)))
    mask = jnp.pad(mask, ((0, 0), (0, action_dim - a)))
    return actions, mask


def masked_chunk_mean(err: jax.Array, mask: jax.Array) -> jax.Array:
    """err: [B, H, A], mask: [B, A] -> [B] mean over horizon and valid action dims."""
    m = mask.astype(err.dtype)[:, None, :]  # [B, 1, A]
    denom = err.shape[1] * jnp.maximum(jnp.sum(m, axis=(1, 2)), 1.0)  # [B]
    return jnp.sum(err * m, axis=(1, 2)) / denom


def weighted_mean(per_sample: jax.Array, weights: jax.Array | None) -> jax.Array:
    """mean_b(w_b * l_b): linear in w; w_b = 0 removes sample b from the gradient exactly."""
    if weights is None:
        return jnp.mean(per_sample)
    weights = jnp.asarray(weights, per_sample.dtype)
    if weights.shape != per_sample.shape:
        raise ValueError(f"weights shape {weights.shape} != per-sample loss {per_sample.shape}")
    return jnp.mean(weights * per_sample)


class StateEncoder(nn.Module):
    """Flat padded state -> ``num_tokens`` prefix tokens (see module docstring for why)."""

    num_tokens: int
    hidden: int
    width: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, state: jax.Array, mask: jax.Array) -> jax.Array:
        x = jnp.concatenate([state * mask, mask.astype(state.dtype)], axis=-1).astype(self.dtype)
        x = nn.swish(nn.Dense(self.hidden, dtype=self.dtype, name="Dense_0")(x))
        x = nn.swish(nn.Dense(self.hidden, dtype=self.dtype, name="Dense_1")(x))
        x = nn.Dense(self.num_tokens * self.width, dtype=self.dtype, name="Dense_2")(x)
        return x.reshape(state.shape[0], self.num_tokens, self.width)  # [B, T_s, W]


# --- prompt length: pad to what the batch needs, not to max_token_len ---------------------------

TOKEN_BUCKET = 8  # prompt widths are rounded up to a multiple of this (bounds recompiles)


def token_bucket(needed: int, max_len: int, multiple: int = TOKEN_BUCKET) -> int:
    """Prompt width for a batch whose longest prompt has `needed` tokens: the next multiple of
    `multiple` (at least one), capped at `max_len`. A handful of widths → a handful of compiles.
    """
    if needed > max_len:
        raise ValueError(f"prompt of {needed} tokens exceeds max_token_len {max_len}")
    return min(max_len, max(multiple, -(-int(needed) // multiple) * multiple))


def prompt_width(token_mask: np.ndarray | jax.Array) -> int:
    """Columns up to the last valid token of any row: the width the batch needs. Host-side."""
    cols = np.nonzero(np.asarray(token_mask, bool).any(axis=0))[0]
    return int(cols[-1]) + 1 if cols.size else 0


def fit_prompt(
    tokens: np.ndarray | jax.Array, token_mask: np.ndarray | jax.Array, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Pad (id 0, mask False) or cut prompt columns to `width`; only padding may be cut.

    Padded prompt columns are masked keys that nothing attends to, so dropping them leaves the
    policy's outputs unchanged (up to float reduction order) and saves their compute.
    """
    tokens, token_mask = np.asarray(tokens), np.asarray(token_mask, bool)
    if prompt_width(token_mask) > width:
        raise ValueError(f"prompts need {prompt_width(token_mask)} tokens; cannot cut to {width}")
    n = tokens.shape[-1]
    if width <= n:
        return tokens[:, :width], token_mask[:, :width]
    pad = ((0, 0), (0, width - n))
    return np.pad(tokens, pad), np.pad(token_mask, pad)
