"""A mode's generation program written from its evidence: the diagnosed failures' own scenes.

A diagnosis says "this failure happens because factor δ has this value, in phase p". The
offline engine writes the program that puts δ where the failures had it, read off the failure
scenes (the parents `OfflineEngine.program_for` is given), and lets everything else vary:

* layout -> ``place_in_region``: every task role's object inside the box its failing positions
  span (``LAYOUT_MARGIN`` beyond them, cut to the family's sampling region), every pair of task
  roles at a distance in the band the failures span (``LAYOUT_MARGIN`` either side); the other
  objects re-placed at random. A ``collision_with_distractor`` cause adds the rule table's
  distractor placement (`coda.engine.rules`) beside the focus role's object.
* attributes -> ``set_in_bands``: every size, the mass and the friction of every task role's
  object inside the band its failing values span (``ATTRIBUTE_MARGIN`` of the field's category
  range beyond them, cut to the range); the other objects' attributes redrawn. The critic's
  cause words name an effect (dropped, not grasped), not which field caused it, so every field
  is kept near the failing values.
* task -> ``choose_task``: every task role played by an object of a category the failures had
  in it, every task parameter (the goal relation: action, mode, depth) one of the failures'
  values; anything else the base scene's.

Every task role is kept, not only the one the phase is about (the ``focus``, the program's
primary role: the target for reach / grasp / lift, the goal for transport and the family's ν
phase): a put-down can fail because of the carried object's size. A band spanned by the
failures on a value that did not matter covers most of its range and costs little variety.
Programs of two modes differ when their factor, focus or evidence differ.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from coda.engine.neighbourhood import object_region
from coda.engine.programs import Program
from coda.engine.roles import ALIASES
from coda.engine.rules import RULES, TARGET_PHASES, canonical_cause
from coda.sim import assets
from coda.sim.scene import Scene

__all__ = [
    "ATTRIBUTE_MARGIN",
    "LAYOUT_MARGIN",
    "evidence_roles",
    "focus_role",
    "neighbourhood_program",
]

LAYOUT_MARGIN = 0.01  # m beyond the failing positions / distances
ATTRIBUTE_MARGIN = 0.05  # of the field's category range beyond the failing values
_ABSTRACT = ("target", "goal")


def _symbolic(scene: Scene) -> dict[str, str]:
    """{symbolic role: object name} of a scene's task roles (target / goal aliases first)."""
    out: dict[str, str] = {}
    for key, name in scene.task.get("roles", {}).items():
        sym = next((a for a in _ABSTRACT if key in ALIASES[a]), key)
        out.setdefault(sym, name)
    return out


def focus_role(phase: str, roles: Sequence[str]) -> str:
    """The role a phase is about: the target for reach / grasp / lift, else the goal (the
    first task role where the family has no such role)."""
    want = "target" if phase in TARGET_PHASES else "goal"
    return want if want in roles else roles[0]


def evidence_roles(evidence: Sequence[Scene], phase: str) -> list[str]:
    """Symbolic task roles every evidence scene has, the focus role first."""
    common = None
    for s in evidence:
        mine = list(_symbolic(s))
        common = mine if common is None else [r for r in common if r in mine]
    if not common:
        return []
    f = focus_role(phase, common)
    return [f, *(r for r in common if r != f)]


def _band(vals: Sequence[float], margin: float, lo: float, hi: float) -> list[float]:
    """[min - margin, max + margin] cut to [lo, hi] (never cutting the values themselves)."""
    a, b = min(vals), max(vals)
    return [round(max(a - margin, min(lo, a)), 5), round(min(b + margin, max(hi, b)), 5)]


