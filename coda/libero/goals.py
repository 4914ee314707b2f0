"""LIBERO's goal vocabulary, new goals over a scene's objects, and their instructions.

The vocabulary is read from LIBERO's own source tasks (`SOURCE_SUITES`: the five benchmark
suites' BDDL files, never LIBERO-PRO's or LIBERO-Plus's perturbed ones, which are evaluation
data). Each goal atom is reduced to what it asks of a kind of thing:

    ("on" | "in", target)    target = ("object", category)               e.g. On(x, plate)
                                      ("region", fixture category, part)  e.g. In(x, basket's
                                                                          contain_region)
                                      ("workspace",)                      On(x, a table region)
    ("open" | "close" | "turnon" | "turnoff", thing)   thing = ("fixture", category) or
                                                       ("region", fixture category, part)

with the categories of the objects LIBERO moved onto / into each target. A new goal for a scene
(`candidate_atoms`) is any atom whose descriptor LIBERO uses, over that scene's objects: a
binary target takes any movable object when LIBERO put objects of two or more categories there
(a plate, a basket, the stove), and only LIBERO's own categories otherwise (the wine rack takes
wine bottles); a table region is a target when the task declares it and nothing starts in it.

Instructions are templated (`instruction`): "put the black bowl on the plate", "open the top
drawer of the cabinet", "turn on the stove", joined by "and" for several atoms. `phrasings`
gives several wordings of one goal (LIBERO's own sentence first for a source task, then the
templates of `WORDINGS`), never one of the evaluation suites' sentences (`heldout_sentences`:
LIBERO-PRO's paraphrased tasks and, where its wheel is installed, LIBERO-Plus's language
tasks), so a policy trained on them meets a new phrasing as a new wording, not a new task.
"""

from __future__ import annotations

import functools
import re

from coda.libero import bddl, plus, suites
from coda.libero import scene as S
from coda.libero.perturb import shiftable

SOURCE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
BINARY = ("on", "in")
UNARY = ("open", "close", "turnon", "turnoff")
# display names where the category's own words are not what an instruction says
NAMES = {
    "akita_black_bowl": "black bowl",
    "chefmate_8_frypan": "frying pan",
    "glazed_rim_porcelain_ramekin": "ramekin",
    "new_salad_dressing": "salad dressing",
    "porcelain_mug": "white mug",
    "white_yellow_mug": "white and yellow mug",
    "flat_stove": "stove",
    "wooden_cabinet": "cabinet",
    "white_cabinet": "white cabinet",
    "wooden_two_layer_shelf": "shelf",
    "desk_caddy": "caddy",
    "wooden_tray": "tray",
    "wine_rack": "wine rack",
    "cookies": "box of cookies",
}
# fixture parts as an instruction says them ("{} of the {fixture}" or the fixture itself)
PARTS = {
    "top_region": "top drawer of the {}",
    "middle_region": "middle drawer of the {}",
    "bottom_region": "bottom drawer of the {}",
    "top_side": "top of the {}",
    "contain_region": "{}",
    "cook_region": "{}",
    "heating_region": "{}",
}


def name_of(category: str) -> str:
    """What an instruction calls a category ("akita_black_bowl" -> "black bowl")."""
    return NAMES.get(category, category.replace("_", " "))


def _kind(p: bddl.Problem, ws: str, arg: str) -> tuple[str, ...]:
    """What a goal argument is (module doc); ("unknown",) for a region of a thing the problem
    does not have."""
    objects, fixtures = dict(p.objects), dict(p.fixtures)
    if arg in objects:
        return ("object", objects[arg])
    if arg in fixtures:
        return ("fixture", fixtures[arg])
    r = p.regions[arg]
    if r.target == ws:
        return ("workspace",)
    cat = objects.get(r.target) or fixtures.get(r.target)
    return ("unknown",) if cat is None else ("region", cat, arg[len(r.target) + 1 :])


@functools.lru_cache(maxsize=1)
def vocabulary() -> dict[tuple, frozenset]:
    """(predicate, descriptor) -> the categories LIBERO's source tasks moved there (empty for
    unary predicates), over every task of `SOURCE_SUITES`."""
    out: dict[tuple, set] = {}
    for suite in SOURCE_SUITES:
        for name in suites.tasks(suite):
            task = S.load_task(suite, name)
            p, ws = task.problem, task.workspace.name
            for atom in p.goal:
                if atom[0] in BINARY:
                    key = (atom[0], _kind(p, ws, atom[2]))
                    out.setdefault(key, set()).add(p.category(atom[1]))
                else:
                    out.setdefault((atom[0], _kind(p, ws, atom[1])), set())
    return {k: frozenset(v) for k, v in out.items()}


@functools.lru_cache(maxsize=1)
def object_categories() -> frozenset:
    """The categories LIBERO's source tasks use as movable objects (their :objects)."""
    return frozenset(
        c
        for suite in SOURCE_SUITES
        for n in suites.tasks(suite)
        for _, c in S.load_task(suite, n).problem.objects
    )


