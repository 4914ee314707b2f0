"""Observations as LIBERO gives them: the agent view and the wrist (eye-in-hand) view, 256 x 256
RGB, rendered offscreen from recorded states (chunk endpoints), optionally under an observation
perturbation (`perturb.ObsPerturbation`); their pi0.5 inputs; rollout GIFs.

Rollouts never render: they record qpos at every chunk endpoint (`RolloutResult.qpos`), and this
module replays those states through `mj_forward` on the task's visual model (LIBERO's meshes and
textures; same qpos layout as the collision-only model the rollout stepped) with
`coda.sim.render` (EGL / OSMesa, probed once). Frames are top-down rows, as a camera sees them.
Sites are hidden, except a stove's burner while the stove is on (LIBERO toggles it so).

pi0.5 (openpi's `pi05_libero`): the agent view is `base_0_rgb`, the wrist view
`left_wrist_0_rgb`, `right_wrist_0_rgb` is absent (a black image with mask False), each resized
to the vision tower's 224 x 224 (square in, square out: no padding). openpi's LIBERO client turns
LIBERO's frames by 180 deg before inference; LIBERO (robosuite) returns OpenGL row order (bottom
row first), so its turned frame is our top-down frame mirrored left-right: `pi05_images` does
that mirror by default (`mirror=False` feeds the camera's own view). This follows from the two
conventions. LIBERO's Panda frames (`panda_env`, `robosuite=True` here) are compared with
robosuite's own, pixel by pixel, at the same states (`benchmarks/libero_fidelity.py`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import mujoco
import numpy as np

from coda.libero import perturb as P
from coda.libero import scene as S
from coda.sim import render as R
from coda.sim.predicates import LIBERO_JOINT_THRESHOLDS

CAMERAS = (S.AGENTVIEW_CAMERA, S.WRIST_CAMERA)  # axis 1 of `render_observations`
IMAGE_SIZE = 256  # LIBERO_ENV_RESOLUTION of openpi's LIBERO client: what training data used
PI05_IMAGE_SIZE = 224  # SigLIP's input (coda.policy.configs: siglip.image_size)
PI05_CAMERAS = {S.AGENTVIEW_CAMERA: "base_0_rgb", S.WRIST_CAMERA: "left_wrist_0_rgb"}
PI05_ABSENT = ("right_wrist_0_rgb",)
GIF_SIZE = 128
GIF_FPS = 1.0 / 0.4  # one frame per 10-step chunk (0.4 s of simulated time)


def render_model(suite: str, name: str) -> mujoco.MjModel:
    """The task's visual model, shared per task (`scene.visual_model`)."""
    return S.visual_model(suite, name)


def _qpos_of(model: mujoco.MjModel, states) -> np.ndarray:  # -> [B, nq] float64
    if isinstance(states, mujoco.MjData):
        states = [states]
    if isinstance(states, Sequence) and states and isinstance(states[0], mujoco.MjData):
        states = [d.qpos for d in states]
    q = np.asarray(states, np.float64)
    if q.ndim != 2 or q.shape[1] != model.nq:
        raise ValueError(f"states must be MjData or qpos [B, nq={model.nq}], got {q.shape}")
    return q


def _burners(model: mujoco.MjModel) -> list[tuple[int, np.ndarray]]:
    """(site id, qpos addresses of its stove's joints) of every stove burner site: LIBERO shows
    a stove's red burner only while the stove is on (its knob at LIBERO's TurnOn threshold)."""
    out = []
    for i in range(model.nsite):
        name = model.site(i).name
        if not name.endswith("_burner"):
            continue
        stove = name[: -len("_burner")]
        adr = [
            model.jnt_qposadr[j]
            for j in range(model.njnt)
            if model.joint(j).name.startswith(stove + "_")
            and model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE
        ]
        if adr:
            out.append((i, np.asarray(adr)))
    return out


def _burner_groups(model: mujoco.MjModel, qpos: np.ndarray) -> list[tuple[np.ndarray, tuple]]:
    """States grouped by which burners are lit: [(state indices, lit flags per burner)]."""
    burners = _burners(model)
    if not burners:
        return [(np.arange(len(qpos)), ())]
    op, bound = LIBERO_JOINT_THRESHOLDS["stove_knob"]["turn_on"]
    assert op == ">="
    lit = np.stack([(qpos[:, adr] >= bound).any(-1) for _, adr in burners], -1)  # [B, n]
    keys = [tuple(bool(v) for v in row) for row in lit]
    return [
        (np.array([b for b, k in enumerate(keys) if k == key]), key) for key in dict.fromkeys(keys)
    ]


# how robosuite's offscreen renderer draws LIBERO's frames: its visual geoms only (group 1; its
# collision geoms, group 0, are hidden: `render_collision_mesh=False`), MuJoCo's default scene
# flags (reflections and shadows on: a stove's reflective top shows light, not dark metal) and
# multisampling
ROBOSUITE_DRAWING = dict(groups=(1,), reflections=True, shadows=True, antialias=True)


def _render(
    model: mujoco.MjModel, qpos: np.ndarray, camera: str, size: int, robosuite: bool = False
) -> np.ndarray:
    """[T, size, size, 3] uint8 with each state's burners lit as LIBERO shows them."""
    out = np.empty((len(qpos), size, size, 3), np.uint8)
    burners = _burners(model)
    alpha = model.site_rgba[:, 3].copy()
    how = ROBOSUITE_DRAWING if robosuite else {}
    try:
        for idx, lit in _burner_groups(model, qpos):
            for (site, _), on in zip(burners, lit, strict=True):
                model.site_rgba[site, 3] = 1.0 if on else 0.0
            out[idx] = R.render_states(
                model, qpos[idx], camera=camera, width=size, height=size, **how
            )
    finally:
        model.site_rgba[:, 3] = alpha
    return out


