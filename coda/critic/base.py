"""The critic interface, its registry, failure selection and recording in memory.

A critic maps failed `Episode`s to `Critique`s (a validated `Diagnosis`, or why none was made).
Every accepted diagnosis is written to memory's episodic tier with `add_diagnosis`, which clusters
it into a difficulty mode K_j; the `Assignment` comes back on the critique. Rejected outputs
(a VLM reply naming a phase the family lacks) are kept on the critique and never stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

import jax
import numpy as np

from coda import registries
from coda.critic.episode import Episode
from coda.critic.types import MEMORY_FACTOR, Diagnosis


@dataclasses.dataclass(frozen=True)
class Critique:
    """One episode's outcome: a diagnosis (recorded in memory when one was given) or a
    rejection reason."""

    episode: Episode
    diagnosis: Diagnosis | None
    rejected: str | None = None  # why the critic's output was not accepted
    assignment: Any = None  # coda.memory Assignment (diagnosis id, mode id, ...) when recorded
    seconds: float = 0.0  # wall time spent on this episode (its share of batched probes)

    @property
    def ok(self) -> bool:
        return self.diagnosis is not None


class Critic(Protocol):
    name: str

    def diagnose(
        self, episodes: Sequence[Episode], key: jax.Array, *, round: int = 0
    ) -> list[Critique]:
        """One critique per episode, in order."""
        ...


def record(memory: Any, ep: Episode, diag: Diagnosis, *, round: int) -> Any:
    """Writes ψ to memory (episodic) and lets it cluster into a mode; returns the Assignment.
    Factor names are mapped to memory's (`MEMORY_FACTOR`)."""
    evidence = diag.evidence.to_json()
    evidence["numbers"] = dict(diag.evidence.numbers)
    evidence.update(
        {
            "cause_label": diag.cause,
            "family": ep.family,
            "instruction": ep.instruction,
            "structure_key": ep.structure_key,
            "scene_factor": diag.factor,
        }
    )
    return memory.add_diagnosis(
        round=round,
        factor=MEMORY_FACTOR[diag.factor],
        phase=diag.phase,
        cause=diag.memory_cause(),
        evidence=evidence,
        critic=diag.critic,
        model=diag.model,
        scene_program_id=ep.scene_program_id,
        deployment_id=ep.deployment_id,
    )


def default_stratum(ep: Episode) -> Hashable:
    """Strata for selection: the bucket structure and the phase where progress stopped."""
    return (ep.structure_key, ep.stopped_phase)


def select_failures(
    episodes: Sequence[Episode],
    max_per_mode: int,
    key: jax.Array,
    *,
    mode_of: Callable[[Episode], Hashable] = lambda ep: ep.mode_id,
    stratum: Callable[[Episode], Hashable] = default_stratum,
) -> list[Episode]:
    """At most `max_per_mode` failed episodes per mode (the memory mode a scene was generated
    for; None groups novel scenes), spread over strata round-robin so one bucket or one stopped
    phase cannot fill a mode's quota. Deterministic given `key`: episodes are shuffled within
    each stratum and strata are visited in a shuffled order. Successful episodes are skipped."""
    if max_per_mode < 0:
        raise ValueError(f"max_per_mode must be >= 0, got {max_per_mode}")
    modes: dict[Hashable, dict[Hashable, list[int]]] = {}
    for i, ep in enumerate(episodes):
        if not ep.success:
            modes.setdefault(mode_of(ep), {}).setdefault(stratum(ep), []).append(i)
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    chosen: list[int] = []
    for m, (_, strata) in enumerate(sorted(modes.items(), key=lambda kv: repr(kv[0]))):
        rng = np.random.default_rng([seed, m])
        groups = [list(rng.permutation(v)) for _, v in sorted(strata.items(), key=repr)]
        groups = [groups[j] for j in rng.permutation(len(groups))]
        picked: list[int] = []
        while len(picked) < max_per_mode and any(groups):
            for g in groups:
                if g and len(picked) < max_per_mode:
                    picked.append(int(g.pop(0)))
        chosen += picked
    return [episodes[i] for i in sorted(chosen)]


CRITICS = registries.CRITICS  # name -> critic factory (coda.registries)


def register_critic(name: str, factory: Callable[..., Critic]) -> None:
    """Adds a critic factory under `name` (an error if the name is taken)."""
    CRITICS.register(name, factory)


def make_critic(name: str, **kwargs: Any) -> Critic:
    """A critic backend by config name; an unknown name lists the valid ones."""
    return CRITICS.make(name, **kwargs)
