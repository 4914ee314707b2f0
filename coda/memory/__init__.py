"""Shared memory M of CoDA: episodic B, semantic modes K_j, procedural Ω and Φ (§3.2).

``open_memory(path, mode=...)`` picks the full memory or one of its ablations by name; all share
the ``MemoryStore`` interface. The schema is documented in ``coda.memory.schema``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

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

MEMORY_MODES: dict[str, Callable[..., MemoryStore]] = {
    "full": MemoryStore,
    "single_store": SingleStoreMemory,
    "none": NoMemory,
}


def open_memory(path: str | os.PathLike[str], mode: str = "full", **kwargs: Any) -> MemoryStore:
    """Open (or create) the run's memory with the chosen layout: full | single_store | none."""
    if mode not in MEMORY_MODES:
        raise ValueError(f"unknown memory mode {mode!r}; valid: {sorted(MEMORY_MODES)}")
    return MEMORY_MODES[mode](path, **kwargs)


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
