"""pi0.5 in Flax: PaliGemma prefix (SigLIP + Gemma) + Gemma action expert, flow matching.

Parameters use openpi's checkpoint layout exactly (``PaliGemma/llm/...``, ``PaliGemma/img/...``,
``action_in_proj``, ``action_out_proj``, ``time_mlp_in``, ``time_mlp_out``), so openpi params load
unchanged (see ``checkpoints.load_openpi``). Optional non-openpi part: ``state_encoder`` (only when
``num_state_tokens > 0``; see ``base`` for the state-only mode).

Flow-matching convention (openpi): t=1 is noise, t=0 is data; ``x_t = t*noise + (1-t)*actions``,
target ``u_t = noise - actions``; training time ~ Beta(1.5, 1)*0.999 + 0.001; sampling integrates
Euler steps from t=1 to t=0 with a KV cache of the prefix.
"""

from __future__ import annotations

import dataclasses
from typing import Any

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
    to_model_image,
    weighted_mean,
)
from coda.policy.config_utils import spec_fields
from coda.policy.gemma import ExpertConfig, GemmaMoE, make_attn_mask
from coda.policy.siglip import SigLIP, SiglipConfig


@dataclasses.dataclass(frozen=True)
class Pi05Spec:
    """Hashable, static view of a pi0.5 ConfigDict (what the Flax modules hold)."""

    vlm: ExpertConfig
    expert: ExpertConfig
    siglip: SiglipConfig | None
    camera_names: tuple[str, ...]
    vocab_size: int
    action_dim: int
    action_horizon: int
    max_token_len: int
    max_state_dim: int
    num_state_tokens: int
    state_hidden: int
    dtype: str
    proprio_dims: int = 0  # > 0: the state encoder sees only the first dims (see embed_observation)
    scan_unroll: int = 1  # layers per step of the Gemma layer scan (0 = all; gemma.GemmaMoE)

    @classmethod
    def from_config(cls, c: ConfigDict) -> Pi05Spec:
        return cls(**spec_fields(c, experts=("vlm", "expert")))


