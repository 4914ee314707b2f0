"""Analytic FLOP counts of pi0.5 and OFT (matmuls and attention; 1 multiply-add = 2 FLOPs).

Counts what the joint forward actually computes: every camera through SigLIP, the prompt at
``token_len`` columns (default ``max_token_len``: a fixed-width batch; pass the width the batch
needs to count useful work only), the whole (masked) attention matrix. Norms, softmax,
activations and embedding lookups are ignored (a few percent). Training ≈ 3 × forward
(backward ≈ 2 × forward).
"""

from __future__ import annotations

from ml_collections import ConfigDict

from coda.policy.oft import OFTSpec
from coda.policy.pi05 import Pi05Spec


def _prefix_flops(s, out: dict[str, int], token_len: int | None) -> int:
    """SigLIP and state-encoder FLOPs into ``out``; returns the prefix token count."""
    n_prefix = 0
    if s.siglip is not None:
        g = s.siglip
        n = g.num_tokens
        w = g.width
        per_img = n * g.patch_size**2 * 3 * w  # patchify conv
        per_img += g.depth * (4 * n * w * w + 2 * n * n * w + 2 * n * w * g.mlp_dim)
        per_img += n * w * s.vlm.width  # head
        out["siglip"] = 2 * per_img * len(s.camera_names)
        n_prefix += n * len(s.camera_names)
    if s.num_state_tokens > 0:
        h = s.state_hidden
        out["state_encoder"] = 2 * (
            2 * s.max_state_dim * h + h * h + h * s.num_state_tokens * s.vlm.width
        )
        n_prefix += s.num_state_tokens
    length = s.max_token_len if token_len is None else int(token_len)
    if not 0 < length <= s.max_token_len:
        raise ValueError(f"token_len {token_len} outside (0, max_token_len={s.max_token_len}]")
    return n_prefix + length


def _expert(e, t: int) -> int:
    proj = t * e.width * (e.num_heads * e.head_dim * 2 + 2 * e.num_kv_heads * e.head_dim)
    mlp = 3 * t * e.width * e.mlp_dim
    return 2 * e.depth * (proj + mlp)


def pi05_forward_flops(config: ConfigDict, token_len: int | None = None) -> dict[str, int]:
    """Forward FLOPs per sample of the joint (training) forward, by part."""
    s = Pi05Spec.from_config(config)
    out: dict[str, int] = {}
    n_prefix = _prefix_flops(s, out, token_len)
    n_suffix = s.action_horizon
    total_tokens = n_prefix + n_suffix
    expert = _expert

    out["vlm_expert"] = expert(s.vlm, n_prefix)
    ada = (
        2 * 2 * s.expert.depth * s.expert.width * 3 * s.expert.width
        + 2 * s.expert.width * 3 * s.expert.width
    )
    out["action_expert"] = expert(s.expert, n_suffix) + ada
    e = s.vlm
    out["attention"] = 2 * e.depth * 2 * total_tokens * total_tokens * e.num_heads * e.head_dim
    w1 = s.expert.width
    out["action_time_proj"] = 2 * (2 * n_suffix * s.action_dim * w1 + 2 * w1 * w1)
    out["total"] = sum(out.values())
    return out


def pi05_train_flops_per_sample(config: ConfigDict, token_len: int | None = None) -> int:
    return 3 * pi05_forward_flops(config, token_len)["total"]


def oft_forward_flops(config: ConfigDict, token_len: int | None = None) -> dict[str, int]:
    """Forward FLOPs per sample of OFT's parallel-decoding pass (prefix + H queries) + head."""
    s = OFTSpec.from_config(config)
    out: dict[str, int] = {}
    n_prefix = _prefix_flops(s, out, token_len)
    total_tokens = n_prefix + s.action_horizon
    out["vlm_expert"] = _expert(s.vlm, total_tokens)
    e = s.vlm
    out["attention"] = 2 * e.depth * 2 * total_tokens * total_tokens * e.num_heads * e.head_dim
    out["action_head"] = 2 * s.action_horizon * s.head_hidden * (e.width + s.action_dim)
    out["total"] = sum(out.values())
    return out


def train_flops_per_sample(config: ConfigDict, token_len: int | None = None) -> int:
    """Training FLOPs per sample (≈ 3 × forward) for either backbone."""
    fwd = {"pi05": pi05_forward_flops, "oft": oft_forward_flops}
    if config.backbone not in fwd:
        raise ValueError(f"no FLOP count for backbone {config.backbone!r}; valid: {sorted(fwd)}")
    return 3 * fwd[config.backbone](config, token_len)["total"]