def movers(task: S.LiberoTask) -> list[str]:
    """Movable objects of a task that start on its workspace (what a new goal may move; the
    objects LIBERO-Plus's layout shift moves, `perturb.shiftable`)."""
    return shiftable(task)


def free_regions(task: S.LiberoTask) -> list[str]:
    """Workspace regions the task declares but places nothing in at the start (goal regions
    such as "plate_right_region")."""
    p, ws = task.problem, task.workspace.name
    used = {a[2] for a in p.init if len(a) == 3}
    return [n for n, r in p.regions.items() if r.target == ws and n not in used and r.ranges]


def candidate_atoms(task: S.LiberoTask) -> list[tuple[str, ...]]:
    """Every single-atom goal LIBERO's vocabulary allows over this task's objects, minus the
    task's own goal atoms, in a fixed order."""
    vocab = vocabulary()
    p, ws = task.problem, task.workspace.name
    own = set(p.goal)
    free = set(free_regions(task))
    targets = [n for n, _ in p.objects] + [n for n, _ in p.fixtures] + sorted(p.regions)
    out: list[tuple[str, ...]] = []
    named = set(labels(task))
    for mover in movers(task):
        cat = p.category(mover)
        if mover not in named:
            continue
        for pred in BINARY:
            for t in targets:
                if t == mover or (t in p.regions and p.regions[t].target in (mover,)):
                    continue
                kind = _kind(p, ws, t)
                if kind[0] == "object" and t not in named:
                    continue
                if kind == ("workspace",) and t not in free:
                    continue
                used = vocab.get((pred, kind))
                if used is None or not (len(used) >= 2 or cat in used):
                    continue
                out.append((pred, mover, t))
    for pred in UNARY:
        for t in [n for n, _ in p.fixtures] + sorted(p.regions):
            if (pred, _kind(p, ws, t)) in vocab:
                out.append((pred, t))
    return [a for a in out if a not in own]


def _centre(task: S.LiberoTask, name: str) -> tuple[float, float] | None:
    """The centre of the region a task's :init places an object in (LIBERO's frame)."""
    for atom in task.problem.init:
        if len(atom) == 3 and atom[0] == "on" and atom[1] == name:
            r = task.problem.regions.get(atom[2])
            if r is not None and r.ranges:
                x0, y0, x1, y1 = r.ranges[0]
                return (x0 + x1) / 2, (y0 + y1) / 2
    return None


def labels(task: S.LiberoTask) -> dict[str, str]:
    """How an instruction names each object / fixture: "the plate", or, for two of a kind,
    by where the task places them ("the left black bowl"); objects it cannot tell apart (three
    of a kind) have no label and take no part in new goals."""
    out: dict[str, str] = {}
    by_cat: dict[str, list[str]] = {}
    for n, c in list(task.problem.objects) + list(task.fixtures):
        by_cat.setdefault(c, []).append(n)
    for cat, names in by_cat.items():
        if len(names) == 1:
            out[names[0]] = "the " + name_of(cat)
            continue
        centres = [_centre(task, n) for n in names]
        if len(names) != 2 or None in centres:
            continue  # three of a kind, or one in a fixture: no plain way to tell them apart
        (xa, ya), (xb, yb) = centres
        # LIBERO's words are the agent view's (its camera faces the robot across the table):
        # "left" is -y ("plate_left_region" at y = -0.3) and "front" is +x, towards the camera
        # ("stove_front_region" +0.36 m in x from the stove)
        if abs(ya - yb) >= abs(xa - xb):
            words = ("left", "right") if ya < yb else ("right", "left")
        else:
            words = ("front", "back") if xa > xb else ("back", "front")
        for n, w in zip(names, words, strict=True):
            out[n] = f"the {w} {name_of(cat)}"
    return out


# parts whose words depend on the fixture ((category, part) -> words; else PARTS)
FIXTURE_PARTS = {
    ("wine_rack", "top_region"): "{}",
    ("wooden_two_layer_shelf", "top_region"): "top shelf of the {}",
    ("wooden_two_layer_shelf", "bottom_region"): "bottom shelf of the {}",
    ("wooden_two_layer_shelf", "top_side"): "top of the {}",
    ("desk_caddy", "front_contain_region"): "front compartment of the {}",
    ("desk_caddy", "back_contain_region"): "back compartment of the {}",
    ("desk_caddy", "left_contain_region"): "left compartment of the {}",
    ("desk_caddy", "right_contain_region"): "right compartment of the {}",
}


def _thing(task: S.LiberoTask, arg: str) -> str:
    p, ws = task.problem, task.workspace.name
    kind = _kind(p, ws, arg)
    if kind[0] in ("object", "fixture"):
        return labels(task).get(arg, "the " + name_of(kind[1]))
    if kind == ("workspace",):
        return _table_region(p.regions[arg].name[len(ws) + 1 :])
    part = FIXTURE_PARTS.get((kind[1], kind[2]), PARTS.get(kind[2]))
    fixture = name_of(kind[1])
    return "the " + (part.format(fixture) if part else f"{kind[2].replace('_', ' ')} of {fixture}")


