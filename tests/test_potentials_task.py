"""Φ for a task without a diagnosis from a named compiler: offline, and an LLM behind a local
OpenAI-compatible server on 127.0.0.1 (record, then replay with the server gone)."""

from __future__ import annotations

import types

import pytest

from coda.llm import LLMClient, LLMConfig, RoleConfig
from coda.potentials import OfflineCompiler, offline_compiler_handler
from coda.potentials.task import TaskPotentialError, make_compiler, task_potential
from tests.chat_server import ChatServer

MODEL = "local-compiler"
BROKEN = {"source": "SUBGOALS = [\n", "notes": "truncated"}  # does not parse: repaired


@pytest.fixture
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(k, raising=False)


@pytest.fixture(scope="module")
def stack(planner_demos):
    bucket, res = max(planner_demos["stack_or_insert"], key=lambda br: len(br[0].variants))
    return bucket, res


def _client(url: str, run_dir, mode: str) -> LLMClient:
    rc = RoleConfig(backend="openai_compatible", model=MODEL, backend_kwargs={"base_url": url})
    return LLMClient(LLMConfig(roles={"compiler": rc}, record_mode=mode), run_dir=run_dir)


def test_offline_task_potential_is_the_offline_template(stack):
    bucket, res = stack
    pot, attempts = task_potential(make_compiler("offline"), bucket, res)
    assert len(attempts) == 1 and attempts[0].accepted
    from coda.potentials import CompileRequest

    want = OfflineCompiler().propose(CompileRequest(task=bucket.scene_task), bucket.sym).source
    assert pot.source == want and pot.num_stages >= 2


def test_llm_task_potential_repaired_then_replayed(stack, tmp_path, no_proxy):
    bucket, res = stack
    replies = [BROKEN]

    def answer(body):
        if replies:
            return replies.pop(0)
        return offline_compiler_handler(types.SimpleNamespace(messages=body["messages"]), "")

    server = ChatServer(answer)
    try:
        pot, attempts = task_potential(
            make_compiler("llm", _client(server.url, tmp_path, "record")), bucket, res
        )
    finally:
        server.close()
    assert [a.accepted for a in attempts] == [False, True]
    assert attempts[0].report.failures[0].stage == "syntax"
    assert "attempts" in server.requests[1]["messages"][-1]["content"]  # the repair prompt
    # the server is gone: the record answers both calls, the same Φ comes back
    again, att2 = task_potential(
        make_compiler("llm", _client(server.url, tmp_path, "replay")), bucket, res
    )
    assert again.source == pot.source and len(att2) == 2


def test_bad_compiler_names_and_unaccepted_programs_fail_clearly(stack):
    with pytest.raises(ValueError, match="valid: offline, llm"):
        make_compiler("gpt")
    with pytest.raises(ValueError, match="needs an LLMClient"):
        make_compiler("llm")
    from coda.llm import OfflineBackend

    client = LLMClient(
        backends={"compiler": OfflineBackend(handlers={"compiler": lambda r, role: BROKEN})}
    )
    bucket, res = stack
    with pytest.raises(TaskPotentialError, match="no potential accepted in 2") as e:
        task_potential(make_compiler("llm", client), bucket, res, max_rounds=2)
    assert len(e.value.attempts) == 2
