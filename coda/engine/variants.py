"""What generation makes and the shared steps of making it: a `Variant` (one generated scene and
where it came from), the check that a program edits its mode's factor, the parents a program
binds to, and a program applied to many (parent, seed) pairs. Used by `coda.engine.generate`
(targeted variants) and `coda.engine.pairs` (validation pairs)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from coda.engine.edits import factor_magnitude
from coda.engine.engines import mode_spec
from coda.engine.programs import Program, apply_many, bind
from coda.engine.roles import RoleBindingError
from coda.sim.compile import CompiledScene
from coda.sim.scene import Scene
from coda.sim.verify import Verdict

__all__ = ["GenerationError", "Variant", "check_factor", "make_many", "usable_parents"]

log = logging.getLogger(__name__)


class GenerationError(RuntimeError):
    """Too few variants verified within the attempt budget; says how many and why not."""


@dataclasses.dataclass
class Variant:
    """One generated scene: where it came from and what it took."""

    scene: Scene
    kind: str  # "targeted" | "control" | "novel"
    parent: int  # index into the parents (-1 for novel seeds)
    seed: int
    factor: str | None
    magnitude: float
    compiled: CompiledScene | None = None
    verdict: Verdict | None = None
    # a nested pair's targeted variant: the seed of the control edit it was made on top of
    control_seed: int | None = None
    # a recreate pair with rest="resample": the seed that redrew the base's other factors
    rest_seed: int | None = None

    def record(self) -> dict[str, Any]:
        """JSON-able summary (what Ω stores per variant; the program re-makes the scene)."""
        out = {
            "kind": self.kind,
            "parent": self.parent,
            "seed": self.seed,
            "factor": self.factor,
            "magnitude": round(float(self.magnitude), 6),
        }
        if self.control_seed is not None:
            out["control_seed"] = self.control_seed
        if self.rest_seed is not None:
            out["rest_seed"] = self.rest_seed
        return out


def check_factor(mode: Any, program: Program) -> str:
    m = mode_spec(mode)
    if program.factor != m.factor:
        raise ValueError(
            f"the program edits {program.factor!r} but the mode's factor is {m.factor!r}; "
            "targeted variants edit only the responsible factor"
        )
    return m.factor


def usable_parents(program: Program, parents: Sequence[Scene]) -> list[int]:
    idx, first = [], None
    for i, p in enumerate(parents):
        try:
            bind(program, p)
            idx.append(i)
        except RoleBindingError as e:
            first = first or e
    if not idx:
        if first is None:
            raise ValueError("need at least one parent scene")
        raise first
    return idx


def make_many(
    program: Program, jobs: Sequence[tuple[Scene, int]], isolation: str | None = None
) -> list[tuple[Scene, float] | None]:
    """(variant, magnitude) per (parent, seed), None where the edit cannot be made there."""
    out = []
    made_all = apply_many(program, jobs, isolation=isolation)
    for (parent, _), made in zip(jobs, made_all, strict=True):
        if isinstance(made, Scene):
            out.append((made, factor_magnitude(parent, made, program.factor)))
        else:
            log.debug("edit could not be made: %s", made)
            out.append(None)
    return out
