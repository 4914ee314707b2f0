"""Image observations (`policy.obs_mode = "images"`): agent-view + wrist frames rendered at chunk
endpoints by the native backend feed pi0.5's vision tower; the learner stores them (uint8) for
BC / AWR; evaluation renders them too. Smoke scale: 32 px, a one-layer SigLIP."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from coda import runconfig
from coda.policy import get_policy
from coda.policy.configs import (
    PROPRIO_DIMS,
    SCENE_CAMERAS,
    VISION_PATCH,
    obs_overrides,
    vision_overrides,
)
from coda.sim import render as R
from coda.sim.observe import ImageSpec, image_spec_for, policy_images, render_qpos, render_result
from coda.sim.state import StateLayout
from coda.train.agent import PolicyAgent

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = 32
CHUNKS = 3

pytestmark = pytest.mark.skipif(not R.gl_available()[0], reason="no headless GL backend")


def image_policy():
    over = dict(max_state_dim=64, action_horizon=10, **vision_overrides(SIZE, 16, 1))
    return get_policy("small_tiny", **over)


@pytest.fixture(scope="module")
def bucket():
    from coda.eval.suites import build_buckets
    from coda.sim import tasks

    src = tasks.get_family("pick_place").propose(np.random.default_rng(0), split="train")
    b = build_buckets([src] * 3, [1, 2, 3], "train", batch_size=4)[0]
    assert b.valid.tolist() == [True, True, True, False]  # one padding row
    return b


def test_proprio_dims_match_the_flat_state_layout():
    layout = StateLayout((), (), (), 0)
    assert layout.state_dim == PROPRIO_DIMS  # a scene without objects: proprioception only
    assert runconfig.IMAGE_PATCH == VISION_PATCH  # runconfig checks image_size without JAX


def test_scene_cameras_render_distinct_frames_and_skip_padding(bucket):
    spec = image_spec_for(image_policy().config)
    assert spec == ImageSpec(SCENE_CAMERAS, ("front", "wrist"), SIZE)
    names = {bucket.models[0].camera(i).name for i in range(bucket.models[0].ncam)}
    assert {"front", "wrist"} <= names
    frames = render_qpos(bucket.models, bucket.init_qpos, spec, bucket.valid)
    assert frames.shape == (4, 2, SIZE, SIZE, 3) and frames.dtype == np.uint8
    assert frames[:3].std(axis=(2, 3, 4)).min() > 5  # not blank
    assert np.abs(frames[:3, 0].astype(int) - frames[:3, 1]).mean() > 10  # cameras differ
    assert np.abs(frames[0].astype(int) - frames[1]).mean() > 0  # layouts differ
    assert frames[3].max() == 0  # padding is not rendered
    # the shared-context renderer draws each variant as its own context would
    own = R.render_states(
        bucket.models[1], bucket.init_qpos[1:2], camera="wrist", width=SIZE, height=SIZE
    )
    assert np.abs(own[0].astype(int) - frames[1, 1]).max() <= 1


def test_policy_images_map_cameras_to_pi05_keys():
    spec = ImageSpec(SCENE_CAMERAS, ("front", "wrist"), 8)
    frames = jnp.arange(2 * 2 * 8 * 8 * 3, dtype=jnp.uint32).astype(jnp.uint8)
    frames = frames.reshape(2, 2, 8, 8, 3)
    images, masks = policy_images(frames, spec)
    np.testing.assert_array_equal(images["base_0_rgb"], frames[:, 0])
    np.testing.assert_array_equal(images["left_wrist_0_rgb"], frames[:, 1])
    assert masks["base_0_rgb"].shape == (2,) and bool(masks["left_wrist_0_rgb"].all())
    with pytest.raises(ValueError, match="frames"):
        policy_images(frames[:, :1], spec)


def test_unknown_camera_key_lists_the_valid_ones():
    cfg = image_policy().config
    cfg.camera_names = ("right_wrist_0_rgb",)
    with pytest.raises(ValueError, match="base_0_rgb"):
        image_spec_for(cfg)


def test_mjx_refuses_an_image_policy(bucket):
    from coda.sim.rollout import MjxBackend

    agent = PolicyAgent.for_bucket(image_policy(), bucket)
    with pytest.raises(ValueError, match="native"):
        MjxBackend().rollout(bucket, agent, None, jax.random.key(0), 2)


SEEN: list[np.ndarray] = []


@dataclasses.dataclass(frozen=True, eq=False)
class RecordingAgent(PolicyAgent):
    """Records, from inside the jitted step, the frames the policy is given."""

    def act(self, params, state, carry, rng, images=None):
        jax.debug.callback(lambda x: SEEN.append(np.asarray(x)), images)
        return super().act(params, state, carry, rng, images=images)


@pytest.fixture(scope="module")
def trained(bucket):
    """Collection (image policy, native backend) -> replay; planner demos -> BC; critic; AWR
    with demo rows — the loop's update path in image mode."""
    from coda.loop import collect
    from coda.sim.planner import planner_for
    from coda.sim.rollout import NativeBackend
    from coda.train import Learner, LearnerConfig

    policy = image_policy()
    cfg = LearnerConfig(
        critic_hidden=16,
        critic_batch=8,
        policy_batch=4,
        replay_size=64,
        demo_capacity=64,
        updates_per_call=2,
        num_candidates=1,
        demo_fraction=0.5,
    )
    lrn = Learner(policy, cfg, jax.random.key(0))
    backend = NativeBackend(2)
    agent = lrn.agent(bucket, 1)
    rec = RecordingAgent(**{f.name: getattr(agent, f.name) for f in dataclasses.fields(agent)})
    SEEN.clear()
    res = backend.rollout(bucket, rec, lrn.agent_params(), jax.random.key(1), CHUNKS)
    jax.effects_barrier()
    seen = list(SEEN)
    info = lrn.add_rollout(res, bucket)
    demo_res = backend.rollout(bucket, planner_for(bucket), None, jax.random.key(2), CHUNKS)
    agents = collect.Agents(lrn)
    demos = lrn.demo_batch(demo_res, bucket, only_success=False)
    vision0 = jax.tree.map(np.asarray, lrn.pstate.params["PaliGemma"]["img"])
    bc = lrn.update_policy_bc(demos, 4, jax.random.key(3))
    lrn.set_demos(demos)
    critic = lrn.update_critic(2, jax.random.key(4))
    awr = lrn.update_policy_awr(2, jax.random.key(5))
    return dict(
        lrn=lrn,
        res=res,
        seen=seen,
        info=info,
        demo_res=demo_res,
        demos=demos,
        vision0=vision0,
        bc=bc,
        critic=critic,
        awr=awr,
        agents=agents,
        backend=backend,
    )


