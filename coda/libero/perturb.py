"""Perturbation generators for LIBERO scenes beyond LIBERO-PRO's shipped suites (`suites.py`).

`layout_shift` is LIBERO-Plus's layout perturbation: at level L (1-5) every object that LIBERO
places on a workspace region has its region centre, so its initial position, moved by up to
0.01 * L m in a random direction (seeded), before the usual settle. Objects LIBERO places in
or on fixtures (drawers, shelves, the stove) move with their fixture, so they are not shifted.

Observation perturbations (LIBERO-Plus style, levels 1-5; names "camera3", "light2", "noise5")
change what the cameras see, never the physics, so state-based policies are unaffected:
  camera  the agent view moved by CAMERA_SHIFT_PER_LEVEL * L m, turned by CAMERA_TURN_PER_LEVEL
          * L deg about a random axis, its fovy changed by CAMERA_FOVY_PER_LEVEL * L deg;
  light   every light's direction tilted by LIGHT_TILT_PER_LEVEL * L deg, its intensity scaled by
          1 +- LIGHT_GAIN_PER_LEVEL * L (the headlight too), its colour tinted per channel by up
          to LIGHT_TINT_PER_LEVEL * L;
  noise   on the rendered uint8 image: a Gaussian blur of BLUR_SIGMA_PER_LEVEL * L px, then
          Gaussian noise of NOISE_STD_PER_LEVEL * L grey levels.
The random directions, signs and noise fields are drawn from the seed alone and scaled by the
level, so for one seed a higher level is the same change, larger; level 0 is the identity. Camera
and light draws are one per seed (a perturbed suite: every episode sees the same change); image
noise is drawn per (seed, frame index), so successive frames get fresh noise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

import mujoco
import numpy as np

from coda.libero import scene as S
from coda.sim.compile import CompiledScene

LEVELS = (1, 2, 3, 4, 5)
SHIFT_PER_LEVEL = 0.01  # m


def shiftable(task: S.LiberoTask) -> list[str]:
    """Movable objects whose :init puts them on a workspace (table / floor) region."""
    ws = task.workspace.name
    movable = {n for n, _ in task.problem.objects}
    out = []
    for atom in task.problem.init:
        if len(atom) == 3 and atom[0] == "on" and atom[1] in movable:
            region = task.problem.regions.get(atom[2])
            if region is not None and region.target == ws and atom[1] not in out:
                out.append(atom[1])
    return out


def parse_layout(name: str) -> int | None:
    """The layout shift's level a perturbation name selects ("layout3" -> 3); None for any
    other name."""
    if name not in tuple(f"layout{k}" for k in LEVELS):
        return None
    return int(name[len("layout") :])


def layout_offsets(task: S.LiberoTask, index: int, level: int, seed: int) -> dict[str, np.ndarray]:
    """The x / y shift [2] (m) of each `shiftable` object of initial state `index` at `level`:
    uniform over a disc of radius SHIFT_PER_LEVEL * level, drawn from (seed, index, level)."""
    if level not in LEVELS:
        raise ValueError(f"layout_shift level must be one of {LEVELS}, got {level!r}")
    rng = np.random.default_rng([seed, index, level])
    out = {}
    for obj in shiftable(task):
        r = SHIFT_PER_LEVEL * level * math.sqrt(rng.uniform())  # uniform over the disc
        a = rng.uniform(0.0, 2 * math.pi)
        out[obj] = np.array([r * math.cos(a), r * math.sin(a)])
    return out


def layout_shift(suite: str, name: str, index: int, level: int, seed: int) -> CompiledScene:
    """Task `name` with initial state `index`, its table objects shifted at `level`, settled."""
    task = S.load_task(suite, name)
    offsets = layout_offsets(task, index, level, seed)
    raw = S.compile_task(suite, name, index, settle=False)
    qpos = raw.init_qpos.copy()
    moved = {}
    names = [n for n, _ in task.problem.objects]
    for obj, dxy in offsets.items():
        adr = S.GRIPPER_NQ + 7 * names.index(obj)
        qpos[adr : adr + 2] += dxy
        moved[obj] = [float(v) for v in dxy]
    qpos = S.settled_qpos(raw.model, qpos)
    scene = raw.scene
    layout = {k: dict(v) for k, v in scene.layout.items()}
    for k, (obj, _) in enumerate(task.problem.objects):
        adr = S.GRIPPER_NQ + 7 * k
        layout[obj].update(x=float(qpos[adr]), y=float(qpos[adr + 1]), z=float(qpos[adr + 2]))
    initial = dict(scene.task["initial"])
    initial["perturbation"] = {"kind": "layout_shift", "level": level, "seed": seed, "moved": moved}
    scene = dataclasses.replace(scene, layout=layout, task={**scene.task, "initial": initial})
    return dataclasses.replace(raw, scene=scene, init_qpos=qpos)


# ----------------------------------------------------------------------------- observations

OBS_KINDS = ("camera", "light", "noise")
CAMERA_SHIFT_PER_LEVEL = 0.02  # m of agent-view position
CAMERA_TURN_PER_LEVEL = 2.0  # deg of agent-view orientation
CAMERA_FOVY_PER_LEVEL = 1.5  # deg of agent-view field of view
LIGHT_TILT_PER_LEVEL = 8.0  # deg of light direction
LIGHT_GAIN_PER_LEVEL = 0.12  # relative intensity
LIGHT_TINT_PER_LEVEL = 0.06  # relative per-channel colour
BLUR_SIGMA_PER_LEVEL = 0.3  # px (at 256 x 256)
NOISE_STD_PER_LEVEL = 3.0  # grey levels of 255


@dataclasses.dataclass(frozen=True)
class ObsPerturbation:
    """One observation perturbation: kind (OBS_KINDS), level (0 = identity .. 5), seed."""

    kind: str
    level: int
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in OBS_KINDS:
            raise ValueError(f"unknown observation perturbation {self.kind!r}; kinds: {OBS_KINDS}")
        if self.level not in (0,) + LEVELS:
            raise ValueError(
                f"{self.kind} level must be one of {(0,) + LEVELS}, got {self.level!r}"
            )

    @property
    def name(self) -> str:
        return f"{self.kind}{self.level}"


def obs_perturbation_names() -> tuple[str, ...]:
    """Registered names, e.g. "camera1" .. "noise5"."""
    return tuple(f"{k}{lv}" for k in OBS_KINDS for lv in LEVELS)


def parse_obs(name: str, seed: int = 0) -> ObsPerturbation | None:
    """The observation perturbation a name selects; None for any other perturbation name."""
    if name not in obs_perturbation_names():
        return None
    kind = name.rstrip("0123456789")
    return ObsPerturbation(kind, int(name[len(kind) :]), int(seed))


def _draws(p: ObsPerturbation) -> np.random.Generator:
    """The seed's draws for a kind, independent of the level (the level only scales them)."""
    return np.random.default_rng([int(p.seed), OBS_KINDS.index(p.kind)])


