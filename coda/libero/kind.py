"""LIBERO scenes as a scene kind (`coda.registries.SCENE_KINDS["libero"]`): what the critic
reads of a compiled LIBERO scene where it reads a family's own code for ours. Today its phases
(`coda.libero.phases`: from the resolved goal, so one segmenter per task model); the probes
(`coda.libero.program.probe`) and the engine's side follow (docs/libero_coda_port_plan.md)."""

from __future__ import annotations

import dataclasses

from coda.libero.phases import goal_phases


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


KIND = LiberoKind()

__all__ = ["KIND", "LiberoKind"]
