"""The policy specs' shared reading of a policy ConfigDict (`Pi05Spec` and `OFTSpec`
`.from_config`): experts, vision tower, cameras and the sizes every spec holds."""

from __future__ import annotations

from typing import Any

from ml_collections import ConfigDict

from coda.policy.gemma import ExpertConfig
from coda.policy.siglip import SiglipConfig

MAX_CAMERAS = 3


def spec_fields(c: ConfigDict, experts: tuple[str, ...]) -> dict[str, Any]:
    """Keyword arguments of a spec's common fields from `c`: one `ExpertConfig` per name in
    `experts` (e.g. "vlm", "expert"), the SigLIP config when there are cameras (None without),
    the camera names, the integer sizes, the dtype, and `proprio_dims` / `scan_unroll` (defaults
    0 and 1 when absent). Raises on more than `MAX_CAMERAS` cameras."""
    cams = tuple(c.camera_names)
    if len(cams) > MAX_CAMERAS:
        raise ValueError(f"at most {MAX_CAMERAS} cameras are supported, got {cams}")
    return {
        **{name: ExpertConfig(**dict(c[name])) for name in experts},
        "siglip": SiglipConfig(**dict(c.siglip)) if cams else None,
        "camera_names": cams,
        "vocab_size": int(c.vocab_size),
        "action_dim": int(c.action_dim),
        "action_horizon": int(c.action_horizon),
        "max_token_len": int(c.max_token_len),
        "max_state_dim": int(c.max_state_dim),
        "num_state_tokens": int(c.num_state_tokens),
        "state_hidden": int(c.state_hidden),
        "dtype": str(c.dtype),
        "proprio_dims": int(c.get("proprio_dims", 0)),
        "scan_unroll": int(c.get("scan_unroll", 1)),
    }
