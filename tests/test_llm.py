"""LLM clients against a local OpenAI-compatible server on 127.0.0.1 (no other network)."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from coda.llm import (
    BACKENDS,
    ChatCall,
    LLMClient,
    LLMConfig,
    Price,
    RawCompletion,
    ReplayMissError,
    RoleConfig,
    get_backend,
    message,
)
from coda.llm.backends import OfflineBackend

MODEL = "qwen3-vl-test"
DIAG_SCHEMA = {
    "type": "object",
    "properties": {
        "factor": {"type": "string", "enum": ["task", "spatial", "attribute", "execution"]},
        "phase": {"type": "string"},
        "cause": {"type": "string", "minLength": 3},
    },
    "required": ["factor", "phase", "cause"],
    "additionalProperties": False,
}
GOOD_DIAG = {"factor": "execution", "phase": "grasp", "cause": "gripper closes early"}


class FakeOpenAIServer:
    """Scripted chat-completions endpoint; each request pops one action from ``script``."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.script: list[tuple] = []
        self.default: tuple = ("ok", json.dumps(GOOD_DIAG))
        self.lock = threading.Lock()
        self.inflight = 0
        self.max_inflight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def _send(self, code: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                with server.lock:
                    server.requests.append(body)
                    action = server.script.pop(0) if server.script else server.default
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                reply = None
                try:
                    kind = action[0]
                    if kind == "sleep":
                        time.sleep(action[1])
                        action = ("ok", action[2])
                        kind = "ok"
                    if kind == "status":
                        code = action[1]
                        err = {"error": {"message": f"scripted {code}", "type": "test"}}
                        reply = (code, err, {"retry-after": "0"})
                        return
                    msg: dict = {"role": "assistant", "content": None}
                    if kind == "ok":
                        msg["content"] = action[1]
                    elif kind == "tool":
                        msg["tool_calls"] = [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": action[1], "arguments": action[2]},
                            }
                        ]
                    prompt = len(json.dumps(body["messages"])) // 4
                    completion = len(msg["content"] or "") // 4 + 1
                    reply = (
                        200,
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "created": 1_700_000_000,
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "message": msg,
                                    "finish_reason": "stop",
                                    "logprobs": None,
                                }
                            ],
                            "usage": {
                                "prompt_tokens": prompt,
                                "completion_tokens": completion,
                                "total_tokens": prompt + completion,
                            },
                        },
                    )
                finally:
                    # answered before the reply is written: the client may send its next
                    # request as soon as it reads this one, and that must not count as a
                    # third request in flight
                    with server.lock:
                        server.inflight -= 1
                    if reply is not None:
                        self._send(*reply)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(k, raising=False)
    s = FakeOpenAIServer()
    yield s
    s.stop()


def make_client(server, run_dir=None, *, backend="openai_compatible", timeout_s=5.0, **cfg):
    kwargs = {"base_url": server.base_url}
    if backend == "openai":
        kwargs["api_key"] = "sk-test"
    rc = RoleConfig(
        backend=backend, model=MODEL, backend_kwargs=kwargs, timeout_s=timeout_s, max_tokens=256
    )
    sleeps: list[float] = []
    config = LLMConfig(
        roles={"engine": rc, "critic": rc, "compiler": rc},
        prices={MODEL: Price(input_per_mtok=1.0, output_per_mtok=2.0)},
        backoff_base_s=0.01,
        backoff_max_s=0.05,
        **cfg,
    )
    client = LLMClient(config, run_dir=run_dir, sleep=sleeps.append)
    return client, sleeps


def frame() -> np.ndarray:
    img = np.zeros((8, 8, 3), np.uint8)  # [H, W, 3]
    img[2:5, 3:6] = (255, 0, 0)
    return img


