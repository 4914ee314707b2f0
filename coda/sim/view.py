"""Readable views of a scene for people and the VLM critic: a framed workspace camera, the wrist
camera, a background, and keyframe sheets.

The views render from a *view model*: the scene's own spec (`coda.sim.compile.build_spec`: the
same bodies, joints and qpos layout) plus visual-only additions — a gradient skybox, a checkered
floor material, a soft fill light — compiled on the side. The physics model, the observation
cameras of image-mode policies (`AGENT_CAMERA`, `WRIST_CAMERA`) and verification never see
these additions: rollouts, observations and every number the loop measures are unchanged. Views
replay recorded qpos through the view model (`coda.sim.render.render_states`).

The workspace camera is framed per trace (`frame_workspace`): it looks at the box holding the
task's objects and the tool centre point over the frames shown, from a raised three-quarter
view facing the robot, at the distance that fits that box (`VIEW_FOVY`), so the objects fill
the frame instead of a few pixels of a whole-floor view.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence

import mujoco
import numpy as np

from coda.sim import render
from coda.sim.compile import WRIST_CAMERA, CompiledScene, build_spec
from coda.sim.media import _check_frames

# The framed workspace camera: a raised three-quarter view from the far side of the table, a
# little to the robot's right, so the jaws and the object between them are not hidden behind
# the gripper (MuJoCo convention: the camera looks along (cos az, sin az) in the xy-plane).
VIEW_AZIMUTH = 215.0
VIEW_ELEVATION = -45.0
VIEW_FOVY = 45.0  # deg: the view model's free-camera field of view
MIN_EXTENT = 0.12  # m: the smallest half-extent framed (a lone small object keeps its context)
FILL = 0.85  # the framed points reach at most this fraction of the image's half width
_CACHE_SIZE = 8


@dataclasses.dataclass(frozen=True)
class Framing:
    """A free camera (MuJoCo convention, degrees)."""

    lookat: tuple[float, float, float]
    distance: float
    azimuth: float = VIEW_AZIMUTH
    elevation: float = VIEW_ELEVATION


def _add_background(spec: mujoco.MjSpec) -> None:
    """Visual-only: a skybox, a checkered floor material and a fill light (no bodies, no geoms:
    contacts, masses and the qpos layout are those of the physics spec)."""
    spec.add_texture(
        name="view/sky",
        type=mujoco.mjtTexture.mjTEXTURE_SKYBOX,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_GRADIENT,
        rgb1=[0.62, 0.74, 0.86],
        rgb2=[0.95, 0.96, 0.98],
        width=256,
        height=256,
    )
    spec.add_texture(
        name="view/floor",
        type=mujoco.mjtTexture.mjTEXTURE_2D,
        builtin=mujoco.mjtBuiltin.mjBUILTIN_CHECKER,
        rgb1=[0.36, 0.40, 0.46],
        rgb2=[0.46, 0.50, 0.56],
        width=256,
        height=256,
    )
    mat = spec.add_material(name="view/floor", texrepeat=[8, 8], reflectance=0.0)
    mat.textures[mujoco.mjtTextureRole.mjTEXROLE_RGB] = "view/floor"
    floor = spec.geom("floor")
    floor.material = "view/floor"
    floor.rgba = [1, 1, 1, 1]  # the material's colour, unshaded by the geom's
    fill = spec.worldbody.add_light(name="view/fill", pos=[1.6, 0.9, 1.6])
    fill.dir = [-0.6, -0.35, -0.7]
    fill.diffuse = [0.25, 0.25, 0.25]
    fill.castshadow = False
    spec.visual.headlight.ambient = [0.15, 0.15, 0.15]
    spec.visual.headlight.diffuse = [0.25, 0.25, 0.25]
    spec.visual.headlight.specular = [0.0, 0.0, 0.0]
    spec.visual.global_.fovy = VIEW_FOVY


_cache: OrderedDict[str, mujoco.MjModel] = OrderedDict()
_cache_lock = threading.Lock()


def view_model(compiled: CompiledScene) -> mujoco.MjModel:
    """The render-only model of a compiled scene (module docstring); a scene with its own
    visual model (`render_model`, e.g. LIBERO's meshes and textures) renders with that one."""
    if compiled.render_model is not None:
        return compiled.render_model()
    key = json.dumps(compiled.scene.to_dict(), sort_keys=True, default=str)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    spec = build_spec(compiled.scene)[0]
    _add_background(spec)
    model = spec.compile()
    if model.nq != compiled.model.nq:  # the same joints in the same order, or replay is wrong
        raise AssertionError(f"view model nq {model.nq} != physics nq {compiled.model.nq}")
    with _cache_lock:
        _cache[key] = model
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return model


def _points(model: mujoco.MjModel, qpos: np.ndarray, bodies: Sequence[str]) -> np.ndarray:
    """World positions [T * k, 3] of the named bodies, the gripper's wrist and its tcp, those
    the model has (a LIBERO visual model names its bodies its own way); [0, 3] when none."""
    data = mujoco.MjData(model)
    ids = [_find(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in (*bodies, "gripper")]
    ids = [i for i in ids if i >= 0]
    tcp = _find(model, mujoco.mjtObj.mjOBJ_SITE, "tcp")
    out = [np.zeros((0, 3))]
    for q in np.asarray(qpos, np.float64):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        out.append(data.xpos[ids])
        if tcp >= 0:
            out.append(data.site_xpos[tcp][None])
    return np.concatenate(out)


def _find(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str) -> int:
    return int(mujoco.mj_name2id(model, kind, name))


def _camera_axes(azimuth: float, elevation: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(forward, right, up) unit vectors of a free camera (MuJoCo convention, degrees)."""
    az, el = math.radians(azimuth), math.radians(elevation)
    fwd = np.array([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)])
    right = np.cross(fwd, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    return fwd, right, np.cross(right, fwd)


def frame_workspace(
    model: mujoco.MjModel,
    qpos: np.ndarray,  # [T, nq]
    bodies: Sequence[str],
    *,
    azimuth: float = VIEW_AZIMUTH,
    elevation: float = VIEW_ELEVATION,
) -> Framing:
    """The free camera that keeps the named bodies and the tcp in view over every frame: the
    view direction is fixed; the look-at point centres the points' extent across the image and
    the distance is the smallest at which every point lies within `FILL` of the image's half
    width (perspective included), with `MIN_EXTENT` of context around a lone object."""
    pts = _points(model, qpos, bodies)
    if not len(pts):  # nothing known to frame: the default view of the table
        return Framing(render.DEFAULT_LOOKAT, render.DEFAULT_DISTANCE, azimuth, elevation)
    pts[:, 2] = np.maximum(pts[:, 2], 0.0)  # what fell off the table is not worth the frame
    fwd, right, up = _camera_axes(azimuth, elevation)
    centre = (pts.min(0) + pts.max(0)) / 2
    d = pts - centre
    x, y = d @ right, d @ up
    centre = centre + right * (x.max() + x.min()) / 2 + up * (y.max() + y.min()) / 2
    d = pts - centre
    x, y, z = np.abs(d @ right), np.abs(d @ up), d @ fwd
    half = math.tan(math.radians(float(model.vis.global_.fovy)) / 2) * FILL
    reach = np.maximum(np.maximum(x, y), MIN_EXTENT)
    distance = max(float(np.max(reach / half - z)), MIN_EXTENT / half)
    return Framing(tuple(float(v) for v in centre), distance, azimuth, elevation)


def scene_bodies(compiled: CompiledScene) -> list[str]:
    """The bodies a view frames: the scene's objects (the gripper is framed by its tcp)."""
    return [o.name for o in compiled.scene.objects]


def render_views(
    compiled: CompiledScene,
    qpos: np.ndarray,  # [K, nq]: the frames to show
    size: int = 224,
    *,
    frame_qpos: np.ndarray | None = None,  # [T, nq] what the framing covers (default: qpos)
    framing: Framing | None = None,
) -> tuple[np.ndarray, np.ndarray]:  # ([K, S, S, 3], [K, S, S, 3]) uint8
    """(workspace frames, wrist frames) of `qpos` through the view model: one framing for all
    frames (fitted to `frame_qpos`, e.g. the whole episode, so the camera does not jump)."""
    model = view_model(compiled)
    qpos = np.asarray(qpos)
    if framing is None:
        cover = qpos if frame_qpos is None else np.asarray(frame_qpos)
        framing = frame_workspace(model, cover, scene_bodies(compiled))
    agent = render.render_states(
        model,
        qpos,
        width=size,
        height=size,
        lookat=framing.lookat,
        distance=framing.distance,
        azimuth=framing.azimuth,
        elevation=framing.elevation,
    )
    wrist = render.render_states(model, qpos, camera=WRIST_CAMERA, width=size, height=size)
    return agent, wrist


def side_by_side(agent: np.ndarray, wrist: np.ndarray, gap: int = 4) -> np.ndarray:
    """[K, H, W, 3] x 2 -> [K, H, 2W + gap, 3]: the workspace view left, the wrist view right."""
    agent, wrist = _check_frames(agent), _check_frames(wrist)
    if agent.shape != wrist.shape:
        raise ValueError(f"views differ in shape: {agent.shape} vs {wrist.shape}")
    k, h, _, _ = agent.shape
    sep = np.full((k, h, gap, 3), 255, np.uint8)
    return np.concatenate([agent, sep, wrist], axis=2)
