"""Headless rendering: frames from replayed states, GIF / MP4 / contact sheets, GL fallbacks."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageSequence

from coda.sim import render

try:
    import mujoco
except Exception as err:  # e.g. MUJOCO_GL=osmesa without libOSMesa breaks `import mujoco`
    mujoco, _MUJOCO_ERROR = None, f"{type(err).__name__}: {err}"

ROOT = Path(__file__).resolve().parents[1]

FALLING_BOX = """
<mujoco>
  <worldbody>
    <light pos="0 0 3" dir="0 0 -1" castshadow="true"/>
    <camera name="top" pos="0.45 0 2.0" xyaxes="0 -1 0 1 0 0"/>
    <geom name="floor" type="plane" size="2 2 0.1" rgba="0.8 0.8 0.8 1"/>
    <body name="box" pos="0.45 0 0.35">
      <freejoint/>
      <geom type="box" size="0.06 0.06 0.06" rgba="0.9 0.1 0.1 1"/>
    </body>
  </worldbody>
</mujoco>
"""


def _falling_box(frames: int = 4, every: int = 25) -> tuple["mujoco.MjModel", np.ndarray]:
    if mujoco is None:
        pytest.skip(
            f"mujoco cannot be imported with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r}: "
            f"{_MUJOCO_ERROR}"
        )
    model = mujoco.MjModel.from_xml_string(FALLING_BOX)
    data = mujoco.MjData(model)
    qpos = []
    for _ in range(frames):
        qpos.append(data.qpos.copy())
        for _ in range(every):
            mujoco.mj_step(model, data)
    return model, np.stack(qpos)  # [T, nq]


def _run_py(code: str, env_updates: dict[str, str | None]) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for k, v in env_updates.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_render_states_shapes_and_motion(gl):
    model, qpos = _falling_box()
    frames = render.render_states(model, qpos, width=64, height=48)
    assert frames.shape == (4, 48, 64, 3) and frames.dtype == np.uint8
    assert frames[0].std() > 5  # not a blank image
    # The box falls: consecutive frames differ, and the red box is lower in the image later.
    for a, b in zip(frames[:-1], frames[1:], strict=True):
        assert np.abs(a.astype(int) - b.astype(int)).sum() > 0
    f = frames.astype(int)
    red = (f[..., 0] > 120) & (f[..., 0] > f[..., 1] + 60) & (f[..., 0] > f[..., 2] + 60)
    rows = [np.nonzero(m)[0].mean() for m in red]  # image row of the box, per frame
    assert all(m.sum() > 5 for m in red) and np.all(np.diff(rows) > 0), rows
    again = render.render_states(model, qpos, width=64, height=48)
    np.testing.assert_array_equal(frames, again)  # deterministic replay
    assert len(render._renderers[model]) == 1  # one cached renderer per (model, size)


def test_camera_selection(gl):
    model, qpos = _falling_box(frames=1)
    free = render.render_states(model, qpos, width=48, height=48)
    top = render.render_states(model, qpos, camera="top", width=48, height=48)
    by_id = render.render_states(model, qpos, camera=0, width=48, height=48)
    np.testing.assert_array_equal(top, by_id)
    assert not np.array_equal(free, top)
    # Looking straight down at the box: the image centre is red.
    r, g, b = top[0, 22:27, 22:27].reshape(-1, 3).mean(0)
    assert r > 120 and r > g + 60 and r > b + 60
    moved = render.render_states(model, qpos, width=48, height=48, azimuth=180.0, distance=2.0)
    assert not np.array_equal(free, moved)
    with pytest.raises(ValueError, match="unknown camera 'nope'.*'top'"):
        render.render_states(model, qpos, camera="nope")
    with pytest.raises(ValueError, match="out of range"):
        render.render_states(model, qpos, camera=3)


def test_shadow_and_reflection_flags_change_the_image(gl):
    model, qpos = _falling_box(frames=1)
    plain = render.render_states(model, qpos, width=64, height=64)
    shadowed = render.render_states(model, qpos, width=64, height=64, shadows=True)
    assert not np.array_equal(plain, shadowed)
    # A shadow only darkens.
    assert shadowed.astype(int).sum() < plain.astype(int).sum()
    np.testing.assert_array_equal(plain, render.render_states(model, qpos, width=64, height=64))


def test_geom_groups_hide_what_they_leave_out(gl):
    """robosuite draws group 1 only (its collision geoms are group 0): `groups=(1,)` hides a
    group-0 geom, and the next default call draws it again (the renderer is shared)."""
    xml = FALLING_BOX.replace('<geom type="box"', '<geom type="box" group="0"').replace(
        'rgba="0.8 0.8 0.8 1"', 'rgba="0.8 0.8 0.8 1" group="1"'
    )
    model = mujoco.MjModel.from_xml_string(xml)
    qpos = _falling_box(frames=1)[1]
    red = lambda f: int((f[..., 0].astype(int) - f[..., 1] > 60).sum())  # noqa: E731
    shown = render.render_states(model, qpos, camera="top", width=48, height=48)
    hidden = render.render_states(model, qpos, camera="top", width=48, height=48, groups=(1,))
    assert red(shown) > 10 and red(hidden) == 0
    again = render.render_states(model, qpos, camera="top", width=48, height=48)
    np.testing.assert_array_equal(again, shown)
    for bad in ((7,), (True,), ("1",)):
        with pytest.raises(ValueError, match=r"geom groups in \[0, 6\)"):
            render.render_states(model, qpos, groups=bad)


def test_context_options_are_cached_separately_and_leave_the_model_untouched(gl):
    model, qpos = _falling_box(frames=1)
    before = (
        model.vis.global_.offwidth,
        model.vis.quality.offsamples,
        model.vis.quality.shadowsize,
    )
    no_aa = render.render_states(model, qpos, width=40, height=40)
    aa = render.render_states(model, qpos, width=40, height=40, antialias=True)
    assert no_aa.shape == aa.shape and not np.array_equal(aa, no_aa)  # edges differ
    render.render_states(model, qpos, width=40, height=40, shadows=True, shadow_size=256)
    assert len(render._renderers[model]) == 3
    after = (model.vis.global_.offwidth, model.vis.quality.offsamples, model.vis.quality.shadowsize)
    assert after == before
    with pytest.raises(ValueError, match="shadow_size"):
        render.render_states(model, qpos, shadow_size=10)


def test_renderers_are_freed_with_their_model(gl, monkeypatch):
    import gc
    import weakref

    closed = []
    original_close = render._Renderer.close

    def recording_close(self):
        closed.append(self.gl is not None)
        original_close(self)

    monkeypatch.setattr(render._Renderer, "close", recording_close)
    model, qpos = _falling_box(frames=1)
    render.render_states(model, qpos, width=16, height=16)
    (r,) = render._renderers[model].values()
    ref = weakref.ref(r)
    del r, model
    gc.collect()
    assert ref() is None and closed[:1] == [True]  # closed while it still held a GL context

    model2, _ = _falling_box(frames=1)
    render.render_states(model2, qpos, width=16, height=16)
    render.close_renderers()
    assert len(render._renderers) == 0
    assert render.render_states(model2, qpos, width=16, height=16).shape == (1, 16, 16, 3)


def test_render_batch_matches_per_trajectory(gl):
    model, qpos = _falling_box(frames=3)
    model2 = mujoco.MjModel.from_xml_string(FALLING_BOX)
    batch = np.stack([qpos, qpos[::-1]])  # [2, T, nq]
    out = render.render_batch([model, model2], batch, width=32, height=32)
    assert out.shape == (2, 3, 32, 32, 3)
    np.testing.assert_array_equal(out[1], out[0][::-1])
    shared = render.render_batch(model, batch, width=32, height=32)
    np.testing.assert_array_equal(out, shared)
    with pytest.raises(ValueError, match="2 models for 1 trajectories"):
        render.render_batch([model, model2], batch[:1])


def test_bad_inputs_get_clear_errors():
    model, qpos = _falling_box(frames=2)
    with pytest.raises(ValueError, match=r"\[T, nq=7\]"):
        render.render_states(model, qpos[:, :3])
    with pytest.raises(ValueError, match=r"\[T, nq=7\]"):
        render.render_states(model, qpos[0])
    bad = qpos.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="non-finite values at frame 1"):
        render.render_states(model, bad)
    with pytest.raises(TypeError, match="mujoco.MjModel"):
        render.render_states("model.xml", qpos)
    with pytest.raises(ValueError, match="positive integers"):
        render.render_states(model, qpos, width=0)


def _synthetic_frames(t: int = 5, h: int = 12, w: int = 16) -> np.ndarray:  # [T, H, W, 3]
    frames = np.zeros((t, h, w, 3), np.uint8)
    for i in range(t):
        frames[i, :, : (i + 1) * w // t] = (255, 0, 0)
        frames[i, :, (i + 1) * w // t :] = (0, 0, 255)
    return frames


def test_gif_round_trip(tmp_path):
    frames = _synthetic_frames()
    path = tmp_path / "clip.gif"
    render.save_gif(frames, path, fps=10)
    with Image.open(path) as im:
        assert im.n_frames == 5 and im.size == (16, 12)
        durations, back = [], []
        for f in ImageSequence.Iterator(im):
            durations.append(f.info["duration"])
            back.append(np.asarray(f.convert("RGB")))
    assert durations == [100] * 5
    np.testing.assert_array_equal(np.stack(back), frames)
    with pytest.raises(TypeError, match="uint8"):
        render.save_gif(frames.astype(np.float32), path)
    with pytest.raises(ValueError, match="fps"):
        render.save_gif(frames, path, fps=0)


def test_gif_of_rendered_frames(gl, tmp_path):
    model, qpos = _falling_box(frames=4)
    frames = render.render_states(model, qpos, width=32, height=32)
    render.save_gif(frames, tmp_path / "fall.gif", fps=5)
    with Image.open(tmp_path / "fall.gif") as im:
        assert im.n_frames == 4 and im.size == (32, 32)


def test_contact_sheet_layout():
    frames = _synthetic_frames(t=5, h=4, w=6)
    sheet = render.contact_sheet(frames, cols=2, pad=1, pad_value=255)
    assert sheet.shape == (3 * 4 + 4 * 1, 2 * 6 + 3 * 1, 3) and sheet.dtype == np.uint8
    np.testing.assert_array_equal(sheet[1:5, 1:7], frames[0])
    np.testing.assert_array_equal(sheet[1:5, 8:14], frames[1])
    np.testing.assert_array_equal(sheet[11:15, 1:7], frames[4])
    assert (sheet[11:15, 8:14] == 255).all()  # empty cell
    assert render.contact_sheet(frames, cols=10, pad=0).shape == (4, 5 * 6, 3)
    with pytest.raises(ValueError, match="cols"):
        render.contact_sheet(frames, cols=0)


def test_subsample_and_png(tmp_path):
    frames = np.arange(10)[:, None, None, None] * np.ones((1, 2, 2, 3), np.uint8)
    picked = render.subsample(frames, 4)
    assert picked[:, 0, 0, 0].tolist() == [0, 3, 6, 9]
    assert len(render.subsample(frames, 20)) == 10
    render.save_png(render.contact_sheet(picked.astype(np.uint8), cols=2), tmp_path / "s.png")
    with Image.open(tmp_path / "s.png") as im:
        assert im.size == (2 * 2 + 3 * 2, 2 * 2 + 3 * 2)


def test_save_mp4_writes_or_explains(tmp_path):
    frames = _synthetic_frames(t=6, h=15, w=20)  # odd height: padded to even for yuv420p
    path = tmp_path / "clip.mp4"
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError:
        with pytest.raises(render.VideoUnavailable, match="imageio-ffmpeg.*save_gif"):
            render.save_mp4(frames, path)
        return
    render.save_mp4(frames, path, fps=20)
    import imageio.v2 as iio

    back = iio.mimread(path, format="FFMPEG")
    assert len(back) == 6 and back[0].shape == (16, 20, 3)


def test_invalid_mujoco_gl_raises_render_unavailable():
    # mujoco itself refuses to import with an invalid MUJOCO_GL, so the child imports it with
    # rendering disabled and only then sets the invalid value that render.py reads.
    proc = _run_py(
        """
        import os, numpy as np, mujoco
        from coda.sim import render
        os.environ["MUJOCO_GL"] = "bogus"
        model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='1'/>"
                                               "</worldbody></mujoco>")
        ok, why = render.gl_available()
        assert not ok, why
        try:
            render.render_states(model, np.zeros((1, model.nq)))
        except render.RenderUnavailable as err:
            print("RAISED", err)
        """,
        {"MUJOCO_GL": "disable"},
    )
    assert proc.returncode == 0, proc.stderr
    msg = proc.stdout
    assert "RAISED" in msg and "MUJOCO_GL='bogus'" in msg
    for hint in ("libegl1", "libosmesa6", "libgl1", "make setup"):
        assert hint in msg


def test_forced_backend_that_fails_raises_render_unavailable():
    # PyOpenGL pinned to EGL makes the OSMesa backend fail to load on any machine.
    proc = _run_py(
        """
        import numpy as np, mujoco
        from coda.sim import render
        model = mujoco.MjModel.from_xml_string("<mujoco><worldbody><geom size='1'/>"
                                               "</worldbody></mujoco>")
        try:
            render.render_states(model, np.zeros((2, model.nq)))
        except render.RenderUnavailable as err:
            print("RAISED", err)
        """,
        {"MUJOCO_GL": "osmesa", "PYOPENGL_PLATFORM": "egl"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "RAISED" in proc.stdout
    assert "MUJOCO_GL='osmesa' was set, so only it was tried" in proc.stdout
    assert "libosmesa6" in proc.stdout


def test_probe_when_mujoco_gl_unset():
    # The usual launch: mujoco imported first with MUJOCO_GL unset, render.py picks a backend.
    proc = _run_py(
        """
        import os, numpy as np, mujoco
        from coda.sim import render
        ok, info = render.gl_available()
        shape = "-"
        if ok:
            model = mujoco.MjModel.from_xml_string(
                "<mujoco><worldbody><light pos='0 0 2'/><geom size='0.1' rgba='1 0 0 1'/>"
                "</worldbody></mujoco>")
            frames = render.render_states(model, np.zeros((2, model.nq)), width=40, height=30,
                                          lookat=(0, 0, 0), distance=1.0)
            shape = f"{frames.shape} {frames.max()}"
        print(ok, "|", info, "|", os.environ.get("MUJOCO_GL"), "|", shape)
        """,
        {"MUJOCO_GL": None, "PYOPENGL_PLATFORM": None},
    )
    assert proc.returncode == 0, proc.stderr
    ok, info, env_gl, shape = (s.strip() for s in proc.stdout.strip().split("|"))
    if ok == "True":
        assert info in render.PROBE_ORDER and env_gl == info  # exported for later imports
        assert shape == "(2, 30, 40, 3) 255"
    else:
        assert "egl:" in info and "osmesa:" in info and "libosmesa6" in info


def test_probe_order_and_failure_message(monkeypatch):
    # Selection logic alone (no GL touched): egl fails, osmesa works -> osmesa is chosen.
    tried = []

    def fake_probe(backend):
        tried.append(backend)
        return (backend == "osmesa", "llvmpipe" if backend == "osmesa" else "libEGL not found")

    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(render, "_selected", {})
    monkeypatch.setattr(render, "_probe", fake_probe)
    monkeypatch.setattr(render, "_activate", lambda backend: object)
    assert render.gl_available() == (True, "osmesa") and tried == ["egl", "osmesa"]

    monkeypatch.setattr(render, "_selected", {})
    monkeypatch.setattr(render, "_probe", lambda backend: (False, f"{backend} is broken"))
    ok, why = render.gl_available()
    assert not ok and "egl: egl is broken; osmesa: osmesa is broken" in why
    with pytest.raises(render.RenderUnavailable, match="libosmesa6"):
        render.require_gl()
    monkeypatch.setenv("MUJOCO_GL", "off")
    monkeypatch.setattr(render, "_selected", {})
    assert render.gl_available() == (False, "rendering is disabled by MUJOCO_GL='off'. Unset it.")
