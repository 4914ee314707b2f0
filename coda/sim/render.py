"""Headless rendering of MuJoCo states: frames, GIF / MP4, contact sheets.

Rollouts run in MJX; for people and for the VLM critic we replay recorded ``qpos`` in native MuJoCo
and rasterise offscreen with EGL or OSMesa (both work on CPU-only machines through Mesa). A GL
driver that fails to initialise can abort the whole process, so backends are first tried in a
child process; when none works, callers get :class:`RenderUnavailable` with what to install
instead of a crash.

MuJoCo picks its own GL backend from ``MUJOCO_GL`` once, when ``mujoco`` is imported. This module
does not rely on that choice: it loads the GL context class of the backend it selected itself, so
it renders correctly whichever module imported ``mujoco`` first.

Writing frames (GIF / MP4 / PNG, contact sheets) is in :mod:`coda.sim.media`, re-exported here.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

# writing frames lives in coda.sim.media; re-exported here, where callers use it from
from coda.sim.media import (  # noqa: F401
    VideoUnavailable,
    contact_sheet,
    save_gif,
    save_mp4,
    save_png,
    subsample,
)

if TYPE_CHECKING:  # mujoco is imported lazily: an invalid MUJOCO_GL makes `import mujoco` raise.
    import mujoco

# Headless backends probed, in order, when MUJOCO_GL is unset.
PROBE_ORDER: tuple[str, ...] = ("egl", "osmesa")
# MUJOCO_GL values this module can drive -> module holding the GLContext class.
_BACKEND_MODULES: dict[str, str] = {
    "egl": "mujoco.egl",
    "osmesa": "mujoco.osmesa",
    "glfw": "mujoco.glfw",  # needs a display; only used when MUJOCO_GL asks for it
    "glx": "mujoco.glfw",
}
_DISABLED = ("disable", "disabled", "off", "false", "0")
_PROBE_TIMEOUT_S = 60.0

# Default free camera: looks at the table workspace in front of a robot based at the origin.
DEFAULT_LOOKAT: tuple[float, float, float] = (0.45, 0.0, 0.1)
DEFAULT_DISTANCE = 1.1
DEFAULT_ELEVATION = -35.0
# MuJoCo's free camera looks along (cos az, sin az) in the xy-plane: azimuth 0 views toward +x
# from behind a robot at the origin; 180 views back at the robot from the far side of the table.
DEFAULT_AZIMUTH = 0.0


class RenderUnavailable(RuntimeError):
    """No usable OpenGL backend; the message says what was tried and what to install."""


def _install_hint() -> str:
    return (
        "Install a headless GL library and retry: `apt-get install -y libegl1 libgl1` (EGL) or "
        "`apt-get install -y libosmesa6` (OSMesa, pure software); `make setup` installs them when "
        "run as root. To force a backend set MUJOCO_GL=egl or MUJOCO_GL=osmesa (unset it to let "
        "coda probe egl then osmesa)."
    )


# --------------------------------------------------------------------------------------------
# Backend selection
# --------------------------------------------------------------------------------------------

# Runs in a child process: a broken driver may abort there without taking the caller down.
_PROBE_SCRIPT = r"""
import ctypes.util, importlib, os, sys
backend, module = sys.argv[1], sys.argv[2]
lib = {"egl": ("EGL", "libegl1"), "osmesa": ("OSMesa", "libosmesa6")}.get(backend)
if lib and ctypes.util.find_library(lib[0]) is None:
    sys.exit(f"lib{lib[0]} not found (Debian package {lib[1]})")
os.environ["MUJOCO_GL"] = "disable"  # import mujoco without its own GL backend choice
import mujoco
os.environ["MUJOCO_GL"] = backend
ctx = importlib.import_module(module).GLContext(32, 32)
ctx.make_current()
model = mujoco.MjModel.from_xml_string(
    "<mujoco><worldbody><light pos='0 0 2'/><geom type='sphere' size='0.2' rgba='1 0 0 1'/>"
    "</worldbody></mujoco>")
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
scene = mujoco.MjvScene(model, maxgeom=100)
cam = mujoco.MjvCamera()
mujoco.mjv_defaultFreeCamera(model, cam)
mujoco.mjv_updateScene(model, data, mujoco.MjvOption(), None, cam,
                       mujoco.mjtCatBit.mjCAT_ALL, scene)
con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, con)
import numpy as np
rgb = np.zeros((32, 32, 3), np.uint8)
rect = mujoco.MjrRect(0, 0, 32, 32)
mujoco.mjr_render(rect, scene, con)
mujoco.mjr_readPixels(rgb, None, rect, con)
if int(rgb.max()) == 0:
    sys.exit("rendered an all-black probe frame")