@pytest.mark.parametrize("backend", ["openai", "openai_compatible"])
def test_image_and_json_schema(server, tmp_path, backend):
    client, _ = make_client(server, tmp_path, backend=backend)
    msgs = [
        message("system", "You diagnose robot failures."),
        message("user", "Why did the grasp fail?", images=[frame()]),
    ]
    r = client.chat("critic", msgs, schema=DIAG_SCHEMA, schema_name="diagnosis", round=3)
    assert r.ok and r.parsed == GOOD_DIAG and r.attempts == 1 and not r.replayed
    (body,) = server.requests
    parts = body["messages"][1]["content"]
    assert parts[0] == {"type": "text", "text": "Why did the grasp fail?"}
    url = parts[1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]).startswith(b"\x89PNG")
    rf = body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == DIAG_SCHEMA
    assert rf["json_schema"]["name"] == "diagnosis"
    max_key = "max_completion_tokens" if backend == "openai" else "max_tokens"
    assert body[max_key] == 256
    # Usage and cost from the price table, accounted to (critic, round 3).
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens > 0
    expected = (r.usage.prompt_tokens * 1.0 + r.usage.completion_tokens * 2.0) / 1e6
    assert r.cost_usd == pytest.approx(expected, abs=1e-9)
    (row,) = client.usage_summary()["by_role_round"]
    assert (row["role"], row["round"], row["calls"]) == ("critic", 3, 1)
    assert row["cost_usd"] == pytest.approx(expected, abs=1e-9)
    table = client.save_usage()
    assert "critic" in table and (tmp_path / "llm" / "usage.json").exists()


def test_429_then_success_with_backoff(server):
    server.script = [("status", 429)]
    client, sleeps = make_client(server)
    r = client.chat("engine", [message("user", "write a scene")], schema=DIAG_SCHEMA)
    assert r.ok and r.attempts == 2 and len(server.requests) == 2
    assert len(sleeps) == 1 and 0.005 <= sleeps[0] <= 0.05


def test_5xx_retried_4xx_not(server):
    server.script = [("status", 503), ("status", 500)]
    client, sleeps = make_client(server)
    r = client.chat("engine", [message("user", "x")])
    assert r.ok and r.attempts == 3 and len(sleeps) == 2
    assert sleeps[1] >= sleeps[0] * 0.5  # exponential schedule with jitter
    server.script = [("status", 400)]
    r = client.chat("engine", [message("user", "y")])
    assert not r.ok and r.failure.kind == "bad_request" and r.attempts == 1


def test_retries_exhausted_is_a_value(server, tmp_path):
    server.script = [("status", 429)] * 3
    client, sleeps = make_client(server, tmp_path, max_retries=2)
    r = client.chat("engine", [message("user", "x")], round=1)
    assert not r.ok and r.failure.kind == "rate_limit" and r.failure.status == 429
    assert r.attempts == 3 and len(sleeps) == 2
    log = (tmp_path / "llm" / "failures.jsonl").read_text().splitlines()
    assert json.loads(log[0])["failure"]["kind"] == "rate_limit"
    assert client.usage_summary()["total"]["failure_kinds"] == {"rate_limit": 1}


def test_malformed_json_repaired(server):
    server.script = [("ok", '```json\n{"factor": "execution", "phase": "grasp"'), ("ok", "")]
    server.script[1] = ("ok", json.dumps(GOOD_DIAG))
    client, _ = make_client(server)
    r = client.chat("critic", [message("user", "diagnose")], schema=DIAG_SCHEMA, round=0)
    assert r.ok and r.repaired and r.parsed == GOOD_DIAG
    assert len(server.requests) == 2
    repair_msgs = server.requests[1]["messages"]
    assert repair_msgs[-2]["role"] == "assistant" and "phase" in repair_msgs[-2]["content"]
    assert "not valid JSON" in repair_msgs[-1]["content"]
    assert client.usage_summary()["total"]["calls"] == 2  # both round-trips are accounted


