"""The shared memory M: one SQLite file per run holding the episodic, semantic and procedural tiers.

Why SQLite: one file that the run folder carries, crash-safe transactions (WAL, ``synchronous``
FULL by default), indexes for retrieval by mode / (δ, p) / role signature, and no server. Host 0
alone writes (see DESIGN.md); a lock makes the store safe to share between host threads.

Writes are transactions: each ``add_*`` commits on return, and ``with store.batch():`` groups many
writes into one all-or-nothing commit. A writer killed mid-batch leaves the database exactly as of
its last commit.

The tiers live in their own modules, composed here into ``MemoryStore``: ``coda.memory.base``
(connection, transactions), ``episodic``, ``semantic``, ``procedural``, ``exchange``
(export/import); the row types and shared helpers are in ``coda.memory.records``.
"""

from __future__ import annotations

from coda.memory.episodic import EpisodicTier
from coda.memory.exchange import _FOREIGN as _FOREIGN
from coda.memory.exchange import EXPORT_FORMAT as EXPORT_FORMAT
from coda.memory.exchange import ExportImport, MemoryImportError
from coda.memory.exchange import _is_int as _is_int
from coda.memory.procedural import ProceduralTier
from coda.memory.records import _EXPORT_ORDER as _EXPORT_ORDER
from coda.memory.records import _JSON_COLS as _JSON_COLS
from coda.memory.records import (
    FACTORS,
    MODE_STATUSES,
    Assignment,
    Deployment,
    Diagnosis,
    GenerationProgram,
    Mode,
    SceneProgram,
    TrainingProgram,
    role_signature,
)
from coda.memory.records import _check_factor as _check_factor
from coda.memory.records import _check_status as _check_status
from coda.memory.records import _dumps as _dumps
from coda.memory.records import _json_default as _json_default
from coda.memory.records import _limit as _limit
from coda.memory.records import _row_to as _row_to
from coda.memory.semantic import _TRANSITIONS as _TRANSITIONS
from coda.memory.semantic import SemanticTier

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


class MemoryStore(EpisodicTier, SemanticTier, ProceduralTier, ExportImport):
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
