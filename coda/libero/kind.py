"""LIBERO scenes as a scene kind (`coda.registries.SCENE_KINDS["libero"]`): what the critic
reads of a compiled LIBERO scene where it reads a family's own code for ours: its phases
(`coda.libero.phases`: from the resolved goal, so one segmenter per task model) and its
counterfactual probes (`coda.libero.program.probe`, compiled and checked by LIBERO's
verification). The engine's side follows (docs/libero_coda_port_plan.md)."""

from __future__ import annotations

import dataclasses

import numpy as np

from coda.libero import program
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


KIND = LiberoKind()

__all__ = ["KIND", "LiberoKind"]
