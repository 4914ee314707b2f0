"""Rendered policy observations for our scenes: agent view + wrist camera at chunk endpoints.

Image-mode policies (`config.policy.obs_mode = "images"`, a pi0.5 config with `camera_names`)
see two cameras compiled into every scene (`coda.sim.compile`): the fixed agent view behind the
robot base (`front` -> pi0.5's `base_0_rgb`) and the wrist camera on the floating gripper
(`wrist` -> `left_wrist_0_rgb`), both square at the vision tower's resolution
(`siglip.image_size`), uint8 RGB, top row first. The policy acts only at chunk endpoints, so only
those states are rendered: the native backend renders the current states between chunks, on the
host, right before the jitted policy step (`coda.sim.rollout.NativeBackend`); MJX cannot (its
episode is one jitted program, and MJX has no renderer), so image mode needs the native backend.

Rendering depends on qpos and the model only, so the frames a rollout fed its policy are
reproduced from `RolloutResult.qpos` (`render_result`; up to that array's float32 rounding: at
most one intensity level on < 0.1 % of the pixels, tests/test_obs_images.py): planner demos,
which never render while they run, get their images that way for behaviour cloning.

What reads what: the image policy gets the frames, proprioception (the first
`coda.policy.configs.PROPRIO_DIMS` entries of the flat state; the model masks the rest,
`proprio_dims`) and the instruction tokens. The chunk critic (best-of-j scores, AWR advantages)
keeps reading the full flat state: it is only used in simulation, never deployed (an asymmetric
actor-critic), so it stays cheap and needs no frames.

Storage: frames stay uint8 [.., n_cam, S, S, 3] everywhere (rollout results, the learner's
device replay and demo buffer) and become float in [-1, 1] inside the model
(`coda.policy.pi05.embed_observation`), 4x less memory than float32. At S = 32 that is 6 KB per
transition, at 64 px 24.6 KB, at 224 px 301 KB (`replay_size` x that is the replay's image
memory: size the config for it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from coda.sim import render as R
from coda.sim.compile import AGENT_CAMERA, WRIST_CAMERA

# pi0.5 image key -> the scene camera that feeds it (coda.policy.configs.OPENPI_CAMERAS)
POLICY_CAMERAS: dict[str, str] = {
    "base_0_rgb": AGENT_CAMERA,
    "left_wrist_0_rgb": WRIST_CAMERA,
}
# a render model that carries these cameras shows them instead (LIBERO's agent view and wrist
# camera, `coda.libero.scene.add_cameras`: what LIBERO's policies see)
CAMERA_ALIASES: dict[str, tuple[str, ...]] = {
    AGENT_CAMERA: ("agentview",),
    WRIST_CAMERA: ("robot0_eye_in_hand",),
}


def cameras_in(model: Any, cameras: Sequence[str]) -> tuple[str, ...]:
    """`cameras` as `model` names them (`CAMERA_ALIASES` first)."""
    import mujoco

    def one(name: str) -> str:
        for alias in CAMERA_ALIASES.get(name, ()):
            if mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, alias) >= 0:
                return alias
        return name

    return tuple(one(c) for c in cameras)


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """What an image-mode policy is fed: scene cameras (render order), the policy's image keys
    in the same order, and the square side in pixels. Hashable (part of jit-static agents)."""

    keys: tuple[str, ...]  # policy image keys, e.g. ("base_0_rgb", "left_wrist_0_rgb")
    cameras: tuple[str, ...]  # scene camera names, same order
    size: int  # pixels per side

    def __post_init__(self):
        if len(self.keys) != len(self.cameras) or not self.keys:
            raise ValueError(f"keys {self.keys} and cameras {self.cameras} must pair up")
        if self.size < 1:
            raise ValueError(f"image size must be >= 1, got {self.size}")

    @property
    def bytes_per_endpoint(self) -> int:
        """uint8 bytes of one endpoint's frames (all cameras)."""
        return len(self.cameras) * self.size * self.size * 3


