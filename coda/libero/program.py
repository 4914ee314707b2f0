"""LIBERO tasks as factored scene programs: a source task plus edits, each of one factor.

A LIBERO scene here is a source task (its BDDL problem and its 50 stored initial states) and an
ordered list of edits, each changing one factor and nothing else:

    σ layout      swap(a,b)          objects a and b trade places (x, y; each keeps its height
                                     and orientation), in every initial state
                  move(a,region)     object a starts at the centre of a free table region of
                                     the task (one it declares and starts nothing in)
    α attributes  inst(a,category)   object a is an instance of another of LIBERO's object
                                     categories (of the kind LIBERO uses in a's place: a thing
                                     it moves, or a thing it puts things on / in, with the parts
                                     the task names, e.g. a contain_region), of a similar
                                     footprint and, for a thing to grasp, no wider than the
                                     gripper opens; it rests where a rested
    τ task        goal(p,x[,y]+...)  the goal becomes these atoms of LIBERO's vocabulary
                                     (`coda.libero.goals`), with an instruction made from them

The edits are text (`Edit.text`, joined by ";"), so an edited task has a name:
"<task>!<edits>" in the pseudo-suite "edit:<suite>", which `scene.load_task` resolves through
`scene.TASK_SOURCES` to `load` here: `scene.compile_task`, LIBERO's verification, ν, the planner
and the episode programs (`coda.libero.episodes`: "libero:<suite>/<task>@<i>!<edits>") work on
it as on LIBERO's own tasks. Edits are untrusted text (an engine may write them): each is
checked against the task it edits, and anything wrong is an `EditError` naming what is wrong and
what is valid.

`resample(program, factor, rng)` is the LIBERO form of `coda.sim.scene.resample`: one edit of
that factor, drawn uniformly from every edit the task allows (`edits_for`). Verification
(`coda.libero.verify`) decides whether an edited initial state is a valid scene; the planner
(`coda.libero.planner.planner_for`) solves the new goals it can script and names the atom it
cannot.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence

import mujoco
import numpy as np

from coda.libero import assets, bddl, goals
from coda.libero import episodes as E
from coda.libero import scene as S
from coda.libero.geoms import body_half
from coda.libero.verify import verify_task_state
from coda.sim import robot

PREFIX = "edit:"  # scene.TASK_SOURCES: the pseudo-suite "edit:<suite>"
SEP = "!"  # "<task>!<edits>"
OPS = {"swap": "layout", "move": "layout", "inst": "attributes", "goal": "task"}
FACTORS = ("layout", "attributes", "task")
# α: a replacement's largest footprint half-extent within this factor of the original's
FOOTPRINT_RATIO = (0.6, 1.6)
GRASP_MARGIN = 0.9  # a thing to grasp is at most this share of the gripper's full opening wide
_NAME = r"[a-z0-9_]+"
_EDIT = re.compile(rf"^(?P<op>{'|'.join(OPS)})\((?P<args>[a-z0-9_,+]*)\)$")


class EditError(ValueError):
    """An edit that does not apply to its task (one line: what is wrong, what is valid)."""


@dataclasses.dataclass(frozen=True)
class Edit:
    op: str  # swap | move | inst | goal
    args: tuple[str, ...]  # goal: atoms as "p,x[,y]" strings

    @property
    def factor(self) -> str:
        return OPS[self.op]

    @property
    def text(self) -> str:
        return f"{self.op}({('+' if self.op == 'goal' else ',').join(self.args)})"

    @property
    def atoms(self) -> tuple[tuple[str, ...], ...]:
        return tuple(tuple(a.split(",")) for a in self.args) if self.op == "goal" else ()


def goal_edit(atoms: Sequence[Sequence[str]]) -> Edit:
    return Edit("goal", tuple(",".join(a) for a in atoms))


def parse_edits(text: str) -> tuple[Edit, ...]:
    """Edits from their text ("swap(a,b);goal(on,a,plate_1)"); EditError naming the bad one."""
    out = []
    for part in (text or "").split(";"):
        m = _EDIT.match(part.strip())
        if m is None:
            raise EditError(
                f"edit {part.strip()!r} is not one of swap(a,b), move(a,region), "
                "inst(a,category), goal(p,x[,y]+...)"
            )
        op = m["op"]
        sep = "+" if op == "goal" else ","
        args = tuple(a for a in m["args"].split(sep) if a)
        if op != "goal" and len(args) != 2:
            raise EditError(f"edit {part.strip()!r}: {op} takes 2 arguments, got {len(args)}")
        if op == "goal" and not args:
            raise EditError(f"edit {part.strip()!r}: goal needs at least one atom")
        out.append(Edit(op, args))
    return tuple(out)


def format_edits(edits: Sequence[Edit]) -> str:
    return ";".join(e.text for e in edits)


def with_edit(edits: Sequence[Edit], new: Edit) -> tuple[Edit, ...]:
    """`edits` + `new`, dropping what `new` overrides (an earlier goal; an earlier instance of
    the same object)."""
    keep = [
        e
        for e in edits
        if not (e.op == new.op == "goal" or (e.op == new.op == "inst" and e.args[0] == new.args[0]))
    ]
    return (*keep, new)


# ----------------------------------------------------------------------------- applying edits


def load(suite: str, name: str) -> S.LiberoTask:
    """The `scene.TASK_SOURCES` entry of "edit:<suite>": task "<task>!<edits>" of `suite`."""
    base_name, sep, text = name.partition(SEP)
    if not sep:
        raise KeyError(f"an edited task is named '<task>{SEP}<edits>', got {name!r}")
    return apply(S.load_task(suite, base_name), parse_edits(text), PREFIX + suite, name)


def apply(base: S.LiberoTask, edits: Sequence[Edit], suite: str, name: str) -> S.LiberoTask:
    """`base` with `edits` applied in order, as a task of pseudo-suite `suite` named `name`."""
    task = base
    states = base.states.copy()
    for e in edits:
        task, states = _APPLY[e.op](task, states, e)
        task = dataclasses.replace(task, states=states)
    return dataclasses.replace(task, suite=suite, name=name)


def applicable(base: S.LiberoTask, edits: Sequence[Edit]) -> tuple[Edit, ...]:
    """`edits` in order without those that no longer apply after the ones kept before them
    (an instance chosen once an edit, since removed, had made its object movable)."""
    task, states, out = base, base.states.copy(), []
    for e in edits:
        try:
            task, states = _APPLY[e.op](task, states.copy(), e)
        except EditError:
            continue
        task = dataclasses.replace(task, states=states)
        out.append(e)
    return tuple(out)


def _column(task: S.LiberoTask, obj: str) -> int:
    """Column of an object's free-joint position in LIBERO's initial-state rows."""
    names = [n for n, _ in task.problem.objects]
    return 1 + S.ROBOT_NQ + 7 * names.index(obj)


def _movers(task: S.LiberoTask, e: Edit, objs: Sequence[str]) -> None:
    movers = goals.movers(task)
    for o in objs:
        if o not in movers:
            raise EditError(f"{e.text}: {o!r} is not an object on the table; valid: {movers}")


def _reinit(problem: bddl.Problem, obj: str, region: str) -> bddl.Problem:
    init = tuple(
        ("on", obj, region) if len(a) == 3 and a[0] == "on" and a[1] == obj else a
        for a in problem.init
    )
    return dataclasses.replace(problem, init=init)


def _init_region(problem: bddl.Problem, obj: str) -> str:
    return next(a[2] for a in problem.init if len(a) == 3 and a[0] == "on" and a[1] == obj)


def _swap(task: S.LiberoTask, states: np.ndarray, e: Edit):
    a, b = e.args
    _movers(task, e, (a, b))
    if a == b:
        raise EditError(f"{e.text}: swap needs two different objects")
    ca, cb = _column(task, a), _column(task, b)
    xa = states[:, ca : ca + 2].copy()
    states[:, ca : ca + 2] = states[:, cb : cb + 2]
    states[:, cb : cb + 2] = xa
    ra, rb = _init_region(task.problem, a), _init_region(task.problem, b)
    problem = _reinit(_reinit(task.problem, a, rb), b, ra)
    return dataclasses.replace(task, problem=problem), states


def _move(task: S.LiberoTask, states: np.ndarray, e: Edit):
    obj, region = e.args
    _movers(task, e, (obj,))
    free = goals.free_regions(task)
    if region not in free:
        raise EditError(f"{e.text}: {region!r} is not a free table region; valid: {free}")
    x0, y0, x1, y1 = task.problem.regions[region].ranges[0]
    ws = task.workspace
    c = _column(task, obj)
    states[:, c] = (x0 + x1) / 2 + ws.offset[0]
    states[:, c + 1] = (y0 + y1) / 2 + ws.offset[1]
    return dataclasses.replace(task, problem=_reinit(task.problem, obj, region)), states


def _inst(task: S.LiberoTask, states: np.ndarray, e: Edit):
    obj, cat = e.args
    _movers(task, e, (obj,))
    valid = instance_candidates(task, obj)
    if cat not in valid:
        raise EditError(f"{e.text}: {cat!r} cannot stand in for {obj!r}; valid: {valid}")
    p = task.problem
    old = p.category(obj)
    objects = tuple((n, cat if n == obj else c) for n, c in p.objects)
    language = p.language
    hit = None
    if sum(c == old for _, c in p.objects + p.fixtures) == 1:  # its words name it alone...
        words = (old.replace("_", " "), goals.name_of(old))
        # ... once in the sentence ("white mug" twice: also in "yellow and white mug")
        once = [w for w in words if len(re.findall(rf"\b{re.escape(w)}\b", language)) == 1]
        hit = once[0] if once else None
    if hit is not None:
        language = re.sub(rf"\b{re.escape(hit)}\b", goals.name_of(cat), language)
    problem = dataclasses.replace(p, objects=objects, language=language)
    c = _column(task, obj)
    states[:, c + 2] += S.bottom_offset(old) - S.bottom_offset(cat)  # rest where `obj` rested
    edited = dataclasses.replace(task, problem=problem)
    if hit is None and any(obj in a[1:] for a in p.goal):  # say the goal with the new object
        edited = _with_goal(edited, p.goal)
    return edited, states


def _with_goal(task: S.LiberoTask, atoms: Sequence[tuple[str, ...]]) -> S.LiberoTask:
    p = task.problem
    names = {n for n, _ in p.objects + p.fixtures}
    interest = []
    for a in atoms:
        for x in a[1:]:
            who = x if x in names else p.regions[x].target
            if who in names and who not in interest:
                interest.append(who)
    problem = dataclasses.replace(p, goal=tuple(atoms), obj_of_interest=tuple(interest))
    problem = dataclasses.replace(problem, language=goals.instruction(task, tuple(atoms)))
    return dataclasses.replace(task, problem=problem)


def _goal(task: S.LiberoTask, states: np.ndarray, e: Edit):
    p = task.problem
    known = {n for n, _ in p.objects + p.fixtures} | set(p.regions)
    for atom in e.atoms:
        if atom[0] not in bddl.ARITY:
            raise EditError(f"{e.text}: unknown predicate {atom[0]!r}; valid: {bddl.PREDICATES}")
        if len(atom) - 1 != bddl.ARITY[atom[0]]:
            raise EditError(f"{e.text}: {atom[0]} takes {bddl.ARITY[atom[0]]} argument(s)")
        bad = [x for x in atom[1:] if x not in known]
        if bad:
            raise EditError(
                f"{e.text}: {bad[0]!r} is no object, fixture or region of the task; "
                f"valid: {sorted(known)}"
            )
    return _with_goal(task, e.atoms), states


_APPLY = {"swap": _swap, "move": _move, "inst": _inst, "goal": _goal}


# ----------------------------------------------------------------------------- what may change


@functools.lru_cache(maxsize=128)
def footprint(category: str) -> tuple[float, float, float]:
    """Half extents (x, y, z) of a LIBERO object category's collision box (its root frame)."""
    m = assets.load(category).compile()
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    return tuple(float(v) for v in body_half(m, d, m.body("object").id))


