"""LIBERO scenes as a scene kind (`coda.registries.SCENE_KINDS["libero"]`): what the critic
reads of a compiled LIBERO scene where it reads a family's own code for ours: its phases
(`coda.libero.phases`: from the resolved goal, so one segmenter per task model) and its
counterfactual probes (`coda.libero.program.probe`, compiled and checked by LIBERO's
verification); and what the engine steps call (`coda.engine.kinds`): records loaded through
their episode program, targeted-vs-control pairs and targeted variants as choices over edits
(`coda.libero.engine`), and no Φ template (a LIBERO mode is trained without a potential)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from coda.libero import engine, program
from coda.libero.episodes import compile_episode
from coda.libero.phases import goal_phases
from coda.libero.verify import verify_task_state

# probe kinds with no LIBERO change of their own that fall back to a redraw, as the critic's
# family probes do (`coda.critic.probes.probe_plan`); "away" and "near" are skipped instead
FALLBACK = ("recategorized", "relation")


@dataclasses.dataclass(frozen=True)
class LiberoKind:
    name: str = "libero"

    def phases(self, compiled) -> tuple:
        """The goal's ordered phases, ν last (`coda.libero.phases.goal_phases`)."""
        return goal_phases(compiled)

    def segment_key(self, compiled) -> str:
        """What makes two compiled scenes share a segmenter: the task model (its goal's
        resolved atoms are the model's)."""
        return compiled.structure_key

    def probe(self, compiled, factor: str, kind: str, seed: int):
        """A compiled probe of `kind` changing `factor` of a LIBERO episode, or None."""
        rng = np.random.default_rng(seed)
        p = program.probe(compiled.scene.program, factor, kind, rng)
        if p is None and kind in FALLBACK:  # a redraw (the task's: isolated, see probe)
            p = program.probe(compiled.scene.program, factor, "redraw", rng)
        return None if p is None else compile_episode(p, seed)

    def verify(self, compiled):
        """LIBERO's checks of a compiled scene (`coda.libero.verify`): a `Verdict`."""
        return verify_task_state(compiled).verdict

    def load(self, record: Mapping[str, Any]):
        """A scene again from its record: its episode program and seed compiled (`Scene`)."""
        return self.compile(record).scene

    def compile(self, record: Mapping[str, Any]):
        """The compiled episode of a record (`coda.libero.episodes.compile_episode`)."""
        return compile_episode(record["program"], int(record.get("seed", 0)))

    def validation_batches(self, mode, bases, n: int, seed: int, **kw: Any):
        """Recreate pairs over edits (`coda.libero.engine.validation_batches`)."""
        return engine.validation_batches(mode, bases, n, seed, **kw)

    def generate_targeted(self, mode, bases, n: int, seed: int, **kw: Any):
        """The mode's edits on `bases` (`coda.libero.engine.generate_targeted`)."""
        return engine.generate_targeted(mode, bases, n, seed, **kw)

    def has_potential(self, task: Mapping[str, Any]) -> bool:
        """No Φ template for LIBERO goals yet (docs/libero_coda_port_plan.md, step 7)."""
        return False


KIND = LiberoKind()

__all__ = ["KIND", "LiberoKind"]