def test_schema_violation_repaired_and_fenced_json_accepted(server):
    bad = {"factor": "lighting", "phase": "grasp", "cause": "x", "extra": 1}
    server.script = [("ok", json.dumps(bad)), ("ok", "```json\n" + json.dumps(GOOD_DIAG) + "\n```")]
    client, _ = make_client(server)
    r = client.chat("critic", [message("user", "diagnose")], schema=DIAG_SCHEMA)
    assert r.ok and r.repaired and r.parsed == GOOD_DIAG
    prompt = server.requests[1]["messages"][-1]["content"]
    assert "lighting" in prompt and "unexpected property 'extra'" in prompt


def test_unrepairable_output_is_a_failure_value(server):
    server.script = [("ok", "not json"), ("ok", "still not json")]
    client, _ = make_client(server)
    r = client.chat("critic", [message("user", "diagnose")], schema=DIAG_SCHEMA)
    assert not r.ok and r.failure.kind == "schema" and r.parsed is None
    assert r.text == "still not json" and len(server.requests) == 2


def test_timeout_then_success_and_timeout_failure(server):
    server.script = [("sleep", 1.5, json.dumps(GOOD_DIAG))]
    client, sleeps = make_client(server, timeout_s=0.3)
    t0 = time.monotonic()
    r = client.chat("engine", [message("user", "x")], schema=DIAG_SCHEMA)
    assert r.ok and r.attempts == 2 and len(sleeps) == 1
    assert time.monotonic() - t0 < 1.5
    server.script = [("sleep", 1.5, "a"), ("sleep", 1.5, "b")]
    client, _ = make_client(server, timeout_s=0.3, max_retries=1)
    r = client.chat("engine", [message("user", "y")])
    assert not r.ok and r.failure.kind == "timeout" and r.attempts == 2


def test_tool_calls_are_parsed(server):
    tool = {
        "type": "function",
        "function": {
            "name": "set_layout",
            "parameters": {"type": "object", "properties": {"x": {"type": "number"}}},
        },
    }
    server.script = [("tool", "set_layout", '{"x": 0.25}'), ("tool", "set_layout", "{bad")]
    client, _ = make_client(server)
    r = client.chat("engine", [message("user", "place it")], tools=[tool], tool_choice="auto")
    assert (
        r.ok and r.tool_calls[0].name == "set_layout" and r.tool_calls[0].arguments == {"x": 0.25}
    )
    assert server.requests[0]["tools"] == [tool] and server.requests[0]["tool_choice"] == "auto"
    r = client.chat("engine", [message("user", "again")], tools=[tool])
    assert r.tool_calls[0].arguments is None and "not valid JSON" in r.tool_calls[0].error


def test_bounded_concurrency_keeps_order(server):
    server.script = [("sleep", 0.15, json.dumps({**GOOD_DIAG, "phase": f"p{i}"})) for i in range(6)]
    client, _ = make_client(server, max_concurrency=2)
    calls = [ChatCall("critic", [message("user", f"q{i}")], schema=DIAG_SCHEMA) for i in range(6)]
    out = client.chat_many(calls, max_concurrency=6)  # the client-wide bound still applies
    assert all(r.ok for r in out)
    assert server.max_inflight <= 2
    asked = [r["messages"][0]["content"] for r in server.requests]
    answers = {asked[i]: server_phase for i, server_phase in enumerate(f"p{i}" for i in range(6))}
    assert [r.parsed["phase"] for r in out] == [answers[f"q{i}"] for i in range(6)]


