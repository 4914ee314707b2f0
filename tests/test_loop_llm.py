"""The loop's LLM wiring: `critic.name=vlm` / `engine.name=llm` through `config.llm`.

Fast: config validation, the client each config builds, LLM spend folded into the budgets.
Slow: one smoke round with the VLM critic and the LLM engine against a scripted
OpenAI-compatible server on 127.0.0.1, then the same round again from its round-0 checkpoint
with the server gone — every call replays from the record and the metrics are the same.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sqlite3
import types

import pytest

from coda import runconfig
from coda.loop import llm as loop_llm
from coda.loop.state import Budgets
from tests.chat_server import ChatServer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "local-vlm-test"


def smoke_config(**llm):
    path = os.path.join(ROOT, "configs", "coda.py")
    spec = importlib.util.spec_from_file_location("coda_cfg_llm", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config("smoke")
    for k, v in llm.items():
        cfg.llm[k] = v
    return cfg


def test_llm_fields_are_validated_before_anything_runs():
    cfg = smoke_config()
    assert runconfig.problems(cfg) == []
    cfg.critic.name = "vlm"  # the embedded backend has no vision model
    assert any(
        "critic.name=vlm needs a networked llm.backend" in p for p in runconfig.problems(cfg)
    )
    cfg.llm.backend = "openai_compatible"
    assert any("llm.base_url: needed" in p for p in runconfig.problems(cfg))
    cfg.llm.base_url = "http://127.0.0.1:9/v1"
    assert runconfig.problems(cfg) == []
    cfg.engine.name, cfg.llm.backend, cfg.llm.record_mode = "gpt", "anthropic", "always"
    got = runconfig.problems(cfg)
    assert "engine.name='gpt' is unknown (valid: offline, llm)" in got
    assert "llm.backend='anthropic' is unknown (valid: offline, openai, openai_compatible)" in got
    assert "llm.record_mode='always' is unknown (valid: off, record, replay, reuse)" in got


def test_llm_compiler_is_a_validated_choice_that_needs_the_client():
    cfg = smoke_config()
    assert cfg.potentials.compiler == "offline" and not loop_llm.needs_llm(cfg)
    cfg.potentials.compiler = "gpt"
    assert "potentials.compiler='gpt' is unknown (valid: offline, llm)" in runconfig.problems(cfg)
    cfg.potentials.compiler = "llm"
    assert loop_llm.needs_llm(cfg)  # the loop builds the client: R_hone's calls go through it
    cfg.llm.backend, cfg.llm.base_url = "openai_compatible", "http://127.0.0.1:9/v1"
    assert runconfig.problems(cfg) == []


def test_a_saved_config_without_a_later_field_still_matches():
    """Run folders written before `potentials.compiler` existed resume / are adopted / count
    as finished study cells: the missing field reads as the value they ran with."""
    from coda.loop.compat import config_diff

    new = json.loads(smoke_config().to_json_best_effort())
    old = json.loads(smoke_config().to_json_best_effort())
    del old["potentials"]
    del old["loop"]["retest_after"], old["loop"]["max_retests"]  # added later still
    assert config_diff(old, new, ()) == []
    assert runconfig.with_added_defaults(old) == new
    new["potentials"]["compiler"] = "llm"
    assert config_diff(old, new, ()) == ["potentials.compiler: 'offline' -> 'llm'"]


def test_config_choices_name_what_the_code_registers():
    """The names a config is checked against are the registries the code builds from."""
    from coda import registries
    from coda.critic.base import CRITICS
    from coda.engine.engines import ENGINES
    from coda.llm.backends import BACKENDS
    from coda.llm.record import RECORD_MODES
    from coda.potentials.task import COMPILERS

    assert CRITICS is registries.CRITICS and ENGINES is registries.ENGINES
    assert COMPILERS is registries.COMPILERS and BACKENDS is registries.LLM_BACKENDS
    assert runconfig.LLM_RECORD_MODES == RECORD_MODES


def test_client_puts_every_role_on_the_configured_backend(tmp_path):
    cfg = smoke_config(backend="openai_compatible", base_url="http://127.0.0.1:9/v1")
    cfg.critic.name, cfg.engine.name = "vlm", "llm"
    assert loop_llm.needs_llm(cfg)
    client = loop_llm.make_client(cfg, str(tmp_path))
    for role in ("critic", "engine", "compiler"):
        rc = client.config.roles[role]
        assert rc.backend == "openai_compatible"
        assert rc.backend_kwargs["base_url"] == "http://127.0.0.1:9/v1"
        assert rc.model  # the default critic model when none is configured
        assert client.record_mode(role) == "reuse"
    offline = loop_llm.make_client(smoke_config(), str(tmp_path / "off"))
    assert offline.config.roles["engine"].backend == "offline"
    assert not loop_llm.needs_llm(smoke_config())


class _Ledger:
    def __init__(self):
        self.by_role = {}

    def usage_summary(self):
        return {"by_role": self.by_role}


def _tally(calls, prompt, completion, usd, replayed=0):
    return {
        "calls": calls,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "replayed_prompt_tokens": replayed,
        "replayed_completion_tokens": 0,
        "cost_usd": usd,
    }


def test_usage_sync_adds_only_the_growth_and_counts_replays_once():
    # restored from a checkpoint: earlier rounds' spend
    start = Budgets(llm_tokens=50, llm={"critic": {"calls": 1, "tokens": 50, "usd": 0.5}})
    sync = loop_llm.UsageSync(ledger := _Ledger())
    ledger.by_role = {"critic": _tally(2, 100, 20, 1.0, replayed=30)}
    budgets = sync(start)
    assert start.llm["critic"]["calls"] == 1  # a new value; the old one is unchanged
    assert budgets.llm["critic"] == {"calls": 3, "tokens": 200, "usd": pytest.approx(1.5, abs=1e-9)}
    ledger.by_role["engine"] = _tally(1, 10, 5, 0.0)
    budgets = sync(budgets)  # critic unchanged: nothing added twice
    assert budgets.llm["critic"]["tokens"] == 200
    assert budgets.llm["engine"] == {"calls": 1, "tokens": 15, "usd": pytest.approx(0.0, abs=1e-9)}
    assert budgets.llm_tokens == 215
    assert loop_llm.UsageSync(None)(budgets) is budgets  # offline run: no client, no change


# ----------------------------------------------------------------------------- slow: end to end


def _critic_reply(body: dict) -> dict:
    """A schema-valid diagnosis: the phase the prompt says progress stopped in, layout."""
    text = body["messages"][1]["content"][0]["text"]
    phase = re.search(r"Progress stopped in phase '([a-z_]+)'", text).group(1)
    return {
        "factor": "layout",
        "phase": phase,
        "cause": "collision_with_distractor",
        "cause_text": "the gripper's approach path runs through the other object",
        "evidence": {"chunks": [1], "keyframes": [0, 1], "numbers": []},
    }


def Server() -> ChatServer:  # noqa: N802 - reads like the class it builds
    """The engine role answers with the rule table's program (`offline_engine_handler`, as a
    model would send it), the critic role with a diagnosis."""
    from coda.engine.llm_engine import offline_engine_handler
    from coda.potentials import offline_compiler_handler

    def answer(body: dict) -> dict:
        name = body.get("response_format", {}).get("json_schema", {}).get("name")
        if name == "edit_program":
            return offline_engine_handler(
                types.SimpleNamespace(messages=body["messages"]), "engine"
            )
        if name == "training_program":  # R_hone, when a mode validates in the round
            return offline_compiler_handler(types.SimpleNamespace(messages=body["messages"]), "")
        return _critic_reply(body)

    return ChatServer(answer, prompt_tokens=1000, completion_tokens=50)


def _calls(server: ChatServer, role_schema: str) -> int:
    names = [
        r.get("response_format", {}).get("json_schema", {}).get("name") for r in server.requests
    ]
    return sum(n == role_schema for n in names)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_smoke_round_with_vlm_critic_and_llm_engine_then_replay(tmp_path, monkeypatch):
    from coda import loop
    from coda.loop import checkpoint as ckpt
    from coda.sim.render import gl_available

    ok, why = gl_available()
    if not ok:
        pytest.skip(f"the VLM critic renders keyframes: {why}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the SDK must not route 127.0.0.1
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(k, raising=False)
    server = Server()
    cfg = smoke_config(backend="openai_compatible", base_url=server.url, model=MODEL)
    cfg.critic.name, cfg.engine.name, cfg.loop.rounds = "vlm", "llm", 1
    cfg.potentials.compiler = "llm"
    workdir = str(tmp_path / "run")
    try:
        first = loop.run(cfg, workdir)
    finally:
        server.close()
    rows = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
    spent = rows[-1]["budget/llm/critic/tokens"]
    n_critic = _calls(server, "diagnosis")
    assert n_critic >= 1 and spent == 1050 * n_critic
    assert first["costs"]["llm_tokens"] >= spent
    with sqlite3.connect(os.path.join(workdir, "memory.sqlite")) as db:
        critics = {r[0] for r in db.execute("SELECT critic FROM diagnoses")}
    assert critics == {"vlm"}
    # lose round 1 (as a kill before its checkpoint would) and run it again, server gone
    shutil.rmtree(ckpt.round_dir(workdir, 1))
    again = loop.run(cfg, workdir)
    rows2 = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl"))]
    keys = [k for k in rows[-1] if k.startswith(("success/", "se/", "budget/llm"))]
    assert {k: rows2[-1][k] for k in keys} == {k: rows[-1][k] for k in keys}
    assert again["costs"]["llm_tokens"] == first["costs"]["llm_tokens"]
