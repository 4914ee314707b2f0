"""The planted-flaw benchmark through the VLM critic and the LLM engine (issue 28 item 6), from
replies: a local OpenAI-compatible server on 127.0.0.1 answers as a model would (the critic
names the flaw's factor and phase, the engine replies with the rule table's program as SDK
source); the run records every exchange to a reply file; a second run replays the file with no
server, a third through a local server serving the file, and both reproduce the diagnoses, the
engine's program and the validation numbers. No network beyond 127.0.0.1, no key. One flaw,
tiny sizes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import critic_engine_vlm as bench
from coda.engine.llm_engine import offline_engine_handler
from coda.llm import CompletionRequest, LLMClient, LLMConfig, RoleConfig, message
from coda.llm.replies import ReplyFile, reply_key
from coda.sim.flaws import get_flaw
from tests.chat_server import ChatServer

FLAW = "reach_overshoot_right"  # pick_place; ground truth layout / reach
SIZES = ["--n_diag", "2", "--max_failures", "1", "--max_modes", "1", "--n_validate", "2"]
SIZES += ["--num_chunks", "6", "--image_size", "32", "--isolation", "inprocess", "--flaws", FLAW]


def _model(body: dict) -> dict:
    """A model that knows the flaw: ground-truth diagnoses, the rule table's programs."""
    system = body["messages"][0]["content"]
    if "failure critic" in system:
        factor, phase = get_flaw(FLAW).ground_truth
        return {
            "factor": factor,
            "phase": phase,
            "cause": "did_not_approach",
            "cause_text": "the jaws came down beside the object",
            "evidence": {"chunks": [1], "keyframes": [0], "numbers": []},
        }
    req = CompletionRequest(model=body["model"], messages=body["messages"])
    return offline_engine_handler(req, "engine")


@pytest.fixture
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(k, raising=False)


def _digest(result: dict) -> list:
    return [
        (
            r["diagnoses"],
            r["both_right"],
            [
                (
                    m["mode"],
                    m["outcome"],
                    m.get("program"),
                    m.get("targeted_success"),
                    m.get("control_success"),
                )
                for m in r["modes"]
            ],
        )  # fmt: skip
        for r in result["rows"]
    ]


def test_vlm_critic_and_llm_engine_on_a_planted_flaw_then_replayed(tmp_path, no_proxy):
    replies = tmp_path / "replies.jsonl"
    server = ChatServer(_model, prompt_tokens=1000, completion_tokens=50)
    try:
        live = bench.main(
            ["--critic", "vlm", "--engine", "llm", "--base_url", server.url,
             "--record", str(replies), "--out", str(tmp_path / "live.json"), *SIZES]
        )  # fmt: skip
    finally:
        server.close()
    (row,) = live["rows"]
    assert row["failures"] == row["diagnosed"] == 1 and row["both_right"] == 1
    (mode,) = row["modes"]
    assert mode["right"] and mode["outcome"] in ("validated", "refuted")
    assert mode["program"] and mode["engine_attempts"] >= 1  # the LLM engine wrote it
    # the critic's request carried the readable keyframes: workspace | wrist, 32 px each
    critic_req = next(r for r in server.requests if "failure critic" in str(r["messages"][0]))
    images = [p for p in critic_req["messages"][1]["content"] if p["type"] == "image_url"]
    assert images and "wrist camera" in critic_req["messages"][1]["content"][0]["text"]
    roles = [json.loads(line)["role"] for line in replies.read_text().splitlines()]
    assert roles.count("critic") == 1 and roles.count("engine") == mode["engine_attempts"]
    t = live["totals"]
    assert t["tokens"]["critic"]["prompt_tokens"] == 1000 and t["tested_right"] == 1
    assert (tmp_path / "live.md").read_text().startswith("# Planted flaws: critic `vlm`")

    # replayed from the file: no server, no key, the same diagnoses, program and numbers
    replay = bench.main(["--critic", "vlm", "--engine", "llm", "--replay", str(replies), *SIZES])
    assert _digest(replay) == _digest(live)
    assert replay["totals"]["replay_misses"] == 0
    # ... and served by a local OpenAI-compatible server from the same file
    server = ChatServer(ReplyFile(replies).answer)
    try:
        served = bench.main(
            ["--critic", "vlm", "--engine", "llm", "--base_url", server.url, *SIZES]
        )
    finally:
        server.close()
    assert _digest(served) == _digest(live)


def test_reply_file_is_served_by_a_local_server_keyed_without_images(tmp_path, no_proxy):
    path = tmp_path / "r.jsonl"
    img = lambda v: np.full((2, 2, 3), v, np.uint8)  # noqa: E731
    msgs = [message("system", "s"), message("user", "look", images=[img(10)])]
    key, n = reply_key(msgs)
    assert n == 1 and key == reply_key([msgs[0], message("user", "look", images=[img(200)])])[0]
    assert key != reply_key([msgs[0], message("user", "other", images=[img(10)])])[0]
    ReplyFile(path).append({"key": key, "role": "critic", "model": "m", "text": '{"a": 1}'})
    served = ReplyFile(path)
    server = ChatServer(served.answer)
    try:
        role = RoleConfig(
            backend="openai_compatible", model="m", backend_kwargs={"base_url": server.url}
        )
        client = LLMClient(LLMConfig(roles={"critic": role}, record_mode="off", max_retries=0))
        other_pixels = [msgs[0], message("user", "look", images=[img(250)])]
        assert client.chat("critic", other_pixels).text == '{"a": 1}'
        miss = client.chat("critic", [msgs[0], message("user", "unseen")])
        assert not miss.ok and served.misses == 1
    finally:
        server.close()
