"""The diagnosis ψ = (δ factor, p phase, c cause, e evidence), its JSON schema and validation.

Both critic backends produce the same record. The JSON shape is what a VLM is asked to write
(OpenAI structured output, strict mode: every property required, no free-form maps, so the
evidence numbers are a list of {name, value}); the offline critic writes the same shape, so one
validator guards both. Validation is two-layered:

1. `DIAGNOSIS_SCHEMA` (structural; factor and cause from fixed vocabularies). The LLM client
   repairs a reply that violates it once (the errors are sent back).
2. `validate_diagnosis(value, phases)`: the phase must be one of the scene family's phase names
   and evidence chunk indices must lie inside the episode. A reply that fails here is rejected,
   not repaired: a critic naming a phase the family does not have (or a chunk the episode does
   not have) misread the episode, and coaxing a valid name out of it would not ground it.

Factor names follow the scene factors (`coda.sim.scene.FACTORS` + "execution"); memory stores
them under its own names (`MEMORY_FACTOR`: layout -> spatial, attributes -> attribute).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from coda.llm.jsonschema import validate_json

FACTORS = ("task", "layout", "attributes", "execution")

# The scene factors' names in `coda.memory` (its FACTORS are task, spatial, attribute, execution).
MEMORY_FACTOR = {
    "task": "task",
    "layout": "spatial",
    "attributes": "attribute",
    "execution": "execution",
}
FACTOR_FROM_MEMORY = {v: k for k, v in MEMORY_FACTOR.items()}

# The cause vocabulary: label -> what it means (shown to the VLM critic; the offline critic's
# rules in `coda.critic.evidence` say how each is measured).
CAUSES: dict[str, str] = {
    "beyond_reach": "the manipulated object lies outside the gripper's reachable workspace",
    "did_not_approach": "the gripper never came within reach of the (reachable) object",
    "collision_with_distractor": "the gripper touched or displaced a distractor object before "
    "the grasp",
    "object_too_wide": "the object's narrowest horizontal width exceeds the gripper's opening",
    "no_finger_contact": "the fingers closed near the object without touching it",
    "one_finger_contact": "only one finger pad touched the object; no two-sided grasp",
    "object_pushed_away": "the object was pushed from its start pose without being grasped",
    "object_too_heavy": "the object is heavier than the grip's friction can hold",
    "never_grasped": "the jaws closed without the object between them (narrower than it, e.g. "
    "closed above it), so it was never held or lifted",
    "contact_lost": "a grasp was established and then lost from the jaws while they were still "
    "closed on it (slip or drop)",
    "released_away_from_goal": "the gripper opened and let go of the object before it was at "
    "the goal (away from the destination, or the joint short of its goal)",
    "not_lifted": "the object was held but never raised off the table",
    "destination_not_reached": "the object was carried but never brought over the destination",
    "not_released": "the object was over the destination but still held at the end",
    "misplaced": "the object was released but does not rest on / in the destination",
    "joint_not_moving": "the handle was grasped but the articulated joint did not move",
    "joint_short_of_goal": "the articulated joint moved but stopped short of the goal",
    "success_not_held": "every phase completed at some point but ν did not hold at the end",
    "ran_out_of_time": "progress was still being made when the episode ended",
    "simulation_unstable": "the simulation diverged and the variant was frozen",
    "other": "none of the other causes fits",
}

# Which scene factor a cause points at when probes cannot separate factors (a tie-break only;
# counterfactual probes decide the factor).
CAUSE_FACTOR_HINT: dict[str, str] = {
    "beyond_reach": "layout",
    "collision_with_distractor": "layout",
    "object_too_wide": "attributes",
    "object_too_heavy": "attributes",
    "contact_lost": "attributes",
    "joint_not_moving": "attributes",
}

MAX_TEXT = 600

DIAGNOSIS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["factor", "phase", "cause", "cause_text", "evidence"],
    "properties": {
        "factor": {"type": "string", "enum": list(FACTORS)},
        "phase": {"type": "string", "minLength": 1, "maxLength": 64},
        "cause": {"type": "string", "enum": list(CAUSES)},
        "cause_text": {"type": "string", "maxLength": MAX_TEXT},
        "evidence": {
            "type": "object",
            "additionalProperties": False,
            "required": ["chunks", "keyframes", "numbers"],
            "properties": {
                "chunks": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "keyframes": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                "numbers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "value"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1, "maxLength": 64},
                            "value": {"type": "number"},
                        },
                    },
                },
            },
        },
    },
}


class DiagnosisError(ValueError):
    """A diagnosis (e.g. a critic's reply) is malformed; the message lists what is wrong."""

    def __init__(self, errors: Sequence[str]) -> None:
        self.errors = list(errors)
        super().__init__("invalid diagnosis: " + "; ".join(self.errors))


class PhaseError(DiagnosisError):
    """The diagnosis names a phase the scene's family does not have."""


@dataclasses.dataclass(frozen=True)
class Evidence:
    """e: chunk-endpoint indices (0 = t0, k = after chunk k), keyframe indices (endpoints shown
    to a VLM) and the measured numbers that support the diagnosis."""

    chunks: tuple[int, ...] = ()
    keyframes: tuple[int, ...] = ()
    numbers: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "chunks": [int(c) for c in self.chunks],
            "keyframes": [int(k) for k in self.keyframes],
            "numbers": [{"name": k, "value": float(v)} for k, v in self.numbers.items()],
        }


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    """ψ = (δ, p, c, e) plus free text and provenance (which critic, which model)."""

    factor: str
    phase: str
    cause: str
    cause_text: str
    evidence: Evidence
    critic: str = ""
    model: str = ""

    def to_json(self) -> dict[str, Any]:
        """The schema's shape (provenance is not part of what a critic writes)."""
        return {
            "factor": self.factor,
            "phase": self.phase,
            "cause": self.cause,
            "cause_text": self.cause_text,
            "evidence": self.evidence.to_json(),
        }

    def memory_cause(self) -> str:
        """The cause string memory clusters on: the label, then the free text."""
        return f"{self.cause}: {self.cause_text}" if self.cause_text else self.cause