def posemb_sincos(
    t: jax.Array, dim: int, min_period: float = 4e-3, max_period: float = 4.0
) -> jax.Array:
    """Sin-cos time embedding, sin half first. t: [B] -> [B, dim]."""
    if dim % 2:
        raise ValueError(f"embedding dim {dim} must be even")
    fraction = jnp.linspace(0.0, 1.0, dim // 2)
    period = min_period * (max_period / min_period) ** fraction
    arg = jnp.einsum("i,j->ij", t, 1.0 / period * 2 * jnp.pi, precision=jax.lax.Precision.HIGHEST)
    return jnp.concatenate([jnp.sin(arg), jnp.cos(arg)], axis=-1)


def embed_observation(spec, obs: Observation, *, img_fn, state_fn, text_fn):
    """Prefix = [camera tokens..., state tokens, prompt tokens], all bidirectional.

    A configured camera missing from ``obs.images`` becomes a black image with mask False (nothing
    attends to it). uint8 images ([0, 255], how rollouts and replay buffers keep them) become
    float [-1, 1] here (``base.to_model_image``). ``spec.proprio_dims > 0`` (image-mode policies:
    the objects are seen, not told): state dims from that index on are masked out before the
    state encoder, so the policy reads only proprioception from the padded flat state while the
    same stored state still serves the critic. Returns tokens [B, S, W], mask [B, S] bool,
    ar_mask [S] bool (all False).
    """
    b = obs.batch_size
    toks, masks = [], []
    if spec.camera_names:
        if obs.images is None:
            raise ValueError(
                f"config expects images for cameras {spec.camera_names}; got none "
                "(use a state-only config for unrendered simulation)"
            )
        for name in spec.camera_names:
            if name in obs.images:
                img = to_model_image(obs.images[name])
                m = (obs.image_masks or {}).get(name, jnp.ones((b,), bool))
            else:
                size = spec.siglip.image_size
                img = jnp.zeros((b, size, size, 3), jnp.float32)
                m = jnp.zeros((b,), bool)
            tok = img_fn(img)
            toks.append(tok)
            masks.append(jnp.broadcast_to(m[:, None], tok.shape[:2]))
    if spec.num_state_tokens > 0:
        if obs.state is None:
            raise ValueError("config has a state encoder (num_state_tokens > 0); obs.state is None")
        if obs.state.shape[-1] != spec.max_state_dim:
            raise ValueError(
                f"obs.state dim {obs.state.shape[-1]} != max_state_dim {spec.max_state_dim}; "
                "use coda.policy.pad_state"
            )
        sm = obs.state_mask if obs.state_mask is not None else jnp.ones(obs.state.shape, bool)
        keep = int(getattr(spec, "proprio_dims", 0))
        if keep > 0:
            sm = sm & (jnp.arange(spec.max_state_dim) < keep)
        st = state_fn(obs.state.astype(jnp.float32), sm)
        toks.append(st)
        masks.append(jnp.ones(st.shape[:2], bool))
    if obs.tokens.shape[-1] > spec.max_token_len:
        raise ValueError(
            f"prompt length {obs.tokens.shape[-1]} > max_token_len {spec.max_token_len}"
        )
    toks.append(text_fn(obs.tokens))
    masks.append(obs.token_mask.astype(bool))
    dt = jnp.dtype(spec.dtype)
    tokens = jnp.concatenate([t.astype(dt) for t in toks], axis=1)
    mask = jnp.concatenate(masks, axis=1)
    return tokens, mask, jnp.zeros((tokens.shape[1],), bool)


def init_key(rng: jax.Array) -> jax.Array:
    """A fast-to-compile RBG key derived deterministically from any PRNG key."""
    return jax.random.wrap_key_data(jax.random.bits(rng, (4,), jnp.uint32), impl="rbg")


def dummy_observation(spec, batch: int = 1) -> Observation:
    """An all-zero observation with every input the spec uses (for init / shape evaluation)."""
    images = masks = None
    if spec.camera_names:
        sz = spec.siglip.image_size
        images = {n: jnp.zeros((batch, sz, sz, 3), jnp.float32) for n in spec.camera_names}
        masks = {n: jnp.ones((batch,), bool) for n in spec.camera_names}
    state = smask = None
    if spec.num_state_tokens > 0:
        state = jnp.zeros((batch, spec.max_state_dim), jnp.float32)
        smask = jnp.ones((batch, spec.max_state_dim), bool)
    return Observation(
        tokens=jnp.zeros((batch, spec.max_token_len), jnp.int32),
        token_mask=jnp.ones((batch, spec.max_token_len), bool),
        state=state,
        state_mask=smask,
        images=images,
        image_masks=masks,
    )


class PaliGemma(nn.Module):
    """Container giving the ``PaliGemma/{llm,img}`` parameter prefix."""

    spec: Pi05Spec

    def setup(self):
        s = self.spec
        self.llm = GemmaMoE(
            (s.vlm, s.expert),
            s.vocab_size,
            adarms=(False, True),
            dtype=s.dtype,
            scan_unroll=s.scan_unroll,
        )
        if s.siglip is not None:
            self.img = SigLIP(s.siglip, s.vlm.width, dtype=s.dtype)


class Pi05Model(nn.Module):
    spec: Pi05Spec

    def setup(self):
        s = self.spec
        self.PaliGemma = PaliGemma(s)
        self.action_in_proj = nn.Dense(s.expert.width)
        self.time_mlp_in = nn.Dense(s.expert.width)
        self.time_mlp_out = nn.Dense(s.expert.width)
        self.action_out_proj = nn.Dense(s.action_dim)
        if s.num_state_tokens > 0:
            self.state_encoder = StateEncoder(
                s.num_state_tokens, s.state_hidden, s.vlm.width, dtype=s.dtype
            )

    def image_tokens(self, image: jax.Array) -> jax.Array:
        """SigLIP tokens projected to the VLM width: [B, N_img, W0]."""
        return self.PaliGemma.img(image)

    def embed_text(self, tokens: jax.Array) -> jax.Array:
        return self.PaliGemma.llm.embed(tokens)

    # --- prefix -----------------------------------------------------------------------------
    def embed_prefix(self, obs: Observation) -> tuple[jax.Array, jax.Array, jax.Array]:
        """-> tokens [B, S, W0], mask [B, S] bool, ar_mask [S] bool (all False)."""
        return embed_observation(
            self.spec,
            obs,
            img_fn=self.PaliGemma.img if self.spec.camera_names else None,
            state_fn=self.state_encoder if self.spec.num_state_tokens > 0 else None,
            text_fn=self.PaliGemma.llm.embed,
        )

    # --- suffix -----------------------------------------------------------------------------
    def embed_suffix(self, x_t: jax.Array, time: jax.Array):
        """x_t: [B, H, A], time: [B] -> tokens [B, H, W1], mask [B, H], ar [H], cond [B, W1]."""
        w = self.spec.expert.width
        emb = posemb_sincos(time, w, min_period=4e-3, max_period=4.0)
        cond = nn.swish(self.time_mlp_out(nn.swish(self.time_mlp_in(emb))))
        tokens = self.action_in_proj(x_t)
        h = x_t.shape[1]
        mask = jnp.ones(tokens.shape[:2], bool)
        ar = jnp.zeros((h,), bool).at[0].set(True)
        return tokens, mask, ar, cond

    # --- forward passes ---------------------------------------------------------------------
    def joint_forward(self, obs: Observation, x_t: jax.Array, time: jax.Array) -> dict:
        """Joint (non-cached) forward over prefix + suffix; returns v_t and intermediates."""
        p_tok, p_mask, p_ar = self.embed_prefix(obs)
        s_tok, s_mask, s_ar, cond = self.embed_suffix(x_t, time)
        input_mask = jnp.concatenate([p_mask, s_mask], axis=1)
        ar = jnp.concatenate([p_ar, s_ar], axis=0)
        attn_mask = make_attn_mask(input_mask, ar)
        positions = jnp.cumsum(input_mask.astype(jnp.int32), axis=1) - 1
        (p_out, s_out), (k, v) = self.PaliGemma.llm(
            [p_tok, s_tok], positions, attn_mask, adarms_cond=[None, cond]
        )
        h = self.spec.action_horizon
        v_t = self.action_out_proj(s_out[:, -h:].astype(jnp.float32))
        return dict(
            prefix_tokens=p_tok,
            prefix_mask=p_mask,
            prefix_ar_mask=p_ar,
            suffix_tokens=s_tok,
            suffix_ar_mask=s_ar,
            adarms_cond=cond,
            input_mask=input_mask,
            attn_mask=attn_mask,
            positions=positions,
            prefix_out=p_out,
            suffix_out=s_out,
            kv_cache_k=k,
            kv_cache_v=v,
            v_t=v_t,
        )

    def velocity(self, obs: Observation, x_t: jax.Array, time: jax.Array) -> jax.Array:
        """Joint (non-cached) forward: v_t [B, H, A]."""
        return self.joint_forward(obs, x_t, time)["v_t"]

    def prefix_cache(self, obs: Observation):
        """Prefix-only pass -> (kv cache ([L, B, S, K, Hd] x2), prefix_mask [B, S])."""
        p_tok, p_mask, p_ar = self.embed_prefix(obs)
        attn_mask = make_attn_mask(p_mask, p_ar)
        positions = jnp.cumsum(p_mask.astype(jnp.int32), axis=1) - 1
        _, kv = self.PaliGemma.llm([p_tok, None], positions, attn_mask)
        return kv, p_mask

    def cached_velocity(self, kv, prefix_mask: jax.Array, x_t: jax.Array, time: jax.Array):
        """Suffix-only pass against a prefix KV cache -> v_t [B, H, A]."""
        s_tok, s_mask, s_ar, cond = self.embed_suffix(x_t, time)
        full, positions = cached_suffix_layout(prefix_mask, s_mask, s_ar)
        (_, s_out), _ = self.PaliGemma.llm(
            [None, s_tok], positions, full, adarms_cond=[None, cond], kv_cache=kv
        )
        return self.action_out_proj(s_out[:, -self.spec.action_horizon :].astype(jnp.float32))


def cached_suffix_layout(prefix_mask: jax.Array, suffix_mask: jax.Array, suffix_ar: jax.Array):
    """Mask [B, H, S_p + H] and RoPE positions [B, H] of a suffix pass against a prefix cache.

    Queries see every valid prefix key plus the suffix keys allowed by the block-causal mask;
    positions continue after the valid prefix tokens.
    """
    b, h = suffix_mask.shape
    prefix_attn = jnp.broadcast_to(prefix_mask[:, None, :], (b, h, prefix_mask.shape[1]))
    full = jnp.concatenate([prefix_attn, make_attn_mask(suffix_mask, suffix_ar)], axis=-1)
    positions = (
        jnp.sum(prefix_mask.astype(jnp.int32), axis=-1)[:, None]
        + jnp.cumsum(suffix_mask.astype(jnp.int32), axis=-1)
        - 1
    )
    return full, positions


def sample_flow_times(rng: jax.Array, batch: int) -> jax.Array:
    """openpi's training time distribution: Beta(1.5, 1) * 0.999 + 0.001. -> [B]."""
    return jax.random.beta(rng, 1.5, 1.0, (batch,)) * 0.999 + 0.001


class PolicyCore:
    """Construction shared by the backbones: config checks, spec, model, jitted init."""

    backbone: str = ""
    spec_cls: Any = None
    model_cls: Any = None

    def __init__(self, config: ConfigDict):
        if config.backbone != self.backbone:
            raise ValueError(
                f"{type(self).__name__} needs backbone {self.backbone!r}, got {config.backbone!r}"
            )
        if config.env_action_dim > config.action_dim:
            raise ValueError("env_action_dim must be <= action_dim")
        self.config = config
        self.spec = self.spec_cls.from_config(config)
        self.model = self.model_cls(self.spec)

    def dummy_obs(self, batch: int = 1) -> Observation:
        return dummy_observation(self.spec, batch)

    def init(self, rng: jax.Array) -> Params:
        """Fresh params, deterministic in ``rng``.

        Jitted, and drawn from an RBG key derived from ``rng``: XLA:CPU compiles each threefry
        draw separately (slow with many parameters), RBG draws compile much faster.
        """
        if not hasattr(self, "_jit_init"):
            self._jit_init = jax.jit(lambda r: self._init(init_key(r)))
        return self._jit_init(rng)

    def param_shapes(self) -> Params:
        """Abstract params (jax.ShapeDtypeStruct leaves); allocates nothing."""
        return jax.eval_shape(self._init, jax.random.key(0))


class Pi05Policy(PolicyCore):
    """pi0.5 behind the CoDA policy protocol (see ``coda.policy.base``)."""

    backbone = "pi05"
    spec_cls = Pi05Spec
    model_cls = Pi05Model

    def _init(self, rng: jax.Array) -> Params:
        s = self.spec
        x = jnp.zeros((1, s.action_horizon, s.action_dim), jnp.float32)
        t = jnp.ones((1,), jnp.float32)
        variables = self.model.init(
            {"params": rng}, self.dummy_obs(1), x, t, method=Pi05Model.velocity
        )
        return variables["params"]

    # --- forward ----------------------------------------------------------------------------
    def apply(self, params: Params, *args, method, **kwargs) -> Any:
        return self.model.apply({"params": params}, *args, method=method, **kwargs)

    def velocity(self, params: Params, obs: Observation, x_t: jax.Array, time: jax.Array):
        """v_t [B, H, A] at (x_t [B, H, A], time [B])."""
        return self.apply(params, obs, x_t, time, method=Pi05Model.velocity)

    def step_losses(
        self,
        params: Params,
        obs: Observation,
        actions: jax.Array,
        noise: jax.Array,
        time: jax.Array,
    ) -> jax.Array:
        """openpi's compute_loss with explicit noise/time: [B, H] (mean over action dim)."""
        t = time[:, None, None]
        x_t = t * noise + (1 - t) * actions
        v_t = self.velocity(params, obs, x_t, time)
        return jnp.mean(jnp.square(v_t - (noise - actions)), axis=-1)

    def draw_noise_time(self, rng: jax.Array, shape: tuple[int, ...]):
        """Same split order as openpi's compute_loss: (preprocess, noise, time)."""
        _, noise_rng, time_rng = jax.random.split(rng, 3)
        noise = jax.random.normal(noise_rng, shape)
        return noise, sample_flow_times(time_rng, shape[0])

    def flow_loss(
        self,
        params: Params,
        obs: Observation,
        actions: jax.Array,  # [B, H, A] (model action dim)
        mask: jax.Array,  # [B, A] bool
        noise: jax.Array,
        time: jax.Array,
    ) -> jax.Array:
        """Per-sample flow-matching loss over valid action dims: [B]."""
        t = time[:, None, None]
        x_t = t * noise + (1 - t) * actions
        v_t = self.velocity(params, obs, x_t, time)
        return masked_chunk_mean(jnp.square(v_t - (noise - actions)), mask)

    def per_sample_loss(self, params: Params, batch: Batch, rng: jax.Array) -> jax.Array:
        actions, mask = pad_actions(batch.actions, batch.action_mask, self.spec.action_dim)
        noise, time = self.draw_noise_time(rng, actions.shape)
        return self.flow_loss(params, batch.obs, actions, mask, noise, time)

    def loss(self, params: Params, batch: Batch, rng: jax.Array):
        per = self.per_sample_loss(params, batch, rng)
        total = weighted_mean(per, batch.weights)
        return total, {"loss": total, "unweighted_loss": jnp.mean(per)}

    # --- sampling ---------------------------------------------------------------------------
    def _euler(self, params, kv, prefix_mask, noise, num_steps: int) -> jax.Array:
        dt = -1.0 / num_steps
        b = noise.shape[0]

        def body(_, carry):
            x_t, time = carry
            v_t = self.apply(
                params,
                kv,
                prefix_mask,
                x_t,
                jnp.broadcast_to(time, (b,)),
                method=Pi05Model.cached_velocity,
            )
            return x_t + dt * v_t, time + jnp.float32(dt)

        x0, _ = jax.lax.fori_loop(0, num_steps, body, (noise, jnp.float32(1.0)))
        return x0

    def sample_actions(
        self, params: Params, obs: Observation, noise: jax.Array, num_steps: int | None = None
    ) -> jax.Array:
        """openpi's sample_actions from given noise [B, H, A] -> [B, H, A] (model action dim)."""
        n = int(num_steps or self.config.num_sample_steps)
        kv, pmask = self.apply(params, obs, method=Pi05Model.prefix_cache)
        return self._euler(params, kv, pmask, noise, n)

    def sample_chunks(
        self,
        params: Params,
        obs: Observation,
        rng: jax.Array,
        num_candidates: int = 1,
        num_steps: int | None = None,
    ) -> jax.Array:
        """j candidate chunks per observation from j noise draws: [B, j, H, A_env].

        The prefix is encoded once per observation and its KV cache shared by the j candidates.
        """
        s = self.spec
        j = int(num_candidates)
        if j < 1:
            raise ValueError(f"num_candidates must be >= 1, got {j}")
        n = int(num_steps or self.config.num_sample_steps)
        b = obs.batch_size
        kv, pmask = self.apply(params, obs, method=Pi05Model.prefix_cache)
        kv = jax.tree.map(lambda a: jnp.repeat(a, j, axis=1), kv)  # [L, B*j, S, K, Hd]
        pmask = jnp.repeat(pmask, j, axis=0)
        noise = jax.random.normal(rng, (b * j, s.action_horizon, s.action_dim))
        noise = noise * float(self.config.get("sample_noise_scale", 1.0))
        x0 = self._euler(params, kv, pmask, noise, n)
        x0 = x0.reshape(b, j, s.action_horizon, s.action_dim)
        return x0[..., : self.config.env_action_dim]
