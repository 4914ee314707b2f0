"""Gemma-style mixture-of-experts decoder used by pi0.5 (PaliGemma LLM + action expert).

Two (or one) "experts" share one joint attention over the concatenation of their tokens, each
expert using its own projection, norm and MLP weights. Parameter names and shapes follow
openpi's checkpoint layout (``layers/attn/q_einsum/w``, ``layers/mlp_1/gating_einsum``, ...), with
the layer depth as the leading (scan) axis, so openpi checkpoints load without renaming.

Numerics follow the openpi fixture contract: RMSNorm with ``(1 + scale)`` and f32 variance,
adaRMS (scale, shift, gate) for conditioned experts, half-split RoPE (max wavelength 1e4), q
scaled by ``head_dim**-0.5`` after RoPE, f32 logits/softmax, masked fill -2.3819763e38, GeGLU
with tanh-gelu and ``sqrt(width)`` embedding scale.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

BIG_NEG = -2.3819763e38


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
    """Sizes of one expert (a Gemma decoder stack that shares attention with the others)."""

    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    num_kv_heads: int
    head_dim: int


def _name(base: str, i: int) -> str:
    # openpi naming: expert 0 keeps the bare name, expert i>0 gets the suffix "_i".
    return base if i == 0 else f"{base}_{i}"


def apply_rope(x: jax.Array, positions: jax.Array, max_wavelength: float = 10_000.0) -> jax.Array:
    """Half-split rotary embedding. x: [B, T, N, H]; positions: [B, T]."""
    head_dim = x.shape[-1]
    freq_exponents = (2.0 / head_dim) * jnp.arange(head_dim // 2, dtype=jnp.float32)
    timescale = max_wavelength**freq_exponents  # [H/2]
    radians = positions[..., None] / timescale[None, None, :]  # [B, T, H/2]
    radians = radians[..., None, :]  # [B, T, 1, H/2]
    sin, cos = jnp.sin(radians), jnp.cos(radians)
    x1, x2 = jnp.split(x, 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


def make_attn_mask(input_mask: jax.Array, ar_mask: jax.Array) -> jax.Array:
    """openpi's block-causal mask. input_mask: [B, N] bool; ar_mask: [N] or [B, N] bool.

    Token k is visible from query q iff cumsum(ar)[k] <= cumsum(ar)[q] and both are valid, so
    ar=False tokens form bidirectional blocks and an ar=True token starts a new block that can see
    every earlier block but not be seen by them. Returns [B, N, N] bool ([b, query, key]).
    """
    ar = jnp.broadcast_to(ar_mask, input_mask.shape)
    cums = jnp.cumsum(ar.astype(jnp.int32), axis=1)
    attn = cums[:, None, :] <= cums[:, :, None]
    valid = input_mask[:, None, :] & input_mask[:, :, None]
    return attn & valid


def rows(x: jax.Array, n: int = 1) -> jax.Array:
    """[..., *F] -> [M, *F] with the last `n` axes kept: projections run on 2-D row blocks.

    Why: XLA:CPU lowers a weight gradient that contracts over two axes (batch and token, as
    ``BTD,BTF->DF`` does) by transposing the [B, T, F] cotangent into an [F, B*T] copy inside the
    elementwise fusion that produces it; those transposed writes cost more than the GEMMs of
    `small`'s backward (benchmarks/results/learner.md, "v2"). Over [B*T, D] rows the gradient is
    a plain ``MD,MF->DF`` GEMM. The sums are the same (reshapes only), so results are unchanged.
    """
    return x.reshape((-1,) + x.shape[x.ndim - n :])


class Einsum(nn.Module):
    """A bias-free einsum projection with one weight named ``w`` (openpi layout).

    ``eqn`` is ``"BT<in>,<w>-><out>"``: the activation leads with two row axes (B, T) and the
    output keeps them in place; every ``<in>`` axis is contracted. It runs as one 2-D GEMM
    [B*T, prod(in)] x [prod(in), prod(free)] (see `rows`): the weight (small) is permuted into
    that layout, never the activations. Free weight axes must appear in ``<out>`` after ``BT``.
    """

    shape: tuple[int, ...]
    init_fn: nn.initializers.Initializer = nn.initializers.lecun_normal()

    @nn.compact
    def __call__(self, eqn: str, x: jax.Array) -> jax.Array:
        w = self.param("w", self.init_fn, self.shape)
        lhs, rest = eqn.split(",")
        wax, out = rest.split("->")
        bt, xin = lhs[:2], lhs[2:]
        free = out[2:]
        if (
            out[:2] != bt
            or sorted(free + xin) != sorted(wax)
            or any(a in wax or a in out[2:] for a in bt)
            or x.ndim != len(lhs)
        ):
            raise ValueError(f"einsum {eqn!r} is not a row projection 'BT<in>,<w>->BT<free>'")
        dims = dict(zip(wax, w.shape, strict=True))
        w2 = jnp.einsum(f"{wax}->{xin}{free}", w.astype(x.dtype))  # weight-sized permute
        w2 = w2.reshape(math.prod(dims[a] for a in xin), -1)
        y = rows(x, len(xin)).reshape(-1, w2.shape[0]) @ w2  # [B*T, prod(free)]
        return y.reshape(x.shape[:2] + tuple(dims[a] for a in free))


class RMSNorm(nn.Module):
    """Gemma RMSNorm; with a conditioning vector it becomes adaRMS and also returns a gate."""

    @nn.compact
    def __call__(self, x: jax.Array, cond: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
        dtype = x.dtype
        var = jnp.mean(jnp.square(x.astype(jnp.float32)), axis=-1, keepdims=True)
        normed = x * jnp.reciprocal(jnp.sqrt(var + 1e-6))
        if cond is None:
            scale = self.param("scale", nn.initializers.zeros, (x.shape[-1],))
            return (normed * (1 + scale)).astype(dtype), None
        # cond: [B, C] -> modulation [B, 1, 3W], split as scale, shift, gate.
        mod = nn.Dense(
            x.shape[-1] * 3, kernel_init=nn.initializers.zeros, dtype=dtype, name="Dense_0"
        )(cond)
        scale, shift, gate = jnp.split(mod[:, None, :], 3, axis=-1)
        return (normed * (1 + scale) + shift).astype(dtype), gate


class FeedForward(nn.Module):
    """GeGLU MLP: gelu_tanh(x W0) * (x W1) @ linear."""

    features: int
    hidden_dim: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init = nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,))
        w_gating = self.param("gating_einsum", init, (2, self.features, self.hidden_dim))
        w_gating = w_gating.astype(x.dtype)
        x2 = rows(x)  # [M, D] (see `rows`)
        gate = nn.gelu(jnp.dot(x2, w_gating[0]), approximate=True)
        lin = jnp.dot(x2, w_gating[1])
        w_linear = self.param(
            "linear", nn.initializers.lecun_normal(), (self.hidden_dim, self.features)
        )
        return jnp.dot(gate * lin, w_linear.astype(x.dtype)).reshape(x.shape)


KVCache = tuple[jax.Array, jax.Array]  # k, v: [B, S, K, H] per layer


def _check_heads(configs: Sequence[ExpertConfig]) -> ExpertConfig:
    """Expert 0's config, after checking that every expert shares its attention heads and that
    they are multi-query (num_kv_heads < num_heads)."""
    c0 = configs[0]
    for c in configs:
        if (c.num_heads, c.num_kv_heads, c.head_dim) != (
            c0.num_heads,
            c0.num_kv_heads,
            c0.head_dim,
        ):
            raise ValueError("all experts must share num_heads, num_kv_heads and head_dim")
    if c0.num_kv_heads == c0.num_heads:
        raise ValueError("pi0.5 layout uses multi-query attention (num_kv_heads < num_heads)")
    return c0


def _attend(
    q: jax.Array,  # [B, T, N, H], roped and scaled
    k: jax.Array,  # [B, S, K, H]
    v: jax.Array,  # [B, S, K, H]
    attn_mask: jax.Array,  # [B, T, S]
    kh: int,  # K, the kv heads
    dtype,
) -> jax.Array:  # [B, T, N, H]
    """Masked softmax attention of N query heads over K kv heads (logits in float32)."""
    b, t, n, h = q.shape
    if attn_mask.shape != (b, t, k.shape[1]):
        raise ValueError(f"attn_mask shape {attn_mask.shape} != {(b, t, k.shape[1])}")
    if kh == 1:
        # One kv head (pi0.5's Gemmas): the N query heads of a token are N more rows of one
        # [B, T*N, H] x [B, S, H] product, so no operand needs a transposed copy.
        logits = jnp.einsum(
            "BQH,BSH->BQS",
            q.reshape(b, t * n, h),
            k[:, :, 0],
            preferred_element_type=jnp.float32,
        ).reshape(b, t, n, -1)  # [B, T, N, S]
        logits = jnp.where(attn_mask[:, :, None, :], logits, BIG_NEG)
        probs = jax.nn.softmax(logits, axis=-1).astype(dtype)
        enc = jnp.einsum("BQS,BSH->BQH", probs.reshape(b, t * n, -1), v[:, :, 0])
        return enc.reshape(b, t, n, h)
    q = q.reshape(b, t, kh, n // kh, h)  # query head n uses kv head n // (N/K)
    logits = jnp.einsum("BTKGH,BSKH->BKGTS", q, k, preferred_element_type=jnp.float32)
    logits = jnp.where(attn_mask[:, None, None, :, :], logits, BIG_NEG)
    probs = jax.nn.softmax(logits, axis=-1).astype(dtype)
    return jnp.einsum("BKGTS,BSKH->BTKGH", probs, v).reshape(b, t, n, h)


class Attention(nn.Module):
    """Joint multi-query attention over the tokens of all present experts."""

    configs: tuple[ExpertConfig, ...]

    @nn.compact
    def __call__(
        self,
        xs: Sequence[jax.Array | None],
        positions: jax.Array,  # [B, T]
        attn_mask: jax.Array,  # [B, T, S]
        kv_cache: KVCache | None,
    ) -> tuple[list[jax.Array | None], KVCache]:
        c0 = _check_heads(self.configs)
        qs, ks, vs = [], [], []
        for i, (x, c) in enumerate(zip(xs, self.configs, strict=True)):
            if x is None:
                continue
            q = Einsum(
                (c.num_heads, c.width, c.head_dim),
                nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0,)),
                name=_name("q_einsum", i),
            )("BTD,NDH->BTNH", x)
            kv = Einsum(
                (2, c.num_kv_heads, c.width, c.head_dim),
                nn.initializers.lecun_normal(in_axis=-2, out_axis=-1, batch_axis=(0, 1)),
                name=_name("kv_einsum", i),
            )("BSD,2KDH->BS2KH", x)
            k, v = kv[:, :, 0], kv[:, :, 1]  # [B, S, K, H] each
            qs.append(q)
            ks.append(k)
            vs.append(v)
        q = jnp.concatenate(qs, axis=1)  # [B, T, N, H]
        k = jnp.concatenate(ks, axis=1)  # [B, T, K, H]
        v = jnp.concatenate(vs, axis=1)
        dtype = q.dtype
        q = apply_rope(q, positions) * jnp.asarray(c0.head_dim**-0.5, dtype)
        k = apply_rope(k, positions)
        if kv_cache is not None:
            k = jnp.concatenate([kv_cache[0].astype(dtype), k], axis=1)  # [B, S, K, H]
            v = jnp.concatenate([kv_cache[1].astype(dtype), v], axis=1)
        enc = _attend(q, k, v, attn_mask, c0.num_kv_heads, dtype)  # [B, T, N, H]
        out: list[jax.Array | None] = []
        start = 0
        for i, (x, c) in enumerate(zip(xs, self.configs, strict=True)):
            if x is None:
                out.append(None)
                continue
            end = start + x.shape[1]
            o = Einsum(
                (c.num_heads, c.head_dim, c.width),
                nn.initializers.lecun_normal(in_axis=(-3, -2), out_axis=-1),
                name=_name("attn_vec_einsum", i),
            )("BTNH,NHD->BTD", enc[:, start:end])
            out.append(o)
            start = end
        return out, (k, v)


def _gated_residual(x, y, gate):
    if x is None:
        return None
    return x + y if gate is None else x + y * gate


class Block(nn.Module):
    """One decoder layer for all experts (pre-norm attention + pre-norm GeGLU)."""

    configs: tuple[ExpertConfig, ...]

    @nn.compact
    def __call__(
        self,
        xs: list[jax.Array | None],
        kv_cache: KVCache | None,
        positions: jax.Array,
        attn_mask: jax.Array,
        adarms_cond: Sequence[jax.Array | None],
    ):
        normed, gates = [], []
        for i, x in enumerate(xs):
            if x is None:
                normed.append(None)
                gates.append(None)
                continue
            y, g = RMSNorm(name=_name("pre_attention_norm", i))(x, adarms_cond[i])
            normed.append(y)
            gates.append(g)
        attn_out, new_kv = Attention(self.configs, name="attn")(
            normed, positions, attn_mask, kv_cache
        )
        xs = [_gated_residual(x, y, g) for x, y, g in zip(xs, attn_out, gates, strict=True)]
        outs, gates = [], []
        for i, (x, c) in enumerate(zip(xs, self.configs, strict=True)):
            if x is None:
                outs.append(None)
                gates.append(None)
                continue
            y, g = RMSNorm(name=_name("pre_ffw_norm", i))(x, adarms_cond[i])
            outs.append(FeedForward(c.width, c.mlp_dim, name=_name("mlp", i))(y))
            gates.append(g)
        xs = [_gated_residual(x, y, g) for x, y, g in zip(xs, outs, gates, strict=True)]
        self.sow("intermediates", "hidden", tuple(xs))
        return xs, new_kv


class Embedder(nn.Module):
    """Token embedding of expert 0 (scaled by sqrt(width) with the sqrt taken in f32)."""

    vocab_size: int
    width: int

    @nn.compact
    def __call__(self, tokens: jax.Array, dtype) -> jax.Array:
        table = self.param(
            "input_embedding", nn.initializers.normal(stddev=1.0), (self.vocab_size, self.width)
        )
        x = table[(tokens,)].astype(dtype)
        return x * jnp.sqrt(jnp.float32(self.width)).astype(dtype)


class GemmaMoE(nn.Module):
    """The ``PaliGemma/llm`` module: embedder, scanned layers and per-expert final norms.

    ``adarms`` says which experts are conditioned (adaRMS) — for pi0.5 only the action expert.
    ``scan_unroll`` layers run per step of the layer scan (0 = all: straight-line code). The
    parameters keep the stacked [depth, ...] layout either way. Unrolled, XLA:CPU keeps each
    layer's saved activations in their own buffers instead of zero-filling and copying stacked
    [depth, ...] ones (benchmarks/results/learner.md, "v2"); rolled (1) compiles faster for
    deep models.
    """

    configs: tuple[ExpertConfig, ...]
    vocab_size: int
    adarms: tuple[bool, ...]
    dtype: str = "float32"
    scan_unroll: int = 1

    def setup(self):
        depth = self.configs[0].depth
        if any(c.depth != depth for c in self.configs):
            raise ValueError("all experts must have the same depth")
        if self.scan_unroll < 0:
            raise ValueError(f"scan_unroll must be >= 0 (0 = all layers), got {self.scan_unroll}")
        self.embedder = Embedder(self.vocab_size, self.configs[0].width)
        self.layers = nn.scan(
            Block,
            variable_axes={"params": 0, "intermediates": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast),
            length=depth,
            unroll=self.scan_unroll or depth,
        )(configs=self.configs)
        self.final_norm = RMSNorm()
        if len(self.configs) > 1:
            self.final_norm_1 = RMSNorm()
        if len(self.configs) > 2:
            raise ValueError("at most two experts are supported")

    def embed(self, tokens: jax.Array) -> jax.Array:
        """tokens: [B, L] int -> [B, L, W0]."""
        return self.embedder(tokens, jnp.dtype(self.dtype))

    def __call__(
        self,
        embedded: Sequence[jax.Array | None],
        positions: jax.Array,  # [B, T]
        mask: jax.Array,  # [B, T, S]
        adarms_cond: Sequence[jax.Array | None] | None = None,
        kv_cache: KVCache | None = None,  # per-layer stacked: [depth, B, S, K, H]
    ) -> tuple[list[jax.Array | None], KVCache]:
        dt = jnp.dtype(self.dtype)
        if adarms_cond is None:
            adarms_cond = [None] * len(self.configs)
        for i, (c, use) in enumerate(zip(adarms_cond, self.adarms, strict=True)):
            if embedded[i] is not None and use != (c is not None):
                raise ValueError(
                    f"expert {i}: adaRMS conditioning {'required' if use else 'not used'}"
                )
        xs = [None if e is None else e.astype(dt) for e in embedded]
        xs, kv = self.layers(xs, kv_cache, positions, mask, list(adarms_cond))
        norms = [self.final_norm] + ([self.final_norm_1] if len(self.configs) > 1 else [])
        outs = [
            None if x is None else f(x, a)[0]
            for f, x, a in zip(norms, xs, adarms_cond, strict=True)
        ]
        return outs, kv
