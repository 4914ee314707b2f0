"""The LLM engine: a coding agent writes edit programs against the SDK documentation; they run
in the sandbox, are verified, and failures come back as repair feedback. Tested against a local
OpenAI-compatible server on 127.0.0.1 (record, then replay with the server gone) and the
offline backend; no other network."""

from __future__ import annotations

import pytest

from coda.engine.edits import changed_factors
from coda.engine.engines import ModeSpec, make_engine
from coda.engine.generate import generate_targeted
from coda.engine.llm_engine import LLMEngineError, sdk_documentation
from coda.engine.programs import apply
from coda.llm import LLMClient, LLMConfig, RoleConfig
from coda.memory import MemoryStore
from coda.sim.sdk import exec_program
from tests.chat_server import ChatServer

MODEL = "local-coder"
SCENE = """
add_object("cube", role="target", instance="cube_red")
add_object("plate", role="goal", instance="plate_white")
add_object("ball", role="distractor_0", instance="ball_tennis")
set_task("pick_place", target="target", goal="goal")
sample_layout()
"""
OBSTRUCTED = ModeSpec("layout", "grasp", "collision_with_distractor", id=None)
# Reply 1 puts the distractor exactly where the target is: it runs, but fails verification.
ON_TOP = 't = pose(role("target"))\nset_layout(role("distractor_0"), t["x"], t["y"], 0.0)\n'
# Reply 2, the repair: beside the target on the gripper's side.
BESIDE = (
    'place_beside(role("distractor_0"), role("target"), "approach", 0.0, uniform(0.0, 0.015))\n'
)


def LocalServer(replies: list[dict]) -> ChatServer:  # noqa: N802 - reads like a class
    """Scripted replies in order."""
    queue = list(replies)
    return ChatServer(lambda body: queue.pop(0), prompt_tokens=10, completion_tokens=5)


def _client(base_url: str, run_dir, mode: str) -> LLMClient:
    rc = RoleConfig(backend="openai_compatible", model=MODEL, backend_kwargs={"base_url": base_url})
    return LLMClient(LLMConfig(roles={"engine": rc}, record_mode=mode), run_dir=run_dir)


@pytest.fixture(scope="module")
def parents():
    return [exec_program(SCENE, s, isolation="inprocess") for s in (0, 1)]


@pytest.fixture
def no_proxy(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(k, raising=False)


def test_repair_loop_against_a_local_server_then_replayed(parents, tmp_path, no_proxy):
    server = LocalServer(
        [{"program": ON_TOP, "notes": "on the target"}, {"program": BESIDE, "notes": "beside"}]
    )
    mem = MemoryStore(":memory:")
    eng = make_engine(
        "llm",
        client=_client(server.url, tmp_path, "record"),
        memory=mem,
        isolation="inprocess",
        probe_variants=2,
    )
    try:
        program = eng.program_for(OBSTRUCTED, parents, seed=0, round=3)
    finally:
        server.close()
    assert program.source == BESIDE and program.factor == "layout"
    assert set(program.roles) == {"distractor_0", "target"}
    first, second = eng.attempts
    assert not first.accepted and second.accepted and second.verified == 2
    assert any("penetration" in e for e in first.errors), first.errors
    # the prompt carries the SDK documentation and the mode; the repair carries the failure
    sys0, user0 = (m["content"] for m in server.requests[0]["messages"])
    assert "set_layout(name, x, y, yaw=0.0)" in sys0 and "place_beside(" in sys0
    assert "collision_with_distractor" in user0 and '"distractor_0"' in user0
    user1 = server.requests[1]["messages"][-1]["content"]
    assert "penetration" in user1 and "repair" in user1
    assert server.requests[0]["response_format"]["type"] == "json_schema"
    # every attempt is in memory: scene program + generation trace with its outcome
    assert mem.counts()["scene_programs"] == 2 and mem.counts()["generation_traces"] == 2
    sp = mem.get_scene_program(first.scene_program_id)
    assert sp.source == ON_TOP and sp.factor == "spatial" and sp.meta["attempt"] == 0
    # replay: the server is gone, the records answer, the same program is accepted
    replay = make_engine(
        "llm",
        client=_client(server.url, tmp_path, "replay"),
        isolation="inprocess",
        probe_variants=2,
    )
    assert replay.program_for(OBSTRUCTED, parents, seed=0, round=3) == program
    assert [r.replayed for r in replay.last_responses] == [True, True]


def test_untrusted_programs_are_refused_with_feedback(parents):
    from coda.llm import OfflineBackend

    replies = iter(
        [
            {"program": "import os\nos.system('true')\n", "notes": "escape"},
            {"program": 'set_attributes(role("target"), mass=0.1)\n', "notes": "wrong factor"},
            {"program": "role(", "notes": "syntax"},
        ]
    )
    client = LLMClient(
        backends={"engine": OfflineBackend(handlers={"engine": lambda r, role: next(replies)})}
    )
    eng = make_engine("llm", client=client, isolation="inprocess", max_attempts=3)
    with pytest.raises(LLMEngineError) as e:
        eng.program_for(OBSTRUCTED, parents)
    a0, a1, a2 = e.value.attempts
    assert any("sandbox validate" in x and "import" in x for x in a0.errors), a0.errors
    assert any("may only change the layout factor" in x for x in a1.errors), a1.errors
    assert a2.errors and "does not parse" in a2.errors[0]
    assert not any(a.accepted for a in e.value.attempts)


def test_offline_agent_in_the_subprocess_sandbox_transfers(parents):
    """The default offline backend answers with the rule table as SDK source; the program runs
    in the sandbox's worker process, and re-binds into a put-inside scene."""
    eng = make_engine("llm", probe_variants=2)
    program = eng.program_for(OBSTRUCTED, parents, seed=1)
    assert program.source.startswith("place_beside(") and eng.attempts[0].accepted
    other = exec_program(
        'add_object("can", role="target", instance="can_soup")\n'
        'add_object("bowl", role="container")\n'
        'add_object("cube", role="distractor_0", instance="cube_red")\n'
        'set_task("put_inside", target="target", container="container")\nsample_layout()\n',
        4,
        isolation="inprocess",
    )
    child = apply(program, other, seed=2, isolation="inprocess")
    assert changed_factors(other, child) == ["layout"]
    g = generate_targeted(OBSTRUCTED, program, [other], B=2, seed=0, isolation="inprocess")
    assert len(g.variants) == 2 and all(v.verdict.ok for v in g.variants)


def test_sdk_documentation_is_the_docstrings():
    doc = sdk_documentation()
    for name in ("add_object", "set_attributes(name, dims=None", "move_to_edge(", "rebind("):
        assert name in doc
