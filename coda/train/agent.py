"""The neural policy as a rollout `ChunkPolicy`, with optional best-of-j selection by the critic.

`PolicyAgent` wraps a `coda.policy` policy: the observation is the flat simulator state
(`flat_observation`), normalised by per-dimension statistics and zero-padded to the policy's
`max_state_dim`, plus each variant's tokenised instruction; an image-mode policy (config with
`camera_names`, `coda.sim.observe`) also gets the agent-view and wrist frames the native backend
renders at each chunk start (and reads only proprioception from the state). Everything learned goes
through the traced `params` argument of `act` (`AgentParams`): the policy's parameters, the
observation statistics and, for best-of-j, the critic's parameters — nothing learned is baked
into the jitted rollout, so one compiled chunk step serves every update.

Best-of-j (data collection, §3.5): sample j candidate chunks from the policy, score each with the
critic's pessimistic value min_k Q_k(o, τ, a), execute the argmax. j = 1 is plain sampling and
never touches the critic.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from coda.policy.base import Observation, Policy
from coda.policy.tokenizer import PromptTokenizer, tokenize_for_config, tokenizer_for
from coda.sim.observe import ImageSpec, image_spec_for, policy_images
from coda.sim.state import SimState, flat_observation


@struct.dataclass
class ObsNorm:
    """Per-dimension state statistics (padded to max_state_dim); part of the traced params."""

    mean: jax.Array  # [D]
    std: jax.Array  # [D]

    @classmethod
    def identity(cls, dim: int) -> ObsNorm:
        return cls(jnp.zeros((dim,), jnp.float32), jnp.ones((dim,), jnp.float32))

    @classmethod
    def fit(cls, flat: jax.Array, dim: int, min_std: float = 1e-2) -> ObsNorm:
        """Statistics of raw flat states [N, d] (d <= dim), padded to `dim` with identity."""
        flat = jnp.asarray(flat, jnp.float32).reshape(-1, flat.shape[-1])
        d = flat.shape[-1]
        if d > dim:
            raise ValueError(f"state dim {d} exceeds max_state_dim {dim}")
        mean = jnp.zeros((dim,), jnp.float32).at[:d].set(jnp.mean(flat, 0))
        std = jnp.ones((dim,), jnp.float32).at[:d].set(jnp.maximum(jnp.std(flat, 0), min_std))
        return cls(mean, std)


@struct.dataclass
class AgentParams:
    """What `PolicyAgent.act` reads: traced, replaceable between rollouts without recompiling."""

    policy: Any
    norm: ObsNorm
    critic: Any = None  # critic params; required when num_candidates > 1
    # (tokens [B, L] int32, mask [B, L] bool) overriding the agent's own instructions: one
    # compiled agent then serves every bucket of its batch size (evaluation suites).
    tokens: Any = None


def state_features(state: SimState, norm: ObsNorm, max_state_dim: int) -> tuple[jax.Array, ...]:
    """SimState [..] -> (normalised padded state [.., D], mask [.., D]); shared with the critic."""
    flat = flat_observation(state).astype(jnp.float32)  # [..., d]
    d = flat.shape[-1]
    if d > max_state_dim:
        raise ValueError(f"flat state dim {d} exceeds max_state_dim {max_state_dim}")
    pad = [(0, 0)] * (flat.ndim - 1) + [(0, max_state_dim - d)]
    x = jnp.pad(flat, pad)
    mask = jnp.broadcast_to(jnp.arange(max_state_dim) < d, x.shape)
    x = jnp.where(mask, (x - norm.mean) / norm.std, 0.0)
    return x, mask


def instruction_tokens(
    policy: Policy, prompts: list[str], tokenizer: PromptTokenizer | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Prompts -> (tokens [B, L] int32, mask [B, L] bool) with the policy's own tokenizer."""
    tok = tokenizer or tokenizer_for(policy.config)
    return tokenize_for_config(policy.config, tok, list(prompts))


def bucket_prompts(bucket) -> list[str]:
    """Each (padded) variant's own instruction."""
    return [v.scene.task["instruction"] for v in bucket.padded]


def make_obs(
    state: SimState,
    tokens: jax.Array,
    token_mask: jax.Array,
    norm: ObsNorm,
    max_state_dim: int,
    images: jax.Array | None = None,
    spec: ImageSpec | None = None,
) -> Observation:
    """`Observation` for a batch of states [B]: state-only, or with `images` ([B, n_cam, S, S,
    3] uint8, cameras in `spec` order) under the policy's image keys. The state is always the
    full normalised flat state (the critic reads it; an image-mode policy masks it down to
    proprioception itself, `coda.policy.pi05.embed_observation`)."""
    x, mask = state_features(state, norm, max_state_dim)
    obs = Observation(jnp.asarray(tokens, jnp.int32), jnp.asarray(token_mask, bool), x, mask)
    if images is None:
        return obs
    imgs, masks = policy_images(images, spec)
    return obs.replace(images=imgs, image_masks=masks)