def render_observations(
    model: mujoco.MjModel,
    states,  # [B, nq] qpos, or a sequence of B MjData
    *,
    size: int = IMAGE_SIZE,
    cameras: Sequence[str] = CAMERAS,
    perturbation: P.ObsPerturbation | None = None,
    index: int = 0,
    robosuite: bool = False,
) -> np.ndarray:  # [B, len(cameras), size, size, 3] uint8
    """Both LIBERO cameras for a batch of states (default [B, 2, 256, 256, 3]: agent view,
    wrist). `perturbation` moves the agent view / the lights for these frames, or adds image
    noise drawn from (seed, index): pass the chunk index so successive frames differ.
    `robosuite`: drawn as robosuite draws LIBERO's frames (`ROBOSUITE_DRAWING`: LIBERO's Panda
    frames, whose scenes hold robosuite's collision geoms too).
    Raises `coda.sim.render.RenderUnavailable` without a GL backend."""
    qpos = _qpos_of(model, states)
    out = np.empty((qpos.shape[0], len(cameras), size, size, 3), np.uint8)
    with P.applied(model, perturbation):
        for c, cam in enumerate(cameras):
            out[:, c] = _render(model, qpos, cam, size, robosuite)
    return P.perturb_images(out, perturbation, index)


def render_endpoints(
    model: mujoco.MjModel,
    qpos: np.ndarray,  # [B, T, nq]: RolloutResult.qpos (t = 0 and every chunk endpoint)
    *,
    size: int = IMAGE_SIZE,
    perturbation: P.ObsPerturbation | None = None,
) -> np.ndarray:  # [B, T, 2, size, size, 3] uint8 (~0.4 MB per endpoint at 256)
    """Both cameras at every recorded chunk endpoint of a batch of episodes; endpoint t's noise
    is drawn from (seed, t)."""
    qpos = np.asarray(qpos)
    if qpos.ndim != 3:
        raise ValueError(f"qpos must be [B, T, nq], got {qpos.shape}")
    out = [
        render_observations(model, qpos[:, t], size=size, perturbation=perturbation, index=t)
        for t in range(qpos.shape[1])
    ]
    return np.stack(out, 1)


def render_episode(
    model: mujoco.MjModel,
    qpos: np.ndarray,  # [T, nq]: one episode's chunk endpoints
    *,
    camera: str = S.AGENTVIEW_CAMERA,
    size: int = IMAGE_SIZE,
    perturbation: P.ObsPerturbation | None = None,
    first_index: int = 0,
) -> np.ndarray:  # [T, size, size, 3] uint8
    """One camera over an episode, frame t's noise drawn from (seed, first_index + t)."""
    qpos = _qpos_of(model, qpos)
    with P.applied(model, perturbation):
        frames = _render(model, qpos, camera, size)
    return np.stack(
        [P.perturb_images(f, perturbation, first_index + t) for t, f in enumerate(frames)]
    )


def downsample(
    frames: np.ndarray, factor: int
) -> np.ndarray:  # [..., H, W, 3] -> [..., H/f, W/f, 3]
    """Box-filter downsampling by an integer factor (256 -> 128 for GIFs)."""
    *lead, h, w, c = frames.shape
    if factor < 1 or h % factor or w % factor:
        raise ValueError(f"factor {factor} must divide the frame size {h} x {w}")
    x = frames.reshape(*lead, h // factor, factor, w // factor, factor, c).astype(np.float32)
    return np.rint(x.mean(axis=(-4, -2))).astype(np.uint8)


def pi05_images(
    frames: np.ndarray,  # [B, 2, S, S, 3] uint8 from `render_observations`
    *,
    image_size: int = PI05_IMAGE_SIZE,
    mirror: bool = True,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(images, image_masks) for `coda.policy.base.make_observation`: camera key -> [B, s, s, 3]
    uint8 (bilinear resize, as openpi's client) and -> [B] bool; the absent right wrist is a
    black image with mask False. `mirror`: openpi's LIBERO orientation (module docstring)."""
    from PIL import Image

    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 5 or frames.shape[1] != len(CAMERAS):
        raise ValueError(f"frames must be uint8 [B, 2, S, S, 3], got {frames.dtype} {frames.shape}")
    b = frames.shape[0]
    images, masks = {}, {}
    for c, cam in enumerate(CAMERAS):
        view = frames[:, c, :, ::-1] if mirror else frames[:, c]
        if view.shape[1:3] != (image_size, image_size):
            view = np.stack(
                [
                    np.asarray(
                        Image.fromarray(np.ascontiguousarray(v)).resize(
                            (image_size, image_size), Image.BILINEAR
                        )
                    )
                    for v in view
                ]
            )
        images[PI05_CAMERAS[cam]] = np.ascontiguousarray(view)  # [B, s, s, 3]
        masks[PI05_CAMERAS[cam]] = np.ones(b, bool)
    for key in PI05_ABSENT:
        images[key] = np.zeros((b, image_size, image_size, 3), np.uint8)
        masks[key] = np.zeros(b, bool)
    return images, masks


def write_gif(
    path: str | os.PathLike,
    frames: np.ndarray,  # [T, S, S, 3] uint8
    *,
    size: int = GIF_SIZE,
    fps: float = GIF_FPS,
) -> None:
    """A looping GIF of frames shrunk to size x size (Pillow merges identical successive
    frames into one longer frame)."""
    frames = np.asarray(frames)
    if frames.shape[1] != size:
        frames = downsample(frames, frames.shape[1] // size)
    R.save_gif(frames, path, fps=fps)
