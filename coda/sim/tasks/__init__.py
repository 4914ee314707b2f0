"""Task families: generators of task proposals (instruction, roles, initial / terminal states, ν).

One module per family (`pick_place`, `put_inside`, `articulated`, `stack_or_insert`) owns all
that family knows: program templates and proposals, roles and τ, ν, the ordered task phases and
the segmentation of a trace, the scripted planner's waypoints and the potential templates
(`base.TaskFamily` lists the hooks; `carry` is the pick → carry → place skeleton three of them
share). Everything else reads them from the registry `FAMILIES[name]`. A proposal whose family
has no verifier (ν) is discarded by `propose` — the engine only ever sees verifiable proposals.
"""

from __future__ import annotations

import numpy as np

from coda import registries
from coda.registry import Registry
from coda.sim.tasks.articulated import ArticulatedFamily
from coda.sim.tasks.base import PotentialTemplate, TaskFamily, describe, noun_phrase
from coda.sim.tasks.phases import Phase, segment
from coda.sim.tasks.pick_place import PickPlaceFamily
from coda.sim.tasks.put_inside import PutInsideFamily
from coda.sim.tasks.stack_or_insert import StackOrInsertFamily
from coda.sim.tasks.waypoints import Waypoint

# name -> `TaskFamily` (coda.registries): an unknown name raises `UnknownName` (a KeyError)
# listing the valid ones, for `FAMILIES[name]` and `get_family(name)` alike.
FAMILIES: Registry = registries.FAMILIES


def get_family(name: str) -> TaskFamily:
    """The registered family `name` (KeyError listing the valid names otherwise)."""
    return FAMILIES[name]


def task_phases(task: dict) -> tuple[Phase, ...]:
    """The ordered phases (last: ν) of a task dict, from the family that owns it."""
    return get_family(task["family"]).task_phases(task)


def register_family(family: TaskFamily, probe_seed: int = 0) -> None:
    """Adds a family after checking that its proposals come with a success predicate ν."""
    if family.propose(np.random.default_rng(probe_seed), max_tries=3) is None:
        raise ValueError(f"family {family.name!r} has no success predicate ν; not registered")
    FAMILIES.register(family.name, family, replace=True)


__all__ = [
    "FAMILIES",
    "ArticulatedFamily",
    "Phase",
    "PickPlaceFamily",
    "PotentialTemplate",
    "PutInsideFamily",
    "Registry",
    "StackOrInsertFamily",
    "TaskFamily",
    "Waypoint",
    "describe",
    "get_family",
    "noun_phrase",
    "register_family",
    "segment",
    "task_phases",
]
