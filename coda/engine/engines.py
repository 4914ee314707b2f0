"""Engine backends: who turns a mode into a generation program. One interface, two backends.

* ``offline`` (embedded default): the program written from the evidence
  (`coda.engine.evidence`: the diagnosed factor put where the parent scenes, the mode's
  failures, had it); the rule table `coda.engine.rules` from (δ, p, cause) to parameterised
  edits only where no such program can be made (no task role common to the parents).
* ``llm``: `coda.engine.llm_engine.LLMEngine` — a coding agent (coda.llm, role "engine") writes
  an edit program against the SDK's documentation; sandboxed, verified, repaired.

`make_engine(name, **kwargs)` builds one by name; unknown names fail listing the valid ones.
A mode is anything with ``factor``, ``phase`` and ``label`` (memory's `Mode`) or ``cause``
(a critic's diagnosis), as attributes or mapping keys; ``id`` when it has one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from coda import registries
from coda.engine.evidence import neighbourhood_program
from coda.engine.programs import Program, apply, bind, load_programs, scene_factor
from coda.engine.roles import RoleBindingError
from coda.engine.rules import candidate_programs
from coda.sim import tasks
from coda.sim.scene import Scene
from coda.sim.sdk import SceneProgramError

__all__ = [
    "ENGINES",
    "Engine",
    "ModeSpec",
    "OfflineEngine",
    "make_engine",
    "mode_spec",
    "resolve_program",
]


@dataclasses.dataclass(frozen=True)
class ModeSpec:
    """What generation reads of a mode: factor (scene vocabulary), phase, cause label, id."""

    factor: str
    phase: str
    cause: str
    id: int | None = None


def mode_spec(mode: Any) -> ModeSpec:
    """Normalises a memory `Mode`, a critic diagnosis, a mapping or a `ModeSpec`."""
    if isinstance(mode, ModeSpec):
        return mode

    def get(*names: str) -> Any:
        for n in names:
            v = mode.get(n) if isinstance(mode, Mapping) else getattr(mode, n, None)
            if v is not None:
                return v
        return None

    factor, phase = get("factor"), get("phase")
    if factor is None or phase is None:
        raise ValueError(f"a mode needs factor and phase, got {mode!r}")
    mid = get("id", "mode_id")
    return ModeSpec(
        scene_factor(str(factor)),
        str(phase),
        str(get("label", "cause") or ""),
        None if mid is None else int(mid),
    )


class Engine(Protocol):
    name: str

    def program_for(
        self, mode: Any, parents: Sequence[Scene], *, seed: int = 0, round: int = 0
    ) -> Program: ...


def _is_final(phase: str, parents: Sequence[Scene]) -> bool | None:
    """Whether `phase` is the ν phase of the parents' family (None if no parent says)."""
    for p in parents:
        try:
            names = [ph.name for ph in tasks.task_phases(p.task)]
        except (KeyError, ValueError):
            continue
        if phase in names:
            return phase == names[-1]
    return None


class OfflineEngine:
    """The program from the evidence (`coda.engine.evidence`), else the rule table
    (`coda.engine.rules`): deterministic, no model, no network."""

    name = "offline"

    def program_for(
        self, mode: Any, parents: Sequence[Scene], *, seed: int = 0, round: int = 0
    ) -> Program:
        """The neighbourhood program written from the parents (the mode's diagnosed failures),
        else the first rule's program that can be made on at least one parent (the fallback
        last): its roles bind there and a trial edit succeeds (a put-inside scene has one
        container, so "another object is the goal" cannot be made there).

        Raises `NoProgram` for execution modes and the first candidate's error if no candidate
        can be made on any parent."""
        m = mode_spec(mode)
        if not parents:
            raise ValueError("program_for needs at least one parent scene")
        first: Exception | None = None
        if m.factor == "execution":
            candidate_programs(m.factor, m.phase, m.cause)  # raises NoProgram
        near = neighbourhood_program(m.factor, m.phase, m.cause, parents)
        rules = candidate_programs(
            m.factor, m.phase, m.cause, final_phase=_is_final(m.phase, parents)
        )
        for program, why in ([(near, near.note)] if near is not None else []) + rules:
            for p in parents:
                try:
                    apply(program, p, seed)
                except (RoleBindingError, SceneProgramError) as e:
                    first = first or e
                    continue
                return dataclasses.replace(program, note=program.note or why)
        assert first is not None
        raise first


ENGINES = registries.ENGINES  # name -> engine factory (coda.registries)


def make_engine(name: str = "offline", **kwargs: Any) -> Engine:
    """An engine backend by name; an unknown name lists the valid ones."""
    return ENGINES.make(name, **kwargs)


def resolve_program(
    mode: Any,
    parents: Sequence[Scene],
    *,
    engine: Engine | None = None,
    memory: Any | None = None,
    seed: int = 0,
    round: int = 0,
    evidence: Sequence[Scene] | None = None,
) -> Program:
    """The mode's program: its newest Ω entry in `memory` that binds to a parent, else the
    engine's (offline by default) written from `evidence` (the mode's diagnosed failures;
    default `parents`)."""
    m = mode_spec(mode)
    if memory is not None and m.id is not None:
        for _, program in load_programs(memory, mode_id=m.id):
            if any(_binds(program, p) for p in parents):
                return program
    ev = list(evidence) if evidence else list(parents)
    return (engine or OfflineEngine()).program_for(m, ev, seed=seed, round=round)


def _binds(program: Program, scene: Scene) -> bool:
    try:
        bind(program, scene)
    except RoleBindingError:
        return False
    return True
