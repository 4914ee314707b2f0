"""LIBERO observations: the agent-view and wrist cameras at 256 x 256, their pi0.5 inputs, the
camera / light / noise perturbations (identity at level 0, seeded, growing with the level) and
rollout GIFs. One libero_spatial task, a few states; skipped without a GL backend or without the
`[libero]` extra."""

from __future__ import annotations

import numpy as np
import pytest

from coda.libero import data
from coda.sim.render import gl_available

try:
    data.wheel_path()
    data.assets_root()
except data.LiberoDataMissing as err:  # pragma: no cover - CI installs the extra
    pytest.skip(f"LIBERO data missing: {err}", allow_module_level=True)
_GL, _WHY = gl_available()
if not _GL:  # pragma: no cover - depends on the machine
    pytest.skip(f"no GL backend for offscreen rendering: {_WHY}", allow_module_level=True)

from coda.libero import perturb as P  # noqa: E402
from coda.libero import render as LR  # noqa: E402
from coda.libero import scene as S  # noqa: E402
from coda.libero import suites  # noqa: E402

SUITE = "libero_spatial"


@pytest.fixture(scope="module")
def task():
    """(task name, visual model, qpos [2, nq]: initial state 0 and the gripper 12 cm lower and
    8 cm to the side)."""
    name = suites.tasks(SUITE)[0]
    v = S.compile_task(SUITE, name, 0)
    q = np.stack([v.init_qpos, v.init_qpos])
    q[1, 1] += 0.08
    q[1, 2] -= 0.12
    return name, LR.render_model(SUITE, name), q


@pytest.fixture(scope="module")
def base(task):
    _, model, q = task
    return LR.render_observations(model, q[:1])  # [1, 2, 256, 256, 3]