@functools.lru_cache(maxsize=1)
def _roles() -> tuple[frozenset, frozenset]:
    """(categories LIBERO's source tasks move, categories they put things on / in)."""
    moved, targets = set(), set()
    for (pred, kind), used in goals.vocabulary().items():
        if pred in goals.BINARY:
            moved |= used
            if kind[0] in ("object", "region"):  # a plate; a basket's contain_region
                targets.add(kind[1])
    return frozenset(moved), frozenset(targets) & goals.object_categories()


def instance_candidates(task: S.LiberoTask, obj: str) -> list[str]:
    """Categories that may stand in for `obj` (module doc, α), sorted."""
    p = task.problem
    old = p.category(obj)
    moved, targets = _roles()
    # the parts of `obj` the task names (its regions in the goal or the :init): a stand-in
    # must have them too ("basket_1_contain_region" needs a container)
    named = {r.name[len(obj) + 1 :] for r in p.regions.values() if r.target == obj}
    used = {x for a in p.goal + p.init for x in a[1:]}
    parts = {part for part in named if f"{obj}_{part}" in used}
    is_target = bool(parts) or any(len(a) == 3 and a[2] == obj for a in p.goal)
    pool = targets if is_target else moved
    half = footprint(old)
    size = max(half[:2])
    lo, hi = FOOTPRINT_RATIO
    out = []
    for cat in sorted(pool - {old}):
        if not parts <= set(assets.site_parts(cat)):
            continue
        h = footprint(cat)
        if not lo * size <= max(h[:2]) <= hi * size:
            continue
        if not is_target and 2 * min(h[:2]) > GRASP_MARGIN * 2 * robot.FINGER_OPEN:
            continue
        out.append(cat)
    return out


