"""The SQLite connection of the shared memory M: schema, pragmas, transactions, row inserts.

Every tier (``coda.memory.episodic``, ``semantic``, ``procedural``) and the export/import code
(``coda.memory.exchange``) build on ``StoreBase``; ``coda.memory.store.MemoryStore`` composes them.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar

from coda.memory.records import _EXPORT_ORDER
from coda.memory.schema import apply_schema
from coda.memory.similarity import CauseSimilarity, get_similarity

__all__ = ["StoreBase"]

_S = TypeVar("_S", bound="StoreBase")


class StoreBase:
    """Connection, transactions and generic row access; ``MemoryStore`` documents the arguments."""

    memory_mode: str

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
    def batch(self: _S) -> Iterator[_S]:
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

    def __enter__(self: _S) -> _S:
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
