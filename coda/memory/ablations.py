"""Memory ablations behind the ``MemoryStore`` interface (§4 of the method).

* ``single_store`` — one undivided store, skill-library style: diagnoses are not partitioned into
  difficulty modes (every diagnosis joins one catch-all mode) and retrieval ignores mode, (δ, p)
  and role keys, returning the most recent entries of the whole library.
* ``none`` — nothing persists across rounds: an in-memory database that is discarded whenever a
  new round begins, so within a round the loop works as usual and across rounds it starts blank.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

from coda.memory.store import MemoryStore, Mode, SceneProgram, _row_to

__all__ = ["NoMemory", "SingleStoreMemory"]

_ALL = "*"


class SingleStoreMemory(MemoryStore):
    """One undivided store: no modes by (δ, p), no indexed retrieval."""

    memory_mode = "single_store"

    def __init__(self, path: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self.threshold = -math.inf  # everything joins the single catch-all mode

    def _mode_key(self, factor: str, phase: str) -> tuple[str, str]:
        return _ALL, _ALL

    def modes(
        self,
        *,
        status: str | Sequence[str] | None = None,
        factor: str | None = None,
        phase: str | None = None,
    ) -> list[Mode]:
        return super().modes(status=status)

    def scene_programs_for_mode(
        self, mode_id: int, *, limit: int | None = None
    ) -> list[SceneProgram]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM scene_programs ORDER BY id DESC"
                + ("" if limit is None else f" LIMIT {int(limit)}")
            ).fetchall()
        return [_row_to(SceneProgram, r) for r in rows]

    def _procedural(self, table: str, cls: type, **kw: Any) -> list[Any]:
        # Undivided: mode / (δ, p) / role keys do not narrow retrieval; ids still address entries.
        return super()._procedural(
            table,
            cls,
            mode_id=None,
            factor=None,
            phase=None,
            role_signature=None,
            ids=kw.get("ids"),
            limit=kw.get("limit"),
        )


class NoMemory(MemoryStore):
    """Forgets everything at each new round (the no-memory ablation)."""

    memory_mode = "none"

    def __init__(self, path: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:
        super().__init__(":memory:", **kwargs)

    def begin_round(self, round_idx: int) -> None:
        with self._lock:
            if int(round_idx) != self._round:
                if self._tx_depth:
                    raise RuntimeError("cannot begin a round inside a batch")
                self._conn.close()
                self._conn = self._connect()
            self._round = int(round_idx)