def edits_for(task: S.LiberoTask, factor: str) -> list[Edit]:
    """Every single edit of `factor` the task allows, in a fixed order."""
    movers = goals.movers(task)
    if factor == "layout":
        swaps = [Edit("swap", (a, b)) for i, a in enumerate(movers) for b in movers[i + 1 :]]
        free = goals.free_regions(task)
        return swaps + [Edit("move", (a, r)) for a in movers for r in free]
    if factor == "attributes":
        return [Edit("inst", (a, c)) for a in movers for c in instance_candidates(task, a)]
    if factor == "task":
        return [goal_edit([a]) for a in goals.candidate_atoms(task)]
    raise EditError(f"unknown factor {factor!r}; valid: {FACTORS}")


def edits_of(ep: E.Episode) -> tuple[Edit, ...]:
    """An episode's edits as `Edit`s."""
    return parse_edits(ep.edits) if ep.edits else ()


def resample(program: str, factor: str, rng: np.random.Generator) -> str | None:
    """A LIBERO episode program with one more edit of `factor`, drawn uniformly from
    `edits_for` its (edited) task; None when the task allows none."""
    ep = E.parse(program)
    edits = edits_for(S.load_task(*ep.task_ref), factor)
    if not edits:
        return None
    return _appended(ep, edits[int(rng.integers(len(edits)))])