def _layout(evidence: Sequence[Scene], roles: list[str], cause: str) -> list[dict[str, Any]]:
    boxes, where = {}, {}
    for r in roles:
        names = [(s, _symbolic(s)[r]) for s in evidence]
        where[r] = [(s.layout[n]["x"], s.layout[n]["y"]) for s, n in names]
        regions = [object_region(s.object(n).category) for s, n in names]
        (x0, x1) = min(g[0][0] for g in regions), max(g[0][1] for g in regions)
        (y0, y1) = min(g[1][0] for g in regions), max(g[1][1] for g in regions)
        boxes[r] = [
            _band([p[0] for p in where[r]], LAYOUT_MARGIN, x0, x1),
            _band([p[1] for p in where[r]], LAYOUT_MARGIN, y0, y1),
        ]
    dists = []
    for a, b in itertools.combinations(roles, 2):
        d = [math.dist(p, q) for p, q in zip(where[a], where[b], strict=True)]
        dists.append([a, b, *_band(d, LAYOUT_MARGIN, 0.0, math.inf)])
    edits = [{"edit": "place_in_region", "boxes": boxes, "distances": dists, "focus": roles[0]}]
    if canonical_cause(cause) == "collision_with_distractor" and all(
        any(o.name not in _symbolic(s).values() for o in s.objects) for s in evidence
    ):
        rule = next(r for r in RULES if r.causes and "collision_with_distractor" in r.causes)
        edits.append({**rule.program, "relative_to": roles[0]})
        edits[-1].pop("factor", None)
    return edits


def _fields(evidence: Sequence[Scene], r: str) -> dict[str, list[float]]:
    """{field: band} of role `r`'s object over the evidence (dims keys, mass, friction)."""
    vals: dict[str, list[float]] = {}
    ranges: dict[str, list[tuple[float, float]]] = {}
    for s in evidence:
        n = _symbolic(s)[r]
        cat, a = assets.get_category(s.object(n).category), s.attributes[n]
        for k, v in a["dims"].items():
            if k in cat.dims:
                vals.setdefault(k, []).append(float(v))
                ranges.setdefault(k, []).append(cat.dims[k])
        for k in ("mass", "friction"):
            vals.setdefault(k, []).append(float(a[k]))
            ranges.setdefault(k, []).append(getattr(cat, k))
    out = {}
    for k, v in vals.items():
        lo, hi = min(x[0] for x in ranges[k]), max(x[1] for x in ranges[k])
        out[k] = _band(v, ATTRIBUTE_MARGIN * (hi - lo), lo, hi)
    return out


def _attributes(evidence: Sequence[Scene], roles: list[str]) -> list[dict[str, Any]]:
    bands = {r: _fields(evidence, r) for r in roles}
    return [{"edit": "set_in_bands", "bands": bands, "focus": roles[0]}]


def _task(evidence: Sequence[Scene], roles: list[str]) -> list[dict[str, Any]]:
    cats = {r: sorted({s.object(_symbolic(s)[r]).category for s in evidence}) for r in roles}
    params: dict[str, set] = {}
    keys = set.intersection(*(set(s.task.get("params", {})) for s in evidence))
    for k in sorted(keys):
        vs = [s.task["params"][k] for s in evidence]
        if all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in vs):
            params[k] = set(vs)
    return [
        {
            "edit": "choose_task",
            "categories": cats,
            "params": {k: sorted(v, key=repr) for k, v in params.items()},
            "focus": roles[0],
        }
    ]


def neighbourhood_program(
    factor: str, phase: str, cause: str, evidence: Sequence[Scene]
) -> Program | None:
    """The program that puts `factor` where the `evidence` scenes (the diagnosed failures) had
    it (module docstring); None when there is no evidence, no task role common to it, or the
    factor is not a scene factor (execution)."""
    roles = evidence_roles(evidence, phase) if evidence else []
    if not roles or factor not in ("layout", "attributes", "task"):
        return None
    if factor == "layout":
        edits = _layout(evidence, roles, cause)
    elif factor == "attributes":
        edits = _attributes(evidence, roles)
    else:
        edits = _task(evidence, roles)
    note = f"{factor} where {len(evidence)} diagnosed failure(s) had it (focus: {roles[0]})"
    return Program.from_dict({"factor": factor, "edits": edits, "note": note})