def test_record_then_replay_with_server_stopped(server, tmp_path):
    server.script = [("status", 429), ("ok", "{broken"), ("ok", json.dumps(GOOD_DIAG))]
    client, _ = make_client(server, tmp_path)
    assert client.record_mode("critic") == "record"  # default for networked backends
    msgs = [message("user", "diagnose", images=[frame()])]
    first = client.chat("critic", msgs, schema=DIAG_SCHEMA, round=0)
    second = client.chat("engine", [message("user", "write")], round=0)
    server.script = [("status", 400)]
    third = client.chat("engine", [message("user", "fails")], round=0)
    assert first.ok and first.repaired and second.ok and not third.ok
    n_requests = len(server.requests)
    server.stop()

    replay, _ = make_client(server, tmp_path, record_mode="replay")
    r1 = replay.chat("critic", msgs, schema=DIAG_SCHEMA, round=0)
    r2 = replay.chat("engine", [message("user", "write")], round=0)
    r3 = replay.chat("engine", [message("user", "fails")], round=0)
    assert (r1.parsed, r1.repaired, r1.replayed) == (first.parsed, True, True)
    assert r2.text == second.text and r2.usage == second.usage and r2.cost_usd == 0.0
    assert not r3.ok and r3.failure.kind == "bad_request"  # recorded failures replay too
    assert len(server.requests) == n_requests
    total = replay.usage_summary()["total"]
    assert total["cost_usd"] == 0.0 and total["replayed_calls"] == 4
    with pytest.raises(ReplayMissError, match="diverged"):
        replay.chat("engine", [message("user", "never asked")])


def test_reuse_mode_serves_hits_and_records_misses(server, tmp_path):
    client, _ = make_client(server, tmp_path, record_mode="reuse")
    a = client.chat("engine", [message("user", "same")])
    b = client.chat("engine", [message("user", "same")])
    assert a.ok and b.ok and b.replayed and len(server.requests) == 1


def test_missing_api_key_is_a_failure_value(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    rc = RoleConfig(
        backend="openai", model="gpt-5.5", backend_kwargs={"base_url": "http://127.0.0.1:9/v1"}
    )
    client = LLMClient(LLMConfig(roles={"critic": rc}))
    r = client.chat("critic", [message("user", "x")])
    assert not r.ok and r.failure.kind == "auth" and "OPENAI_API_KEY" in r.failure.message
    summary = client.usage_summary()["total"]
    assert summary["failures"] == 1 and summary["prompt_tokens"] == 0


def test_offline_backend_seam_and_registry(tmp_path):
    with pytest.raises(ValueError, match="valid: \\['offline', 'openai', 'openai_compatible'\\]"):
        get_backend("anthropic-direct")
    assert set(BACKENDS) >= {"openai", "openai_compatible", "offline"}
    client = LLMClient(LLMConfig(), run_dir=tmp_path)  # embedded default: offline, no network
    assert client.record_mode("critic") == "off"
    r = client.chat("critic", [message("user", "x")])
    assert not r.ok and r.failure.kind == "offline_missing" and "critic" in r.failure.message

    def critic(request, role):
        text = request.messages[-1]["content"]
        return {**GOOD_DIAG, "cause": f"offline:{len(text)}"}

    backend = OfflineBackend(handlers={"critic": critic})
    client = LLMClient(LLMConfig(), backends={"critic": backend})
    r1 = client.chat("critic", [message("user", "abc")], schema=DIAG_SCHEMA)
    r2 = client.chat("critic", [message("user", "abc")], schema=DIAG_SCHEMA)
    assert r1.ok and r1.parsed["cause"] == "offline:3" and r1.parsed == r2.parsed
    assert r1.cost_usd == 0.0 and client.usage_summary()["total"]["unpriced_calls"] == 0
    raw_backend = OfflineBackend(handlers={"engine": lambda req, role: RawCompletion(text="g")})
    client = LLMClient(LLMConfig(), backends={"engine": raw_backend})
    assert client.chat("engine", [message("user", "x")]).text == "g"
    with pytest.raises(ValueError, match="configured"):
        client.chat("planner", [message("user", "x")])


def test_unknown_record_mode_and_record_without_run_dir():
    with pytest.raises(ValueError, match="valid"):
        LLMClient(LLMConfig(record_mode="sometimes"))
    with pytest.raises(ValueError, match="run_dir"):
        LLMClient(LLMConfig(record_mode="replay"))
