"""The offline engine's rule table: a mode's (δ factor, p phase, c cause) -> a generation program.

Cause labels are the critic's vocabulary (`coda.critic.types.CAUSES`); a mode label that is not
one of them (free text, or another critic's words such as "obstructed", "too-wide", "slip") is
mapped onto it by keywords (`CAUSE_KEYWORDS`, first hit wins). Rules, first match wins; a rule
whose roles no parent scene provides is skipped (`OfflineEngine` tries the next one):

  δ           p                       cause                        -> program
  layout      any                     collision_with_distractor    -> a distractor on the
              target's approach side, footprints 0-1.5 cm apart (obstructed)
  layout      any                     beyond_reach,                -> the target within 0-4 cm
                                      did_not_approach                of the workspace edge
  layout      grasp / lift            object_pushed_away,          -> the target within 0-4 cm
                                      one/no_finger_contact,          of the workspace edge
                                      contact_lost                    (an off-centre grasp)
  layout      transport / ν phase     destination_not_reached,     -> the goal within 0-4 cm
                                      misplaced                       of the workspace edge
  attributes  any                     object_too_wide              -> target width quantile
                                                                      0.8-1.22 (wider)
  attributes  any                     object_too_heavy             -> target mass 0.85-1.22
  attributes  any                     contact_lost                 -> slip: target friction
                                                                      -0.22-0.1, mass 0.6-1.2
  attributes  any                     no_finger_contact,           -> narrower target: width
                                      one_finger_contact,             quantile -0.22-0.2
                                      object_pushed_away
  task        transport / ν phase     any                          -> rebind_goal (other goals)
  task        reach / grasp / lift    any                          -> rebind_target
  task        any                     any                          -> resample_task
  layout / attributes / task: anything else -> fallback: that factor resampled (no direction)
  execution   -                       -                            -> none (`NoProgram`): no
                                                                      scene factor to vary
(quantiles: see `coda.engine.programs`.)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from coda.engine.programs import Program, scene_factor

__all__ = [
    "CAUSE_KEYWORDS",
    "FALLBACKS",
    "RULES",
    "NoProgram",
    "Rule",
    "canonical_cause",
    "candidate_programs",
]


class NoProgram(ValueError):
    """The mode names no scene factor that a program could vary (δ = execution)."""


# critic cause label -> keywords that mean it in free text (lower case, matched as substrings)
CAUSE_KEYWORDS: dict[str, tuple[str, ...]] = {
    "collision_with_distractor": ("obstruct", "collision", "collide", "distractor", "blocked"),
    "beyond_reach": ("beyond reach", "out of reach", "unreachable", "reach", "edge", "far"),
    "object_too_wide": ("too wide", "too-wide", "too_wide", "wide", "width", "large"),
    "object_too_heavy": ("too heavy", "heavy", "mass", "weight"),
    "contact_lost": ("slip", "contact lost", "dropped", "drop", "friction"),
    "no_finger_contact": ("no contact", "missed", "thin", "narrow", "small"),
    "destination_not_reached": ("destination", "goal far"),
    "misplaced": ("misplaced", "wrong goal", "other goal"),
}

TARGET_PHASES = ("reach", "grasp", "lift")


@dataclasses.dataclass(frozen=True)
class Rule:
    factor: str
    phases: tuple[str, ...] | None  # None = any phase; "final" = the family's ν phase
    causes: tuple[str, ...] | None  # None = any cause
    program: dict[str, Any]
    why: str


def _p(d: dict[str, Any]) -> dict[str, Any]:
    Program.from_dict(d)  # rules are checked at import
    return d


RULES: tuple[Rule, ...] = (
    Rule(
        "layout",
        None,
        ("collision_with_distractor",),
        _p(
            {
                "factor": "layout",
                "edit": "place_distractor",
                "role": "distractor_0",
                "relative_to": "target",
                "side": "approach",
                "distance": [0.0, 0.015],
            }
        ),
        "obstructed: a distractor where the gripper comes in",
    ),
    Rule(
        "layout",
        None,
        ("beyond_reach", "did_not_approach"),
        _p({"factor": "layout", "edit": "toward_workspace_edge", "role": "target"}),
        "reach: the target near the edge of the workspace",
    ),
    Rule(
        "layout",
        ("grasp", "lift"),
        ("object_pushed_away", "one_finger_contact", "no_finger_contact", "contact_lost"),
        _p({"factor": "layout", "edit": "toward_workspace_edge", "role": "target"}),
        "off-centre grasp: the target near the edge of the workspace",
    ),
    Rule(
        "layout",
        ("transport", "final"),
        ("destination_not_reached", "misplaced"),
        _p({"factor": "layout", "edit": "toward_workspace_edge", "role": "goal"}),
        "transport: the destination near the edge of the workspace",
    ),
    Rule(
        "attributes",
        None,
        ("object_too_wide",),
        _p({"factor": "attributes", "edit": "scale_width", "role": "target", "range": [0.8, 1.22]}),
        "too wide: wider targets",
    ),
    Rule(
        "attributes",
        None,
        ("object_too_heavy",),
        _p({"factor": "attributes", "edit": "mass", "role": "target", "range": [0.85, 1.22]}),
        "too heavy: heavier targets",
    ),
    Rule(
        "attributes",
        None,
        ("contact_lost",),
        _p(
            {
                "factor": "attributes",
                "edits": [
                    {"edit": "friction", "role": "target", "range": [-0.22, 0.1]},
                    {"edit": "mass", "role": "target", "range": [0.6, 1.2]},
                ],
            }
        ),
        "slip: lower friction and higher mass",
    ),
    Rule(
        "attributes",
        None,
        ("no_finger_contact", "one_finger_contact", "object_pushed_away"),
        _p(
            {"factor": "attributes", "edit": "scale_width", "role": "target", "range": [-0.22, 0.2]}
        ),
        "missed grasp: narrower targets",
    ),
    Rule("task", ("transport", "final"), None, _p({"edit": "rebind_goal"}), "other goals"),
    Rule("task", TARGET_PHASES, None, _p({"edit": "rebind_target"}), "other targets"),
    Rule("task", None, None, _p({"edit": "resample_task"}), "the family's task resampling"),
)

FALLBACKS: dict[str, dict[str, Any]] = {
    "layout": _p({"edit": "resample_layout"}),
    "attributes": _p({"edit": "resample_attributes"}),
    "task": _p({"edit": "resample_task"}),
}


def canonical_cause(label: str, vocabulary: Sequence[str] | None = None) -> str:
    """A mode label in the critic's vocabulary: the label itself (or its leading word, e.g.
    "contact_lost: slipped while lifting") if it is a known cause, else the first keyword hit,
    else "other"."""
    text = str(label or "").strip().lower()
    known = (
        set(vocabulary or ()) | set(CAUSE_KEYWORDS) | {c for r in RULES for c in (r.causes or ())}
    )
    head = re.split(r"[\s:;,(]", text, maxsplit=1)[0] if text else ""
    if text in known:
        return text
    if head in known:
        return head
    for cause, words in CAUSE_KEYWORDS.items():
        if any(w in text for w in words):
            return cause
    return "other"


def _phase_matches(rule: Rule, phase: str, final: bool) -> bool:
    if rule.phases is None:
        return True
    return phase in rule.phases or (final and "final" in rule.phases)


def candidate_programs(
    factor: str, phase: str, cause: str, *, final_phase: bool | None = None
) -> list[tuple[Program, str]]:
    """(program, why) for a mode, best first, ending with the factor's fallback.

    `final_phase`: whether `phase` is the family's ν phase (place / stack / insert / open /
    close); None guesses it from the name (not one of reach, grasp, lift, transport).
    """
    f = scene_factor(factor)
    if f == "execution":
        raise NoProgram(
            "an execution mode names no scene factor (task, layout, attributes) to vary; the "
            "engine replays its scenes instead of generating targeted variants"
        )
    final = final_phase if final_phase is not None else phase not in (*TARGET_PHASES, "transport")
    c = canonical_cause(cause)
    out = []
    for r in RULES:
        if (
            r.factor == f
            and _phase_matches(r, phase, final)
            and (r.causes is None or c in r.causes)
        ):
            out.append((Program.from_dict(r.program), r.why))
    out.append((Program.from_dict(FALLBACKS[f]), f"fallback: {f} resampled (no direction known)"))
    return out
