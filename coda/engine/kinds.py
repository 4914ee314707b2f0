"""Scene kinds: what the loop's engine steps call to load a mode's parent records, make its
targeted-vs-control pairs and its targeted variants, and whether Φ has a template for it.

`kind_of(family)` is `coda.registries.SCENE_KINDS[family]` where another kind of scene is
registered (LIBERO: `coda.libero.kind`), else `FAMILIES`, our families' functions unchanged
(`Scene.from_dict`, `coda.engine.pairs.make_validation_batches`,
`coda.engine.generate.generate_targeted`). The loop names no kind: it asks the parents' family.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from coda.engine.generate import Generated, generate_targeted
from coda.engine.pairs import ValidationBatches, make_validation_batches
from coda.registries import SCENE_KINDS
from coda.sim.compile import CompiledScene, compile_scene
from coda.sim.scene import Scene


@dataclasses.dataclass(frozen=True)
class FamilyKind:
    """Our families (`coda.sim.tasks`): the engine's SDK programs over `Scene`s."""

    name: str = "families"
    # Φ's usefulness check reads whole planner demos: episodes are sized to the task
    demos_until_success: bool = False

    def load(self, record: Mapping[str, Any]) -> Scene:
        """A scene again from its record (`Scene.to_dict`)."""
        return Scene.from_dict(dict(record))

    def compile(self, record: Mapping[str, Any]) -> CompiledScene:
        """The compiled scene of a record."""
        return compile_scene(self.load(record))

    def validation_batches(
        self, mode: Any, bases: Sequence[Scene], n: int, seed: int, **kw: Any
    ) -> ValidationBatches:
        """`coda.engine.pairs.make_validation_batches`."""
        return make_validation_batches(mode, bases, n, seed, **kw)

    def generate_targeted(
        self, mode: Any, bases: Sequence[Scene], n: int, seed: int, **kw: Any
    ) -> Generated:
        """`coda.engine.generate.generate_targeted` (the mode's Ω program or the engine's)."""
        return generate_targeted(mode, None, bases, n, seed, 0.0, **kw)

    def has_potential(self, task: Mapping[str, Any]) -> bool:
        """Whether the offline Φ compiler has a template for τ (every family has one)."""
        return True


FAMILIES = FamilyKind()


def kind_of(family: str) -> Any:
    """The scene kind of a family name (module docstring)."""
    return SCENE_KINDS[family] if family in SCENE_KINDS else FAMILIES


def kind_of_record(record: Mapping[str, Any]) -> Any:
    """The scene kind of a scene record (its τ's family)."""
    return kind_of(record["task"]["family"])


__all__ = ["FAMILIES", "FamilyKind", "kind_of", "kind_of_record"]
