"""LIBERO's BDDL problem files -> a `Problem` (plain data).

The tokenizer is `bddl.parsing.scan_tokens` (bddl 1.0.1, which LIBERO uses) re-implemented:
`;` comments removed, everything lower-cased, parentheses nest lists. The grouping follows
LIBERO's `robosuite_parse_problem` (objects / fixtures by category in file order, regions with
:target / :ranges / :yaw_rotation, region keys "<target>_<region>", goal = And of atoms).
BDDL text is data from elsewhere: every malformed piece raises `BddlError` naming it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

PREDICATES = ("on", "in", "open", "close", "turnon", "turnoff")  # what LIBERO's goals use
ARITY = {"on": 2, "in": 2, "open": 1, "close": 1, "turnon": 1, "turnoff": 1}


class BddlError(ValueError):
    pass


def scan_tokens(text: str) -> list:
    """Nested token lists of a BDDL/PDDL text (bddl.parsing.scan_tokens semantics)."""
    s = re.sub(r";.*$", "", text, flags=re.MULTILINE).lower()
    stack: list[list] = []
    tokens: list = []
    for t in re.findall(r"[()]|[^\s()]+", s):
        if t == "(":
            stack.append(tokens)
            tokens = []
        elif t == ")":
            if not stack:
                raise BddlError("unbalanced ')' in BDDL text")
            inner, tokens = tokens, stack.pop()
            tokens.append(inner)
        else:
            tokens.append(t)
    if stack:
        raise BddlError("missing ')' in BDDL text")
    if len(tokens) != 1 or not isinstance(tokens[0], list):
        raise BddlError("BDDL text must be one (define ...) form")
    return tokens[0]


@dataclasses.dataclass(frozen=True)
class Region:
    name: str  # "<target>_<region>" as LIBERO keys it
    target: str  # a workspace ("main_table", "kitchen_table", ...) or an object / fixture
    ranges: tuple[tuple[float, float, float, float], ...]  # (x0, y0, x1, y1) in the workspace
    yaw: tuple[float, float]  # yaw_rotation range (rad)


@dataclasses.dataclass(frozen=True)
class Problem:
    problem: str  # LIBERO problem class, e.g. "libero_kitchen_tabletop_manipulation"
    language: str
    objects: tuple[tuple[str, str], ...]  # (instance, category) in LIBERO's (qpos) order
    fixtures: tuple[tuple[str, str], ...]
    regions: dict[str, Region]
    obj_of_interest: tuple[str, ...]
    init: tuple[tuple[str, ...], ...]
    goal: tuple[tuple[str, ...], ...]  # atoms AND-ed: (predicate, arg...)

    def category(self, name: str) -> str:
        for n, c in self.objects + self.fixtures:
            if n == name:
                return c
        raise KeyError(f"no object or fixture {name!r} in the problem")


def _typed_list(group: list, what: str) -> tuple[tuple[str, str], ...]:
    out, pending = [], []
    items = list(group[1:])
    while items:
        t = items.pop(0)
        if t == "-":
            if not items or isinstance(items[0], list):
                raise BddlError(f"{what}: '-' without a category")
            cat = items.pop(0)
            out += [(n, cat) for n in pending]
            pending = []
        elif isinstance(t, str):
            pending.append(t)
        else:
            raise BddlError(f"{what}: unexpected list {t!r}")
    if pending:
        raise BddlError(f"{what}: {pending} have no category")
    return tuple(out)


def _regions(group: list) -> dict[str, Region]:
    out = {}
    for region in group[1:]:
        if not isinstance(region, list) or not region or not isinstance(region[0], str):
            raise BddlError(f":regions: malformed entry {region!r}")
        target, ranges, yaw = None, [], (0.0, 0.0)
        for attr in region[1:]:
            key = attr[0] if isinstance(attr, list) and attr else None
            if key == ":target" and len(attr) == 2:
                target = attr[1]
            elif key == ":ranges":
                for r in attr[1]:
                    if len(r) != 4:
                        raise BddlError(f"region {region[0]}: a range needs 4 numbers, got {r}")
                    ranges.append(tuple(float(x) for x in r))
            elif key == ":yaw_rotation":
                for v in attr[1]:
                    yaw = (float(v[0]), float(v[1]))
            elif key == ":rgba":
                pass
            else:
                raise BddlError(f"region {region[0]}: unknown attribute {attr!r}")
        if target is None:
            raise BddlError(f"region {region[0]} has no :target")
        name = f"{target}_{region[0]}"
        out[name] = Region(name, target, tuple(ranges), yaw)
    return out


def _atoms(cond: Any, where: str) -> list[tuple[str, ...]]:
    if not isinstance(cond, list) or not cond:
        raise BddlError(f"{where}: malformed condition {cond!r}")
    if cond[0] == "and":
        return [a for c in cond[1:] for a in _atoms(c, where)]
    if cond[0] not in ARITY:
        raise BddlError(f"{where}: predicate {cond[0]!r} not supported; known: {PREDICATES}")
    if len(cond) - 1 != ARITY[cond[0]] or not all(isinstance(a, str) for a in cond[1:]):
        raise BddlError(f"{where}: {cond[0]} takes {ARITY[cond[0]]} names, got {cond[1:]!r}")
    return [tuple(cond)]


def parse(text: str) -> Problem:
    """A LIBERO BDDL problem text -> `Problem`."""
    tokens = scan_tokens(text)
    if not tokens or tokens[0] != "define":
        raise BddlError("BDDL text must start with (define ...)")
    f: dict[str, Any] = {
        "problem": "unknown",
        "language": "",
        "objects": (),
        "fixtures": (),
        "regions": {},
        "obj_of_interest": (),
        "init": (),
        "goal": (),
    }
    for group in tokens[1:]:
        if not isinstance(group, list) or not group:
            raise BddlError(f"unexpected top-level token {group!r}")
        key = group[0]
        if key == "problem":
            f["problem"] = group[-1]
        elif key == ":language":
            f["language"] = " ".join(x for x in group[1:] if isinstance(x, str))
        elif key == ":objects":
            f["objects"] = _typed_list(group, ":objects")
        elif key == ":fixtures":
            f["fixtures"] = _typed_list(group, ":fixtures")
        elif key == ":regions":
            f["regions"] = _regions(group)
        elif key == ":obj_of_interest":
            f["obj_of_interest"] = tuple(group[1:])
        elif key == ":init":
            f["init"] = tuple(tuple(x) for x in group[1:] if isinstance(x, list))
        elif key == ":goal":
            if len(group) != 2:
                raise BddlError(":goal must hold one condition")
            f["goal"] = tuple(_atoms(group[1], ":goal"))
        elif key in (":domain", ":requirements", ":scene_properties"):
            pass
        else:
            raise BddlError(f"unknown section {key!r}")
    if not f["goal"]:
        raise BddlError("problem has no :goal")
    names = {n for n, _ in f["objects"] + f["fixtures"]} | set(f["regions"])
    for atom in f["goal"]:
        for a in atom[1:]:
            if a not in names:
                raise BddlError(f"goal {atom} names {a!r}, which is no object, fixture or region")
    return Problem(**f)
