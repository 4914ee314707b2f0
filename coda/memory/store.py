"""The shared memory M: one SQLite file per run holding the episodic, semantic and procedural tiers.

Why SQLite: one file that the run folder carries, crash-safe transactions (WAL, ``synchronous``
FULL by default), indexes for retrieval by mode / (δ, p) / role signature, and no server. Host 0
alone writes (see DESIGN.md); a lock makes the store safe to share between host threads.

Writes are transactions: each ``add_*`` commits on return, and ``with store.batch():`` groups many
writes into one all-or-nothing commit. A writer killed mid-batch leaves the database exactly as of
its last commit.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from coda.memory.schema import SCHEMA_VERSION, apply_schema
from coda.memory.similarity import CauseSimilarity, get_similarity

__all__ = [
    "FACTORS",
    "MODE_STATUSES",
    "Assignment",
    "Deployment",
    "Diagnosis",
    "GenerationProgram",
    "MemoryImportError",
    "MemoryStore",
    "Mode",
    "SceneProgram",
    "TrainingProgram",
    "role_signature",
]

FACTORS = ("task", "spatial", "attribute", "execution")
MODE_STATUSES = ("candidate", "validated", "refuted", "retired")
_TRANSITIONS = {
    "candidate": {"validated", "refuted", "retired"},
    "validated": {"retired"},
    "refuted": {"candidate", "retired"},  # candidate: re-opened for a re-test (reopen_refuted)
    "retired": set(),
}
EXPORT_FORMAT = "coda-memory"


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
# table -> {column: table its ids refer to}
_FOREIGN = {
    "scene_programs": {"mode_id": "modes", "parent_id": "scene_programs"},
    "verifiers": {"scene_program_id": "scene_programs"},
    "generation_traces": {"scene_program_id": "scene_programs"},
    "deployments": {"scene_program_id": "scene_programs"},
    "diagnoses": {"scene_program_id": "scene_programs", "deployment_id": "deployments"},
    "mode_members": {"diagnosis_id": "diagnoses", "mode_id": "modes"},
    "mode_events": {"mode_id": "modes"},
    "generation_programs": {"mode_id": "modes", "parent_scene_program_id": "scene_programs"},
    "training_programs": {"mode_id": "modes"},
}


class MemoryStore:
    """Full three-tier memory (the method's default). See ``coda.memory.schema`` for tables.

    Args:
      path: SQLite file (created if missing) or ``":memory:"``.
      similarity: backend name (``tfidf``/``embedding``) or a ``CauseSimilarity`` instance.
      threshold: minimum cause similarity for a diagnosis to join an existing mode of the same
        (δ, p); below it the diagnosis founds a new candidate mode.
      importance_rate: step size α of w_j ← (1-α) w_j + α · LP_j.
      synchronous: SQLite ``synchronous`` pragma; FULL makes every commit durable.
    """

    memory_mode = "full"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        similarity: str | CauseSimilarity = "tfidf",
        similarity_kwargs: Mapping[str, Any] | None = None,
        threshold: float = 0.3,
        importance_rate: float = 0.3,
        synchronous: str = "FULL",
    ) -> None:
        if synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"unknown synchronous {synchronous!r}; valid: OFF NORMAL FULL EXTRA")
        if not 0.0 < importance_rate <= 1.0:
            raise ValueError(f"importance_rate must be in (0, 1], got {importance_rate}")
        self.path = str(path)
        self.threshold = float(threshold)
        self.importance_rate = float(importance_rate)
        self.synchronous = synchronous.upper()
        if isinstance(similarity, str):
            self.similarity: CauseSimilarity = get_similarity(
                similarity, **dict(similarity_kwargs or {})
            )
        else:
            self.similarity = similarity
        self._lock = threading.RLock()
        self._tx_depth = 0
        self._prepared: dict[int, tuple[float, Any, dict[str, Any]]] = {}
        self._column_types: dict[str, dict[str, str]] = {}  # import_jsonl's schema checks
        self._round = 0
        self._conn = self._connect()

    # ------------------------------------------------------------------ connection & transactions
    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.row_factory = sqlite3.Row
        if self.path != ":memory:":
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise RuntimeError(f"could not enable WAL on {self.path} (got {mode})")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA foreign_keys=OFF")
        apply_schema(conn)
        stored = self._meta_get(conn, "similarity")
        if stored is None:
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('similarity', ?)",
                (self.similarity.name,),
            )
        elif stored != self.similarity.name:
            raise ValueError(
                f"memory at {self.path} was built with cause similarity {stored!r}; "
                f"opening it with {self.similarity.name!r} would mix incomparable mode states"
            )
        self._load_corpus(conn)
        return conn

    @staticmethod
    def _meta_get(conn: sqlite3.Connection, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def _load_corpus(self, conn: sqlite3.Connection) -> None:
        df = {int(f): int(d) for f, d in conn.execute("SELECT feature, df FROM cause_df")}
        n_docs = int(self._meta_get(conn, "n_docs") or 0)
        self.similarity.load_corpus(df, n_docs)
        self._prepared.clear()

    @contextlib.contextmanager
    def batch(self) -> Iterator[MemoryStore]:
        """Group writes into one atomic commit (nested batches join the outer one)."""
        with self._lock:
            if self._tx_depth == 0:
                self._conn.execute("BEGIN IMMEDIATE")
            self._tx_depth += 1
            ok = False
            try:
                yield self
                ok = True
            finally:
                self._tx_depth -= 1
                if self._tx_depth == 0:
                    if ok:
                        self._conn.execute("COMMIT")
                    else:
                        self._conn.execute("ROLLBACK")
                        self._load_corpus(self._conn)  # drop in-memory stats of the lost writes

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def begin_round(self, round_idx: int) -> None:
        """Mark the start of a loop round (the ``none`` ablation forgets everything here)."""
        self._round = int(round_idx)

    def integrity_check(self) -> str:
        with self._lock:
            return self._conn.execute("PRAGMA integrity_check").fetchone()[0]

    def schema_version(self) -> int:
        with self._lock:
            return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {
                t: int(self._conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
                for t in _EXPORT_ORDER
            }

    def _insert(self, table: str, row: Mapping[str, Any]) -> int:
        cols = ", ".join(row)
        qs = ", ".join("?" for _ in row)
        cur = self._conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({qs})", tuple(row.values()))
        return int(cur.lastrowid)

    # ------------------------------------------------------------------------------ episodic tier
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

    # ------------------------------------------------------------------------------ semantic tier
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

    # ---------------------------------------------------------------------------- procedural tier
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

    # ----------------------------------------------------------------------------- export/import
    def export_jsonl(self, path: str | os.PathLike[str]) -> int:
        """Write the whole memory as JSON lines (header first); returns the number of records."""
        n = 0
        tmp = f"{os.fspath(path)}.tmp"
        with self._lock, open(tmp, "w", encoding="utf-8") as f:
            header = {
                "format": EXPORT_FORMAT,
                "schema_version": SCHEMA_VERSION,
                "memory_mode": self.memory_mode,
                "similarity": self.similarity.name,
            }
            f.write(json.dumps(header) + "\n")
            for table in _EXPORT_ORDER:
                for row in self._conn.execute(f"SELECT * FROM {table} ORDER BY rowid"):
                    f.write(json.dumps({"table": table, "row": dict(row)}) + "\n")
                    n += 1
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return n

    def import_jsonl(self, path: str | os.PathLike[str]) -> dict[str, int]:
        """Add an exported memory to this one (ids are remapped; nothing existing changes).

        Use it to reuse a memory in another run, task family or policy backbone. All-or-nothing:
        a malformed file raises `MemoryImportError` naming the file, line and field, and leaves
        this memory untouched (one transaction; in-memory corpus statistics are reloaded).
        """
        where = os.fspath(path)
        remap: dict[str, dict[int, int]] = {t: {} for t in _EXPORT_ORDER}
        counts = dict.fromkeys(_EXPORT_ORDER, 0)
        with open(path, "rb") as f:  # decoded per line, so an encoding error has a line number
            header = self._import_header(f.readline(), where)
            if int(header["schema_version"]) > SCHEMA_VERSION:
                raise MemoryImportError(
                    f"{where}:1: schema version {header['schema_version']}; "
                    f"this code knows up to {SCHEMA_VERSION}"
                )
            if header.get("similarity") != self.similarity.name:
                raise MemoryImportError(
                    f"{where}:1: built with similarity {header.get('similarity')!r}, "
                    f"this memory uses {self.similarity.name!r}"
                )
            with self.batch():
                for lineno, raw in enumerate(f, start=2):
                    if raw.strip():
                        counts[self._import_line(raw, remap, f"{where}:{lineno}")] += 1
                self._load_corpus(self._conn)
        return counts

    @staticmethod
    def _import_header(raw: bytes, where: str) -> dict[str, Any]:
        try:
            header = json.loads(raw.decode("utf-8") or "null")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise MemoryImportError(f"{where}:1: not a CoDA memory export ({e})") from None
        if not isinstance(header, dict) or header.get("format") != EXPORT_FORMAT:
            raise MemoryImportError(f"{where}:1: not a CoDA memory export (bad header {header!r})")
        if not _is_int(header.get("schema_version")):
            raise MemoryImportError(
                f"{where}:1: header schema_version must be an integer, "
                f"got {header.get('schema_version')!r}"
            )
        return header

    def _columns(self, table: str) -> dict[str, str]:
        """{column: declared type} of a table (cached; the schema is fixed per version)."""
        if table not in self._column_types:
            info = self._conn.execute(f"PRAGMA table_info({table})").fetchall()
            self._column_types[table] = {r[1]: str(r[2]).upper() for r in info}
        return self._column_types[table]

    def _import_line(self, raw: bytes, remap: dict[str, dict[int, int]], where: str) -> str:
        """Checks one export record against the schema and inserts it; returns its table."""
        try:
            rec = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise MemoryImportError(f"{where}: malformed record (not UTF-8: {e.reason})") from None
        except json.JSONDecodeError as e:
            raise MemoryImportError(
                f"{where}: malformed record (not JSON: {e.msg} at column {e.colno})"
            ) from None
        if not (
            isinstance(rec, dict)
            and isinstance(rec.get("table"), str)
            and isinstance(rec.get("row"), dict)
        ):
            raise MemoryImportError(
                f'{where}: malformed record (expected {{"table": name, "row": {{...}}}})'
            )
        table, row = rec["table"], dict(rec["row"])
        if table not in remap:
            raise MemoryImportError(
                f"{where}: unknown table {table!r}; valid: {', '.join(_EXPORT_ORDER)}"
            )
        cols = self._columns(table)
        unknown = sorted(set(row) - set(cols))
        if unknown:
            raise MemoryImportError(
                f"{where}: table {table} has no column(s) {unknown}; columns: {sorted(cols)}"
            )
        for col, v in row.items():
            kind = cols[col]
            ok = (
                v is None
                or (kind == "INTEGER" and _is_int(v))
                or (kind == "REAL" and (_is_int(v) or isinstance(v, float)))
                or (kind == "TEXT" and isinstance(v, str))
            )
            if not ok:
                raise MemoryImportError(f"{where}: {table}.{col} must be {kind}, got {v!r:.80}")
            if col in _JSON_COLS and isinstance(v, str):
                try:
                    json.loads(v)
                except json.JSONDecodeError:
                    raise MemoryImportError(
                        f"{where}: {table}.{col} is not JSON text: {v!r:.80}"
                    ) from None
        if table == "meta" and not ({"key", "value"} <= set(row)):
            raise MemoryImportError(f"{where}: meta record needs key and value, got {sorted(row)}")
        if table == "meta" and row["key"] == "n_docs" and not str(row["value"]).isdigit():
            raise MemoryImportError(f"{where}: meta n_docs must be a count, got {row['value']!r}")
        try:
            self._import_row(table, row, remap)
        except sqlite3.Error as e:  # NOT NULL, CHECK, the append-only triggers, ...
            raise MemoryImportError(f"{where}: {table} record refused: {e}") from None
        return table

    def _import_row(
        self, table: str, row: dict[str, Any], remap: dict[str, dict[int, int]]
    ) -> None:
        if table == "meta":
            if row["key"] == "n_docs":
                self._conn.execute(
                    "INSERT INTO meta(key, value) VALUES ('n_docs', ?) ON CONFLICT(key) DO "
                    "UPDATE SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT)",
                    (str(int(row["value"])), int(row["value"])),
                )
            return
        if table == "cause_df":
            self._conn.execute(
                "INSERT INTO cause_df(feature, df) VALUES (?, ?) "
                "ON CONFLICT(feature) DO UPDATE SET df = df + excluded.df",
                (int(row["feature"]), int(row["df"])),
            )
            return
        for col, ref in _FOREIGN.get(table, {}).items():
            if row.get(col) is not None:
                row[col] = remap[ref].get(int(row[col]))
        if table == "modes":
            row["updated_at"] = time.time()
        old_id = row.pop("id", None)
        if table == "mode_members":
            if row["diagnosis_id"] is None or row["mode_id"] is None:
                return
            self._insert(table, row)
            return
        new_id = self._insert(table, row)
        if old_id is not None:
            remap[table][int(old_id)] = new_id


class MemoryImportError(ValueError):
    """An export file is malformed; the message names the file, line and field. Nothing of the
    file was imported."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _limit(limit: int | None) -> str:
    return "" if limit is None else f" LIMIT {int(limit)}"


def _check_factor(factor: str) -> None:
    if factor not in FACTORS:
        raise ValueError(f"unknown factor δ={factor!r}; valid: {list(FACTORS)}")


def _check_status(status: str) -> None:
    if status not in MODE_STATUSES:
        raise ValueError(f"unknown mode status {status!r}; valid: {list(MODE_STATUSES)}")
