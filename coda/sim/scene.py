"""A factored scene s = (τ, σ, α): task, object layout, object attributes.

A scene is data (JSON round-trip); a scene *program* g is Python against the SDK in `sdk.py`
whose execution Exec(g, seed) produces one. Resampling exactly one factor keeps the other two
fixed: `resample(scene, "layout", seed)` changes only poses, "attributes" only sizes / masses /
frictions / colours, "task" only the task (roles, instruction, initial and terminal states).

The record and its family-independent samplers live in `scene_data` (below the task families,
which build τ over it); this module adds `resample`, which asks the scene's family, so the
import graph stays one-way: scene_data <- tasks <- scene.
"""

from __future__ import annotations

import copy

import numpy as np

from coda.sim.scene_data import (
    BACK_REGION,
    FACTORS,
    MIN_GAP,
    TABLE_DEFAULT,
    TABLE_LIMITS,
    TABLE_REGION,
    ObjectSpec,
    Scene,
    SceneFormatError,
    check_record,
    check_table,
    footprint_radius,
    sample_attributes,
    sample_layout,
)
from coda.sim.tasks import get_family

__all__ = [
    "BACK_REGION",
    "FACTORS",
    "MIN_GAP",
    "TABLE_DEFAULT",
    "TABLE_LIMITS",
    "TABLE_REGION",
    "ObjectSpec",
    "Scene",
    "SceneFormatError",
    "check_record",
    "check_table",
    "footprint_radius",
    "resample",
    "sample_attributes",
    "sample_layout",
]


def resample(scene: Scene, factor: str, seed: int) -> Scene:
    """A copy of `scene` with exactly one factor resampled (deterministic in `seed`)."""
    if factor not in FACTORS:
        raise ValueError(f"unknown factor {factor!r}; valid: {FACTORS}")
    rng = np.random.default_rng(seed)
    new = copy.deepcopy(scene)
    if factor == "layout":
        new.layout = sample_layout(new.objects, new.attributes, rng, table=new.table)
    elif factor == "attributes":
        new.attributes = sample_attributes(new.objects, rng)
        get_family(new.task["family"]).couple_attributes(new)
    else:
        new.task = get_family(new.task["family"]).resample_task(new, rng)
    new.program = None  # the scene no longer equals Exec(g); the engine writes a new g
    return new