try:
    from OpenGL import GL
    name = GL.glGetString(GL.GL_RENDERER)
    name = name.decode() if isinstance(name, bytes) else str(name)
except Exception:
    name = "unknown renderer"
con.free()
ctx.free()
print("CODA_GL_OK", name)
"""

_lock = threading.RLock()
_selected: dict[str, Any] = {}  # "ok": bool, "backend"/"reason"/"renderer": str, "ctx_cls": type


def _probe(backend: str) -> tuple[bool, str]:
    """Try `backend` in a child process; (True, renderer name) or (False, why it failed)."""
    env = dict(os.environ, MUJOCO_GL=backend)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE_SCRIPT, backend, _BACKEND_MODULES[backend]],
            env=env,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return False, f"GL initialisation did not finish within {_PROBE_TIMEOUT_S:.0f} s"
    for line in proc.stdout.splitlines():
        if line.startswith("CODA_GL_OK"):
            return True, line[len("CODA_GL_OK") :].strip()
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
    if proc.returncode < 0:
        why = f"killed by signal {-proc.returncode}"
    else:
        why = lines[-1] if lines else f"exit status {proc.returncode}"
    return False, why[:300]


def _pyopengl_platform() -> str | None:
    """The platform PyOpenGL already committed to in this process, if any."""
    plat = sys.modules.get("OpenGL.platform")
    inst = getattr(plat, "PLATFORM", None) if plat is not None else None
    if inst is None:
        return None
    name = type(inst).__module__.rsplit(".", 1)[-1].lower()  # e.g. OpenGL.platform.egl
    return {"glx": "glx", "egl": "egl", "osmesa": "osmesa"}.get(name, name)


def _activate(backend: str) -> type:
    """Point MUJOCO_GL / PyOpenGL at `backend` in this process and return its GLContext class."""
    if backend in ("egl", "osmesa"):
        committed = _pyopengl_platform()
        if committed is not None and committed != backend:
            raise RenderUnavailable(
                f"PyOpenGL was already initialised for platform {committed!r} in this process, "
                f"so the {backend!r} backend cannot be used. Set MUJOCO_GL={backend} (and "
                f"PYOPENGL_PLATFORM={backend}) before Python starts."
            )
        os.environ.setdefault("PYOPENGL_PLATFORM", backend)
    try:
        ctx_cls = importlib.import_module(_BACKEND_MODULES[backend]).GLContext
    except Exception as err:  # ImportError, OSError from ctypes, PyOpenGL platform errors
        raise RenderUnavailable(
            f"GL backend {backend!r} worked in a probe but failed to load here: {err}"
        ) from err
    os.environ.setdefault("MUJOCO_GL", backend)  # later `import mujoco` in children agree
    return ctx_cls


def _select() -> dict[str, Any]:
    with _lock:
        if _selected:
            return _selected
        forced = os.environ.get("MUJOCO_GL", "").strip().lower()
        if forced in _DISABLED:
            _selected.update(
                ok=False, reason=f"rendering is disabled by MUJOCO_GL={forced!r}. Unset it."
            )
            return _selected
        if forced and forced not in _BACKEND_MODULES:
            _selected.update(
                ok=False,
                reason=(
                    f"MUJOCO_GL={forced!r} is not a backend coda can render with (valid: "
                    f"{', '.join(sorted(_BACKEND_MODULES))}). " + _install_hint()
                ),
            )
            return _selected
        candidates = (forced,) if forced else PROBE_ORDER
        failures = []
        for backend in candidates:
            ok, info = _probe(backend)
            if ok:
                try:
                    ctx_cls = _activate(backend)
                except RenderUnavailable as err:
                    failures.append(f"{backend}: {err}")
                    continue
                _selected.update(ok=True, backend=backend, renderer=info, ctx_cls=ctx_cls)
                return _selected
            failures.append(f"{backend}: {info}")
        how = f"MUJOCO_GL={forced!r} was set, so only it was tried" if forced else "probed"
        _selected.update(
            ok=False,
            reason=(
                f"No OpenGL backend for headless rendering ({how}): "
                + "; ".join(failures)
                + ". "
                + _install_hint()
            ),
        )
        return _selected


def gl_available() -> tuple[bool, str]:
    """(True, backend name) if frames can be rendered here, else (False, reason with a fix)."""
    sel = _select()
    return (True, sel["backend"]) if sel["ok"] else (False, sel["reason"])


def gl_renderer() -> str:
    """The GL_RENDERER string of the selected backend (e.g. 'llvmpipe ...' means CPU)."""
    sel = _select()
    if not sel["ok"]:
        raise RenderUnavailable(sel["reason"])
    return sel["renderer"]


def require_gl() -> str:
    """Return the selected backend, or raise RenderUnavailable explaining how to get one."""
    ok, info = gl_available()
    if not ok:
        raise RenderUnavailable(info)
    return info


# --------------------------------------------------------------------------------------------
# Offscreen renderer, cached per (model, width, height, MSAA samples, shadow-map size)
# --------------------------------------------------------------------------------------------


class _Renderer:
    """One GL context + MjrContext + scene for a model; reused across calls (creation is slow)."""

    def __init__(
        self,
        model: mujoco.MjModel,
        width: int,
        height: int,
        ctx_cls: type,
        samples: int,
        shadow_size: int,
    ):
        import mujoco

        self.model = weakref.ref(model)
        self.width, self.height = width, height
        self.gl = ctx_cls(width, height)
        self.con = None
        # MjrContext sizes its offscreen buffer, MSAA and shadow map from model.vis when created:
        # set them for this image (a buffer of exactly W x H renders faster on software GL than
        # the default 640 x 480), then give the caller's model its values back.
        vis_g, vis_q = model.vis.global_, model.vis.quality
        saved = (vis_g.offwidth, vis_g.offheight, vis_q.offsamples, vis_q.shadowsize)
        try:
            vis_g.offwidth, vis_g.offheight = width, height
            vis_q.offsamples, vis_q.shadowsize = samples, shadow_size
            self.gl.make_current()
            self.con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_100)
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self.con)
        except Exception:
            self.close()
            raise
        finally:
            vis_g.offwidth, vis_g.offheight, vis_q.offsamples, vis_q.shadowsize = saved
        self.scene = mujoco.MjvScene(model, maxgeom=max(1000, 2 * model.ngeom + 100))
        self.option = mujoco.MjvOption()
        self.camera = mujoco.MjvCamera()
        self.rect = mujoco.MjrRect(0, 0, width, height)
        self.buffer = np.empty((height, width, 3), np.uint8)

    def render_into(
        self, data: mujoco.MjData, out: np.ndarray, model: mujoco.MjModel | None = None
    ) -> None:  # out: [H, W, 3] uint8
        """`model`: another model of the same structure to draw with this context (its geom
        sizes / colours / poses); None = the context's own model."""
        import mujoco

        model = self.model() if model is None else model
        self.gl.make_current()
        mujoco.mjv_updateScene(
            model, data, self.option, None, self.camera, mujoco.mjtCatBit.mjCAT_ALL, self.scene
        )
        mujoco.mjr_render(self.rect, self.scene, self.con)
        mujoco.mjr_readPixels(self.buffer, None, self.rect, self.con)
        out[...] = self.buffer[::-1]  # GL rows start at the bottom

    def __del__(self) -> None:
        # Free the MjrContext while its GL context is current, before the GL context goes.
        try:
            self.close()
        except Exception:
            pass

    def close(self) -> None:
        gl, self.gl = getattr(self, "gl", None), None
        con, self.con = getattr(self, "con", None), None
        if gl is None:
            return
        try:
            with gl.as_current():
                if con is not None:
                    con.free()
        finally:
            gl.free()


