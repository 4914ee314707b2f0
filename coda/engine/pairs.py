"""Targeted-vs-control validation batches (§3.3): N paired targeted / control variants of a mode.

`make_validation_batches(mode, parents, N, seed)`: N targeted variants (the mode's program) and N
control variants, paired: pair i comes from the same base (a parent), and only pairs whose two
scenes both verify are kept. The program is the mode's (Ω in memory, else the engine's, written
from `evidence`: the mode's diagnosed failures; the bases themselves when none are given). How a
pair is made (`pairing`, `PAIRINGS`; the loop's `loop.validation_pairing`):

* ``recreate`` (the loop's default since issue 28): targeted i = base i with the mode's program
  (the diagnosed factor put where the failures had it: `coda.engine.evidence`); control i = base
  i with the diagnosed factor moved out of that neighbourhood: ``control="outside"`` (the
  loop's default) draws each box axis / value band / distance band of the program outside its
  interval (`coda.engine.neighbourhood`, ``side="outside"``), and a task mode's focus role gets
  an object of another category in place, or the relation another value
  (`coda.engine.task_control`: holding the role's pose, mass, friction and width, which a task
  redraw would move with the role; where the failures span every category and relation the
  family allows here, the control is drawn from that same neighbourhood, as a band covering
  nearly a whole range is); ``control="resample"`` redraws the factor from the
  family's own distribution (weak where the failures' band is most of a category's range, and
  a task redraw moves the role to another object). The pair differs only in the diagnosed
  factor (a task control also swaps the focus object's kind), so a wrong factor cannot pass:
  the true factor is the base's in both. ``rest`` says what the base is: ``keep`` (parent i as
  it is) or ``resample`` (parent i with every other factor redrawn, shared by the pair: the
  difficulty must recreate in other contexts too).
* ``nested``: control i = parent i with the control edit (another factor, `CONTROL_FACTOR`);
  targeted i = control i with the mode's edit. Targeted i and control i then differ only in the
  diagnosed factor, but the control keeps that factor at the parent's value (a failing one when
  the parents are the failures).
* ``sibling``: targeted i and control i are both edited from parent i, each in its own factor,
  so they differ in two factors: the test asks whether the diagnosed edit is harder than an
  edit of another factor.

How the control of ``nested`` / ``sibling`` matches the targeted magnitude (``control=
"matched"``): each targeted variant's displacement along its factor is measured in normalised
units (`coda.engine.edits.factor_magnitude`: layout = largest object displacement / 0.566 m, the
sampling region's diagonal; attributes = largest change of one field as a fraction of its
category range; task = displacement of the rebound role's location / 0.566 m). The paired
control moves the program's primary role by that same normalised amount along the control
factor: `shift` by m * 0.566 m in a random direction for layout, `perturb_attributes` of one
random field by m of its range for attributes. `ValidationBatches.magnitude_gap` reports how
well it matched. ``control="resample"`` instead redraws the control factor from the family's own
distribution (measured: benchmarks/results/validation_power.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from coda.engine.edits import LAYOUT_SCALE, factor_magnitude
from coda.engine.engines import Engine, resolve_program
from coda.engine.programs import Program
from coda.engine.seeding import verify_scenes
from coda.engine.task_control import task_control
from coda.engine.variants import GenerationError, Variant, check_factor, make_many, usable_parents
from coda.sim.scene import Scene, resample
from coda.sim.sdk import SceneProgramError

__all__ = [
    "CONTROLS",
    "CONTROL_FACTOR",
    "PAIRINGS",
    "RECREATE_CONTROLS",
    "RESTS",
    "ValidationBatches",
    "control_program",
    "make_validation_batches",
]

# targeted factor -> the factor a nested / sibling control batch varies
CONTROL_FACTOR = {"layout": "attributes", "attributes": "layout", "task": "layout"}
_OTHERS = {
    "layout": ("attributes", "task"),
    "attributes": ("layout", "task"),
    "task": ("layout", "attributes"),
}

# how the control batch varies its factor (`make_validation_batches(control=...)`)
CONTROLS = ("resample", "matched", "outside")
# the controls a recreate pair may use: the diagnosed factor out of the neighbourhood | redrawn
RECREATE_CONTROLS = ("outside", "resample")
# how a targeted / control pair is made (`make_validation_batches(pairing=...)`, module doc)
PAIRINGS = ("recreate", "nested", "sibling")
# recreate pairs: what the shared base keeps of the parent besides the diagnosed factor
RESTS = ("keep", "resample")


def control_program(
    control_factor: str, role: str, magnitude: float, kind: str = "matched"
) -> Program:
    """The control edit. ``matched``: `role` moved by `magnitude` (normalised) along
    `control_factor`, in a random direction; ``resample``: `control_factor` redrawn from the
    family's own distribution (see the module docstring)."""
    if kind not in CONTROLS:
        raise ValueError(f"unknown control kind {kind!r}; valid: {list(CONTROLS)}")
    if kind == "resample":
        if control_factor not in ("layout", "attributes", "task"):
            raise ValueError(
                f"unknown control factor {control_factor!r}; valid: layout, attributes, task"
            )
        return Program.from_dict({"edit": f"resample_{control_factor}"})
    m = float(max(magnitude, 0.0))
    if control_factor == "layout":
        d = min(m * LAYOUT_SCALE, 1.0)
        return Program.from_dict({"edit": "shift", "role": role, "distance": [d, d]})
    if control_factor == "attributes":
        return Program.from_dict(
            {"edit": "perturb_attributes", "role": role, "magnitude": min(m, 1.5)}
        )
    if control_factor == "task":  # discrete: magnitude cannot be matched, documented
        return Program.from_dict({"edit": "resample_task"})
    raise ValueError(f"unknown control factor {control_factor!r}; valid: layout, attributes, task")