@pytest.mark.slow  # the `trained` fixture: ~110 s of a CI worker
def test_native_rollout_feeds_the_policy_rendered_endpoints(bucket, trained):
    res, seen = trained["res"], trained["seen"]
    im = np.asarray(res.images)
    assert im.shape == (4, CHUNKS, 2, SIZE, SIZE, 3) and im.dtype == np.uint8
    # what the jitted policy step received, chunk by chunk, is what the result recorded
    assert len(seen) == CHUNKS
    for c in range(CHUNKS):
        np.testing.assert_array_equal(seen[c], im[:, c])
    v = im[:3]
    assert np.abs(v[:, :, 0].astype(int) - v[:, :, 1]).mean() > 10  # agent view != wrist
    # the gripper moves: its wrist camera sees a different picture at every endpoint
    for c in range(1, CHUNKS):
        assert np.abs(v[:, c, 1].astype(int) - v[:, c - 1, 1]).mean() > 1
    assert im[3].max() == 0  # padding row
    # reproduced from the recorded qpos (float32: <= 1 level on a few pixels)
    again = render_result(bucket, res, trained["lrn"].image_spec)
    diff = np.abs(again.astype(int) - im)
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3


@pytest.mark.slow  # the `trained` fixture: ~110 s of a CI worker
def test_learner_stores_frames_and_trains_the_vision_tower(trained):
    lrn = trained["lrn"]
    n = trained["info"]["transitions"]
    assert n == 3 * CHUNKS  # valid rows x chunks
    rows = np.asarray(lrn.state.replay.data.images[:n])
    np.testing.assert_array_equal(
        rows.reshape(3, CHUNKS, 2, SIZE, SIZE, 3), np.asarray(trained["res"].images)[:3]
    )
    assert lrn.state.replay.data.images.dtype == jnp.uint8
    # planner demos never rendered while running: their frames come from the recorded qpos
    assert trained["demo_res"].images is None
    d = trained["demos"].obs.images
    assert set(d) == set(SCENE_CAMERAS) and d["base_0_rgb"].dtype == jnp.uint8
    assert d["base_0_rgb"].shape == (3 * CHUNKS, SIZE, SIZE, 3)
    assert np.asarray(d["left_wrist_0_rgb"]).std() > 5
    assert int(lrn.state.demos.size) == 3 * CHUNKS
    for m in (trained["bc"], trained["critic"], trained["awr"]):
        assert all(np.isfinite(v) for v in m.values())
    assert lrn.policy_updates == 6
    # gradients reach the vision tower (its head starts at zero: images then matter)
    after = lrn.pstate.params["PaliGemma"]["img"]
    changed = jax.tree.map(
        lambda a, b: float(np.abs(np.asarray(b) - a).max()), trained["vision0"], after
    )
    assert changed["head"]["kernel"] > 0 and changed["embedding"]["kernel"] > 0