def _appended(ep: E.Episode, edit: Edit) -> str:
    """The program of `ep` with `edit` added. `edit` was chosen on the edited task, so it may
    hold only after the edits `with_edit` would drop for it (a stand-in is chosen by the
    object's current category and size; a goal edit can make an object a target, which
    changes its stand-ins): the shorter program is kept when it still applies, else `edit`
    follows the whole chain, valid by construction."""
    chain = edits_of(ep)
    short = with_edit(chain, edit)
    try:
        apply(S.load_task(ep.suite, ep.task), short, PREFIX + ep.suite, ep.task)
    except EditError:
        short = (*chain, edit)
    return dataclasses.replace(ep, edits=format_edits(short)).program


PROBE_KINDS = ("away", "redraw", "near", "relation", "recategorized")


def focus(task: S.LiberoTask) -> str | None:
    """The object the goal moves first (a binary atom's first argument), if it is on the table."""
    for atom in task.problem.goal:
        if atom[0] in goals.BINARY and atom[1] in goals.movers(task):
            return atom[1]
    return None


def _start(task: S.LiberoTask, ep: E.Episode, obj: str) -> np.ndarray:
    c = _column(task, obj)
    return task.states[ep.index, c : c + 2]


def _away(task: S.LiberoTask, ep: E.Episode, factor: str) -> Edit | None:
    """The largest change of `factor` for the focus object: layout, to the free table region
    farthest from where it starts; attributes, to the stand-in whose footprint differs most."""
    obj = focus(task)
    if obj is None:
        return None
    if factor == "layout":
        here, ws = _start(task, ep, obj), task.workspace
        free = goals.free_regions(task)
        if not free:
            return None

        def far(r: str) -> float:
            x0, y0, x1, y1 = task.problem.regions[r].ranges[0]
            there = np.array([(x0 + x1) / 2 + ws.offset[0], (y0 + y1) / 2 + ws.offset[1]])
            return float(np.linalg.norm(there - here))

        return Edit("move", (obj, max(free, key=far)))
    cands = instance_candidates(task, obj)
    if factor != "attributes" or not cands:
        return None
    size = max(footprint(task.problem.category(obj))[:2])
    return Edit("inst", (obj, max(cands, key=lambda c: abs(max(footprint(c)[:2]) - size))))


