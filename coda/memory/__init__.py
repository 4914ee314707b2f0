"""Shared memory M of CoDA: episodic B, semantic modes K_j, procedural Ω and Φ (§3.2).

``open_memory(path, mode=...)`` picks the full memory or one of its ablations by name; all share
the ``MemoryStore`` interface. The schema is documented in ``coda.memory.schema``.
"""

from __future__ import annotations

import os
from typing import Any

from coda import registries
from coda.memory.ablations import NoMemory, SingleStoreMemory
from coda.memory.schema import SCHEMA_VERSION
from coda.memory.similarity import (
    CauseSimilarity,
    EmbeddingSimilarity,
    HashedTfidfSimilarity,
    get_similarity,
)
from coda.memory.store import (
    FACTORS,
    MODE_STATUSES,
    Assignment,
    Deployment,
    Diagnosis,
    GenerationProgram,
    MemoryImportError,
    MemoryStore,
    Mode,
    SceneProgram,
    TrainingProgram,
    role_signature,
)

MEMORY_MODES = registries.MEMORY_MODES  # name -> store class (coda.registries)


def open_memory(path: str | os.PathLike[str], mode: str = "full", **kwargs: Any) -> MemoryStore:
    """Open (or create) the run's memory with the chosen layout: full | single_store | none."""
    return MEMORY_MODES.make(mode, path, **kwargs)


__all__ = [
    "FACTORS",
    "MEMORY_MODES",
    "MODE_STATUSES",
    "SCHEMA_VERSION",
    "Assignment",
    "CauseSimilarity",
    "Deployment",
    "Diagnosis",
    "EmbeddingSimilarity",
    "GenerationProgram",
    "HashedTfidfSimilarity",
    "MemoryImportError",
    "MemoryStore",
    "Mode",
    "NoMemory",
    "SceneProgram",
    "SingleStoreMemory",
    "TrainingProgram",
    "get_similarity",
    "open_memory",
    "role_signature",
]