def _change(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


def test_cameras_are_libero_s_and_render_both_views(task, base):
    name, model, q = task
    physics = S.compile_task(SUITE, name, 0).model  # the rollout model carries them too
    for m in (model, physics):
        assert {S.AGENTVIEW_CAMERA, S.WRIST_CAMERA} <= {m.camera(i).name for i in range(m.ncam)}
    pos, quat = S.AGENTVIEW_POSE["libero_tabletop_manipulation"]
    ws = S.load_task(SUITE, name).workspace
    cam = model.camera(S.AGENTVIEW_CAMERA)
    np.testing.assert_allclose(cam.pos, S.to_ours(pos, ws), atol=1e-9)
    np.testing.assert_allclose(cam.quat, np.asarray(quat) / np.linalg.norm(quat), atol=1e-6)
    assert model.cam_fovy[cam.id] == pytest.approx(45.0, abs=1e-9)
    assert model.cam_bodyid[model.camera(S.WRIST_CAMERA).id] == model.body("gripper").id

    obs = LR.render_observations(model, q)
    assert obs.shape == (2, 2, 256, 256, 3) and obs.dtype == np.uint8
    np.testing.assert_array_equal(obs[:1], base)  # rendering is deterministic
    assert all(float(obs[b, c].std()) > 10.0 for b in range(2) for c in range(2))  # not flat
    assert _change(obs[0, 0], obs[0, 1]) > 10.0  # two different views
    assert _change(obs[0, 0], obs[1, 0]) > 0.5  # the moved gripper shows in the agent view
    assert _change(obs[0, 1], obs[1, 1]) > 5.0  # and the wrist view moved with it
    import mujoco

    d = mujoco.MjData(model)
    d.qpos[:] = q[0]
    np.testing.assert_array_equal(LR.render_observations(model, [d]), base)  # MjData works


def test_chunk_endpoints_of_a_rollout_batch_render_in_order(task, base):
    _, model, q = task
    obs = LR.render_endpoints(model, np.stack([q, q[::-1]]))  # [B=2, T=2, nq]
    assert obs.shape == (2, 2, 2, 256, 256, 3)
    np.testing.assert_array_equal(obs[0, 0], base[0])
    np.testing.assert_array_equal(obs[1, 1], base[0])
    np.testing.assert_array_equal(obs[0, 1], obs[1, 0])  # the same state, the same frames


def test_stove_burner_shows_only_when_the_stove_is_on(task):
    _, model, q = task
    adr = model.jnt_qposadr[model.joint("flat_stove_1_button").id]
    on = q[:1].copy()
    on[0, adr] = 0.6  # LIBERO's TurnOn: q >= 0.5
    off, lit = LR.render_observations(model, np.concatenate([q[:1], on]), cameras=("agentview",))

    def red(img):
        i = img.astype(int)
        return int(((i[..., 0] > 150) & (i[..., 1] < 80) & (i[..., 2] < 80)).sum())

    assert red(lit[0]) > red(off[0]) + 50
    assert model.site_rgba[model.site("flat_stove_1_burner").id, 3] == pytest.approx(0.0, abs=0)


def test_pi05_inputs_follow_openpi_s_libero_convention(base):
    from coda.policy.base import make_observation

    images, masks = LR.pi05_images(base)
    assert set(images) == {"base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb"}
    assert all(v.shape == (1, 224, 224, 3) and v.dtype == np.uint8 for v in images.values())
    assert masks["base_0_rgb"].all() and not masks["right_wrist_0_rgb"].any()
    plain, _ = LR.pi05_images(base, mirror=False, image_size=256)
    np.testing.assert_array_equal(plain["base_0_rgb"], base[:, 0])
    mirrored, _ = LR.pi05_images(base, image_size=256)
    np.testing.assert_array_equal(mirrored["left_wrist_0_rgb"], base[:, 1, :, ::-1])
    obs = make_observation(np.zeros((1, 4), np.int32), np.ones((1, 4), bool), images=images)
    img = np.asarray(obs.images["base_0_rgb"])
    assert img.min() >= -1.0 and img.max() <= 1.0 and img.std() > 0.05


@pytest.mark.parametrize("kind", P.OBS_KINDS)
def test_observation_perturbation_levels(task, base, kind):
    _, model, q = task

    def render(level, seed=0):
        return LR.render_observations(
            model, q[:1], perturbation=P.ObsPerturbation(kind, level, seed), index=3
        )

    np.testing.assert_array_equal(render(0), base)  # level 0: the identity
    levels = [render(lv) for lv in P.LEVELS]
    np.testing.assert_array_equal(render(4), levels[3])  # seeded: deterministic
    change = [_change(im, base) for im in levels]
    assert change[0] > 1.0 and all(b > a for a, b in zip(change, change[1:], strict=False))
    assert _change(render(3, seed=1), levels[2]) > 0.5  # another seed, another change
    np.testing.assert_array_equal(LR.render_observations(model, q[:1]), base)  # model restored
    if kind == "camera":  # the agent view moves, the wrist camera does not
        assert np.array_equal(levels[4][:, 1], base[:, 1])


def test_observation_perturbations_are_registered_by_name():
    from coda.libero import evaluate as E

    assert P.parse_obs("camera3", seed=7) == P.ObsPerturbation("camera", 3, 7)
    assert P.parse_obs("layout3") is None and P.parse_obs("camera6") is None
    assert {"camera1", "light5", "noise3"} <= set(E.PERTURBATIONS)
    with pytest.raises(ValueError, match="noise5"):
        E.compile_variants(SUITE, "x", [0], "blur2", 0)
    with pytest.raises(ValueError, match="kinds"):
        P.ObsPerturbation("fog", 1)
    with pytest.raises(ValueError, match="level"):
        P.ObsPerturbation("noise", 6)
    img = np.full((8, 8, 3), 128, np.uint8)
    noise = P.ObsPerturbation("noise", 2, 0)
    np.testing.assert_array_equal(P.perturb_images(img, noise, 1), P.perturb_images(img, noise, 1))
    assert not np.array_equal(P.perturb_images(img, noise, 1), P.perturb_images(img, noise, 2))
    with pytest.raises(ValueError, match="uint8"):
        P.perturb_images(img.astype(np.float32), noise)


def test_rollout_gifs_are_written_and_decode(task, tmp_path):
    from PIL import Image

    from coda.libero import evaluate as E

    name, model, q = task
    frames = np.stack([q[0], q[1], q[0]])  # [3, nq]: distinct successive chunk endpoints
    paths = E.write_gifs(
        tmp_path, SUITE, name, 4, frames[None], np.array([True]), P.parse_obs("light2"), 128
    )
    assert paths == ["gifs/task04_ep00_success.gif"]
    gif = Image.open(tmp_path / paths[0])
    assert gif.size == (128, 128) and gif.n_frames == 3
    gif.seek(1)
    first = LR.render_episode(model, frames[1:2], perturbation=P.parse_obs("light2"))
    small = LR.downsample(first, 2)[0].astype(int)
    # GIF palettes quantise colours: the decoded frame is the rendered one, to a few levels
    assert np.abs(np.asarray(gif.convert("RGB")).astype(int) - small).mean() < 6.0


@pytest.mark.slow
def test_evaluation_command_writes_gifs(tmp_path):
    """launch.libero's path at smoke scale with a camera perturbation (~20 s on 2 CPUs)."""
    import json

    from PIL import Image

    import configs.libero as cfg_mod
    from coda.libero.evaluate import evaluate

    cfg = cfg_mod.get_config("smoke")
    cfg.robot, cfg.perturbation, cfg.gifs, cfg.nthread = "floating", "camera2", 2, 1
    evaluate(cfg, tmp_path)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["observation_perturbation"] == {"kind": "camera", "level": 2, "seed": 0}
    gifs = saved["per_task"][0]["gifs"]
    assert len(gifs) == 2 and saved["per_task"][0]["data_suite"] == SUITE
    for g in gifs:
        assert 1 <= Image.open(tmp_path / g).n_frames <= cfg.num_chunks + 1


def test_panda_frames_under_observation_perturbations(task):
    """On LIBERO's Panda a camera perturbation moves the agent view only and noise is fresh per
    step, neither touches the state, and an episode's noisy frame does not depend on its batch."""
    from coda.libero.panda_env import PandaEnv

    name, act = task[0], np.array([[0.3, -0.2, 0.1, 0.0, 0.0, 0.0, -1.0]])
    envs = {
        p: PandaEnv(SUITE, name, n_envs=1, obs_perturbation=P.parse_obs(p, seed=3))
        for p in ("none", "camera3", "noise2")
    }
    obs = {p: (e.reset([4]), e.step(act)[0]) for p, e in envs.items()}
    frames = {p: e.observe(64) for p, e in envs.items()}
    for p in ("camera3", "noise2"):
        np.testing.assert_allclose(obs[p][1]["state"], obs["none"][1]["state"], atol=0.0)
    plain, cam, noisy = frames["none"], frames["camera3"], frames["noise2"]
    view, wrist = "agentview_image", "robot0_eye_in_hand_image"
    np.testing.assert_array_equal(cam[wrist], plain[wrist])
    assert np.abs(cam[view].astype(int) - plain[view]).mean() > 5.0
    for key in (view, wrist):
        diff = np.abs(noisy[key].astype(int) - plain[key])
        assert 1.0 < diff.mean() < 20.0, (key, diff.mean())
    pair = PandaEnv(SUITE, name, n_envs=2, obs_perturbation=P.parse_obs("noise2", seed=3))
    pair.reset([7, 4])
    pair.step(np.concatenate([act, act]))
    got = pair.observe(64)
    np.testing.assert_array_equal(got[view][1], noisy[view][0])  # state 4 at step 1, either batch
    for e in (envs["none"], envs["noise2"]):  # step 2: the same scene change, fresh noise
        e.step(act)
    noise1 = noisy[view].astype(int) - plain[view]
    noise2 = envs["noise2"].observe(64)[view].astype(int) - envs["none"].observe(64)[view]
    assert np.abs(noise2 - noise1).mean() > 1.0