def _task_probes(task: S.LiberoTask) -> list[Edit]:
    """New goals for a task probe that keep the goal's object (another target or relation
    for it): a goal that moved another object would change the object too, an attribute,
    so a task probe's flip would not be the task's (as our families' probes keep the role's
    object, `coda.critic.probes.isolate_task_probe`). Without a focus object, any new goal."""
    obj = focus(task)
    edits = edits_for(task, "task")
    if obj is None:
        return edits
    return [e for e in edits if len(e.atoms[0]) == 3 and e.atoms[0][1] == obj]


def _relation(task: S.LiberoTask) -> Edit | None:
    """The focus object and the goal's target trade places (when the target is on the table)."""
    movers = goals.movers(task)
    for atom in task.problem.goal:
        if atom[0] in goals.BINARY and atom[1] in movers and atom[2] in movers:
            return Edit("swap", (atom[1], atom[2]))
    return None


def probe(program: str, factor: str, kind: str, rng: np.random.Generator) -> str | None:
    """A counterfactual probe of a LIBERO episode (the critic's probe kinds,
    `coda.critic.probes.probe_plan`): "redraw" = `resample` (for the task, a new goal that keeps
    the goal's object: `_task_probes`); "away" = the focus object's largest
    change of the factor (`_away`); "relation" (layout) = focus and target swapped; "near"
    (layout) = a LIBERO-Plus level-1 shift of the table objects (every one, not the focus
    alone); attributes have no "near" (an instance is a category, not a size) and the task no
    "recategorized" (a goal edit rebinds nothing): None, and the critic falls back or skips."""
    if kind not in PROBE_KINDS:
        raise EditError(f"unknown probe kind {kind!r}; valid: {PROBE_KINDS}")
    ep = E.parse(program)
    task = S.load_task(*ep.task_ref)
    if kind == "redraw" and factor == "task":  # isolated: the goal keeps its object
        edits = _task_probes(task)
        if not edits:
            return None
        return _appended(ep, edits[int(rng.integers(len(edits)))])
    if kind == "redraw":
        return resample(program, factor, rng)
    if kind == "near":
        if factor != "layout" or ep.level:
            return None
        return dataclasses.replace(ep, level=1).program
    edit = {"away": lambda: _away(task, ep, factor), "relation": lambda: _relation(task)}.get(
        kind, lambda: None
    )()
    if edit is None or (kind == "relation" and factor != "layout"):
        return None
    return _appended(ep, edit)


def variant(
    program: str,
    factor: str,
    rng: np.random.Generator,
    shift_levels: Sequence[int],
    share: float,
    say: int = 0,
):
    """(compiled, verified) of one variant of an episode in `factor`, or None when its task
    allows no edit of it: for layout, with probability `share` (on an unedited episode) a
    small shift of its table objects at one of `shift_levels` (LIBERO-Plus's kind, seeded from
    `rng`), else a structural edit; for attributes and task, an edit of that factor. The
    variant is told in the goal's `say`-th wording (`goals.phrasings`; 0: its own)."""
    ep = E.parse(program)
    seed = 0
    if factor == "layout" and not ep.edits and rng.uniform() < share:
        level = int(shift_levels[int(rng.integers(len(shift_levels)))])
        new, seed = dataclasses.replace(ep, level=level).program, int(rng.integers(2**31))
    else:
        new = resample(program, factor, rng)
        if new is None:
            return None
    c = E.compile_episode(dataclasses.replace(E.parse(new), say=int(say)).program, seed)
    return c, bool(verify_task_state(c).verdict.ok)


__all__ = [
    "FACTORS",
    "PREFIX",
    "Edit",
    "applicable",
    "EditError",
    "apply",
    "edits_for",
    "edits_of",
    "focus",
    "format_edits",
    "goal_edit",
    "instance_candidates",
    "load",
    "parse_edits",
    "probe",
    "resample",
    "variant",
    "with_edit",
]
