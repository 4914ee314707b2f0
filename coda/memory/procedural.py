"""Procedural tier of the shared memory: generation programs Ω and training programs Φ,
retrievable by mode, by the (δ, p) of their mode and by role signature.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from coda.memory.base import StoreBase
from coda.memory.records import (
    GenerationProgram,
    TrainingProgram,
    _check_factor,
    _dumps,
    _limit,
    _row_to,
    role_signature,
)

__all__ = ["ProceduralTier"]


class ProceduralTier(StoreBase):
    """Writes and reads of Ω and Φ (mixin of ``MemoryStore``)."""

    def add_generation_program(
        self,
        *,
        round: int,
        mode_id: int | None,
        parent_scene_program_id: int | None,
        factor: str | None,
        variants: Sequence[Any],
        compile_checks: Sequence[Any],
        roles: Any,
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store Ω: a parent scene, validated variants along one factor, and its role structure."""
        if factor is not None:
            _check_factor(factor)
        with self.batch():
            return self._insert(
                "generation_programs",
                {
                    "round": int(round),
                    "mode_id": mode_id,
                    "parent_scene_program_id": parent_scene_program_id,
                    "factor": factor,
                    "variants": _dumps(list(variants)),
                    "compile_checks": _dumps(list(compile_checks)),
                    "roles": _dumps(roles),
                    "role_signature": role_signature(roles),
                    "meta": _dumps(dict(meta or {})),
                    "created_at": time.time(),
                },
            )

    def add_training_program(
        self,
        *,
        round: int,
        mode_id: int | None,
        phase: str | None,
        subgoals: Sequence[Any],
        potential_source: str,
        tools: Mapping[str, Any],
        roles: Any = (),
        evidence: Sequence[Any] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> int:
        """Store Φ: subgoals, potential program source, learning tool per subgoal, phase."""
        with self.batch():
            return self._insert(
                "training_programs",
                {
                    "round": int(round),
                    "mode_id": mode_id,
                    "phase": phase,
                    "subgoals": _dumps(list(subgoals)),
                    "potential_source": str(potential_source),
                    "tools": _dumps(dict(tools)),
                    "evidence": _dumps(list(evidence)),
                    "improved": None,
                    "role_signature": role_signature(roles),
                    "meta": _dumps(dict(meta or {})),
                    "created_at": time.time(),
                },
            )

    def record_training_evidence(
        self,
        program_id: int,
        *,
        round: int,
        before: float,
        after: float,
        **extra: Any,
    ) -> TrainingProgram:
        """Append evidence of whether a training program improved the policy on its mode."""
        with self.batch():
            row = self._conn.execute(
                "SELECT evidence FROM training_programs WHERE id=?", (int(program_id),)
            ).fetchone()
            if row is None:
                raise KeyError(f"no training program with id {program_id}")
            ev = json.loads(row[0])
            ev.append({"round": int(round), "before": before, "after": after, **extra})
            improved = any(e["after"] > e["before"] for e in ev)
            self._conn.execute(
                "UPDATE training_programs SET evidence=?, improved=? WHERE id=?",
                (_dumps(ev), int(improved), int(program_id)),
            )
            (out,) = self.training_programs(ids=[int(program_id)])
            return out

    def _procedural(
        self,
        table: str,
        cls: type,
        *,
        mode_id: int | None,
        factor: str | None,
        phase: str | None,
        role_signature: str | None,
        ids: Sequence[int] | None,
        limit: int | None,
    ) -> list[Any]:
        q, args = f"SELECT t.* FROM {table} t", []
        if factor is not None or phase is not None:
            q += " JOIN modes m ON m.id = t.mode_id"
        q += " WHERE 1=1"
        if mode_id is not None:
            q += " AND t.mode_id=?"
            args.append(int(mode_id))
        if factor is not None:
            q += " AND m.factor=?"
            args.append(factor)
        if phase is not None:
            q += " AND m.phase=?"
            args.append(phase)
        if role_signature is not None:
            q += " AND t.role_signature=?"
            args.append(role_signature)
        if ids is not None:
            q += f" AND t.id IN ({','.join('?' for _ in ids)})"
            args += [int(i) for i in ids]
        with self._lock:
            rows = self._conn.execute(q + " ORDER BY t.id DESC" + _limit(limit), args).fetchall()
        return [_row_to(cls, r) for r in rows]

    def generation_programs(
        self,
        *,
        mode_id: int | None = None,
        factor: str | None = None,
        phase: str | None = None,
        role_signature: str | None = None,
        ids: Sequence[int] | None = None,
        limit: int | None = None,
    ) -> list[GenerationProgram]:
        """Ω entries by mode id, by the (δ, p) of their mode, and/or by role signature."""
        return self._procedural(
            "generation_programs",
            GenerationProgram,
            mode_id=mode_id,
            factor=factor,
            phase=phase,
            role_signature=role_signature,
            ids=ids,
            limit=limit,
        )

    def training_programs(
        self,
        *,
        mode_id: int | None = None,
        factor: str | None = None,
        phase: str | None = None,
        role_signature: str | None = None,
        ids: Sequence[int] | None = None,
        limit: int | None = None,
    ) -> list[TrainingProgram]:
        """Φ entries by mode id, by the (δ, p) of their mode, and/or by role signature."""
        return self._procedural(
            "training_programs",
            TrainingProgram,
            mode_id=mode_id,
            factor=factor,
            phase=phase,
            role_signature=role_signature,
            ids=ids,
            limit=limit,
        )
