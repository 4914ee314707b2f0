"""Units of the LLM layer: JSON-schema subset, accounting, request hashing, PNG parts."""

from __future__ import annotations

import numpy as np
import pytest

from coda.llm import (
    CompletionRequest,
    CostLedger,
    Price,
    estimate_cost,
    image_part,
    message,
    parse_json_text,
    png_bytes,
    request_hash,
    validate_json,
)

SCHEMA = {
    "type": "object",
    "$defs": {
        "sub": {
            "type": "object",
            "required": ["tool"],
            "properties": {"tool": {"enum": ["bc", "shaping", "reeval"]}},
        }
    },
    "properties": {
        "subgoals": {"type": "array", "minItems": 1, "items": {"type": "string"}},
        "weight": {"type": "number", "minimum": 0, "maximum": 1},
        "count": {"type": "integer"},
        "assign": {"type": "array", "items": {"$ref": "#/$defs/sub"}},
        "maybe": {"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^[a-z]+$"}]},
    },
    "required": ["subgoals"],
    "additionalProperties": False,
}


def test_validate_json_subset():
    ok = {
        "subgoals": ["reach"],
        "weight": 0.5,
        "count": 3,
        "assign": [{"tool": "bc"}],
        "maybe": None,
    }
    assert validate_json(ok, SCHEMA) == []
    assert validate_json({**ok, "maybe": "abc"}, SCHEMA) == []
    errs = validate_json(
        {
            "subgoals": [],
            "weight": 2,
            "count": 1.5,
            "assign": [{"tool": "x"}],
            "maybe": "A1",
            "other": 1,
        },
        SCHEMA,
    )
    text = " | ".join(errs)
    for needle in (
        "fewer than 1",
        "maximum 1",
        "expected integer",
        "$.assign[0].tool",
        "anyOf",
        "unexpected property 'other'",
    ):
        assert needle in text, (needle, text)
    assert validate_json({}, SCHEMA) == ["$: missing required property 'subgoals'"]
    assert validate_json(True, {"type": "integer"})  # bools are not integers
    assert validate_json(float("nan"), {"type": "number"})


def test_parse_json_text_accepts_fences():
    assert parse_json_text('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_json_text(' {"a": [1, 2]} ') == {"a": [1, 2]}
    with pytest.raises(ValueError):
        parse_json_text("{a: 1}")


def test_cost_and_ledger_summary():
    prices = {"m": Price(2.0, 8.0), "n": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}
    assert estimate_cost("m", 1_000_000, 500_000, prices) == pytest.approx(6.0, abs=1e-9)
    assert estimate_cost("n", 10, 10, prices) == pytest.approx(20 / 1e6, abs=1e-9)
    assert estimate_cost("unknown", 10, 10, prices) is None
    ledger = CostLedger()
    ledger.add("critic", 0, prompt_tokens=100, completion_tokens=10, cost_usd=0.5)
    ledger.add("critic", 1, prompt_tokens=50, completion_tokens=5, cost_usd=None)
    ledger.add("engine", 1, prompt_tokens=7, completion_tokens=3, cost_usd=0.0, replayed=True)
    ledger.add(
        "engine", 1, prompt_tokens=0, completion_tokens=0, cost_usd=0.0, failure_kind="timeout"
    )
    s = ledger.summary()
    assert s["total"]["calls"] == 4 and s["total"]["prompt_tokens"] == 150
    assert s["total"]["replayed_prompt_tokens"] == 7 and s["total"]["unpriced_calls"] == 1
    assert s["by_role"]["critic"]["cost_usd"] == pytest.approx(0.5, abs=1e-9)
    assert s["by_round"]["1"]["failures"] == 1
    md = ledger.to_markdown()
    assert "(+unpriced)" in md and "replayed" in md and "| **total** |" in md


def test_request_hash_is_content_addressed():
    a = CompletionRequest(model="m", messages=[message("user", "x")])
    b = CompletionRequest(model="m", messages=[message("user", "x")])
    c = CompletionRequest(model="m", messages=[message("user", "y")])
    d = CompletionRequest(model="m2", messages=[message("user", "x")])
    assert request_hash("openai", a) == request_hash("openai", b)
    assert len({request_hash("openai", r) for r in (a, c, d)}) == 3
    assert request_hash("openai", a) != request_hash("offline", a)


def test_png_parts_and_bad_images():
    img = np.zeros((4, 5, 3), np.uint8)  # [H, W, 3]
    data = png_bytes(img)
    assert data.startswith(b"\x89PNG") and png_bytes(data) == data
    assert image_part(img)["image_url"]["url"].startswith("data:image/png;base64,")
    with pytest.raises(ValueError, match="uint8"):
        png_bytes(np.zeros((4, 5, 3), np.float32))
    with pytest.raises(ValueError, match="PNG"):
        png_bytes(b"GIF89a")
    with pytest.raises(ValueError, match="role"):
        message("robot", "x")
