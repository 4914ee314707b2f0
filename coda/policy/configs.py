"""Named model configs (ml_collections ConfigDicts): pi05, pi05_libero, tiny, small,
small_vision, oft, oft_tiny.

Every size is a field. ``pi05`` has openpi's exact dims (Gemma 2B + Gemma 300M action expert +
SigLIP So400m/14); ``tiny`` has the dims of the openpi parity fixture; ``small`` is the
CPU-trainable state-only model the rest of CoDA uses; ``small_vision`` is it in image mode
(``vision_overrides``: agent view + wrist camera, proprioceptive state).
"""

from __future__ import annotations

from typing import Any

from ml_collections import ConfigDict

from coda.registries import POLICIES

OPENPI_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")


def _expert(width, depth, mlp_dim, num_heads, num_kv_heads, head_dim) -> dict:
    return dict(
        width=width,
        depth=depth,
        mlp_dim=mlp_dim,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
    )


def _siglip(patch_size, width, depth, mlp_dim, num_heads, image_size) -> dict:
    return dict(
        patch_size=patch_size,
        width=width,
        depth=depth,
        mlp_dim=mlp_dim,
        num_heads=num_heads,
        image_size=image_size,
    )


def pi05() -> ConfigDict:
    """openpi ``Pi0Config(pi05=True)``."""
    return ConfigDict(
        dict(
            name="pi05",
            backbone="pi05",
            dtype="bfloat16",
            param_dtype="float32",
            vocab_size=257152,
            vlm=_expert(2048, 18, 16384, 8, 1, 256),
            expert=_expert(1024, 18, 4096, 8, 1, 256),
            siglip=_siglip(14, 1152, 27, 4304, 16, 224),
            camera_names=OPENPI_CAMERAS,
            action_dim=32,
            env_action_dim=32,
            action_horizon=50,
            max_token_len=200,
            discrete_state_input=True,
            max_state_dim=32,
            num_state_tokens=0,  # 0: no state encoder (state goes into the prompt text)
            state_hidden=0,
            # > 0: the state encoder reads only the first `proprio_dims` state dims (image-mode
            # policies: robot proprioception from the state, objects from the cameras)
            proprio_dims=0,
            num_sample_steps=10,
            # Gemma layers per step of the layer scan: 1 = a rolled loop (compiles fast at depth
            # 18); 0 = all layers unrolled (faster training on XLA:CPU for shallow models, see
            # gemma.GemmaMoE and benchmarks/results/learner.md "v2"). Parameters are the same.
            scan_unroll=1,
            # Scale of the initial flow noise at sampling (1 = the trained prior; < 1 samples
            # closer to the mode, a temperature knob; training is unaffected).
            sample_noise_scale=1.0,
            tokenizer_path="",  # "" -> the offline SentencePiece model shipped in assets/
        )
    )


def pi05_libero() -> ConfigDict:
    """openpi ``pi05_libero``: horizon 10, no discrete state (same parameters as pi05)."""
    c = pi05()
    c.name = "pi05_libero"
    c.action_horizon = 10
    c.discrete_state_input = False
    return c


def tiny() -> ConfigDict:
    """The openpi parity fixture's tiny pi0.5 (161,544 params), float32."""
    c = pi05()
    c.name = "tiny"
    c.dtype = "float32"
    c.vocab_size = 512
    c.vlm = _expert(64, 2, 128, 2, 1, 16)
    c.expert = _expert(32, 2, 64, 2, 1, 16)
    c.siglip = _siglip(14, 32, 1, 64, 2, 56)
    c.action_dim = 8
    c.env_action_dim = 8
    c.action_horizon = 4
    c.max_token_len = 16
    c.max_state_dim = 8
    c.num_sample_steps = 3
    return c


def small() -> ConfigDict:
    """CPU-trainable pi0.5 (a few million params), state-only by default, 7-dim actions."""
    c = pi05()
    c.name = "small"
    c.dtype = "float32"
    c.vocab_size = 1024  # >= the shipped SentencePiece vocabulary (1000)
    c.vlm = _expert(192, 4, 768, 4, 1, 48)
    c.expert = _expert(96, 4, 384, 4, 1, 48)
    # Used only when camera_names is non-empty (rendered mode).
    c.siglip = _siglip(8, 64, 2, 128, 2, 64)
    c.camera_names = ()
    c.action_dim = 8
    c.env_action_dim = 7  # Δxyz, Δrpy, gripper
    c.action_horizon = 10
    c.max_token_len = 32
    c.discrete_state_input = False
    c.max_state_dim = 64
    c.num_state_tokens = 4
    c.state_hidden = 256
    c.num_sample_steps = 10
    c.scan_unroll = 0  # all 4 layers unrolled (learner.md "v2")
    return c