# model -> {(width, height, samples, shadow_size): _Renderer}; entries (and their GL contexts)
# vanish with their model, so nothing cached may hold a strong reference to the model.
_renderers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _renderer_for(
    model: mujoco.MjModel, width: int, height: int, samples: int, shadow_size: int
) -> _Renderer:
    sel = _select()
    if not sel["ok"]:
        raise RenderUnavailable(sel["reason"])
    with _lock:
        per_model = _renderers.get(model)
        if per_model is None:
            per_model = {}
            _renderers[model] = per_model
        key = (width, height, samples, shadow_size)
        r = per_model.get(key)
        if r is None:
            try:
                r = _Renderer(model, width, height, sel["ctx_cls"], samples, shadow_size)
            except RenderUnavailable:
                raise
            except Exception as err:
                raise RenderUnavailable(
                    f"creating a {width}x{height} {sel['backend']} GL context failed: {err}. "
                    + _install_hint()
                ) from err
            per_model[key] = r
        return r


def close_renderers() -> None:
    """Free every cached GL context (they are also freed when their model is collected)."""
    with _lock:
        for per_model in list(_renderers.values()):
            for r in per_model.values():
                r.close()
        _renderers.clear()


def _set_camera(
    r: _Renderer,
    model: mujoco.MjModel,
    camera: str | int | None,
    lookat: Sequence[float],
    distance: float,
    elevation: float,
    azimuth: float,
) -> None:
    import mujoco

    cam = r.camera
    if camera is None:
        cam.type = mujoco.mjtCamera.mjCAMERA_FREE
        cam.fixedcamid = -1
        cam.lookat[:] = np.asarray(lookat, dtype=np.float64)
        cam.distance = float(distance)
        cam.elevation = float(elevation)
        cam.azimuth = float(azimuth)
        return
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
    if isinstance(camera, str):
        cam_id = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam_id < 0:
            raise ValueError(
                f"unknown camera {camera!r}; the model's cameras are {names} "
                "(or pass camera=None for the default free camera)"
            )
    elif isinstance(camera, (int, np.integer)) and not isinstance(camera, bool):
        cam_id = int(camera)
        if not 0 <= cam_id < model.ncam:
            raise ValueError(
                f"camera id {cam_id} out of range: the model has {model.ncam} cameras {names}"
            )
    else:
        raise TypeError(f"camera must be a name, an id or None, got {type(camera).__name__}")
    cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
    cam.fixedcamid = cam_id