def image_spec_for(policy_config: Any) -> ImageSpec | None:
    """The `ImageSpec` of a policy config, or None for a state-only one (no `camera_names`).

    Raises for a camera key our scenes cannot render (listing the ones they can)."""
    keys = tuple(policy_config.camera_names)
    if not keys:
        return None
    bad = [k for k in keys if k not in POLICY_CAMERAS]
    if bad:
        raise ValueError(
            f"policy camera keys {bad} have no camera in our scenes; "
            f"valid: {sorted(POLICY_CAMERAS)}"
        )
    size = int(policy_config.siglip.image_size)
    return ImageSpec(keys, tuple(POLICY_CAMERAS[k] for k in keys), size)


def render_qpos(
    models: Sequence[Any],
    qpos: np.ndarray,  # [B, nq]
    spec: ImageSpec,
    valid: np.ndarray | None = None,  # [B] bool: rows to render (others stay black)
) -> np.ndarray:  # [B, n_cam, S, S, 3] uint8
    """Every camera of `spec` for one state per (same-structure) model, one GL context shared
    by all of them (`coda.sim.render.render_variants`). Padding rows (`valid` False) are not
    rendered: their frames are zeros and nothing learns from them."""
    qpos = np.asarray(qpos)
    b = qpos.shape[0]
    out = np.zeros((b, len(spec.cameras), spec.size, spec.size, 3), np.uint8)
    rows = np.arange(b) if valid is None else np.nonzero(np.asarray(valid, bool))[0]
    if rows.size == 0:
        return out
    ms = [models[i] for i in rows]
    out[rows] = R.render_variants(
        ms, qpos[rows], cameras=cameras_in(ms[0], spec.cameras), width=spec.size, height=spec.size
    )
    return out


def render_result(
    bucket: Any, result: Any, spec: ImageSpec, keep: np.ndarray | None = None
) -> np.ndarray:
    """The policy inputs of a finished rollout, re-rendered from its recorded endpoints:
    [B, C, n_cam, S, S, 3] uint8 at chunk starts 0..C-1 (what `NativeBackend` fed an image
    policy at those chunks; for rollouts whose policy did not render, e.g. planner demos).
    `keep` [B] bool: rows to render (default the bucket's valid ones; the rest stay black)."""
    qpos = np.asarray(result.qpos)  # [B, C+1, nq]
    c = int(np.asarray(result.actions).shape[1])
    keep = np.asarray(bucket.valid if keep is None else keep, bool)
    out = np.zeros((qpos.shape[0], c, len(spec.cameras), spec.size, spec.size, 3), np.uint8)
    for t in range(c):
        out[:, t] = render_qpos(bucket.render_models, qpos[:, t], spec, keep)
    return out


def with_images(
    result: Any, bucket: Any, spec: ImageSpec | None, keep: np.ndarray | None = None
) -> Any:
    """`result` with `images` filled in (rendered from qpos, rows `keep`, default the valid
    ones) when `spec` asks for images and the rollout did not record them; unchanged otherwise.
    Raises if the recorded frames do not match `spec` (another camera set or resolution)."""
    if spec is None:
        return result
    if result.images is not None:
        shape = tuple(np.shape(result.images)[2:])
        want = (len(spec.cameras), spec.size, spec.size, 3)
        if shape != want:
            raise ValueError(f"rollout images are [.., {shape}], the policy needs [.., {want}]")
        return result
    return result.replace(images=jnp.asarray(render_result(bucket, result, spec, keep)))


def policy_images(
    frames: jax.Array, spec: ImageSpec
) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
    """[.., n_cam, S, S, 3] uint8 -> ({key: [.., S, S, 3] uint8}, {key: [..] bool}), the
    `Observation.images` / `image_masks` of pi0.5 (uint8 is converted inside the model).
    Jittable."""
    if frames.shape[-4:] != (len(spec.keys), spec.size, spec.size, 3):
        raise ValueError(
            f"frames {frames.shape} != [.., {len(spec.keys)}, {spec.size}, {spec.size}, 3]"
        )
    images = {k: frames[..., i, :, :, :] for i, k in enumerate(spec.keys)}
    masks = {k: jnp.ones(frames.shape[:-4], bool) for k in spec.keys}
    return images, masks
