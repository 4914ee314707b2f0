"""OpenVLA-OFT-style backbone: parallel decoding of the whole chunk with an L1 regression head.

The prefix (cameras, state tokens, prompt; same ``Observation`` as pi0.5) is followed by H learned
*action query* tokens. One Gemma-style decoder pass (prefix bidirectional; the queries see the
prefix and each other, the prefix never sees the queries) produces all H query features at once,
and an MLP head regresses the normalised action chunk; training minimises the masked L1 error
(per-sample weights as in the policy protocol).

Candidates (``sample_chunks(..., num_candidates=j)``): OFT is deterministic, so j candidates come
from **MC dropout in the action head** — the head is trained with dropout (``candidate_dropout``)
and at sampling time each candidate uses its own dropout mask drawn from ``rng``. The backbone runs
once per observation; only the cheap head runs j times. ``predict`` gives the dropout-free mean.
With ``candidate_dropout = 0`` all candidates coincide.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
from ml_collections import ConfigDict

from coda.policy.base import (
    Batch,
    Observation,
    Params,
    StateEncoder,
    masked_chunk_mean,
    pad_actions,
    weighted_mean,
)
from coda.policy.config_utils import spec_fields
from coda.policy.gemma import ExpertConfig, GemmaMoE, make_attn_mask
from coda.policy.pi05 import PolicyCore, embed_observation
from coda.policy.siglip import SigLIP, SiglipConfig


@dataclasses.dataclass(frozen=True)
class OFTSpec:
    vlm: ExpertConfig
    siglip: SiglipConfig | None
    camera_names: tuple[str, ...]
    vocab_size: int
    action_dim: int
    action_horizon: int
    max_token_len: int
    max_state_dim: int
    num_state_tokens: int
    state_hidden: int
    head_hidden: int
    candidate_dropout: float
    dtype: str
    proprio_dims: int = 0  # as Pi05Spec.proprio_dims
    scan_unroll: int = 1  # as Pi05Spec.scan_unroll

    @classmethod
    def from_config(cls, c: ConfigDict) -> OFTSpec:
        common = spec_fields(c, experts=("vlm",))  # checks the cameras first
        if not 0.0 <= c.candidate_dropout < 1.0:
            raise ValueError(f"candidate_dropout must be in [0, 1), got {c.candidate_dropout}")
        return cls(
            **common,
            head_hidden=int(c.head_hidden),
            candidate_dropout=float(c.candidate_dropout),
        )


class ActionHead(nn.Module):
    """Per-query MLP regression head with (MC-)dropout on its hidden layer."""

    hidden: int
    action_dim: int
    rate: float

    @nn.compact
    def __call__(self, feats: jax.Array, deterministic: bool) -> jax.Array:
        x = nn.Dense(self.hidden, name="Dense_0")(feats.astype(jnp.float32))
        x = nn.gelu(x, approximate=True)
        x = nn.Dropout(self.rate, deterministic=deterministic or self.rate == 0.0)(x)
        return nn.Dense(self.action_dim, name="Dense_1")(x)  # [..., H, A]


class OFTModel(nn.Module):
    spec: OFTSpec

    def setup(self):
        s = self.spec
        self.llm = GemmaMoE(
            (s.vlm,), s.vocab_size, adarms=(False,), dtype=s.dtype, scan_unroll=s.scan_unroll
        )
        if s.siglip is not None:
            self.img = SigLIP(s.siglip, s.vlm.width, dtype=s.dtype)
        if s.num_state_tokens > 0:
            self.state_encoder = StateEncoder(
                s.num_state_tokens, s.state_hidden, s.vlm.width, dtype=s.dtype
            )
        self.action_queries = self.param(
            "action_queries", nn.initializers.normal(0.02), (s.action_horizon, s.vlm.width)
        )
        self.head = ActionHead(s.head_hidden, s.action_dim, s.candidate_dropout)

    def features(self, obs: Observation) -> jax.Array:
        """One parallel-decoding pass -> query features [B, H, W]."""
        s = self.spec
        p_tok, p_mask, p_ar = embed_observation(
            s,
            obs,
            img_fn=self.img if s.camera_names else None,
            state_fn=self.state_encoder if s.num_state_tokens > 0 else None,
            text_fn=self.llm.embed,
        )
        b, h = obs.batch_size, s.action_horizon
        q = jnp.broadcast_to(self.action_queries[None], (b, h, s.vlm.width)).astype(p_tok.dtype)
        tokens = jnp.concatenate([p_tok, q], axis=1)
        mask = jnp.concatenate([p_mask, jnp.ones((b, h), bool)], axis=1)
        ar = jnp.concatenate([p_ar, jnp.zeros((h,), bool).at[0].set(True)])
        positions = jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1
        (out,), _ = self.llm([tokens], positions, make_attn_mask(mask, ar))
        return out[:, -h:]

    def decode(self, feats: jax.Array, deterministic: bool) -> jax.Array:
        return self.head(feats, deterministic)

    def __call__(self, obs: Observation, deterministic: bool = True) -> jax.Array:
        return self.decode(self.features(obs), deterministic)  # [B, H, A]


class OFTPolicy(PolicyCore):
    """OFT behind the CoDA policy protocol (see ``coda.policy.base``)."""

    backbone = "oft"
    spec_cls = OFTSpec
    model_cls = OFTModel

    def _init(self, rng: jax.Array) -> Params:
        return self.model.init({"params": rng}, self.dummy_obs(1))["params"]

    def predict(self, params: Params, obs: Observation) -> jax.Array:
        """Dropout-free chunk [B, H, A_env]."""
        out = self.model.apply({"params": params}, obs, True)
        return out[..., : self.config.env_action_dim]

    def sample_chunks(
        self, params: Params, obs: Observation, rng: jax.Array, num_candidates: int = 1
    ) -> jax.Array:
        """j MC-dropout candidates per observation: [B, j, H, A_env]."""
        j = int(num_candidates)
        if j < 1:
            raise ValueError(f"num_candidates must be >= 1, got {j}")
        s = self.spec
        feats = self.model.apply({"params": params}, obs, method=OFTModel.features)
        feats = jnp.repeat(feats, j, axis=0)  # [B*j, H, W]
        out = self.model.apply(
            {"params": params}, feats, False, method=OFTModel.decode, rngs={"dropout": rng}
        )
        out = out.reshape(obs.batch_size, j, s.action_horizon, s.action_dim)
        return out[..., : self.config.env_action_dim]

    def per_sample_loss(self, params: Params, batch: Batch, rng: jax.Array) -> jax.Array:
        actions, mask = pad_actions(batch.actions, batch.action_mask, self.spec.action_dim)
        pred = self.model.apply({"params": params}, batch.obs, False, rngs={"dropout": rng})
        return masked_chunk_mean(jnp.abs(pred - actions), mask)

    def loss(self, params: Params, batch: Batch, rng: jax.Array):
        per = self.per_sample_loss(params, batch, rng)
        total = weighted_mean(per, batch.weights)
        return total, {"loss": total, "unweighted_loss": jnp.mean(per)}