@dataclasses.dataclass
class ValidationBatches:
    """Paired targeted / control variants (same size, same parents, pair by pair; ``nested``:
    targeted i is control i with the mode's edit)."""

    targeted: list[Variant]
    control: list[Variant]
    program: Program
    factor: str
    control_factor: str
    attempted: int
    pairing: str = "sibling"
    rest: str = "keep"  # recreate pairs: the parents' other factors kept | resampled

    @property
    def magnitude_gap(self) -> float:
        """Mean |targeted magnitude - control magnitude| over the pairs (normalised units)."""
        if not self.targeted:
            return 0.0
        pairs = zip(self.targeted, self.control, strict=True)
        return float(np.mean([abs(t.magnitude - c.magnitude) for t, c in pairs]))


def _check_args(N: int, control: str, pairing: str, rest: str) -> None:
    if N <= 0:
        raise ValueError(f"N must be positive, got {N}")
    if control not in CONTROLS:
        raise ValueError(f"unknown control kind {control!r}; valid: {list(CONTROLS)}")
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; valid: {list(PAIRINGS)}")
    if rest not in RESTS:
        raise ValueError(f"unknown rest {rest!r}; valid: {list(RESTS)}")
    if (pairing == "recreate") != (control in RECREATE_CONTROLS) and control != "resample":
        raise ValueError(
            f"control {control!r} does not go with pairing {pairing!r}; valid: recreate with "
            f"{list(RECREATE_CONTROLS)}, nested / sibling with ['resample', 'matched']"
        )


def _base(parent: Scene, factor: str, rest: str, seed: int) -> Scene:
    """A recreate pair's base: the parent, or the parent with every other factor redrawn."""
    if rest == "keep":
        return parent
    out = parent
    for k, f in enumerate(_OTHERS[factor]):
        out = resample(out, f, seed + k)
    return out


def outside_program(program: Program) -> Program | None:
    """The control of a recreate pair with ``control="outside"``: the program's neighbourhood
    edits with ``side="outside"`` (other edits, e.g. an obstruction, dropped); None when it has
    none (a rule-table program: the control redraws the factor instead)."""
    edits = [{**e, "side": "outside"} for e in program.edits if "side" in e]
    if not edits:
        return None
    return Program.from_dict({"factor": program.factor, "edits": edits, "note": "outside"})


def _controls(program: Program, factor: str, kind: str, jobs: list) -> list:
    """(scene, magnitude) | None per (base, seed): the diagnosed factor moved out of the
    program's neighbourhood (``outside``) or redrawn from the family (``resample``)."""
    choose = [e for e in program.edits if e["edit"] == "choose_task"]
    if kind == "outside" and factor == "task" and choose:
        out = []
        for base, sc in jobs:
            try:
                c = task_control(base, choose[0], sc)
            except SceneProgramError:  # nothing outside: "anywhere" is the neighbourhood itself
                out += make_many(program, [(base, sc)])
                continue
            out.append((c, factor_magnitude(base, c, factor)))
        return out
    cprog = outside_program(program) if kind == "outside" else None
    return make_many(cprog or control_program(factor, "", 0.0, "resample"), jobs)


