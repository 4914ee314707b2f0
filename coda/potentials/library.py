"""Deterministic training-program templates: the offline compiler's knowledge (§3.4).

``subgoal_program(task, phase, factor, level)`` writes a real subgoal program (source text in the
training-program language, see ``program.py``) for a task τ of one of the four families:

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
Routing (``coda.train``) revises tools from measured success rates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coda.sim import predicates as P

__all__ = [
    "PHASE_TO_SUBGOAL",
    "REPAIR_LEVELS",
    "subgoal_program",
    "task_description_program",
    "task_kind",
]

REPAIR_LEVELS = 3

# planner / critic phase names -> subgoal name, per kind of task
PHASE_TO_SUBGOAL: dict[str, dict[str, str]] = {
    "pick": {
        "approach": "reach",
        "descend": "reach",
        "grasp": "grasp",
        "lift": "lift",
        "transport": "carry",
        "lower": "place",
        "release": "place",
        "retreat": "place",
    },
    "articulated": {
        "approach": "reach",
        "descend": "reach",
        "grasp": "grasp",
        "pull": "move",
        "push": "move",
        "release": "move",
        "retreat": "move",
    },
}
# coarse (level 1) stage that absorbs each full stage
_COARSE = {
    "pick": {"reach": "acquire", "grasp": "acquire", "lift": "carry", "carry": "carry"},
    "articulated": {"reach": "acquire", "grasp": "acquire", "move": "move"},
}


def task_kind(task: Mapping[str, Any]) -> str:
    """pick_place | put_inside | stack | insert | articulated (from τ)."""
    fam = task.get("family")
    if fam == "stack_or_insert":
        mode = task.get("params", {}).get("mode", "stack")
        if mode not in ("stack", "insert"):
            raise ValueError(f"stack_or_insert mode must be stack or insert, got {mode!r}")
        return mode
    if fam in ("pick_place", "put_inside", "articulated"):
        return fam
    raise ValueError(
        f"no offline training program for task family {fam!r}; "
        "valid: ['articulated', 'pick_place', 'put_inside', 'stack_or_insert']"
    )


def _roles(task: Mapping[str, Any], kind: str) -> tuple[str, str]:
    """Symbolic roles (keys of τ's role map) of the moved object and the destination."""
    want = {
        "pick_place": ("target", "goal"),
        "put_inside": ("target", "container"),
        "stack": ("top", "base"),
        "insert": ("peg", "hole"),
        "articulated": ("cabinet", "cabinet.handle"),
    }[kind]
    roles = task.get("roles", {})
    if roles and want[0] not in roles:
        raise ValueError(f"task roles {sorted(roles)} lack {want[0]!r} needed by {kind}")
    return want


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


# ----------------------------------------------------------------------------- pick-like


def _final_pred(kind: str) -> str:
    """Body of `placed(s, sym)`: ν of the task, in the program language."""
    if kind == "pick_place":
        return "return on_top(s, o, d, 0.02) & ~grasped(s, o)"
    if kind == "put_inside":
        return "return inside(s, o, d) & ~grasped(s, o)"
    if kind == "stack":
        return "return on_top(s, o, d, 0.015) & ~grasped(s, o) & upright(s, o)"
    return (
        "in_xy = within_footprint(s, pos(s, o), d, 0.0, True)\n"
        "    return in_xy & (bottom(s, o) < top(s, d) - DEPTH) & ~grasped(s, o)"
    )


def _at_dest(kind: str) -> str:
    """Body of `at_dest(s, sym)`: the object is over (or already in/on) the destination."""
    if kind in ("pick_place", "stack"):
        return "return above(s, o, d) | on_top(s, o, d, 0.02)"
    if kind == "put_inside":
        return (
            "over = within_footprint(s, pos(s, o), d, 0.0, True)\n"
            "    over = over & (bottom(s, o) > top(s, d) - 0.01)\n"
            "    return over | inside(s, o, d)"
        )
    return "return within_footprint(s, pos(s, o), d, -0.01, True)"


def _lowered(kind: str) -> str:
    """Body of `lowered_done`: the terminal relation holds, released or not."""
    if kind == "pick_place":
        return "return on_top(s, o, d, 0.02) | placed(s, sym)"
    if kind == "put_inside":
        return "return inside(s, o, d) | placed(s, sym)"
    if kind == "stack":
        return "return on_top(s, o, d, 0.015) | placed(s, sym)"
    return (
        "in_xy = within_footprint(s, pos(s, o), d, 0.0, True)\n"
        "    return (in_xy & (bottom(s, o) < top(s, d) - DEPTH)) | placed(s, sym)"
    )


def _place_gap(kind: str) -> str:
    """Expression: height of the object's bottom above where it must end up."""
    if kind == "put_inside":
        return "bottom(s, o) - (s.body_pos[..., d, 2] + s.inner[..., d, 3])"
    if kind == "insert":
        return "bottom(s, o) - (top(s, d) - DEPTH)"
    return "bottom(s, o) - top(s, d)"


_PICK_DESC = {
    "reach": "tool centre at the object",
    "grasp": "both fingers hold the object",
    "lift": "object off the table",
    "carry": "object over the destination",
    "place": "object at its destination and released",
    "acquire": "object held",
    "hover": "tool centre above the object",
    "enclose": "object centred between the open fingers",
    "raise": "object at carrying height",
    "near_dest": "object near the destination",
    "lower": "object resting at the destination, still held",
    "release": "fingers opened, object left in place",
}

_PICK_DEFS = """
OBJ = "{obj}"
DEST = "{dest}"
DEPTH = {depth}


def roles(sym):
    return sym.body(OBJ), sym.body(DEST)


def placed(s, sym):
    o, d = roles(sym)
    {final}


def at_dest(s, sym):
    o, d = roles(sym)
    {at_dest}


def lift_done(s, sym):
    o, d = roles(sym)
    return lifted(s, o, 0.03) | at_dest(s, sym) | placed(s, sym)


def grasp_done(s, sym):
    o, d = roles(sym)
    return grasped(s, o) | lift_done(s, sym)


def reach_done(s, sym):
    o, d = roles(sym)
    return (ee_distance(s, o) < 0.025) | grasp_done(s, sym)


def reach_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(ee_distance(s, o), 0.15)


def grasp_progress(s, sym):
    o, d = roles(sym)
    closing = ramp(0.09 - gripper_opening(s), 0.0, 0.04)
    return closing * distance_progress(ee_distance(s, o), 0.05)


def lift_progress(s, sym):
    o, d = roles(sym)
    return ramp(height(s, o), 0.0, 0.03)


def carry_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(xy_distance(pos(s, o), pos(s, d)), 0.15)


def place_progress(s, sym):
    o, d = roles(sym)
    lowered = ramp(-({gap}), -0.12, -0.005)
    released = jnp.where(grasped(s, o), 0.0, 1.0)
    return 0.7 * lowered + 0.3 * released
"""

# finer stages for the diagnosed subgoal (level 0): dense progress where the policy fails
_PICK_REFINE_DEFS = """

def hover_done(s, sym):
    o, d = roles(sym)
    over = (xy_distance(s.ee_pos, pos(s, o)) < 0.015) & (s.ee_pos[..., 2] > top(s, o))
    return over | reach_done(s, sym)


def hover_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(xy_distance(s.ee_pos, pos(s, o)), 0.1)


def enclose_done(s, sym):
    o, d = roles(sym)
    return (ee_distance(s, o) < 0.012) | grasp_done(s, sym)


def enclose_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(ee_distance(s, o), 0.02)


def raise_done(s, sym):
    o, d = roles(sym)
    return lifted(s, o, 0.06) | at_dest(s, sym) | placed(s, sym)


def raise_progress(s, sym):
    o, d = roles(sym)
    return ramp(height(s, o), 0.03, 0.06)


def near_dest_done(s, sym):
    o, d = roles(sym)
    return (xy_distance(pos(s, o), pos(s, d)) < 0.05) | at_dest(s, sym) | placed(s, sym)


def fine_carry_progress(s, sym):
    o, d = roles(sym)
    return distance_progress(xy_distance(pos(s, o), pos(s, d)), 0.03)


def lowered_done(s, sym):
    o, d = roles(sym)
    {lowered}


def lower_progress(s, sym):
    o, d = roles(sym)
    return ramp(-({gap}), -0.12, -0.005)


def release_progress(s, sym):
    return ramp(gripper_opening(s), 0.0, 0.09)
"""
# focus stage -> the stages that replace it
_PICK_REFINE = {
    "reach": ["hover", "reach"],
    "grasp": ["enclose", "grasp"],
    "lift": ["lift", "raise"],
    "carry": ["near_dest", "carry"],
    "place": ["lower", "release"],
}

# per stage: (done, progress) function names
_PICK_STAGES = {
    "reach": ("reach_done", "reach_progress"),
    "grasp": ("grasp_done", "grasp_progress"),
    "lift": ("lift_done", "lift_progress"),
    "carry": ("at_dest", "carry_progress"),
    "place": ("placed", "place_progress"),
    "acquire": ("grasp_done", "reach_progress"),
    "hover": ("hover_done", "hover_progress"),
    "enclose": ("enclose_done", "enclose_progress"),
    "raise": ("raise_done", "raise_progress"),
    "near_dest": ("near_dest_done", "carry_progress"),
    "lower": ("lowered_done", "lower_progress"),
    "release": ("placed", "release_progress"),
}
_PICK_REFINED_PROGRESS = {
    "reach": "reach_progress",
    "grasp": "grasp_progress",
    "lift": "lift_progress",
    "carry": "fine_carry_progress",
}
_PICK_LEVELS = {
    0: ["reach", "grasp", "lift", "carry", "place"],
    1: ["acquire", "carry", "place"],
}


# ----------------------------------------------------------------------------- articulated

_ART_DESC = {
    "reach": "tool centre at the handle",
    "grasp": "both fingers hold the handle",
    "move": "joint at the goal fraction",
    "acquire": "handle held",
    "hover": "tool centre above the handle",
    "enclose": "handle centred between the open fingers",
    "start": "joint moving toward the goal",
}

_ART_DEFS = """
PART = "{part}"
HANDLE = "{handle}"


def goal_reached(s, sym):
    f = joint_fraction(s, sym.joint(PART))
    return {goal}


def grasp_done(s, sym):
    return grasped(s, sym.body(HANDLE)) | goal_reached(s, sym)


def reach_done(s, sym):
    return (ee_distance(s, sym.body(HANDLE)) < 0.03) | grasp_done(s, sym)


def reach_progress(s, sym):
    return distance_progress(ee_distance(s, sym.body(HANDLE)), 0.15)


def grasp_progress(s, sym):
    closing = ramp(0.09 - gripper_opening(s), 0.0, 0.04)
    return closing * distance_progress(ee_distance(s, sym.body(HANDLE)), 0.05)


def move_progress(s, sym):
    f = joint_fraction(s, sym.joint(PART))
    return {move}
"""
_ART_REFINE_DEFS = """

def hover_done(s, sym):
    h = sym.body(HANDLE)
    over = (xy_distance(s.ee_pos, pos(s, h)) < 0.015) & (s.ee_pos[..., 2] > pos(s, h)[..., 2])
    return over | reach_done(s, sym)


def hover_progress(s, sym):
    return distance_progress(xy_distance(s.ee_pos, pos(s, sym.body(HANDLE))), 0.1)


def enclose_done(s, sym):
    return (ee_distance(s, sym.body(HANDLE)) < 0.012) | grasp_done(s, sym)


def enclose_progress(s, sym):
    return distance_progress(ee_distance(s, sym.body(HANDLE)), 0.02)


def started_done(s, sym):
    f = joint_fraction(s, sym.joint(PART))
    return ({started}) | goal_reached(s, sym)
"""
_ART_REFINE = {
    "reach": ["hover", "reach"],
    "grasp": ["enclose", "grasp"],
    "move": ["start", "move"],
}
_ART_STAGES = {
    "reach": ("reach_done", "reach_progress"),
    "grasp": ("grasp_done", "grasp_progress"),
    "move": ("goal_reached", "move_progress"),
    "acquire": ("grasp_done", "reach_progress"),
    "hover": ("hover_done", "hover_progress"),
    "enclose": ("enclose_done", "enclose_progress"),
    "start": ("started_done", "move_progress"),
}
_ART_LEVELS = {0: ["reach", "grasp", "move"], 1: ["acquire", "move"]}


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
    kind = task_kind(task)
    group = "articulated" if kind == "articulated" else "pick"
    focus = PHASE_TO_SUBGOAL[group].get(phase) if phase else None
    if group == "articulated":
        names = list(_ART_LEVELS[level])
        table, desc = _ART_STAGES, _ART_DESC
        action = task.get("params", {}).get("action", "open")
        if action == "open":
            goal = f"f >= {P.OPEN_FRACTION}"
            move = f"ramp(f, 0.0, {P.OPEN_FRACTION})"
        else:
            goal = f"f <= {P.CLOSED_FRACTION}"
            move = f"ramp(-f, -1.0, -{P.CLOSED_FRACTION})"
        obj, handle = _roles(task, kind)
        defs = _ART_DEFS.format(part=obj, handle=handle, goal=goal, move=move)
        started = "f >= 0.2" if action == "open" else "f <= 0.45"
        refine_defs, refine = _ART_REFINE_DEFS.format(started=started), _ART_REFINE
        refined_progress: dict[str, str] = {}
    else:
        names = list(_PICK_LEVELS[level])
        table, desc = _PICK_STAGES, _PICK_DESC
        obj, dest = _roles(task, kind)
        depth = float(task.get("params", {}).get("depth", P.INSERT_DEPTH))
        defs = _PICK_DEFS.format(
            obj=obj,
            dest=dest,
            depth=depth,
            final=_final_pred(kind),
            at_dest=_at_dest(kind),
            gap=_place_gap(kind),
        )
        refine_defs = _PICK_REFINE_DEFS.format(lowered=_lowered(kind), gap=_place_gap(kind))
        refine, refined_progress = _PICK_REFINE, _PICK_REFINED_PROGRESS
    if level == 1 and focus is not None:
        focus = _COARSE[group].get(focus, focus)
    if level == 0 and focus in refine:
        k = names.index(focus)
        finer = refine[focus]
        names[k : k + 1] = finer
        table = dict(table)
        if focus in refined_progress:
            table[focus] = (table[focus][0], refined_progress[focus])
        defs += refine_defs
        focus = finer[0]
    tools = _tools(names, focus)
    return (
        _header(kind, task, phase, factor)
        + "\n"
        + _subgoals_literal(names, tools, desc)
        + defs
        + _stage_functions(names, table)
    )


# ----------------------------------------------------------------------------- ablation

_TASK_DESC_DEFS = """
OBJ = "{obj}"
DEST = "{dest}"
DEPTH = {depth}


def subgoal_0_done(s, sym):
    o, d = sym.body(OBJ), sym.body(DEST)
    {final}


def subgoal_0_potential(s, sym):
    o, d = sym.body(OBJ), sym.body(DEST)
    goal = jnp.stack([pos(s, d)[..., 0], pos(s, d)[..., 1], {goal_z}], -1)
    return distance_progress(distance(pos(s, o), goal), 0.2)
"""


def task_description_program(task: Mapping[str, Any]) -> str:
    """Single-stage potential from τ's terminal relation alone (the ablation; repair fallback).

    φ = progress of the object's distance to where the terminal relation puts it (or of the
    joint fraction); done = the terminal relation (ν).
    """
    kind = task_kind(task)
    rel = task.get("terminal", {}).get("relation", "?")
    header = f'"""Task-description potential ({kind}): terminal relation {rel!r}."""\n\n'
    sg = '{"name": "task", "tool": "shaped_awr", "description": "terminal relation of the task"}'
    subgoals = f"SUBGOALS = [{sg}]\n"
    if kind == "articulated":
        action = task.get("params", {}).get("action", "open")
        part = _roles(task, kind)[0]
        if action == "open":
            done, prog = f"f >= {P.OPEN_FRACTION}", f"ramp(f, 0.0, {P.OPEN_FRACTION})"
        else:
            done, prog = f"f <= {P.CLOSED_FRACTION}", f"ramp(-f, -1.0, -{P.CLOSED_FRACTION})"
        frac = f'    f = joint_fraction(s, sym.joint("{part}"))\n'
        return (
            header
            + subgoals
            + f"\n\ndef subgoal_0_done(s, sym):\n{frac}    return {done}\n"
            + f"\n\ndef subgoal_0_potential(s, sym):\n{frac}    return {prog}\n"
        )
    obj, dest = _roles(task, kind)
    goal_z = {
        "pick_place": "top(s, d) + half(s, o)[..., 2]",
        "stack": "top(s, d) + half(s, o)[..., 2]",
        "put_inside": "pos(s, d)[..., 2] + s.inner[..., d, 3] + half(s, o)[..., 2]",
        "insert": "top(s, d) - DEPTH + half(s, o)[..., 2]",
    }[kind]
    depth = float(task.get("params", {}).get("depth", P.INSERT_DEPTH))
    return (
        header
        + subgoals
        + _TASK_DESC_DEFS.format(
            obj=obj, dest=dest, depth=depth, final=_final_pred(kind), goal_z=goal_z
        )
    )
