"""Targeted-vs-control validation batches (§3.3): N paired targeted / control variants of a mode.

`make_validation_batches(mode, parents, N, seed)`: N targeted variants (the mode's program) and N
control variants, paired: pair i comes from the same base (a parent), and only pairs whose two
scenes both verify are kept. The program is the mode's (Ω in memory, else the engine's, written
from `evidence`: the mode's diagnosed failures; the bases themselves when none are given). How a
pair is made (`pairing`, `PAIRINGS`; the loop's `loop.validation_pairing`):

* ``recreate`` (the loop's default since issue 28): targeted i = base i with the mode's program
  (the diagnosed factor put where the failures had it: `coda.engine.evidence`); control i = base
  i with the diagnosed factor redrawn from the family's own distribution (``resample_<factor>``).
  They differ only in the diagnosed factor, and the control puts it back to nominal: the test
  asks "does keeping δ where the failures were fail more than δ as usual?", which a wrong
  factor cannot pass (the true factor is the base's in both). ``rest`` says what the base is:
  ``keep`` (parent i as it is) or ``resample`` (parent i with every other factor redrawn,
  shared by the pair: the difficulty must recreate in other contexts too). Only
  ``control="resample"``.
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

from coda.engine.edits import LAYOUT_SCALE
from coda.engine.engines import Engine, resolve_program
from coda.engine.programs import Program
from coda.engine.seeding import verify_scenes
from coda.engine.variants import GenerationError, Variant, check_factor, make_many, usable_parents
from coda.sim.scene import Scene, resample

__all__ = [
    "CONTROLS",
    "CONTROL_FACTOR",
    "PAIRINGS",
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
CONTROLS = ("resample", "matched")
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
    if pairing == "recreate" and control != "resample":
        raise ValueError(
            f"pairing 'recreate' redraws the diagnosed factor for its control; control must be "
            f"'resample', got {control!r}"
        )


def _base(parent: Scene, factor: str, rest: str, seed: int) -> Scene:
    """A recreate pair's base: the parent, or the parent with every other factor redrawn."""
    if rest == "keep":
        return parent
    out = parent
    for k, f in enumerate(_OTHERS[factor]):
        out = resample(out, f, seed + k)
    return out


def _recreate_pairs(program, factor, parents, picks, rest, isolation) -> list[tuple]:
    """(targeted, control) per pick (parent i, targeted seed, control seed, rest seed)."""
    bases = [_base(parents[i], factor, rest, sr) for i, _, _, sr in picks]
    made_t = make_many(
        program, [(b, st) for b, (_, st, _, _) in zip(bases, picks, strict=True)], isolation
    )
    cprog = control_program(factor, "", 0.0, "resample")
    made_c = make_many(cprog, [(b, sc) for b, (_, _, sc, _) in zip(bases, picks, strict=True)])
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
            pairs = _recreate_pairs(program, factor, parents, picks, rest, isolation)
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
