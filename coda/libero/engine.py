"""The engine on LIBERO (issue 30 item 2): a mode's generation program Ω as a choice over edits.

A LIBERO scene is a source task plus discrete edits (`coda.libero.program`: swap / move for
layout, inst for attributes, goal for the task), so the difficulty a mode names is a set of edits
of its factor, not a neighbourhood of continuous values:

    EditChoice(factor, edits)   targeted variant = a base episode with its edits of `factor`
                                replaced by one of `edits` (drawn per variant)

Written from the evidence (`program_for`: the mode's diagnosed failures): the failures' own edits
of the factor ("the policy fails after these swaps"); where the failures carry none (a failure
at one of LIBERO's own initial states, or after a layout shift), every edit of the factor that
changes the first of the goal's objects that some but not all of the factor's edits change
(`goal_objects`: the moved object, else where it goes, e.g. the plate when the bowl starts on a
cabinet and cannot be moved; a control needs an edit that leaves the object alone):
"changing this object in this factor is what the policy cannot handle".

Validation (`validation_batches`, the pairings of `coda.engine.pairs`): pair i shares base i (a
pool episode, or a failure with its edits of the factor removed). ``recreate`` (the loop's
default): targeted i adds one of the program's edits, control i one of the factor's other edits
the base's task allows (never one of the program's): are these edits harder than the factor's
others? ``nested``: control i adds an edit of the control factor (`CONTROL_FACTOR`: layout <->
attributes, task -> layout), targeted i that edit plus one of the program's: is the diagnosed
factor's edit harder than none, with another factor changed in both (a mode naming the wrong
factor cannot pass: the true difficulty is in both or in neither)? ``sibling``: the program's
edit vs an edit of the control factor. Discrete edits have no magnitude to match
(`Variant.magnitude` = 0). Every variant is verified by LIBERO's checks
(`coda.libero.verify`). `generate_targeted` makes the validated program's variants the same way.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from coda.engine.engines import mode_spec
from coda.engine.generate import Generated
from coda.engine.pairs import CONTROL_FACTOR, PAIRINGS, ValidationBatches
from coda.engine.variants import GenerationError, Variant
from coda.libero import episodes as E
from coda.libero import program as P
from coda.libero import scene as S
from coda.libero.verify import verify_task_state

log = logging.getLogger(__name__)

KEY = "libero_edits"  # an Ω entry's program is an EditChoice when its meta program has this key


@dataclasses.dataclass(frozen=True)
class EditChoice:
    """Ω on LIBERO: one factor and the edits (`program.Edit.text`) that recreate its difficulty."""

    factor: str
    edits: tuple[str, ...]
    note: str = ""

    def __post_init__(self) -> None:
        if self.factor not in P.FACTORS:
            raise ValueError(f"EditChoice factor {self.factor!r}; valid: {P.FACTORS}")
        if not self.edits:
            raise ValueError("an EditChoice needs at least one edit")
        for e in P.parse_edits(";".join(self.edits)):  # EditError names a malformed one
            if e.factor != self.factor:
                raise P.EditError(f"edit {e.text!r} changes {e.factor}, not {self.factor}")

    @property
    def roles(self) -> tuple[str, ...]:
        """The objects the edits change (memory's role signature of the entry)."""
        out = []
        for e in P.parse_edits(";".join(self.edits)):
            out += [a.split(",")[1] for a in e.args] if e.op == "goal" else [e.args[0]]
        return tuple(dict.fromkeys(out))

    def to_dict(self) -> dict[str, Any]:
        return {"factor": self.factor, KEY: list(self.edits), "note": self.note}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EditChoice:
        if not isinstance(d, Mapping) or KEY not in d:
            raise ValueError(f"not a LIBERO edit-choice program (needs {KEY!r}): {d!r}")
        return cls(str(d.get("factor")), tuple(str(x) for x in d[KEY]), str(d.get("note", "")))


def _episode(scene: Any) -> E.Episode:
    return E.parse(scene.program)


def strip(ep: E.Episode, factor: str) -> E.Episode:
    """`ep` without its edits of `factor` (the base a pair adds its edit of `factor` to), and
    without later edits that held only after a removed one (`program.applicable`)."""
    keep = [e for e in P.edits_of(ep) if e.factor != factor]
    if keep:
        keep = list(P.applicable(S.load_task(ep.suite, ep.task), keep))
    return dataclasses.replace(ep, edits=P.format_edits(keep))


@functools.lru_cache(maxsize=512)
def allowed(task_ref: tuple[str, str], factor: str) -> tuple[str, ...]:
    """Every edit of `factor` the task `task_ref` allows, as text, in `edits_for`'s order."""
    return tuple(e.text for e in P.edits_for(S.load_task(*task_ref), factor))


def _touches(text: str, obj: str) -> bool:
    (e,) = P.parse_edits(text)
    if e.op == "goal":  # a new goal that moves the object or puts something in / on it
        return any(obj in a[1:] for a in e.atoms)
    return obj in e.args


def goal_objects(task: S.LiberoTask) -> list[str]:
    """The objects the goal names, in its order (the moved object, then where it goes)."""
    return list(dict.fromkeys(x for atom in task.problem.goal for x in atom[1:]))


def program_for(mode: Any, evidence: Sequence[Any]) -> EditChoice:
    """The mode's EditChoice written from its failures (module docstring); `GenerationError`
    when there is nothing of the factor to recreate."""
    m = mode_spec(mode)
    if m.factor not in P.FACTORS:
        raise GenerationError(f"a {m.factor} mode names no LIBERO scene factor to edit")
    eps = [_episode(s) for s in evidence]
    seen = [e.text for ep in eps for e in P.edits_of(ep) if e.factor == m.factor]
    if seen:
        return EditChoice(m.factor, tuple(dict.fromkeys(seen)), "the failures' edits")
    touching = []
    for ep in eps:
        base = strip(ep, m.factor)
        edits = allowed(base.task_ref, m.factor)
        for obj in goal_objects(S.load_task(*base.task_ref)):
            mine = [t for t in edits if _touches(t, obj)]
            if mine and len(mine) < len(edits):  # the first one a control can leave alone
                touching += mine
                break
    if not touching:
        raise GenerationError(f"no {m.factor} edit of the failures' goal objects")
    return EditChoice(m.factor, tuple(dict.fromkeys(touching)), "edits of the goal's object")


def stored_program(memory: Any, mode_id: int | None) -> EditChoice | None:
    """The mode's newest EditChoice in Ω, or None."""
    if memory is None or mode_id is None:
        return None
    for gp in memory.generation_programs(mode_id=int(mode_id)):
        d = (gp.meta or {}).get("program")
        if isinstance(d, Mapping) and KEY in d:
            return EditChoice.from_dict(d)
    return None


def resolve(mode: Any, evidence: Sequence[Any], memory: Any | None) -> EditChoice:
    """The mode's Ω program if it has one, else the one written from `evidence`."""
    return stored_program(memory, mode_spec(mode).id) or program_for(mode, evidence)


def _made(program: str, seed: int) -> tuple[Any, Any]:
    c = E.compile_episode(program, seed)
    return c, verify_task_state(c).verdict


def _with(base: E.Episode, text: str) -> str:
    (edit,) = P.parse_edits(text)
    return dataclasses.replace(base, edits=P.format_edits((*P.edits_of(base), edit))).program


def _choices(program: EditChoice, base: E.Episode) -> tuple[list[str], list[str]]:
    """(targeted, control) edits the base's task allows: the program's, and the factor's others."""
    ok = allowed(base.task_ref, program.factor)
    mine = set(program.edits)
    return [t for t in program.edits if t in ok], [t for t in ok if t not in mine]


def _pick(xs: Sequence[str], rng) -> str:
    return xs[int(rng.integers(len(xs)))]


def _pair(program: EditChoice, base: E.Episode, pairing: str, rng) -> tuple[str, str] | None:
    """(targeted, control) episode programs of one pair on `base`, or None when its task
    allows no such pair. ``recreate``: the program's edit vs another edit of its factor;
    ``sibling``: the program's edit vs an edit of the control factor (`CONTROL_FACTOR`);
    ``nested``: control = an edit of the control factor, targeted = that control plus the
    program's edit (the pair differs in the diagnosed factor's edit only)."""
    if pairing == "recreate":
        tgt, ctl = _choices(program, base)
        if not tgt or not ctl:
            return None
        return _with(base, _pick(tgt, rng)), _with(base, _pick(ctl, rng))
    other = CONTROL_FACTOR[program.factor]
    base = strip(base, other)
    ctl = allowed(base.task_ref, other)
    if not ctl:
        return None
    control = E.parse(_with(base, _pick(ctl, rng)))
    on = control if pairing == "nested" else base
    tgt = [t for t in program.edits if t in allowed(on.task_ref, program.factor)]
    if not tgt:
        return None
    return _with(on, _pick(tgt, rng)), control.program


def _tries(bases: Sequence[Any], factor: str, tries: int, rng):
    """(index, the base's episode without its edits of `factor`, its seed) for `tries` tries,
    cycling over `bases` in one random order (none without bases)."""
    if not len(bases):
        return
    order = rng.permutation(len(bases))
    for k in range(tries):
        i = int(order[k % len(bases)])
        yield i, strip(_episode(bases[i]), factor), int(bases[i].seed)


def validation_batches(
    mode: Any,
    bases: Sequence[Any],
    n: int,
    seed: int,
    *,
    evidence: Sequence[Any] | None = None,
    memory: Any | None = None,
    pairing: str = "recreate",
    max_attempts_factor: int = 4,
    **_: Any,
) -> ValidationBatches:
    """`n` verified targeted / control pairs on `bases` (module docstring; `pairing` as
    `coda.engine.pairs.PAIRINGS`, made by `_pair`); `GenerationError` when fewer verify within
    `max_attempts_factor * n` tries. The loop's `control` / `rest` settings are our families'
    (continuous neighbourhoods); a LIBERO pair is always on the base as it is."""
    if n <= 0:
        raise ValueError(f"n must be positive, got {n}")
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; valid: {list(PAIRINGS)}")
    program = resolve(mode, list(evidence or bases), memory)
    rng = np.random.default_rng([int(seed), 0x11B])
    targeted, control, tried, rejected = [], [], 0, Counter()
    for i, base, s in _tries(bases, program.factor, max_attempts_factor * n, rng):
        if len(targeted) == n:
            break
        tried += 1
        pair = _pair(program, base, pairing, rng)
        if pair is None:
            rejected["no edit here"] += 1
            continue
        (t, tv), (c, cv) = _made(pair[0], s), _made(pair[1], s)
        if not (tv.ok and cv.ok):
            rejected.update(r.check for v in (tv, cv) for r in v.reasons)
            continue
        targeted.append(Variant(t.scene, "targeted", i, s, program.factor, 0.0, t, tv))
        control.append(Variant(c.scene, "control", i, s, program.factor, 0.0, c, cv))
    if len(targeted) < n:
        raise GenerationError(
            f"{len(targeted)} of {n} LIBERO pairs verified after {tried} tries "
            f"(rejected: {dict(rejected)})"
        )
    cf = program.factor if pairing == "recreate" else CONTROL_FACTOR[program.factor]
    return ValidationBatches(targeted, control, program, program.factor, cf, tried, pairing)


def generate_targeted(
    mode: Any,
    bases: Sequence[Any],
    n: int,
    seed: int,
    *,
    evidence: Sequence[Any] | None = None,
    memory: Any | None = None,
    max_attempts_factor: int = 4,
    **_: Any,
) -> Generated:
    """≤ `n` verified variants of `bases` with one of the mode's edits each (its Ω program,
    else the one written from `evidence`); fewer when too few verify (logged)."""
    t0 = time.perf_counter()
    program = resolve(mode, list(evidence or bases), memory)
    rng = np.random.default_rng([int(seed), 0x7A6])
    out, tried, failures, verified, rejected = [], 0, 0, 0, Counter()
    for i, base, s in _tries(bases, program.factor, max_attempts_factor * n, rng):
        if len(out) == n:
            break
        tgt, _ = _choices(program, base)
        tried += 1
        if not tgt:
            failures += 1
            continue
        c, v = _made(_with(base, _pick(tgt, rng)), s)
        verified += bool(v.ok)
        if v.ok:
            out.append(Variant(c.scene, "targeted", i, s, program.factor, 0.0, c, v))
        else:
            rejected.update(r.check for r in v.reasons)
    if len(out) < n:
        log.warning("%d of %d LIBERO targeted variants after %d tries", len(out), n, tried)
    return Generated(out, program, tried, verified, failures, rejected, time.perf_counter() - t0)


__all__ = [
    "KEY",
    "EditChoice",
    "allowed",
    "generate_targeted",
    "goal_objects",
    "program_for",
    "resolve",
    "stored_program",
    "strip",
    "validation_batches",
]
