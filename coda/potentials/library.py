"""Deterministic training-program templates: the offline compiler's knowledge (§3.4).

``subgoal_program(task, phase, factor, level)`` writes a real subgoal program (source text in the
training-program language, see ``program.py``) for a task τ from its family's template
(``FAMILIES[τ.family].potential_template(τ)``: stages, their done / progress functions, the
finer stages of each, the map from planner phases to stages). The four families give:

* pick-like (pick_place, put_inside, stack, insert): reach the object → grasp it → lift it →
  carry it over the destination → place/insert and release;
* articulated: reach the handle → grasp it → move the joint to the goal fraction.

Each done predicate is cumulative ("this subgoal or any later one is achieved"), so completion
holds along a successful execution although Φ is a function of the state only. ``level`` is the
repair ladder: 0 the full decomposition, 1 a coarser one (fewer, broader stages), 2 the single-
stage task-description potential (``task_description_program``, also the ablation).

The diagnosed phase shapes the program: at level 0 its subgoal is split into finer stages (e.g.
a failing "lower/release" becomes "lower" → "release", a failing "grasp" becomes "enclose" →
"grasp"), so the potential is densest where the policy fails. Learning tools: subgoals before
the diagnosed one get ``reeval`` (they already work: only periodic re-evaluation), the diagnosed
ones and later ones ``shaped_awr``; without a diagnosis all get ``shaped_awr``.
Routing (``coda.train``) revises tools from measured success rates. This module only assembles
programs; nothing here knows a family by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coda.registries import SCENE_KINDS
from coda.sim.tasks import FAMILIES, PotentialTemplate

__all__ = [
    "REPAIR_LEVELS",
    "subgoal_program",
    "task_description_program",
    "task_kind",
]

REPAIR_LEVELS = 3


def _template(task: Mapping[str, Any]) -> PotentialTemplate:
    fam = task.get("family")
    if fam in SCENE_KINDS:  # another kind of scene (LIBERO) writes its own template
        return SCENE_KINDS[fam].potential_template(task)
    if fam not in FAMILIES:
        valid = sorted(FAMILIES) + sorted(SCENE_KINDS)
        raise ValueError(f"no offline training program for task family {fam!r}; valid: {valid}")
    return FAMILIES[fam].potential_template(task)


def task_kind(task: Mapping[str, Any]) -> str:
    """The program kind of τ, from its family: pick_place | put_inside | stack | insert |
    articulated for the four built-in families."""
    return _template(task).kind


def _tools(names: list[str], focus: str | None) -> list[str]:
    if focus is None or focus not in names:
        return ["shaped_awr"] * len(names)
    k = names.index(focus)
    return ["reeval"] * k + ["shaped_awr"] * (len(names) - k)


def _header(kind: str, task: Mapping[str, Any], phase: str | None, factor: str | None) -> str:
    instr = str(task.get("instruction", kind)).replace('"', "'")
    diag = f"diagnosed phase {phase!r}, factor {factor!r}" if phase else "no diagnosis"
    return f'"""Training program ({kind}): {instr}. {diag}."""\n'


def _subgoals_literal(names: list[str], tools: list[str], desc: Mapping[str, str]) -> str:
    rows = "".join(
        f'    {{"name": "{n}", "tool": "{t}", "description": "{desc.get(n, "")}"}},\n'
        for n, t in zip(names, tools, strict=True)
    )
    return f"SUBGOALS = [\n{rows}]\n"


def _stage_functions(names: list[str], table: Mapping[str, tuple[str, str]]) -> str:
    out = ""
    for k, n in enumerate(names):
        done, prog = table[n]
        out += (
            f"\n\ndef subgoal_{k}_done(s, sym):\n    return {done}(s, sym)\n"
            f"\n\ndef subgoal_{k}_potential(s, sym):\n    return {prog}(s, sym)\n"
        )
    return out


def subgoal_program(
    task: Mapping[str, Any],
    phase: str | None = None,
    factor: str | None = None,
    level: int = 0,
) -> str:
    """Source of the offline training program for τ and a diagnosed phase (repair `level`)."""
    if level >= REPAIR_LEVELS - 1:
        return task_description_program(task)
    if level < 0:
        raise ValueError(f"level must be in [0, {REPAIR_LEVELS}), got {level}")
    tpl = _template(task)
    focus = tpl.phase_to_subgoal.get(phase) if phase else None
    names = list(tpl.levels[level])
    table, defs = dict(tpl.stages), tpl.defs
    if level == 1 and focus is not None:
        focus = tpl.coarse.get(focus, focus)
    if level == 0 and focus in tpl.refine:
        k = names.index(focus)
        finer = list(tpl.refine[focus])
        names[k : k + 1] = finer
        if focus in tpl.refined_progress:
            table[focus] = (table[focus][0], tpl.refined_progress[focus])
        defs += tpl.refine_defs
        focus = finer[0]
    tools = _tools(names, focus)
    return (
        _header(tpl.kind, task, phase, factor)
        + "\n"
        + _subgoals_literal(names, tools, tpl.descriptions)
        + defs
        + _stage_functions(names, table)
    )


def task_description_program(task: Mapping[str, Any]) -> str:
    """Single-stage potential from τ's terminal relation alone (the ablation; repair fallback).

    φ = progress of the object's distance to where the terminal relation puts it (or of the
    joint fraction); done = the terminal relation (ν).
    """
    tpl = _template(task)
    rel = task.get("terminal", {}).get("relation", "?")
    header = f'"""Task-description potential ({tpl.kind}): terminal relation {rel!r}."""\n\n'
    sg = '{"name": "task", "tool": "shaped_awr", "description": "terminal relation of the task"}'
    return header + f"SUBGOALS = [{sg}]\n" + tpl.task_description
