"""Readable keyframes (issue 28 item 6): the view model adds visuals only, the workspace camera
is framed on the task's objects, the wrist view sits beside it, the sheet is labelled, the VLM
critic sends these views, and the report writes a GIF and a sheet per diagnosed failure.
Rendering tests skip without headless GL, like tests/test_render.py."""

from __future__ import annotations

import base64
import io
import json
import math

import numpy as np
import pytest
from ml_collections import ConfigDict
from PIL import Image

from coda.critic import VLMCritic, keyframe_indices, keyframe_sheet, readable_keyframes
from coda.critic.keyframes import diagnosis_title, sheet_indices
from coda.llm import LLMClient
from coda.loop.failure_media import failure_media
from coda.sim import render, robot, view
from coda.sim.compile import compile_scene
from coda.sim.media import labelled_sheet
from coda.sim.sdk import exec_program
from tests.conftest import CUBE_PLATE
from tests.test_critic_vlm import _episode


@pytest.fixture(scope="module")
def compiled():
    return compile_scene(exec_program(CUBE_PLATE, seed=0, isolation="inprocess"))


@pytest.fixture(scope="module")
def trace(compiled):
    """[5, nq]: the gripper moves from home to 10 cm above the cube."""
    cube = compiled.scene.layout["target"]
    q = np.tile(compiled.init_qpos, (5, 1))
    goal = np.array([cube["x"], cube["y"], 0.1 + robot.TCP_OFFSET])
    for t in range(5):
        q[t, :3] = robot.HOME[:3] + (goal - robot.HOME[:3]) * t / 4
    return q


def test_view_model_adds_visuals_only(compiled):
    m, p = view.view_model(compiled), compiled.model
    for f in ("nq", "nv", "nu", "nbody", "ngeom", "njnt", "ncam"):
        assert getattr(m, f) == getattr(p, f), f
    for f in ("geom_contype", "geom_conaffinity", "geom_friction", "geom_size", "body_mass"):
        np.testing.assert_array_equal(getattr(m, f), getattr(p, f))
    assert (m.ntex, m.nmat, m.nlight) == (2, 1, p.nlight + 1)
    # the physics model (rollouts, image observations, verification) has none of it
    assert (p.ntex, p.nmat) == (0, 0)
    assert view.view_model(compiled) is m  # cached per scene


def _ndc(framing: view.Framing, p: np.ndarray, fovy_deg: float) -> np.ndarray:
    """Normalised image coordinates of world point p under a free camera (|x|, |y| < 1: in view)."""
    fwd, right, up = view._camera_axes(framing.azimuth, framing.elevation)
    d = p - (np.asarray(framing.lookat) - framing.distance * fwd)
    return np.array([d @ right, d @ up]) / (d @ fwd) / math.tan(math.radians(fovy_deg) / 2)


def test_framing_keeps_objects_and_tcp_in_view(compiled, trace):
    m = view.view_model(compiled)
    fr = view.frame_workspace(m, trace, view.scene_bodies(compiled))
    assert fr.distance < render.DEFAULT_DISTANCE  # closer than the whole-floor default view
    pts = view._points(m, trace, view.scene_bodies(compiled))
    ndc = np.array([_ndc(fr, p, view.VIEW_FOVY) for p in pts])
    assert np.abs(ndc).max() < 1.0
    assert np.abs(ndc).max() > 0.7  # ... and they fill the frame, not a corner of it


def test_labelled_sheet_layout():
    a = np.full((5, 20, 30, 3), 100, np.uint8)
    w = np.full((5, 20, 30, 3), 200, np.uint8)
    s = labelled_sheet([a, w], [f"chunk {t}" for t in range(5)], title="t", cols=3, pad=2)
    assert s.dtype == np.uint8 and s.shape[1] == 3 * 30 + 4 * 2
    assert (s == 100).all(-1).sum() == 5 * 20 * 30 and (s == 200).all(-1).sum() == 5 * 20 * 30
    assert ((s < 100).all(-1)).any()  # dark text: the title and labels
    with pytest.raises(ValueError, match="labels"):
        labelled_sheet([a], ["x"])


def test_sheet_indices_cover_the_episode():
    idx = sheet_indices([0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2], max_frames=6)
    assert idx[0] == 0 and idx[-1] == 14 and {2, 5} <= set(idx) and len(idx) == 6
    assert sheet_indices([0, 1, 2, 3, 4, 5, 6, 7, 8], max_frames=4) == [0, 3, 5, 8]


def _red(img: np.ndarray) -> int:
    r, g, b = (img[..., i].astype(int) for i in range(3))
    return int(((r > 120) & (r > 2 * g) & (r > 2 * b)).sum())


def test_views_show_the_objects_against_a_background(gl, compiled, trace):
    agent, wrist = view.render_views(compiled, trace, 96)
    assert agent.shape == wrist.shape == (5, 96, 96, 3)
    old = render.render_states(compiled.model, trace, width=96, height=96)  # whole-floor view
    assert _red(agent[0]) > 3 * _red(old[0]) > 0  # the red cube is several times larger
    black = lambda f: float((f.max(-1) < 12).mean())  # noqa: E731
    assert black(old[0]) > 0.15 and black(agent[0]) < 0.02  # no black void: sky and floor


def test_readable_keyframes_and_sheet(gl):
    ep = _episode("cube_red")
    idx = keyframe_indices(ep)
    img = readable_keyframes(ep, idx, 64)
    assert img.shape == (len(idx), 64, 2 * 64 + 4, 3)
    diag = {"factor": "layout", "phase": "grasp", "cause": "never_grasped", "critic": "vlm"}
    sheet = keyframe_sheet(ep, diag, size=64, max_frames=4)
    assert sheet.shape[1] == 4 * 64 + 5 * 3 and sheet.std() > 0
    assert "layout / grasp / never_grasped (vlm)" in diagnosis_title(ep.instruction, diag)


def test_vlm_critic_sends_the_readable_views(gl):
    ep = _episode("cube_red")
    critic = VLMCritic(client=LLMClient(), image_size=48)
    msgs = critic.messages(ep)
    parts = msgs[1]["content"]
    assert "wrist camera" in parts[0]["text"]
    png = base64.b64decode(parts[1]["image_url"]["url"].split(",", 1)[1])
    assert np.asarray(Image.open(io.BytesIO(png))).shape == (48, 2 * 48 + 4, 3)


def test_report_writes_a_gif_and_a_sheet_per_failure(gl, compiled, trace, tmp_path):
    d = tmp_path / "failures"
    d.mkdir()
    np.save(d / "round001_0.npy", trace)
    rec = {
        "round": 1,
        "scene": compiled.scene.to_dict(),
        "diagnosis": {"factor": "layout", "phase": "reach", "cause": "did_not_approach"},
        "mode": 3,
        "phase_names": ["reach", "grasp", "lift", "transport", "place"],
        "phase_index": [0, 0, 0, 1, 1],
    }
    (d / "round001_0.json").write_text(json.dumps(rec))
    cfg = ConfigDict({"render": {"enabled": True, "width": 64, "height": 64}})
    (item,) = failure_media(str(tmp_path), cfg)
    assert item["gif"] == "failures/round001_0.gif"
    assert item["sheet"] == "failures/round001_0_sheet.png"
    with Image.open(tmp_path / item["gif"]) as im:
        assert im.size == (2 * 64 + 4, 64) and im.n_frames == 5
    sheet = np.asarray(Image.open(tmp_path / item["sheet"]))
    assert sheet.shape[1] == 4 * 64 + 5 * 3  # 5 endpoints: 4 columns, two bands