# Image-mode policies on our scenes (coda.sim.observe): agent view + wrist camera.
SCENE_CAMERAS = ("base_0_rgb", "left_wrist_0_rgb")
VISION_PATCH = 8  # px: 32 px images -> 16 tokens per camera, 64 px -> 64
# The proprioceptive head of coda.sim.state.flat_observation: tcp pos (3) + quat (4) + fingers
# (2) + commanded wrist pose (6); object poses and articulated joints follow it.
PROPRIO_DIMS = 15


def vision_overrides(image_size: int, width: int = 64, depth: int = 2) -> dict:
    """`get_config` overrides that turn a state-only config into an image-mode one: the two
    scene cameras through a small SigLIP (patch `VISION_PATCH`, `width`, `depth`) at
    `image_size` px, and a state encoder that reads proprioception only. Sizes are CPU-scale:
    at 32 px with width 32 / depth 1 a smoke run stays in minutes."""
    if image_size < VISION_PATCH or image_size % VISION_PATCH:
        raise ValueError(f"image_size {image_size} must be a positive multiple of {VISION_PATCH}")
    heads = 2 if width % 2 == 0 else 1
    return dict(
        camera_names=SCENE_CAMERAS,
        siglip=_siglip(VISION_PATCH, width, depth, 2 * width, heads, image_size),
        proprio_dims=PROPRIO_DIMS,
    )


def obs_overrides(pc: Any) -> dict:
    """The loop's policy section (configs/coda.py) -> image-mode overrides: {} for
    `obs_mode="state"` (or absent), else `vision_overrides` at `image_size` with the vision
    tower sized like the VLM (`width`, `depth`)."""
    mode = pc.get("obs_mode", "state")
    if mode == "state":
        return {}
    if mode != "images":
        raise ValueError(f"unknown policy.obs_mode {mode!r}; valid: ['images', 'state']")
    return vision_overrides(int(pc.image_size), int(pc.width), int(pc.depth))


def small_vision() -> ConfigDict:
    """``small`` in image mode: agent view + wrist at 64 px (64 tokens each) through a 2-layer
    SigLIP of width 64, proprioception from the state, the instruction through the tokenizer."""
    c = small()
    c.name = "small_vision"
    for k, v in vision_overrides(64).items():
        c[k] = v
    return c


def oft() -> ConfigDict:
    """OpenVLA-OFT-style backbone at ``small`` scale (parallel decoding + L1 head)."""
    c = small()
    c.name = "oft"
    c.backbone = "oft"
    c.head_hidden = 256
    c.candidate_dropout = 0.1  # MC-dropout rate of the action head (candidate mechanism)
    return c


def oft_tiny() -> ConfigDict:
    """A very small OFT for fast tests (state-only)."""
    c = oft()
    c.name = "oft_tiny"
    c.vlm = _expert(32, 1, 64, 2, 1, 16)
    c.action_horizon = 4
    c.max_token_len = 16
    c.max_state_dim = 16
    c.num_state_tokens = 2
    c.state_hidden = 32
    c.head_hidden = 32
    return c


def small_tiny() -> ConfigDict:
    """``small``'s structure (state-only, 7-dim actions) at test size."""
    c = small()
    c.name = "small_tiny"
    c.vlm = _expert(32, 1, 64, 2, 1, 16)
    c.expert = _expert(16, 1, 32, 2, 1, 16)
    c.action_horizon = 4
    c.max_token_len = 16
    c.max_state_dim = 16
    c.num_state_tokens = 2
    c.state_hidden = 32
    c.num_sample_steps = 3
    return c


CONFIGS = POLICIES  # name -> the function above that returns its config (coda.registries)


def get_config(name: str, **overrides) -> ConfigDict:
    """A named config with optional top-level overrides; unknown names list the valid ones."""
    c = POLICIES[name]()  # UnknownName (a ValueError) lists the valid names
    for k, v in overrides.items():
        if k not in c:
            raise ValueError(f"unknown config field {k!r} for {name!r}; fields: {sorted(c.keys())}")
        c[k] = v
    return c