def _check_size(width: int, height: int) -> tuple[int, int]:
    if int(width) != width or int(height) != height or width < 1 or height < 1:
        raise ValueError(f"width and height must be positive integers, got {width}x{height}")
    if width > 8192 or height > 8192:
        raise ValueError(f"{width}x{height} exceeds the 8192 px limit for offscreen frames")
    return int(width), int(height)


def render_states(
    model: mujoco.MjModel,
    qpos: np.ndarray,  # [T, nq]
    *,
    camera: str | int | None = None,
    width: int = 224,
    height: int = 224,
    shadows: bool = False,
    reflections: bool = False,
    antialias: bool = False,
    shadow_size: int = 1024,
    groups: Sequence[int] | None = None,
    lookat: Sequence[float] = DEFAULT_LOOKAT,
    distance: float = DEFAULT_DISTANCE,
    elevation: float = DEFAULT_ELEVATION,
    azimuth: float = DEFAULT_AZIMUTH,
) -> np.ndarray:  # [T, H, W, 3] uint8
    """Replay joint positions through mj_forward and render one RGB frame per state.

    Shadows and reflections are off by default: on software GL shadows slow rendering several
    times over and add little for the critic. `antialias=True` is 4x MSAA (slower on software GL);
    `shadow_size` is the shadow-map side in pixels (MuJoCo's default 4096 is much slower than
    1024 on software GL and no sharper at 224 px; costs: benchmarks/results/render_speed.json).
    `groups`: the geom groups drawn (None: MuJoCo's default, 0-2; robosuite draws its visual
    group 1 only, its collision geoms are group 0). `camera=None` uses a free camera set by
    lookat/distance/elevation/azimuth (degrees, MuJoCo convention); otherwise a named or indexed
    model camera. One GL context is cached per (model, width, height, antialias, shadow_size).
    """
    import mujoco

    if not isinstance(model, mujoco.MjModel):
        raise TypeError(f"model must be a mujoco.MjModel, got {type(model).__name__}")
    qpos = np.asarray(qpos)
    if qpos.ndim != 2 or qpos.shape[1] != model.nq:
        raise ValueError(f"qpos must have shape [T, nq={model.nq}], got {qpos.shape}")
    if not np.issubdtype(qpos.dtype, np.number) or np.issubdtype(qpos.dtype, np.complexfloating):
        raise TypeError(f"qpos must be real-valued, got dtype {qpos.dtype}")
    finite = np.isfinite(qpos).all(axis=1)
    if not finite.all():
        raise ValueError(
            f"qpos has non-finite values at frame {int(np.argmin(finite))} of {len(qpos)}; "
            "truncate diverged rollouts before rendering"
        )
    width, height = _check_size(width, height)
    if int(shadow_size) != shadow_size or not 64 <= shadow_size <= 8192:
        raise ValueError(f"shadow_size must be an integer in [64, 8192], got {shadow_size!r}")
    drawn = _geom_groups(groups)
    r = _renderer_for(model, width, height, 4 if antialias else 0, int(shadow_size))
    with _lock:
        _set_camera(r, model, camera, lookat, distance, elevation, azimuth)
        r.option.geomgroup[:] = drawn  # the renderer is shared: set on every call
        r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = bool(shadows)
        r.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = bool(reflections)
        frames = np.empty((qpos.shape[0], height, width, 3), np.uint8)
        data = mujoco.MjData(model)  # not cached: MjData keeps its model alive
        for t in range(qpos.shape[0]):
            data.qpos[:] = qpos[t]
            mujoco.mj_forward(model, data)
            r.render_into(data, frames[t])
    return frames


