"""Task families: generators of task proposals (instruction, roles, initial / terminal states, ν).

A family proposes scene programs (source text against the SDK), builds the τ factor from a
list of objects (`make_task`), resamples τ keeping σ and α fixed, and returns the success
predicate ν for a task. A proposal whose family has no verifier (ν) is discarded by
`propose` — the engine only ever sees verifiable proposals.
"""

from __future__ import annotations

from coda.sim.tasks.base import TaskFamily, describe, noun_phrase
from coda.sim.tasks.families import (
    ArticulatedFamily,
    PickPlaceFamily,
    PutInsideFamily,
    StackOrInsertFamily,
)
from coda.sim.tasks.phases import Phase, segment

FAMILIES: dict[str, TaskFamily] = {
    f.name: f
    for f in (PickPlaceFamily(), ArticulatedFamily(), PutInsideFamily(), StackOrInsertFamily())
}


def get_family(name: str) -> TaskFamily:
    if name not in FAMILIES:
        raise KeyError(f"unknown task family {name!r}; valid: {sorted(FAMILIES)}")
    return FAMILIES[name]


def task_phases(task: dict) -> tuple[Phase, ...]:
    """The ordered phases (last: ν) of a task dict, from the family that owns it."""
    return get_family(task["family"]).task_phases(task)


def register_family(family: TaskFamily, probe_seed: int = 0) -> None:
    """Adds a family after checking that its proposals come with a success predicate ν."""
    import numpy as np

    if family.propose(np.random.default_rng(probe_seed), max_tries=3) is None:
        raise ValueError(f"family {family.name!r} has no success predicate ν; not registered")
    FAMILIES[family.name] = family


__all__ = [
    "FAMILIES",
    "Phase",
    "ArticulatedFamily",
    "PickPlaceFamily",
    "PutInsideFamily",
    "StackOrInsertFamily",
    "TaskFamily",
    "describe",
    "get_family",
    "noun_phrase",
    "register_family",
    "segment",
    "task_phases",
]