@pytest.mark.slow  # the `trained` fixture: ~110 s of a CI worker
def test_trained_policy_reads_images_and_only_proprioception(bucket, trained):
    lrn = trained["lrn"]
    agent, params = trained["agents"](bucket)
    res = trained["res"]
    states = jax.tree.map(lambda x: x[:, 1], res.states)
    frames = jnp.asarray(res.images)[:, 1]
    obs = agent.observe(params, states, frames)
    pol, key = lrn.policy, jax.random.key(7)
    # a vision head far from its zero init, so that the images' effect is well above float noise
    p = jax.tree.map(lambda x: x, lrn.acting_params)
    head = p["PaliGemma"]["img"]["head"]
    head["kernel"] = jax.random.normal(jax.random.key(9), head["kernel"].shape) * 0.5
    base = np.asarray(pol.sample_chunks(p, obs, key))
    # deterministic CPU programs: the same inputs give the same bits, so an input the policy
    # ignores leaves the output bit-identical, and one it reads moves it far above float32 noise
    np.testing.assert_array_equal(np.asarray(pol.sample_chunks(p, obs, key)), base)
    cams = dict(zip(SCENE_CAMERAS, SCENE_CAMERAS[::-1], strict=True))
    swapped = obs.replace(images={k: obs.images[o] for k, o in cams.items()})
    assert np.abs(np.asarray(pol.sample_chunks(p, swapped, key)) - base).max() > 1e-6
    # object dims of the state are masked out for the image policy; proprio dims are read
    objs = obs.replace(state=obs.state.at[:, PROPRIO_DIMS:].add(3.0))
    np.testing.assert_array_equal(np.asarray(pol.sample_chunks(p, objs, key)), base)
    prop = obs.replace(state=obs.state.at[:, :PROPRIO_DIMS].add(3.0))
    assert np.abs(np.asarray(pol.sample_chunks(p, prop, key)) - base).max() > 1e-6


@pytest.mark.slow  # the `trained` fixture: ~110 s of a CI worker
def test_evaluation_renders_for_the_image_policy(bucket, trained):
    from coda.eval.suites import Suite, evaluate, policy_agent

    lrn = trained["lrn"]
    suite = Suite(
        "id", [bucket.variants[0].scene.program] * 2, [11, 12], split="train", batch_size=2
    )
    agent_for = policy_agent(lrn.policy, lrn.acting_params, lrn.norm)
    out = evaluate(agent_for, suite, trained["backend"], jax.random.key(8), 2)
    assert out.n == 2 and 0.0 <= out.rate <= 1.0


# ----------------------------------------------------------------------------- config


def _config(arg: str = "smoke", **fields):
    sys.path.insert(0, ROOT)
    from configs.coda import get_config

    c = get_config(arg)
    for k, v in fields.items():
        sec, name = k.split(".")
        c[sec][name] = v
    return c


def test_runconfig_checks_obs_mode():
    ok = _config(**{"policy.obs_mode": "images", "sim.backend": "native"})
    assert runconfig.problems(ok) == []
    assert runconfig.problems(_config()) == []  # state-only default
    bad = runconfig.problems(_config(**{"policy.obs_mode": "pixels"}))
    assert any("policy.obs_mode='pixels' is unknown (valid: state, images)" in p for p in bad)
    for backend in ("auto", "mjx"):
        bad = runconfig.problems(_config(**{"policy.obs_mode": "images", "sim.backend": backend}))
        assert any("needs sim.backend='native'" in p for p in bad), bad
    bad = runconfig.problems(
        _config(**{"policy.obs_mode": "images", "sim.backend": "native", "policy.image_size": 30})
    )
    assert any("policy.image_size=30" in p for p in bad)


def test_obs_overrides_build_the_loop_policy():
    from coda.loop.driver import policy_overrides

    c = _config(**{"policy.obs_mode": "images", "sim.backend": "native"})
    assert obs_overrides(_config().policy) == {}
    pol = get_policy(c.policy.name, **policy_overrides(c.policy, c.sim.horizon))
    spec = image_spec_for(pol.config)
    assert spec.size == 32 and spec.keys == SCENE_CAMERAS
    assert pol.config.siglip.width == c.policy.width and pol.config.proprio_dims == PROPRIO_DIMS


@pytest.mark.slow
def test_smoke_loop_runs_in_image_mode(tmp_path):
    """`launch.main` at smoke scale with obs_mode=images, one round after round 0."""
    cmd = [
        sys.executable,
        "-m",
        "launch.main",
        "--config=configs/coda.py:smoke",
        f"--workdir={tmp_path / 'run'}",
        "--config.policy.obs_mode=images",
        "--config.sim.backend=native",
        "--config.loop.rounds=1",
    ]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    assert [r["round"] for r in rows][-1] == 1