def _geom_groups(groups: Sequence[int] | None) -> np.ndarray:
    """`MjvOption.geomgroup` drawing `groups` (None: MuJoCo's default, groups 0-2)."""
    import mujoco

    default = np.array(mujoco.MjvOption().geomgroup, np.uint8)
    if groups is None:
        return default
    out = np.zeros_like(default)
    for g in groups:
        if isinstance(g, bool) or not isinstance(g, (int, np.integer)) or not 0 <= g < len(out):
            raise ValueError(f"groups must be geom groups in [0, {len(out)}), got {list(groups)!r}")
        out[g] = 1
    return out


def render_variants(
    models: Sequence[mujoco.MjModel],
    qpos: np.ndarray,  # [B, nq]: one state per model
    *,
    cameras: Sequence[str | int],
    width: int,
    height: int,
) -> np.ndarray:  # [B, n_cam, H, W, 3] uint8
    """Every camera for one state per model, through ONE GL context created for `models[0]`.

    For same-structure variants of a bucket (`coda.sim.rollout.Bucket.models`): a GL context per
    variant model would be created (and its MjrContext uploaded) for every new variant the loop
    compiles; one context serves them all because `mjv_updateScene` reads each variant's own
    geom sizes, colours and poses, and the context holds only what variants share (our scenes
    have no meshes or textures; a bucket cannot differ in them). Models with meshes or textures
    render here only as one shared model object (a LIBERO task's visual model). Kinematics run
    once per state for all cameras, in one MjData (same structure, same sizes). Plain settings:
    no shadows, reflections or MSAA (the policy's observations, rendered at chunk endpoints).
    """
    import mujoco

    models = list(models)
    qpos = np.asarray(qpos, np.float64)
    width, height = _check_size(width, height)
    frames = np.empty((len(models), len(cameras), height, width, 3), np.uint8)
    if not models:
        return frames
    if qpos.shape != (len(models), models[0].nq):
        raise ValueError(f"qpos must be [B={len(models)}, nq={models[0].nq}], got {qpos.shape}")
    m0 = models[0]
    shape0 = (m0.nq, m0.ngeom, m0.nbody, m0.ncam, m0.nlight, 0, 0)
    for i, m in enumerate(models):
        if m is m0:  # one model (meshes and textures too: the context holds them) serves all
            continue
        if (m.nq, m.ngeom, m.nbody, m.ncam, m.nlight, m.nmesh, m.ntex) != shape0:
            raise ValueError(
                f"model {i} differs from model 0 in structure (joints/geoms/bodies/cameras/"
                "lights) or has meshes/textures: render it with render_states"
            )
    if not np.isfinite(qpos).all():
        raise ValueError("qpos has non-finite values; truncate diverged rollouts before rendering")
    r = _renderer_for(m0, width, height, 0, 1024)
    data = mujoco.MjData(m0)  # sized by the structure, which every model shares
    with _lock:
        r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        r.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False
        for i, (m, q) in enumerate(zip(models, qpos, strict=True)):
            data.qpos[:] = q
            mujoco.mj_kinematics(m, data)  # body / geom / site frames: all rendering reads
            mujoco.mj_camlight(m, data)  # camera and light frames
            for c, cam in enumerate(cameras):
                _set_camera(r, m0, cam, DEFAULT_LOOKAT, DEFAULT_DISTANCE, DEFAULT_ELEVATION, 0.0)
                r.render_into(data, frames[i, c], model=m)
    return frames


def render_batch(
    models: mujoco.MjModel | Sequence[mujoco.MjModel],
    qpos: np.ndarray,  # [B, T, nq]
    **kwargs: Any,
) -> np.ndarray:  # [B, T, H, W, 3] uint8
    """Render B trajectories: one model per trajectory, or one model shared by all."""
    qpos = np.asarray(qpos)
    if qpos.ndim != 3:
        raise ValueError(f"qpos must have shape [B, T, nq], got {qpos.shape}")
    if isinstance(models, Sequence):
        if len(models) != qpos.shape[0]:
            raise ValueError(f"got {len(models)} models for {qpos.shape[0]} trajectories")
        model_list = list(models)
    else:
        model_list = [models] * qpos.shape[0]
    if not model_list:
        w, h = _check_size(kwargs.get("width", 224), kwargs.get("height", 224))
        return np.empty((0, qpos.shape[1], h, w, 3), np.uint8)
    return np.stack([render_states(m, q, **kwargs) for m, q in zip(model_list, qpos, strict=True)])
