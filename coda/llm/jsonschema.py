"""A small JSON-schema validator for structured LLM output (no third-party dependency).

Supports the subset that structured-output schemas use: ``type`` (incl. lists), ``enum``,
``const``, ``properties``, ``required``, ``additionalProperties``, ``items``, ``minItems``,
``maxItems``, ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
``minLength``, ``maxLength``, ``pattern``, ``anyOf``, ``oneOf``, ``allOf`` and local ``$ref``
(``#/$defs/...``, ``#/definitions/...``). Other keywords are ignored. Errors are short,
path-qualified strings meant to be sent back to the model in a repair prompt.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["parse_json_text", "validate_json"]

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (
        isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def parse_json_text(text: str) -> Any:
    """Parse a model's JSON reply, tolerating a Markdown code fence around it."""
    m = _FENCE.match(text)
    if m:
        text = m.group(1)
    return json.loads(text)


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    if not ref.startswith("#/"):
        raise ValueError(f"only local $ref are supported, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def validate_json(value: Any, schema: dict[str, Any], *, max_errors: int = 20) -> list[str]:
    """Return validation errors of ``value`` against ``schema`` (empty list when valid)."""
    errors: list[str] = []
    _validate(value, schema, schema, "$", errors, max_errors)
    return errors


def _validate(
    v: Any, s: dict[str, Any], root: dict[str, Any], path: str, errors: list[str], cap: int
) -> None:
    if len(errors) >= cap or s is True or s == {}:
        return
    if s is False:
        errors.append(f"{path}: no value is allowed here")
        return
    if "$ref" in s:
        _validate(v, _resolve(s["$ref"], root), root, path, errors, cap)
    t = s.get("type")
    if t is not None:
        types = [t] if isinstance(t, str) else list(t)
        if not any(_TYPES.get(x, lambda _: False)(v) for x in types):
            errors.append(f"{path}: expected {' or '.join(types)}, got {_kind(v)}")
            return
    if "enum" in s and v not in s["enum"]:
        errors.append(f"{path}: {v!r} is not one of {s['enum']}")
    if "const" in s and v != s["const"]:
        errors.append(f"{path}: must equal {s['const']!r}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if isinstance(v, float) and not math.isfinite(v):
            errors.append(f"{path}: must be a finite number")
        if "minimum" in s and v < s["minimum"]:
            errors.append(f"{path}: {v} < minimum {s['minimum']}")
        if "maximum" in s and v > s["maximum"]:
            errors.append(f"{path}: {v} > maximum {s['maximum']}")
        if "exclusiveMinimum" in s and v <= s["exclusiveMinimum"]:
            errors.append(f"{path}: {v} <= exclusiveMinimum {s['exclusiveMinimum']}")
        if "exclusiveMaximum" in s and v >= s["exclusiveMaximum"]:
            errors.append(f"{path}: {v} >= exclusiveMaximum {s['exclusiveMaximum']}")
    if isinstance(v, str):
        if "minLength" in s and len(v) < s["minLength"]:
            errors.append(f"{path}: shorter than {s['minLength']} characters")
        if "maxLength" in s and len(v) > s["maxLength"]:
            errors.append(f"{path}: longer than {s['maxLength']} characters")
        if "pattern" in s and re.search(s["pattern"], v) is None:
            errors.append(f"{path}: does not match pattern {s['pattern']!r}")
    if isinstance(v, list):
        if "minItems" in s and len(v) < s["minItems"]:
            errors.append(f"{path}: fewer than {s['minItems']} items")
        if "maxItems" in s and len(v) > s["maxItems"]:
            errors.append(f"{path}: more than {s['maxItems']} items")
        if isinstance(s.get("items"), dict):
            for i, item in enumerate(v):
                _validate(item, s["items"], root, f"{path}[{i}]", errors, cap)
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k in s.get("required", []):
            if k not in v:
                errors.append(f"{path}: missing required property {k!r}")
        for k, item in v.items():
            if k in props:
                _validate(item, props[k], root, f"{path}.{k}", errors, cap)
            else:
                extra = s.get("additionalProperties", True)
                if extra is False:
                    errors.append(f"{path}: unexpected property {k!r}")
                elif isinstance(extra, dict):
                    _validate(item, extra, root, f"{path}.{k}", errors, cap)
    for key in ("anyOf", "oneOf"):
        if key in s:
            n_ok = sum(1 for sub in s[key] if not validate_json(v, {**sub, **_defs(root)}))
            if n_ok == 0 or (key == "oneOf" and n_ok != 1):
                errors.append(f"{path}: matches {n_ok} of the {key} alternatives")
    for sub in s.get("allOf", []):
        _validate(v, sub, root, path, errors, cap)


def _defs(root: dict[str, Any]) -> dict[str, Any]:
    return {k: root[k] for k in ("$defs", "definitions") if k in root}


def _kind(v: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](v):
            return name
    return type(v).__name__