def snap_gripper(actions: jax.Array) -> jax.Array:
    """Gripper command (last action dim) to ±1 by sign: [..., 7] -> [..., 7].

    The gripper is a position servo, so a sampled 0.8 instead of 1.0 means a looser grip and
    a dropped object; the planner's demos only ever command fully open (−1) or closed (+1), so
    snapping loses nothing they contain and removes sampling noise where precision matters most.
    """
    g = jnp.where(actions[..., -1:] >= 0.0, 1.0, -1.0).astype(actions.dtype)
    return jnp.concatenate([actions[..., :-1], g], -1)


@dataclasses.dataclass(frozen=True, eq=False)
class PolicyAgent:
    """A `coda.sim.rollout.ChunkPolicy` around a `coda.policy` policy (hashable by identity).

    `tokens`/`token_mask` are the per-variant instructions of one bucket (static: they are part
    of the task, not learned). `critic` is a `coda.train.critic.ChunkCritic` used only when
    `num_candidates > 1`. `binary_gripper` snaps the gripper command to ±1 (see
    `snap_gripper`); candidates are snapped before the critic scores them.
    """

    policy: Policy
    tokens: np.ndarray  # [B, L] int32
    token_mask: np.ndarray  # [B, L] bool
    num_candidates: int = 1
    critic: Any = None
    clip: bool = True
    binary_gripper: bool = False

    def __post_init__(self):
        if self.num_candidates < 1:
            raise ValueError(f"num_candidates must be >= 1, got {self.num_candidates}")
        if self.num_candidates > 1 and self.critic is None:
            raise ValueError("best-of-j selection (num_candidates > 1) needs a critic")
        if np.shape(self.tokens) != np.shape(self.token_mask) or np.ndim(self.tokens) != 2:
            raise ValueError("tokens and token_mask must both be [B, L]")

    @classmethod
    def for_bucket(
        cls,
        policy: Policy,
        bucket,
        *,
        num_candidates: int = 1,
        critic: Any = None,
        tokenizer: PromptTokenizer | None = None,
        binary_gripper: bool = False,
    ) -> PolicyAgent:
        tokens, mask = instruction_tokens(policy, bucket_prompts(bucket), tokenizer)
        return cls(policy, tokens, mask, num_candidates, critic, binary_gripper=binary_gripper)

    @property
    def horizon(self) -> int:
        return int(self.policy.config.action_horizon)

    @property
    def max_state_dim(self) -> int:
        return int(self.policy.config.max_state_dim)

    @property
    def image_spec(self) -> ImageSpec | None:
        """Cameras and resolution the policy observes (None: state-only); the native backend
        renders them at every chunk start and passes them to `act`."""
        return image_spec_for(self.policy.config)

    def init(self, batch: int, rng: jax.Array) -> jax.Array:
        if batch != self.tokens.shape[0]:
            raise ValueError(f"agent built for batch {self.tokens.shape[0]}, rollout has {batch}")
        return jnp.zeros((batch,), jnp.int32)  # chunk counter (the policy itself is Markov)

    def observe(
        self, params: AgentParams, state: SimState, images: jax.Array | None = None
    ) -> Observation:
        tokens, mask = (self.tokens, self.token_mask) if params.tokens is None else params.tokens
        spec = self.image_spec
        if (spec is None) != (images is None):
            raise ValueError(
                f"policy {self.policy.config.name!r} observes "
                + ("no images but got some" if spec is None else f"cameras {spec.keys}; got none")
                + " (image policies need a backend that renders: the native one)"
            )
        return make_obs(state, tokens, mask, params.norm, self.max_state_dim, images, spec)

    def act(
        self,
        params: AgentParams,
        state: SimState,
        carry: jax.Array,
        rng: jax.Array,
        images: jax.Array | None = None,  # [B, n_cam, S, S, 3] uint8 (image-mode policies)
    ):
        obs = self.observe(params, state, images)
        j = self.num_candidates
        cands = self.policy.sample_chunks(params.policy, obs, rng, num_candidates=j)  # [B,j,H,A]
        if self.clip:
            cands = jnp.clip(cands, -1.0, 1.0)
        if self.binary_gripper:
            cands = snap_gripper(cands)
        b = cands.shape[0]
        if j == 1:
            actions = cands[:, 0]
            q = jnp.zeros((b,), jnp.float32)
        else:
            scores = self.critic.score_candidates(params.critic, obs, cands)  # [B, j]
            best = jnp.argmax(scores, axis=1)  # [B]
            actions = jnp.take_along_axis(cands, best[:, None, None, None], axis=1)[:, 0]
            q = jnp.max(scores, axis=1)
        return actions, carry + 1, {"q": q}