def _table_region(region: str) -> str:
    """A table region's name as a place ("plate_right_region" -> "to the right of the plate")."""
    if region in ("table_center", "center_region"):
        return "in the middle of the table"
    if region in ("table_front", "front_region"):
        return "at the front of the table"
    m = re.fullmatch(r"next_to_(.+)_region", region)
    if m is not None:
        return f"next to the {name_of(m[1])}"
    m = re.fullmatch(r"(.+)_(left|right|front|behind)_region", region)
    if m is None:
        return "in the " + region.removesuffix("_region").replace("_", " ") + " area of the table"
    side = {"left": "to the left of", "right": "to the right of", "front": "in front of"}
    return f"{side.get(m[2], 'behind')} the {name_of(m[1])}"


def phrase(task: S.LiberoTask, atom: tuple[str, ...]) -> str:
    """One goal atom in words."""
    pred = atom[0]
    if pred in BINARY:
        mover = _thing(task, atom[1])
        where = _thing(task, atom[2])
        if _kind(task.problem, task.workspace.name, atom[2]) == ("workspace",):
            return f"put {mover} {where}"
        return f"put {mover} {'on' if pred == 'on' else 'in'} {where}"
    verb = {"open": "open", "close": "close", "turnon": "turn on", "turnoff": "turn off"}[pred]
    return f"{verb} {_thing(task, atom[1])}"


def instruction(task: S.LiberoTask, atoms: tuple[tuple[str, ...], ...]) -> str:
    """The instruction of a goal (its atoms' phrases joined by "and")."""
    return " and ".join(phrase(task, a) for a in atoms)


# wordings per kind of atom ({m}: the thing moved, {t}: where / what), the first = `phrase`'s
WORDINGS = {
    "on": (
        "put {m} on {t}",
        "place {m} on {t}",
        "pick up {m} and put it on {t}",
        "move {m} onto {t}",
        "set {m} down on {t}",
    ),
    "on_table": ("put {m} {t}", "place {m} {t}", "move {m} {t}", "pick up {m} and set it {t}"),
    "in": (
        "put {m} in {t}",
        "place {m} into {t}",
        "pick up {m} and put it in {t}",
        "drop {m} into {t}",
    ),
    "open": ("open {t}", "pull {t} open"),
    "close": ("close {t}", "shut {t}", "push {t} closed"),
    "turnon": ("turn on {t}", "switch on {t}"),
    "turnoff": ("turn off {t}", "switch off {t}"),
}


def _wordings(task: S.LiberoTask, atom: tuple[str, ...]) -> list[str]:
    pred = atom[0]
    if pred in BINARY:
        table = _kind(task.problem, task.workspace.name, atom[2]) == ("workspace",)
        key = "on_table" if pred == "on" and table else pred
        m, t = _thing(task, atom[1]), _thing(task, atom[2])
        return [w.format(m=m, t=t) for w in WORDINGS[key]]
    return [w.format(t=_thing(task, atom[1])) for w in WORDINGS[pred]]


def normalise(sentence: str) -> str:
    """A sentence compared as words: lower case, punctuation and repeated spaces dropped."""
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", sentence.lower()).split())


@functools.lru_cache(maxsize=1)
def heldout_sentences() -> frozenset:
    """The instructions of the evaluation suites that test phrasing (normalised): LIBERO-PRO's
    paraphrased tasks of every suite it perturbs and, where the LIBERO-Plus wheel is installed,
    LIBERO-Plus's language tasks. No training phrasing may be one of them."""
    out = set()
    for suite in suites.PERTURBABLE:
        lan = suites.perturbed(suite, "lan")
        out |= {normalise(S.load_task(lan, n).problem.language) for n in suites.tasks(lan)}
    try:
        for t in plus.tasks():
            if t.dimension == "language":
                out.add(normalise(plus.problem_of(plus.read_text(t.bddl))[0].language))
    except plus.LiberoPlusMissing:  # the wheel is optional data
        pass
    return frozenset(out)


def phrasings(task: S.LiberoTask, limit: int = 8) -> list[str]:
    """Up to `limit` distinct wordings of the task's goal: LIBERO's own sentence first (a source
    task's; an edited task's is already a template), then the templates' combinations in order;
    none of them an evaluation sentence (`heldout_sentences`)."""
    held = heldout_sentences()
    per_atom = [_wordings(task, a) for a in task.problem.goal]
    out, seen = [], set()
    depth = max(len(w) for w in per_atom) if per_atom else 0
    candidates = [task.problem.language] + [
        " and ".join(w[min(k, len(w) - 1)] for w in per_atom) for k in range(depth)
    ]
    for c in candidates:
        n = normalise(c)
        if c and n not in held and n not in seen:
            out.append(c)
            seen.add(n)
        if len(out) == limit:
            break
    return out


__all__ = [
    "SOURCE_SUITES",
    "candidate_atoms",
    "free_regions",
    "labels",
    "instruction",
    "movers",
    "object_categories",
    "heldout_sentences",
    "name_of",
    "normalise",
    "phrase",
    "phrasings",
    "vocabulary",
]