def _recreate_pairs(program, factor, parents, picks, rest, kind, isolation) -> list[tuple]:
    """(targeted, control) per pick (parent i, targeted seed, control seed, rest seed)."""
    bases = [_base(parents[i], factor, rest, sr) for i, _, _, sr in picks]
    jobs_t = [(b, st) for b, (_, st, _, _) in zip(bases, picks, strict=True)]
    made_t = make_many(program, jobs_t, isolation)
    jobs_c = [(b, sc) for b, (_, _, sc, _) in zip(bases, picks, strict=True)]
    made_c = _controls(program, factor, kind, jobs_c)
    pairs = []
    for (i, st, sc, sr), t, c in zip(picks, made_t, made_c, strict=True):
        if t is None or c is None:
            continue
        rs = sr if rest == "resample" else None
        pairs.append(
            (
                Variant(t[0], "targeted", i, st, factor, t[1], rest_seed=rs),
                Variant(c[0], "control", i, sc, factor, c[1], rest_seed=rs),
            )
        )
    return pairs


def _edited_pairs(program, factor, cf, role, control_kind, pairing, parents, picks, isolation):
    """(targeted, control) per pick for the ``nested`` / ``sibling`` pairings."""
    pairs = []
    made_t = make_many(program, [(parents[i], st) for i, st, *_ in picks], isolation)
    for (i, st, sc, *_), made in zip(picks, made_t, strict=True):
        if made is None:
            continue
        t = Variant(made[0], "targeted", i, st, factor, made[1])
        cprog = control_program(cf, role, made[1], control_kind)
        (cmade,) = make_many(cprog, [(parents[i], sc)])
        if cmade is None:
            continue
        pairs.append((t, Variant(cmade[0], "control", i, sc, cf, cmade[1])))
    if pairing == "nested":  # the same edit (program, seed) made on the control scene
        on_c = make_many(program, [(c.scene, t.seed) for t, c in pairs], isolation)
        pairs = [
            (Variant(m[0], "targeted", t.parent, t.seed, factor, m[1], control_seed=c.seed), c)
            for (t, c), m in zip(pairs, on_c, strict=True)
            if m is not None
        ]
    return pairs


def make_validation_batches(
    mode: Any,
    parents: Sequence[Scene],
    N: int,
    seed: int,
    *,
    program: Program | None = None,
    control_factor: str | None = None,
    control: str = "matched",
    pairing: str = "sibling",
    rest: str = "keep",
    evidence: Sequence[Scene] | None = None,
    engine: Engine | None = None,
    memory: Any | None = None,
    max_attempts_factor: int = 6,
    isolation: str | None = None,
) -> ValidationBatches:
    """N targeted and N control variants of `parents` (the bases) for `mode` (module
    docstring: `pairing` recreate | nested | sibling, `control` resample | matched, `rest`
    keep | resample; `evidence`: the scenes the engine writes the program from, default the
    bases). `GenerationError` if fewer than N pairs verify within `max_attempts_factor * N`
    attempts."""
    _check_args(N, control, pairing, rest)
    if program is None:
        program = resolve_program(
            mode, parents, engine=engine, memory=memory, seed=seed, evidence=evidence
        )
    program = Program.from_dict(program)
    factor = check_factor(mode, program)
    cf = factor if pairing == "recreate" else control_factor or CONTROL_FACTOR[factor]
    if cf == factor and pairing != "recreate":
        raise ValueError(f"the control must vary another factor than {factor!r}")
    usable = usable_parents(program, parents)
    role = program.primary_role or "target"  # the object the difficulty is about
    rng = np.random.default_rng([int(seed), 0xC0])
    targeted: list[Variant] = []
    ctrl: list[Variant] = []
    attempted, k = 0, 0
    n_seeds = 3 if pairing == "recreate" else 2  # (targeted, control[, rest]) seeds per pick
    while len(targeted) < N and attempted < max_attempts_factor * N:
        want = N - len(targeted)
        n = min(want + (want + 3) // 4, max_attempts_factor * N - attempted)
        picks = [
            (usable[(k + j) % len(usable)], *map(int, rng.integers(2**31, size=n_seeds)))
            for j in range(n)
        ]
        k, attempted = k + n, attempted + n
        if pairing == "recreate":
            pairs = _recreate_pairs(program, factor, parents, picks, rest, control, isolation)
        else:
            pairs = _edited_pairs(
                program, factor, cf, role, control, pairing, parents, picks, isolation
            )
        checked = verify_scenes([v.scene for p in pairs for v in p])
        for j, (t, c) in enumerate(pairs):
            (ct, vt), (cc, vc) = checked[2 * j], checked[2 * j + 1]
            t.compiled, t.verdict, c.compiled, c.verdict = ct, vt, cc, vc
            if vt.ok and vc.ok and len(targeted) < N:
                targeted.append(t)
                ctrl.append(c)
    if len(targeted) < N:
        raise GenerationError(
            f"{len(targeted)} of {N} targeted/control pairs verified after {attempted} attempts"
        )
    return ValidationBatches(targeted, ctrl, program, factor, cf, attempted, pairing, rest)
