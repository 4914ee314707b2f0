"""Analytic FLOP counts of pi0.5 (matmuls and attention; 1 multiply-add = 2 FLOPs).

Counts what the joint forward actually computes: every camera through SigLIP, the full
``max_token_len`` prompt, the whole (masked) attention matrix. Norms, softmax, activations and
embedding lookups are ignored (a few percent). Training ≈ 3 × forward (backward ≈ 2 × forward).
"""

from __future__ import annotations

from ml_collections import ConfigDict

from coda.policy.pi05 import Pi05Spec


def pi05_forward_flops(config: ConfigDict) -> dict[str, int]:
    """Forward FLOPs per sample of the joint (training) forward, by part."""
    s = Pi05Spec.from_config(config)
    out: dict[str, int] = {}
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
    n_prefix += s.max_token_len
    n_suffix = s.action_horizon
    total_tokens = n_prefix + n_suffix

    def expert(e, t):
        proj = t * e.width * (e.num_heads * e.head_dim * 2 + 2 * e.num_kv_heads * e.head_dim)
        mlp = 3 * t * e.width * e.mlp_dim
        return 2 * e.depth * (proj + mlp)

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


def pi05_train_flops_per_sample(config: ConfigDict) -> int:
    return 3 * pi05_forward_flops(config)["total"]