def validate_diagnosis(
    value: Any,
    phases: Sequence[str],
    *,
    num_endpoints: int | None = None,
    family: str = "",
    critic: str = "",
    model: str = "",
) -> Diagnosis:
    """A checked `Diagnosis` from a JSON value (a critic's reply), or an error saying why not.

    Raises `DiagnosisError` for schema violations (unknown factor / cause label, wrong types,
    non-finite numbers, duplicate number names, chunk indices past the episode's
    `num_endpoints`) and `PhaseError` when the phase is not one of `phases`.
    """
    errors = validate_json(value, DIAGNOSIS_SCHEMA)
    if errors:
        raise DiagnosisError(errors)
    ev = value["evidence"]
    names = [n["name"] for n in ev["numbers"]]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise DiagnosisError([f"$.evidence.numbers: duplicate names {dup}"])
    bad = [n["name"] for n in ev["numbers"] if not math.isfinite(float(n["value"]))]
    if bad:
        raise DiagnosisError([f"$.evidence.numbers: non-finite values for {bad}"])
    if num_endpoints is not None:
        for key in ("chunks", "keyframes"):
            out = [int(i) for i in ev[key] if int(i) >= num_endpoints]
            if out:
                raise DiagnosisError(
                    [
                        f"$.evidence.{key}: indices {out} past the episode's last chunk "
                        f"endpoint {num_endpoints - 1}"
                    ]
                )
    if value["phase"] not in phases:
        fam = f"family {family!r}" if family else "this scene's family"
        raise PhaseError(
            [f"phase {value['phase']!r} is not a phase of {fam}; valid: {list(phases)}"]
        )
    return Diagnosis(
        factor=value["factor"],
        phase=value["phase"],
        cause=value["cause"],
        cause_text=value["cause_text"],
        evidence=Evidence(
            chunks=tuple(int(c) for c in ev["chunks"]),
            keyframes=tuple(int(k) for k in ev["keyframes"]),
            numbers={n["name"]: float(n["value"]) for n in ev["numbers"]},
        ),
        critic=critic,
        model=model,
    )
