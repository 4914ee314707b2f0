"""Semantic tier of the shared memory: difficulty modes K_j, their online clustering of
diagnosis causes, hardness p̂_j, importance w_j, status and events.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from coda.memory.base import StoreBase
from coda.memory.records import Mode, _check_factor, _check_status, _dumps, _row_to

__all__ = ["SemanticTier"]

_TRANSITIONS = {
    "candidate": {"validated", "refuted", "retired"},
    "validated": {"retired"},
    "refuted": {"candidate", "retired"},  # candidate: re-opened for a re-test (reopen_refuted)
    "retired": set(),
}


class SemanticTier(StoreBase):
    """Modes and their statistics (mixin of ``MemoryStore``)."""

    def _event(self, mode_id: int, round: int, kind: str, payload: Mapping[str, Any]) -> None:
        self._insert(
            "mode_events",
            {
                "round": round,
                "mode_id": mode_id,
                "kind": kind,
                "payload": _dumps(dict(payload)),
                "created_at": time.time(),
            },
        )

    def _mode_key(self, factor: str, phase: str) -> tuple[str, str]:
        return factor, phase

    def _observe(self, feature: dict[str, Any]) -> None:
        terms = self.similarity.observe(feature)
        if terms:
            self._conn.executemany(
                "INSERT INTO cause_df(feature, df) VALUES (?, 1) "
                "ON CONFLICT(feature) DO UPDATE SET df = df + 1",
                [(int(t),) for t in terms],
            )
        self._conn.execute(
            "INSERT INTO meta(key, value) VALUES ('n_docs', '1') "
            "ON CONFLICT(key) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT)"
        )

    def _candidates(self, factor: str, phase: str) -> list[tuple[int, Any]]:
        factor, phase = self._mode_key(factor, phase)
        rows = self._conn.execute(
            "SELECT id, updated_at FROM modes WHERE factor=? AND phase=? AND status != 'retired'",
            (factor, phase),
        ).fetchall()
        out = []
        for mode_id, updated in rows:
            hit = self._prepared.get(mode_id)
            if hit is None or hit[0] != updated:
                (state_json,) = self._conn.execute(
                    "SELECT cause_state FROM modes WHERE id=?", (mode_id,)
                ).fetchone()
                state = json.loads(state_json)
                hit = (updated, self.similarity.prepare(state), state)
                self._prepared[mode_id] = hit
            out.append((int(mode_id), hit[1]))
        return out

    def _best_mode(
        self, feature: dict[str, Any], factor: str, phase: str
    ) -> tuple[int | None, float]:
        best_id, best = None, -math.inf
        candidates = self._candidates(factor, phase)
        query = self.similarity.prepare_query(feature) if candidates else None
        for mode_id, prepared in candidates:
            s = self.similarity.score(query, prepared)
            if s > best:
                best_id, best = mode_id, s
        if best_id is None or best < self.threshold:
            return None, (best if best_id is not None else 0.0)
        return best_id, best

    def _create_mode(self, factor: str, phase: str, label: str, round: int, now: float) -> int:
        factor, phase = self._mode_key(factor, phase)
        return self._insert(
            "modes",
            {
                "factor": factor,
                "phase": phase,
                "label": label[:200],
                "status": "candidate",
                "created_round": round,
                "cause_state": _dumps(self.similarity.empty_state()),
                "updated_at": now,
            },
        )

    def _join_mode(self, mode_id: int, feature: dict[str, Any], now: float) -> None:
        hit = self._prepared.get(mode_id)
        if hit is not None:
            state = hit[2]
        else:
            (state_json,) = self._conn.execute(
                "SELECT cause_state FROM modes WHERE id=?", (mode_id,)
            ).fetchone()
            state = json.loads(state_json)
        new_state = self.similarity.add(state, feature)
        # Strictly increasing stamp so cached states are never mistaken for current ones.
        stamp = max(now, (hit[0] if hit else 0.0) + 1e-6)
        self._conn.execute(
            "UPDATE modes SET cause_state=?, n_diagnoses=n_diagnoses+1, updated_at=? WHERE id=?",
            (_dumps(new_state), stamp, mode_id),
        )
        self._prepared[mode_id] = (stamp, self.similarity.prepare(new_state), new_state)

    def nearest_mode(self, *, factor: str, phase: str, cause: str) -> tuple[int | None, float]:
        """Which live mode a diagnosis would join (``None`` if it would found one); no writes."""
        _check_factor(factor)
        with self._lock:
            return self._best_mode(self.similarity.featurize(cause), factor, phase)

    def get_mode(self, mode_id: int) -> Mode:
        with self._lock:
            row = self._conn.execute("SELECT * FROM modes WHERE id=?", (int(mode_id),)).fetchone()
        if row is None:
            raise KeyError(f"no mode with id {mode_id}")
        return _row_to(Mode, row)

    def modes(
        self,
        *,
        status: str | Sequence[str] | None = None,
        factor: str | None = None,
        phase: str | None = None,
    ) -> list[Mode]:
        """Modes filtered by status and/or (δ, p), ordered by id."""
        q, args = "SELECT * FROM modes WHERE 1=1", []
        if status is not None:
            sts = [status] if isinstance(status, str) else list(status)
            for s in sts:
                _check_status(s)
            q += f" AND status IN ({','.join('?' for _ in sts)})"
            args += sts
        if factor is not None:
            q += " AND factor=?"
            args.append(factor)
        if phase is not None:
            q += " AND phase=?"
            args.append(phase)
        with self._lock:
            rows = self._conn.execute(q + " ORDER BY id", args).fetchall()
        return [_row_to(Mode, r) for r in rows]

    def record_mode_outcome(
        self, mode_id: int, *, round: int, n_success: int, n_trials: int
    ) -> Mode:
        """Fold an evaluation on the mode into p̂_j (success rate of the latest round evaluated)."""
        n_success, n_trials = int(n_success), int(n_trials)
        if n_trials <= 0 or not 0 <= n_success <= n_trials:
            raise ValueError(f"need 0 <= n_success <= n_trials > 0, got {n_success}/{n_trials}")
        with self.batch():
            m = self.get_mode(mode_id)
            if m.hardness_round == int(round):
                row = self._conn.execute(
                    "SELECT round_trials, round_successes FROM modes WHERE id=?", (mode_id,)
                ).fetchone()
                rt, rs = row[0] + n_trials, row[1] + n_success
            else:
                rt, rs = n_trials, n_success
            self._conn.execute(
                "UPDATE modes SET n_trials=n_trials+?, n_successes=n_successes+?, round_trials=?, "
                "round_successes=?, hardness=?, hardness_round=? WHERE id=?",
                (n_trials, n_success, rt, rs, rs / rt, int(round), mode_id),
            )
            self._event(
                mode_id, int(round), "outcome", {"n_success": n_success, "n_trials": n_trials}
            )
            return self.get_mode(mode_id)

    def record_learning_progress(
        self, mode_id: int, *, round: int, before: float, after: float
    ) -> Mode:
        """Update w_j from mode-level learning progress LP = success after − success before."""
        if not (math.isfinite(before) and math.isfinite(after)):
            raise ValueError(f"success rates must be finite, got before={before} after={after}")
        lp = float(after) - float(before)
        a = self.importance_rate
        with self.batch():
            m = self.get_mode(mode_id)
            w = lp if m.n_progress == 0 else (1.0 - a) * m.importance + a * lp
            self._conn.execute(
                "UPDATE modes SET importance=?, n_progress=n_progress+1, last_progress=? "
                "WHERE id=?",
                (w, lp, mode_id),
            )
            self._event(
                mode_id, int(round), "progress", {"before": before, "after": after, "lp": lp}
            )
            return self.get_mode(mode_id)

    def set_mode_status(self, mode_id: int, status: str, *, round: int, reason: str = "") -> Mode:
        """candidate → validated | refuted (by a control experiment); refuted → candidate (a
        re-test, `reopen_refuted`); any live mode → retired."""
        _check_status(status)
        with self.batch():
            m = self.get_mode(mode_id)
            if status != m.status and status not in _TRANSITIONS[m.status]:
                raise ValueError(
                    f"mode {mode_id}: cannot go from {m.status!r} to {status!r}; allowed: "
                    f"{sorted(_TRANSITIONS[m.status])}"
                )
            self._conn.execute("UPDATE modes SET status=? WHERE id=?", (status, mode_id))
            self._event(
                mode_id, int(round), "status", {"from": m.status, "to": status, "reason": reason}
            )
            return self.get_mode(mode_id)

    def reopen_refuted(self, *, round: int, min_new: int, max_retests: int = 1) -> list[int]:
        """Refuted modes back to candidate for one more control experiment. -> their ids.

        A refutation is one test at one policy: the policy changes every round, and diagnoses
        keep joining a refuted mode (clustering skips only retired ones). A mode that gathered
        ≥ `min_new` diagnoses in rounds after its last refutation is re-opened, at most
        `max_retests` times over its life, so that a difficulty the policy now shows can still
        be validated. Each re-test is another test at the same α (the family-wise false-positive
        rate per mode grows to about (1 + max_retests)·α). `min_new` < 1 re-opens nothing.
        """
        if min_new < 1:
            return []
        out: list[int] = []
        with self.batch():
            for m in self.modes(status="refuted"):
                events = self._conn.execute(
                    "SELECT round, payload FROM mode_events WHERE mode_id=? AND kind='status' "
                    "ORDER BY id",
                    (m.id,),
                ).fetchall()
                changes = [(int(r), json.loads(p)) for r, p in events]
                refuted_at = max((r for r, p in changes if p.get("to") == "refuted"), default=-1)
                retests = sum(1 for _, p in changes if p.get("reason") == "retest")
                if retests >= max_retests:
                    continue
                (new,) = self._conn.execute(
                    "SELECT COUNT(*) FROM diagnoses d JOIN mode_members mm "
                    "ON mm.diagnosis_id = d.id WHERE mm.mode_id=? AND d.round > ?",
                    (m.id, refuted_at),
                ).fetchone()
                if int(new) >= min_new:
                    self.set_mode_status(m.id, "candidate", round=round, reason="retest")
                    out.append(m.id)
        return out
