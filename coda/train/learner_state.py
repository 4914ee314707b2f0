"""The learner's data: its config (`LearnerConfig`), its state pytree (`LearnerState`, saved and
restored with orbax), the abstract shapes of its device buffers, and the batches drawn from them
on device (`awr_rows`, `demo_rows`, `cut_batch`). `coda.train.learner` (the `Learner` that updates
them) re-exports every name.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from coda import registries
from coda.policy.base import Batch, Observation, Policy, fit_prompt
from coda.policy.train import TrainState, restore_train_state, save_train_state
from coda.sim.observe import ImageSpec, image_spec_for, policy_images
from coda.train import awr as awr_lib
from coda.train.agent import ObsNorm
from coda.train.critic import ChunkCritic, CriticState, Transitions
from coda.train.replay import Replay

MODES = ("shaped", "sparse", "frozen_policy")
# How AWR estimates A(o, a): "critic" = min_k Q_k(o, a) - V(o) (the chunk critic's own action
# ranking); "mc" = G(o_t) - V(o_t) with G the discounted (shaped) return actually obtained to the
# episode's end (the original AWR estimator, Peng et al. 2019); "nstep" = the observed m-chunk
# (shaped) return + Γ^m (1 - d) V(o_{t+m}) - V(o_t) (the n-step advantage of actor-critic
# methods: credit goes to the chunks after which the value rose or fell). The critic's V ranks
# states well, but Q - V on the start policy's data barely ranks actions
# (benchmarks/results/finetune_diagnosis.md): "mc" and "nstep" use the observed outcome instead.
# "success" = success-filtered self-imitation (filtered BC / ReST): rows of successful episodes
# weight 1, all others 0 (A = ±1 with the positive-only filter, whatever awr_positive_only
# says); on stack it lifted an in-band start where every A-weighted rule stayed flat
# (benchmarks/results/finetune_selfimit.md).
ADVANTAGES = registries.ADVANTAGES
# Where a replay row came from (`Transitions.source`): the engine's targeted variants, resampled
# pool scenes, fresh (novel) seeds, or "other" (rows added without a source). Demo rows' sources
# are tracked on the host (`coda.loop.demo_pool`): they are drawn uniformly with weight 1.
SOURCES = ("targeted", "pool", "novel", "other")
OTHER_SOURCE = SOURCES.index("other")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    mode: str = "shaped"
    gamma: float = 0.99  # per control step
    beta: float = 1.0  # shaping scale (forced to 0 in "sparse" mode)
    n_step: int = 3  # chunk backups
    num_candidates: int = 4  # best-of-j for data collection (1 = plain sampling)
    critic_heads: int = 2
    critic_hidden: int = 256
    critic_lr: float = 3e-4
    critic_tau: float = 0.01
    critic_batch: int = 128
    policy_batch: int = 32
    policy_lr: float = 3e-4
    policy_warmup: int = 50
    # EMA of the policy weights (0 = off). With it, rollouts act with the EMA weights: long BC
    # runs with small noisy flow-matching batches give a far more precise policy that way; keep
    # it off for short AWR fine-tuning, where an EMA would hide the few updates made.
    policy_ema: float = 0.0
    # EMA decay in the fine-tuning phase (from `finetune_start`): -1 = policy_ema throughout,
    # 0 = act with the raw weights
    finetune_ema: float = -1.0
    # Fraction of every AWR batch drawn from the planner demos D_t (`set_demos`), weight 1: an
    # anchor to demonstrated behaviour while the policy's own successes are rare (demo mixing as
    # in AWAC / RLPD); 0 = pure AWR on the replay.
    demo_fraction: float = 0.0
    awr_temperature: float = 0.1
    awr_max_weight: float = 20.0
    # Advantage filtering: replay rows with A <= 0 get weight 0 (`awr.awr_weights`).
    awr_positive_only: bool = False
    advantage: str = "critic"  # one of ADVANTAGES
    replay_size: int = 20000  # transitions kept on device (ring buffer: oldest overwritten)
    demo_capacity: int = 20000  # planner-demo rows `set_demos` can hold on device
    # Updates per jitted call (lax.scan length); results do not depend on it, only dispatches.
    updates_per_call: int = 16
    # Fine-tuning phase (0 = off): from policy update `finetune_start` on (the end of the BC
    # start), the policy learns at its own warmup-cosine rate `finetune_lr` (over
    # `finetune_steps` updates) and draws `finetune_batch` rows per update (0 = policy_batch).
    # Self-imitation lifted stack's in-band start at batch 128, lr 3e-4 and stayed flat at the
    # BC start's batch 32 and the tail of its cosine (benchmarks/results/finetune_selfimit.md).
    finetune_start: int = 0
    finetune_lr: float = 0.0
    finetune_batch: int = 0
    finetune_steps: int = 0

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown learner mode {self.mode!r}; valid: {list(MODES)}")
        if self.advantage not in ADVANTAGES:
            raise ValueError(f"unknown advantage {self.advantage!r}; valid: {list(ADVANTAGES)}")
        if not 0.0 <= self.demo_fraction < 1.0:
            raise ValueError(f"demo_fraction must be in [0, 1), got {self.demo_fraction}")
        if self.updates_per_call < 1:
            raise ValueError(f"updates_per_call must be >= 1, got {self.updates_per_call}")
        if self.finetune_start < 0 or self.finetune_batch < 0 or self.finetune_lr < 0:
            raise ValueError("finetune_start, finetune_batch and finetune_lr must be >= 0")
        if self.finetune_start > 0 and self.finetune_lr <= 0 and self.finetune_batch <= 0:
            raise ValueError(
                f"finetune_start={self.finetune_start} needs finetune_lr > 0 or finetune_batch > 0"
            )

    @property
    def effective_beta(self) -> float:
        return 0.0 if self.mode == "sparse" else float(self.beta)


@struct.dataclass
class LearnerState:
    """Everything the learner has learned or collected, as one pytree (orbax-checkpointable)."""

    policy: TrainState
    critic: CriticState
    replay: Replay  # Transitions rows [replay_size, ...]
    demos: Replay  # Batch rows [demo_capacity, ...] (planner demos D_t; size 0 = none set)
    norm: ObsNorm
    rng: jax.Array  # [2] uint32 raw key data (orbax stores no typed keys); see `next_key`
    policy_updates: jax.Array  # [] int32
    critic_updates: jax.Array  # [] int32
    token_len: jax.Array  # [] int32: prompt columns the buffered data needs (bucketed)


def empty_transitions(policy: Policy) -> Transitions:
    """Abstract transition row shapes for `policy` (the replay's leaf shapes): [1, ...]."""
    c = policy.config
    d, length = int(c.max_state_dim), int(c.max_token_len)
    h, a = int(c.action_horizon), int(c.env_action_dim)
    sd = jax.ShapeDtypeStruct
    return Transitions(
        state=sd((1, d), jnp.float32),
        state_mask=sd((1, d), jnp.bool_),
        tokens=sd((1, length), jnp.int32),
        token_mask=sd((1, length), jnp.bool_),
        actions=sd((1, h, a), jnp.float32),
        ret=sd((1,), jnp.float32),
        boot_state=sd((1, d), jnp.float32),
        boot_disc=sd((1,), jnp.float32),
        mc=sd((1,), jnp.float32),
        success=sd((1,), jnp.float32),
        images=_image_rows(image_spec_for(c)),
        source=sd((1,), jnp.int32),
    )


def _image_rows(spec: ImageSpec | None) -> jax.ShapeDtypeStruct | None:
    """Abstract [1, n_cam, S, S, 3] uint8 frame rows of an image-mode policy (None otherwise):
    uint8 keeps the device buffers 4x smaller than float32 (`coda.sim.observe`)."""
    if spec is None:
        return None
    return jax.ShapeDtypeStruct((1, len(spec.cameras), spec.size, spec.size, 3), jnp.uint8)


def empty_demos(policy: Policy) -> Batch:
    """Abstract planner-demo row shapes (BC rows with weights; image-mode policies' rows also
    hold uint8 frames per camera key): [1, ...]."""
    c = policy.config
    d, length = int(c.max_state_dim), int(c.max_token_len)
    sd = jax.ShapeDtypeStruct
    obs = Observation(
        sd((1, length), jnp.int32),
        sd((1, length), jnp.bool_),
        sd((1, d), jnp.float32),
        sd((1, d), jnp.bool_),
    )
    spec = image_spec_for(c)
    if spec is not None:
        obs = obs.replace(
            images={k: sd((1, spec.size, spec.size, 3), jnp.uint8) for k in spec.keys},
            image_masks={k: sd((1,), jnp.bool_) for k in spec.keys},
        )
    return Batch(
        obs,
        sd((1, int(c.action_horizon), int(c.env_action_dim)), jnp.float32),
        sd((1,), jnp.float32),
    )


def demo_rows(demos: Batch, width: int) -> Batch:
    """A BC batch in the buffer's layout: prompts padded to `width`, weights set; frames (image
    mode) kept as uint8."""
    if demos.obs.state is None:
        raise ValueError("the learner's demo buffer needs the flat state in every row")
    tok, tm = fit_prompt(demos.obs.tokens, demos.obs.token_mask, width)
    n = demos.actions.shape[0]
    w = jnp.ones((n,), jnp.float32) if demos.weights is None else demos.weights
    images = masks = None
    if demos.obs.images is not None:
        images = {k: _uint8_frames(v) for k, v in demos.obs.images.items()}
        masks = demos.obs.image_masks or {k: jnp.ones((n,), bool) for k in images}
    obs = Observation(
        jnp.asarray(tok, jnp.int32),
        jnp.asarray(tm),
        jnp.asarray(demos.obs.state, jnp.float32),
        jnp.asarray(demos.obs.state_mask, bool),
        images,
        masks,
    )
    return Batch(obs, jnp.asarray(demos.actions, jnp.float32), jnp.asarray(w, jnp.float32))


def _uint8_frames(x) -> jax.Array:
    """Frames as the buffers keep them: uint8 passes; float in [-1, 1] maps back to [0, 255]."""
    x = jnp.asarray(x)
    if x.dtype == jnp.uint8:
        return x
    return jnp.clip(jnp.round((x + 1.0) * 127.5), 0, 255).astype(jnp.uint8)


def cut_batch(batch: Batch, token_len: int) -> Batch:
    """Inside jit: keep the first `token_len` prompt columns (the rest is padding)."""
    o = batch.obs
    obs = o.replace(tokens=o.tokens[:, :token_len], token_mask=o.token_mask[:, :token_len])
    return batch.replace(obs=obs)


def awr_rows(
    critic: ChunkCritic,
    critic_params: Any,
    replay: Replay,
    demos: Replay,
    key: jax.Array,
    *,
    batch: int,
    n_demo: int,
    temperature: float,
    max_weight: float,
    token_len: int,
    positive_only: bool = False,
    advantage: str = "critic",
    spec: ImageSpec | None = None,
    with_source: bool = False,
) -> Batch | tuple[Batch, jax.Array]:
    """One AWR batch drawn on device: `batch - n_demo` own-rollout rows, then `n_demo` demo rows
    with weight 1. Pure and jittable. The own rows carry (batch - n_demo) / batch of the batch's
    weight whenever any of them has a positive advantage, however few do:

    * ``advantage="success"`` (filtered BC / ReST): the own rows are drawn among the replay's
      successful rows only, each with weight 1 (none yet: weight 0, no update from them);
    * otherwise A comes from the critic (``"critic"``: Q - V; ``"mc"``: observed return - V;
      ``"nstep"``: m-chunk return + bootstrap - V), rows drawn uniformly, weights exp(A/λ)
      normalised to mean 1 over the own rows (`awr.awr_weights`; with `positive_only`, the
      rows with A <= 0 get 0 and the kept rows carry the own rows' whole mass).

    `with_source` also returns the own rows' `Transitions.source` ids [batch - n_demo] (the
    gradient-share report). `spec`: an image-mode policy's cameras (the rows' frames go into the
    policy's observation; the critic reads the state only)."""
    k_replay, k_demo = jax.random.split(key)
    n_own = batch - n_demo
    if advantage == "success":  # among the rows of successful episodes
        idx, any_ok = replay.sample_indices_where(k_replay, n_own, replay.data.success > 0.5)
        mb = replay.take(idx)
    else:
        mb = replay.sample(k_replay, n_own)
    obs = Observation(
        mb.tokens[:, :token_len], mb.token_mask[:, :token_len], mb.state, mb.state_mask
    )
    if spec is not None:
        images, masks = policy_images(mb.images, spec)
        obs = obs.replace(images=images, image_masks=masks)
    if advantage == "success":
        w = jnp.where(any_ok, jnp.ones((n_own,), jnp.float32), 0.0)
        out = Batch(obs, mb.actions, w)
    else:
        if advantage == "mc":
            adv = mb.mc - critic.v(critic_params, obs)
        elif advantage == "nstep":
            boot = Observation(obs.tokens, obs.token_mask, mb.boot_state, mb.state_mask)
            v_boot = critic.v(critic_params, boot)
            adv = mb.ret + mb.boot_disc * v_boot - critic.v(critic_params, obs)
        else:
            adv = critic.advantage(critic_params, obs, mb.actions)
        out = awr_lib.awr_batch(obs, mb.actions, adv, temperature, max_weight, positive_only)
    if n_demo > 0:
        d = cut_batch(demos.sample(k_demo, n_demo), token_len)
        out = awr_lib.concat_batches([out, d])
    return (out, mb.source) if with_source else out


def save_learner_state(path: str, state: LearnerState) -> None:
    """orbax: every array of the learner state (buffers included) to a new directory."""
    save_train_state(path, state)  # generic over pytrees


def restore_learner_state(path: str, target: LearnerState) -> LearnerState:
    """Restore into the structure, shapes and dtypes of `target`; values are bit-exact."""
    return restore_train_state(path, target)
