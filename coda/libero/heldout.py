"""Is a generated LIBERO scene one of the evaluation's? (issue 30: the LIBERO-PRO files are
never trained on, and no training variant may recreate one of their scenes.)

Two scenes are the same task when they hold the same objects (name and category) and the same
goal atoms (`task_identity`, whatever their files are called: an edited source task with
LIBERO-PRO's changed goal is that LIBERO-PRO task). A generated scene duplicates an evaluation
scene when it is the same task and every movable object starts within `tol` (x, y) of where it
starts there (`EvalIndex.duplicate`): LIBERO's initial states differ by about the 2 cm of its
placement regions, so a layout shift or a swap can land on a held-out state of the same task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

TOL = 0.01  # m: an object this close (x and y) to its place in an evaluation scene is "there"


def task_identity(scene: Any) -> tuple:
    """A LIBERO scene's objects (name, category) and goal atoms, sorted."""
    objs = tuple(sorted((o.name, o.category) for o in scene.objects))
    goal = tuple(sorted(tuple(a) for a in scene.task.get("terminal", {}).get("goal", ())))
    return ("libero", objs, goal)


def positions(compiled: Any) -> dict[str, np.ndarray]:
    """Movable objects' start (x, y) in a compiled LIBERO scene (its settled initial state)."""
    m, out = compiled.model, {}
    for o in compiled.scene.objects:
        if not compiled.scene.attributes[o.name]["fixture"]:
            adr = int(m.jnt_qposadr[m.joint(f"{o.name}/free").id])
            out[o.name] = np.asarray(compiled.init_qpos[adr : adr + 2], float)
    return out


@dataclasses.dataclass
class EvalIndex:
    """The evaluation scenes of a run by task identity: (program, movable positions) each."""

    scenes: dict[tuple, list[tuple[str, dict[str, np.ndarray]]]] = dataclasses.field(
        default_factory=dict
    )

    @classmethod
    def of(cls, compiled: Iterable[Any]) -> EvalIndex:
        idx = cls()
        for c in compiled:
            key = task_identity(c.scene)
            idx.scenes.setdefault(key, []).append((c.scene.program, positions(c)))
        return idx

    def same_task(self, compiled: Any) -> bool:
        return task_identity(compiled.scene) in self.scenes

    def duplicate(self, compiled: Any, tol: float = TOL) -> str | None:
        """The evaluation program `compiled` recreates (same task, every movable object within
        `tol` in x and y), or None."""
        mine = positions(compiled)
        for program, theirs in self.scenes.get(task_identity(compiled.scene), ()):
            if set(theirs) == set(mine) and all(
                np.max(np.abs(mine[n] - theirs[n])) <= tol for n in mine
            ):
                return program
        return None

    def nearest(self, compiled: Any) -> float:
        """The smallest, over evaluation scenes of the same task, of the largest movable-object
        distance (m, the max norm in x, y); inf when no evaluation scene is that task."""
        mine, best = positions(compiled), np.inf
        for _, theirs in self.scenes.get(task_identity(compiled.scene), ()):
            if set(theirs) == set(mine):
                d = max((float(np.max(np.abs(mine[n] - theirs[n]))) for n in mine), default=0.0)
                best = min(best, d)
        return best


def index_of(programs: Sequence[str], compile_fn) -> EvalIndex:
    """The index of evaluation episode programs, each compiled once (`compile_fn(program)`)."""
    return EvalIndex.of(compile_fn(p) for p in dict.fromkeys(programs))


__all__ = ["TOL", "EvalIndex", "index_of", "positions", "task_identity"]
