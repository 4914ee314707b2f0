"""SigLIP-style ViT image encoder (the ``PaliGemma/img`` module of pi0.5).

Patchify conv (f32) + learned position embedding, scanned pre-LN encoder blocks, encoder norm and a
``head`` Dense to the VLM width; no pooling. Names follow big_vision / openpi
(``Transformer/encoderblock/MultiHeadDotProductAttention_0/query/kernel`` ...).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SiglipConfig:
    patch_size: int
    width: int
    depth: int
    mlp_dim: int
    num_heads: int
    image_size: int  # square images [image_size, image_size, 3]

    @property
    def num_tokens(self) -> int:
        return (self.image_size // self.patch_size) ** 2


class MlpBlock(nn.Module):
    mlp_dim: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = x.shape[-1]
        x = nn.Dense(self.mlp_dim, dtype=self.dtype, name="Dense_0")(x)
        x = nn.gelu(x, approximate=True)
        return nn.Dense(d, dtype=self.dtype, name="Dense_1")(x)


class Encoder1DBlock(nn.Module):
    mlp_dim: int
    num_heads: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: jax.Array, _):
        y = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name="LayerNorm_0")(x)
        y = nn.MultiHeadDotProductAttention(
            num_heads=self.num_heads,
            kernel_init=nn.initializers.xavier_uniform(),
            deterministic=True,
            dtype=self.dtype,
            name="MultiHeadDotProductAttention_0",
        )(y, y)
        x = x + y
        y = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name="LayerNorm_1")(x)
        y = MlpBlock(self.mlp_dim, self.dtype, name="MlpBlock_0")(y)
        return x + y, None


class Encoder(nn.Module):
    depth: int
    mlp_dim: int
    num_heads: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        block = nn.scan(
            Encoder1DBlock,
            variable_axes={"params": 0},
            split_rngs={"params": True, "dropout": True},
            in_axes=nn.broadcast,
            length=self.depth,
        )
        x, _ = block(self.mlp_dim, self.num_heads, self.dtype, name="encoderblock")(x, None)
        return nn.LayerNorm(epsilon=1e-6, dtype=self.dtype, name="encoder_norm")(x)


class SigLIP(nn.Module):
    """images [B, S, S, 3] in [-1, 1] -> tokens [B, (S/p)^2, out_width]."""

    config: SiglipConfig
    out_width: int
    dtype: str = "float32"

    @nn.compact
    def __call__(self, image: jax.Array) -> jax.Array:
        c = self.config
        if image.shape[-3:] != (c.image_size, c.image_size, 3):
            raise ValueError(
                f"image shape {image.shape} != [B, {c.image_size}, {c.image_size}, 3]; "
                "resize (with padding) to the model resolution first"
            )
        x = jnp.asarray(image, jnp.float32)
        x = nn.Conv(
            c.width,
            (c.patch_size, c.patch_size),
            strides=(c.patch_size, c.patch_size),
            padding="VALID",
            dtype=jnp.float32,
            name="embedding",
        )(x)
        b, h, w, d = x.shape
        x = x.reshape(b, h * w, d)
        pos = self.param(
            "pos_embedding", nn.initializers.normal(stddev=1 / jnp.sqrt(d)), (1, h * w, d)
        )
        x = (x + pos).astype(self.dtype)
        x = Encoder(c.depth, c.mlp_dim, c.num_heads, self.dtype, name="Transformer")(x)
        return nn.Dense(
            self.out_width, kernel_init=nn.initializers.zeros, dtype=self.dtype, name="head"
        )(x)