def _unit(rng: np.random.Generator) -> np.ndarray:  # [3] uniform on the sphere
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


def _turn(quat: np.ndarray, axis: np.ndarray, deg: float) -> np.ndarray:  # [4] w x y z
    """quat turned by deg about a world axis."""
    dq, out = np.zeros(4), np.zeros(4)
    mujoco.mju_axisAngle2Quat(dq, axis, math.radians(deg))
    mujoco.mju_mulQuat(out, dq, np.asarray(quat, float))
    return out


def _tilt(v: np.ndarray, rng: np.random.Generator, deg: float) -> np.ndarray:  # [3]
    """v turned by deg about a random axis perpendicular to it (the same axis for a seed)."""
    axis = np.cross(v, _unit(rng))
    axis /= max(np.linalg.norm(axis), 1e-9)
    rot = np.zeros(9)
    q = np.zeros(4)
    mujoco.mju_axisAngle2Quat(q, axis, math.radians(deg))
    mujoco.mju_quat2Mat(rot, q)
    return rot.reshape(3, 3) @ v


@contextlib.contextmanager
def applied(
    model: mujoco.MjModel, p: ObsPerturbation | None, camera: str = S.AGENTVIEW_CAMERA
) -> Iterator[mujoco.MjModel]:
    """`model` with a camera or light perturbation written into its fields for the duration of
    the block, restored after (the GL context cached for the model stays valid: these fields are
    read per frame). Image noise is not a model change (`perturb_images`)."""
    if p is None or p.level == 0 or p.kind == "noise":
        yield model
        return
    rng, lv = _draws(p), p.level
    vis = model.vis.headlight
    saved = {
        "cam": (model.cam_pos.copy(), model.cam_quat.copy(), model.cam_fovy.copy()),
        "light": (model.light_dir.copy(), model.light_diffuse.copy(), model.light_specular.copy()),
        "head": (vis.diffuse.copy(), vis.ambient.copy(), vis.specular.copy()),
    }
    try:
        if p.kind == "camera":
            c = model.camera(camera).id
            shift, axis, sign = _unit(rng), _unit(rng), rng.choice([-1.0, 1.0])
            model.cam_pos[c] += CAMERA_SHIFT_PER_LEVEL * lv * shift
            model.cam_quat[c] = _turn(model.cam_quat[c], axis, CAMERA_TURN_PER_LEVEL * lv)
            model.cam_fovy[c] += sign * CAMERA_FOVY_PER_LEVEL * lv
        else:
            gain = 1.0 + rng.choice([-1.0, 1.0]) * LIGHT_GAIN_PER_LEVEL * lv
            tint = 1.0 + LIGHT_TINT_PER_LEVEL * lv * rng.uniform(-1.0, 1.0, size=3)
            for i in range(model.nlight):
                model.light_dir[i] = _tilt(model.light_dir[i], rng, LIGHT_TILT_PER_LEVEL * lv)
                model.light_diffuse[i] = np.clip(model.light_diffuse[i] * gain * tint, 0.0, 1.0)
                model.light_specular[i] = np.clip(model.light_specular[i] * gain, 0.0, 1.0)
            vis.diffuse[:] = np.clip(vis.diffuse * gain * tint, 0.0, 1.0)
            vis.ambient[:] = np.clip(vis.ambient * gain, 0.0, 1.0)
        yield model
    finally:
        model.cam_pos[:], model.cam_quat[:], model.cam_fovy[:] = saved["cam"]
        model.light_dir[:], model.light_diffuse[:], model.light_specular[:] = saved["light"]
        vis.diffuse[:], vis.ambient[:], vis.specular[:] = saved["head"]


