"""Episodic tier of the shared memory: scene programs, verifiers, generation traces,
deployments and diagnoses, the record of what happened in each round.

``add_diagnosis`` also clusters the new diagnosis into a difficulty mode through the semantic
tier's methods (``SemanticTier``); ``MemoryStore`` composes both.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from coda.memory.base import StoreBase
from coda.memory.records import (
    Assignment,
    Deployment,
    Diagnosis,
    SceneProgram,
    _check_factor,
    _dumps,
    _limit,
    _row_to,
)

__all__ = ["EpisodicTier"]


class EpisodicTier(StoreBase):
    """Writes and reads of the episodic tables (mixin of ``MemoryStore``)."""

    def add_scene_program(
        self,
        source: str,
        *,
        round: int,
        mode_id: int | None = None,
        parent_id: int | None = None,
        factor: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store a scene program g (the source the engine wrote)."""
        if factor is not None:
            _check_factor(factor)
        with self.batch():
            return self._insert(
                "scene_programs",
                {
                    "round": int(round),
                    "mode_id": mode_id,
                    "parent_id": parent_id,
                    "factor": factor,
                    "source": str(source),
                    "meta": _dumps(dict(meta or {})),
                    "created_at": time.time(),
                },
            )

    def add_verifier(
        self,
        source: str,
        *,
        round: int,
        scene_program_id: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store a success-predicate program ν."""
        with self.batch():
            return self._insert(
                "verifiers",
                {
                    "round": int(round),
                    "scene_program_id": scene_program_id,
                    "source": str(source),
                    "meta": _dumps(dict(meta or {})),
                    "created_at": time.time(),
                },
            )

    def add_generation_trace(
        self,
        *,
        round: int,
        scene_program_id: int | None,
        violated: Sequence[Any],
        repair_steps: Sequence[Any],
        outcome: str,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Summarise one generation: violated constraints, repair steps, verification outcome."""
        with self.batch():
            return self._insert(
                "generation_traces",
                {
                    "round": int(round),
                    "scene_program_id": scene_program_id,
                    "violated": _dumps(list(violated)),
                    "repair_steps": _dumps(list(repair_steps)),
                    "outcome": str(outcome),
                    "meta": _dumps(dict(meta or {})),
                    "created_at": time.time(),
                },
            )

    def add_deployment(
        self,
        *,
        round: int,
        scene_program_id: int | None,
        n_rollouts: int,
        n_success: int,
        learning_progress: float | None = None,
        policy: str = "",
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store p̂(s) over N rollouts and learning progress LV(s) of a deployed scene."""
        n_rollouts, n_success = int(n_rollouts), int(n_success)
        if n_rollouts <= 0 or not 0 <= n_success <= n_rollouts:
            raise ValueError(f"need 0 <= n_success <= n_rollouts > 0, got {n_success}/{n_rollouts}")
        if learning_progress is not None and not math.isfinite(learning_progress):
            raise ValueError(f"learning_progress must be finite, got {learning_progress}")
        with self.batch():
            return self._insert(
                "deployments",
                {
                    "round": int(round),
                    "scene_program_id": scene_program_id,
                    "n_rollouts": n_rollouts,
                    "n_success": n_success,
                    "success_rate": n_success / n_rollouts,
                    "learning_progress": learning_progress,
                    "policy": str(policy),
                    "meta": _dumps(dict(meta or {})),
                    "created_at": time.time(),
                },
            )

    def add_diagnosis(
        self,
        *,
        round: int,
        factor: str,
        phase: str,
        cause: str,
        evidence: Mapping[str, Any] | None = None,
        critic: str = "",
        model: str = "",
        scene_program_id: int | None = None,
        deployment_id: int | None = None,
    ) -> Assignment:
        """Store ψ = (δ, p, c, e) and cluster it online into a difficulty mode.

        The diagnosis joins the most similar live mode with the same (δ, p) when the cause
        similarity reaches ``threshold``; otherwise it founds a new candidate mode.
        """
        _check_factor(factor)
        if not str(phase).strip():
            raise ValueError("diagnosis phase must be a non-empty string")
        if not str(cause).strip():
            raise ValueError("diagnosis cause must be a non-empty string")
        feature = self.similarity.featurize(str(cause))
        with self.batch():
            now = time.time()
            diag_id = self._insert(
                "diagnoses",
                {
                    "round": int(round),
                    "scene_program_id": scene_program_id,
                    "deployment_id": deployment_id,
                    "factor": factor,
                    "phase": str(phase),
                    "cause": str(cause),
                    "evidence": _dumps(dict(evidence or {})),
                    "critic": str(critic),
                    "model": str(model),
                    "created_at": now,
                },
            )
            self._observe(feature)
            mode_id, score = self._best_mode(feature, factor, str(phase))
            created = mode_id is None
            if created:
                mode_id = self._create_mode(factor, str(phase), str(cause), int(round), now)
                score = 1.0
            self._join_mode(mode_id, feature, now)
            self._insert(
                "mode_members",
                {"diagnosis_id": diag_id, "mode_id": mode_id, "similarity": float(score)},
            )
            self._event(
                mode_id,
                int(round),
                "created" if created else "joined",
                {"diagnosis_id": diag_id, "similarity": float(score)},
            )
        return Assignment(diag_id, int(mode_id), float(score), created)

    def diagnoses_for_mode(self, mode_id: int, *, limit: int | None = None) -> list[Diagnosis]:
        """Diagnoses clustered into a mode, newest first."""
        q = (
            "SELECT d.* FROM diagnoses d JOIN mode_members m ON m.diagnosis_id = d.id "
            "WHERE m.mode_id=? ORDER BY d.id DESC"
        )
        with self._lock:
            rows = self._conn.execute(q + _limit(limit), (int(mode_id),)).fetchall()
        return [_row_to(Diagnosis, r) for r in rows]

    def mode_of_diagnosis(self, diagnosis_id: int) -> int | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT mode_id FROM mode_members WHERE diagnosis_id=?", (int(diagnosis_id),)
            ).fetchone()
        return None if row is None else int(row[0])

    def scene_programs_for_mode(
        self, mode_id: int, *, limit: int | None = None
    ) -> list[SceneProgram]:
        """Scene programs generated to target a mode, newest first."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM scene_programs WHERE mode_id=? ORDER BY id DESC" + _limit(limit),
                (int(mode_id),),
            ).fetchall()
        return [_row_to(SceneProgram, r) for r in rows]

    def get_scene_program(self, scene_program_id: int) -> SceneProgram:
        with self._lock:
            row = self._conn.execute(
                "SELECT * FROM scene_programs WHERE id=?", (int(scene_program_id),)
            ).fetchone()
        if row is None:
            raise KeyError(f"no scene program with id {scene_program_id}")
        return _row_to(SceneProgram, row)

    def deployments(
        self, *, scene_program_id: int | None = None, round: int | None = None
    ) -> list[Deployment]:
        q, args = "SELECT * FROM deployments WHERE 1=1", []
        if scene_program_id is not None:
            q += " AND scene_program_id=?"
            args.append(int(scene_program_id))
        if round is not None:
            q += " AND round=?"
            args.append(int(round))
        with self._lock:
            rows = self._conn.execute(q + " ORDER BY id", args).fetchall()
        return [_row_to(Deployment, r) for r in rows]
