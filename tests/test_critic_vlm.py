"""The VLM critic end to end against a local OpenAI-compatible server on 127.0.0.1.

The server checks nothing itself; it records every request and answers by content: the red-cube
episode first gets a reply that violates the schema (then a valid repair), the green-cube episode
gets a reply naming a phase pick-and-place does not have. The tests assert that the requests carry
the keyframe PNGs, that the repair is accepted and stored in memory, that the bad phase is
rejected and not stored, and that the run replays from its record with the server gone.
"""

from __future__ import annotations

import base64
import io
import json

import mujoco
import numpy as np
import pytest
from PIL import Image

from coda.critic import (
    DIAGNOSIS_SCHEMA,
    VLMCritic,
    keyframe_indices,
    make_critic,
    make_episode,
    render_keyframes,
)
from coda.llm import LLMClient, LLMConfig, ReplayMissError, RoleConfig
from coda.memory import MemoryStore
from coda.sim import robot
from coda.sim.compile import compile_scene
from coda.sim.sdk import exec_program
from coda.sim.state import SimState
from tests.chat_server import ChatServer

MODEL = "qwen3-vl-test"
T = 6
SRC = """
add_object("cube", role="target", instance="{cube}")
add_object("plate", role="goal", instance="plate_white")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
GOOD = {
    "factor": "attributes",
    "phase": "grasp",
    "cause": "no_finger_contact",
    "cause_text": "the fingers closed beside the cube",
    "evidence": {
        "chunks": [2, 5],
        "keyframes": [0, 2, 5],
        "numbers": [{"name": "min_tcp_gap_m", "value": 0.0}],
    },
}
SCHEMA_VIOLATION = {**GOOD, "cause": "gripper_was_sad"}  # not in the vocabulary
BAD_PHASE = {**GOOD, "phase": "pour"}  # pick-and-place has no such phase


def _answer(body: dict) -> dict:
    """By content: the red cube first violates the schema (the repair round-trip gets GOOD),
    the green cube names a phase pick-and-place does not have."""
    msgs = body["messages"]
    first = msgs[1]["content"][0]["text"]
    if msgs[-1]["role"] == "user" and isinstance(msgs[-1]["content"], str):
        return GOOD  # the repair round-trip
    return SCHEMA_VIOLATION if "red cube" in first else BAD_PHASE


def Server() -> ChatServer:  # noqa: N802 - reads like the class it builds
    return ChatServer(_answer, prompt_tokens=100, completion_tokens=20)


def _episode(cube: str):
    """A trace whose tcp reaches the cube at endpoint 2 and never grasps it (stopped: grasp);
    bodies stay at their initial poses (numpy only: no per-op JAX compiles)."""
    c = compile_scene(exec_program(SRC.format(cube=cube), seed=0, isolation="inprocess"))
    d = mujoco.MjData(c.model)
    d.qpos[:] = c.init_qpos
    mujoco.mj_forward(c.model, d)
    ids = [c.model.body(n).id for n in c.layout.body_names]
    nb, ne = c.layout.n_bodies, c.layout.n_entities
    body_pos = np.tile(d.xpos[ids], (T, 1, 1))  # [T, NB, 3]
    ee = np.tile(robot.HOME[:3] - [0, 0, robot.TCP_OFFSET], (T, 1))  # [T, 3]
    ee[2:] = body_pos[2:, c.sym.body("target")]
    states = SimState(
        ee_pos=ee,
        ee_quat=np.tile([1.0, 0, 0, 0], (T, 1)),
        finger=np.full((T, 2), robot.FINGER_OPEN),
        body_pos=body_pos,
        body_quat=np.tile(d.xquat[ids], (T, 1, 1)),
        joint_pos=np.zeros((T, 0)),
        contact=np.zeros((T, ne, ne)),
        body_half=np.tile(c.consts["body_half"], (T, 1, 1)),
        inner=np.tile(c.consts["inner"], (T, 1, 1)),
        joint_range=np.tile(c.consts["joint_range"], (T, 1, 1)),
        ee_cmd=np.zeros((T, 6)),
        body_linvel=np.zeros((T, nb, 3)),
        body_angvel=np.zeros((T, nb, 3)),
    )
    return make_episode(c, states)


def frames(ep, idx):
    """Deterministic stand-in keyframes [K, 32, 32, 3] (rendering is tested separately)."""
    out = np.zeros((len(idx), 32, 32, 3), np.uint8)
    for k, t in enumerate(idx):
        out[k, :, :, 0] = 10 * t
        out[k, : 4 * (k + 1), :, 1] = 200
    return out


def _client(run_dir, mode: str, url: str) -> LLMClient:
    role = RoleConfig(backend="openai_compatible", model=MODEL, backend_kwargs={"base_url": url})
    cfg = LLMConfig(roles={"critic": role}, record_mode=mode, max_retries=0)
    return LLMClient(cfg, run_dir=run_dir)


@pytest.fixture(scope="module")
def episodes():
    return [_episode("cube_red"), _episode("cube_green")]


def test_vlm_critic_end_to_end_then_replay(episodes, tmp_path):
    red, green = episodes
    assert red.stopped_phase == "grasp" and "red cube" in red.instruction
    server = Server()
    try:
        memory = MemoryStore(":memory:")
        critic = make_critic(
            "vlm",
            client=_client(tmp_path, "record", server.url),
            memory=memory,
            frames=frames,
            log_dir=tmp_path / "critic",
        )
        out = critic.diagnose(episodes, round=1)
    finally:
        server.close()

    # the requests: two episodes and one repair, each carrying the episode's keyframe PNGs
    assert len(server.requests) == 3
    firsts = [r for r in server.requests if len(r["messages"]) == 2]
    assert len(firsts) == 2
    for req in server.requests:
        assert req["model"] == MODEL
        assert req["response_format"]["json_schema"]["schema"] == DIAGNOSIS_SCHEMA
        parts = req["messages"][1]["content"]
        text, images = parts[0]["text"], parts[1:]
        ep = red if "red cube" in text else green
        idx = keyframe_indices(ep)
        assert len(images) == len(idx) == 3  # start, reach done, end
        for part, want in zip(images, frames(ep, idx), strict=True):
            url = part["image_url"]["url"]
            assert url.startswith("data:image/png;base64,")
            png = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
            np.testing.assert_array_equal(np.asarray(png), want)
        assert "Phases, in order: ['reach', 'grasp', 'lift', 'transport', 'place']" in text
        assert "Progress stopped in phase 'grasp'" in text
        assert '"layout": {"goal": {' in text and '"mass":' in text  # σ and α
        assert "t phase_done tcp_gap_m left right opening_m obj_height_m dest_xy_m" in text
    repair = next(r for r in server.requests if len(r["messages"]) == 4)
    assert "gripper_was_sad" in repair["messages"][3]["content"]

    # the schema violation was repaired and stored; the bad phase rejected and not stored
    a, b = out
    assert a.ok and a.rejected is None
    assert (a.diagnosis.factor, a.diagnosis.phase, a.diagnosis.cause) == (
        "attributes",
        "grasp",
        "no_finger_contact",
    )
    assert a.diagnosis.critic == "vlm" and a.diagnosis.model == MODEL
    assert a.assignment is not None
    assert not b.ok and "'pour' is not a phase of family 'pick_place'" in b.rejected
    assert memory.counts()["diagnoses"] == 1
    (mode,) = memory.modes()
    assert (mode.factor, mode.phase) == ("attribute", "grasp")
    assert len(critic.rejections) == 1
    logged = (tmp_path / "critic" / "critic_rejected.jsonl").read_text().splitlines()
    assert len(logged) == 1 and json.loads(logged[0])["reply"] == json.dumps(BAD_PHASE)

    # replay from the record, no server: the same outcomes
    memory2 = MemoryStore(":memory:")
    replay = VLMCritic(
        client=_client(tmp_path, "replay", server.url), memory=memory2, frames=frames
    )
    out2 = replay.diagnose(episodes, round=1)
    assert out2[0].diagnosis == a.diagnosis and out2[1].rejected == b.rejected
    assert memory2.counts()["diagnoses"] == 1
    # the images are part of what was recorded: other frames miss the record
    other = VLMCritic(
        client=_client(tmp_path, "replay", server.url),
        frames=lambda ep, idx: 255 - frames(ep, idx),
    )
    with pytest.raises(ReplayMissError):
        other.diagnose(episodes[:1])


def test_a_failed_call_is_a_rejection_not_a_crash(episodes):
    cfg = LLMConfig(roles={"critic": RoleConfig(backend="offline")}, max_retries=0)
    critic = VLMCritic(client=LLMClient(cfg), frames=frames)
    (c,) = critic.diagnose(episodes[:1])
    assert not c.ok and c.rejected.startswith("offline_missing")


def test_render_keyframes(episodes):
    from coda.sim import render

    ok, why = render.gl_available()
    if not ok:
        pytest.skip(f"no headless GL: {why}")
    ep = episodes[0]
    idx = keyframe_indices(ep)
    out = render_keyframes(ep, idx, width=48, height=32)
    assert out.shape == (len(idx), 32, 48, 3) and out.dtype == np.uint8
    assert out.std() > 0  # not a blank frame