def _blur(img: np.ndarray, sigma: float) -> np.ndarray:  # [..., H, W, C] float32 -> same
    """Separable Gaussian blur over the H and W axes (edges reflected)."""
    r = max(1, math.ceil(3 * sigma))
    w = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    w = (w / w.sum()).astype(np.float32)
    for axis in (img.ndim - 3, img.ndim - 2):
        pad = [(0, 0)] * img.ndim
        pad[axis] = (r, r)
        src = np.pad(img, pad, mode="reflect")
        n = img.shape[axis]
        out = np.zeros_like(img)
        for k, wk in enumerate(w):
            cut = [slice(None)] * img.ndim
            cut[axis] = slice(k, k + n)
            out += wk * src[tuple(cut)]
        img = out
    return img


def perturb_images(images: np.ndarray, p: ObsPerturbation | None, index: int = 0) -> np.ndarray:
    """Image noise on rendered frames [..., H, W, 3] uint8 -> same shape and dtype: blur then
    Gaussian noise, drawn from (seed, index); other kinds (and level 0) pass frames through."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim < 3 or images.shape[-1] != 3:
        raise ValueError(f"images must be uint8 [..., H, W, 3], got {images.dtype} {images.shape}")
    if p is None or p.level == 0 or p.kind != "noise":
        return images
    x = _blur(images.astype(np.float32), BLUR_SIGMA_PER_LEVEL * p.level)
    z = np.random.default_rng([int(p.seed), OBS_KINDS.index("noise"), int(index)]).standard_normal(
        images.shape, dtype=np.float32
    )
    x = x + NOISE_STD_PER_LEVEL * p.level * z
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)
