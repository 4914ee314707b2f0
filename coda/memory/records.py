"""Records of the shared memory M: the row types of each tier and the helpers every tier shares.

Episodic rows (``SceneProgram``, ``Deployment``, ``Diagnosis``), semantic ones (``Mode``,
``Assignment``) and procedural ones (``GenerationProgram``, ``TrainingProgram``); JSON encoding of
stored values, row -> dataclass conversion, the role-signature key, and argument checks.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = [
    "FACTORS",
    "MODE_STATUSES",
    "Assignment",
    "Deployment",
    "Diagnosis",
    "GenerationProgram",
    "Mode",
    "SceneProgram",
    "TrainingProgram",
    "role_signature",
]

FACTORS = ("task", "spatial", "attribute", "execution")
MODE_STATUSES = ("candidate", "validated", "refuted", "retired")


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"value of type {type(o).__name__} is not JSON-serialisable")


def _dumps(v: Any) -> str:
    return json.dumps(v, default=_json_default, sort_keys=True, allow_nan=False)


def role_signature(roles: Any) -> str:
    """Canonical key of a relational structure: its sorted symbolic role names joined by ",".

    Accepts ``{"roles": {...}, "relations": [...]}``, a mapping role -> object, or a sequence of
    role names, so programs over the same roles retrieve each other across object instances.
    """
    if isinstance(roles, Mapping) and "roles" in roles:
        roles = roles["roles"]
    if isinstance(roles, Mapping):
        names = roles.keys()
    elif isinstance(roles, str):
        names = [roles]
    elif isinstance(roles, Iterable):
        names = roles
    else:
        raise TypeError(f"cannot derive a role signature from {type(roles).__name__}")
    return ",".join(sorted({str(n) for n in names}))


@dataclass(frozen=True)
class Mode:
    """A difficulty mode K_j (semantic tier)."""

    id: int
    factor: str
    phase: str
    label: str
    status: str
    created_round: int
    n_diagnoses: int
    n_trials: int
    n_successes: int
    hardness: float | None  # p̂_j: success rate in hardness_round
    hardness_round: int | None
    importance: float  # w_j: running score of mode-level learning progress
    n_progress: int
    last_progress: float | None


@dataclass(frozen=True)
class Diagnosis:
    """ψ = (δ, p, c, e) plus provenance (episodic tier)."""

    id: int
    round: int
    scene_program_id: int | None
    deployment_id: int | None
    factor: str
    phase: str
    cause: str
    evidence: Any
    critic: str
    model: str
    created_at: float


@dataclass(frozen=True)
class SceneProgram:
    id: int
    round: int
    mode_id: int | None
    parent_id: int | None
    factor: str | None
    source: str
    meta: Any
    created_at: float


@dataclass(frozen=True)
class Deployment:
    id: int
    round: int
    scene_program_id: int | None
    n_rollouts: int
    n_success: int
    success_rate: float
    learning_progress: float | None
    policy: str
    meta: Any
    created_at: float


@dataclass(frozen=True)
class GenerationProgram:
    """Ω entry: how to generate validated variants of a mode along one factor."""

    id: int
    round: int
    mode_id: int | None
    parent_scene_program_id: int | None
    factor: str | None
    variants: Any
    compile_checks: Any
    roles: Any
    role_signature: str
    meta: Any
    created_at: float


@dataclass(frozen=True)
class TrainingProgram:
    """Φ entry: subgoals, potential program, tools per subgoal, and evidence of improvement."""

    id: int
    round: int
    mode_id: int | None
    phase: str | None
    subgoals: Any
    potential_source: str
    tools: Any
    evidence: Any
    improved: bool | None
    role_signature: str
    meta: Any
    created_at: float


@dataclass(frozen=True)
class Assignment:
    """Where a new diagnosis went: its id, its mode, the similarity, and whether it founded it."""

    diagnosis_id: int
    mode_id: int
    similarity: float
    created: bool


_JSON_COLS = {
    "meta",
    "evidence",
    "violated",
    "repair_steps",
    "variants",
    "compile_checks",
    "roles",
    "subgoals",
    "tools",
    "payload",
}


def _row_to(cls: type, row: sqlite3.Row) -> Any:
    kw = {}
    for f in fields(cls):
        v = row[f.name]
        if f.name in _JSON_COLS and isinstance(v, str):
            v = json.loads(v)
        if f.name == "improved" and v is not None:
            v = bool(v)
        kw[f.name] = v
    return cls(**kw)


# Export order: every table after the tables its foreign keys point to.
_EXPORT_ORDER = (
    "meta",
    "cause_df",
    "modes",
    "scene_programs",
    "verifiers",
    "generation_traces",
    "deployments",
    "diagnoses",
    "mode_members",
    "mode_events",
    "generation_programs",
    "training_programs",
)


def _limit(limit: int | None) -> str:
    return "" if limit is None else f" LIMIT {int(limit)}"


def _check_factor(factor: str) -> None:
    if factor not in FACTORS:
        raise ValueError(f"unknown factor δ={factor!r}; valid: {list(FACTORS)}")


def _check_status(status: str) -> None:
    if status not in MODE_STATUSES:
        raise ValueError(f"unknown mode status {status!r}; valid: {list(MODE_STATUSES)}")
