"""Targeted generation and the targeted-vs-control validation batches (§3.1, §3.3).

`generate_targeted(mode, program, parents, B, seed, eps)`: B verified scenes, (1 - ε) of them
variants of the parents that recreate the mode's difficulty by editing only its factor (the
program's), ε of them novel seeds from the parents' families.

`make_validation_batches(mode, parents, N, seed)`: N targeted variants (the mode's factor moved
in the diagnosed direction, by its program) and N control variants (another factor,
`CONTROL_FACTOR`, moved by a comparable amount in a random direction), paired: control i comes
from the same parent as targeted i, and only pairs whose two scenes both verify are kept.
How a pair is made (`pairing`, `PAIRINGS`; the loop's `loop.validation_pairing`):

* ``nested`` (the loop's default): control i = parent i with the control edit; targeted i =
  control i with the mode's edit (the same program and seed as the sibling targeted variant).
  Targeted i and control i then differ only in the diagnosed factor (`changed_factors(control,
  targeted)` is ``[factor]``): every other factor, the control factor's draw included, is the
  same scene, so the pair isolates the diagnosed factor.
* ``sibling`` (runs before ``nested``): targeted i and control i are both edited from parent i,
  each in its own factor, so they differ in two factors (the diagnosed one on the targeted side,
  the control one on the control side): the test asks whether the diagnosed edit is harder than
  an edit of another factor.

How the control's magnitude is matched: each targeted variant's displacement along its factor is
measured in normalised units (`coda.engine.edits.factor_magnitude`: layout = largest object
displacement / 0.566 m, the sampling region's diagonal; attributes = largest change of one field
as a fraction of its category range; task = displacement of the rebound role's location / 0.566
m). The paired control moves the program's primary role (the object the difficulty is about,
e.g. the target a distractor obstructs) by that same normalised amount along the control
factor: `shift` by m * 0.566 m in a random direction for layout, `perturb_attributes` of one
random field by m of its range for attributes. `ValidationBatches.magnitude_gap` reports how
well it matched (a shift blocked by neighbours or a field clipped at its range can fall short).

`control="resample"` (the loop's default, `loop.validation_control`) instead redraws the control
factor from the family's own distribution (`resample_layout` / `resample_attributes` /
`resample_task`): the control stays inside the training support, so the test asks "is the
diagnosed direction harder than an ordinary variation of another factor?". Measured
(benchmarks/results/validation_power.md): the matched layout shift of an attribute mode
(m x 0.566 m, often 0.2-0.3 m) pushes objects out of the region the policy was trained on and
drops control success far below the unedited bases (figures there), so no attribute diagnosis
could ever be validated against it.

`validation_success(...)` rolls both batches out with the current policy (make_buckets +
backend.rollout, one rollout per variant) -> (targeted_success [N], control_success [N]);
`validate_mode(...)` runs the one-sided test of `coda.engine.validate`, writes the decision to
memory and, only when the mode is validated, stores its program in Ω.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from coda.engine import validate as V
from coda.engine.edits import LAYOUT_SCALE, changed_factors, factor_magnitude
from coda.engine.engines import Engine, mode_spec, resolve_program
from coda.engine.programs import Program, apply_many, bind, store_program
from coda.engine.roles import RoleBindingError
from coda.engine.seeding import seed_scenes, verify_scenes
from coda.sim.compile import CompiledScene, compile_scene
from coda.sim.rollout import make_buckets
from coda.sim.scene import Scene
from coda.sim.verify import Verdict

__all__ = [
    "CONTROLS",
    "CONTROL_FACTOR",
    "PAIRINGS",
    "GenerationError",
    "Generated",
    "ValidationBatches",
    "ValidationOutcome",
    "Variant",
    "control_program",
    "generate_targeted",
    "make_validation_batches",
    "rollout_success",
    "targeted_control_success",
    "validate_mode",
    "validation_success",
]

log = logging.getLogger(__name__)

# targeted factor -> the factor its control batch varies
CONTROL_FACTOR = {"layout": "attributes", "attributes": "layout", "task": "layout"}


class GenerationError(RuntimeError):
    """Too few variants verified within the attempt budget; says how many and why not."""


@dataclasses.dataclass
class Variant:
    """One generated scene: where it came from and what it took."""

    scene: Scene
    kind: str  # "targeted" | "control" | "novel"
    parent: int  # index into the parents (-1 for novel seeds)
    seed: int
    factor: str | None
    magnitude: float
    compiled: CompiledScene | None = None
    verdict: Verdict | None = None
    # a nested pair's targeted variant: the seed of the control edit it was made on top of
    control_seed: int | None = None

    def record(self) -> dict[str, Any]:
        """JSON-able summary (what Ω stores per variant; the program re-makes the scene)."""
        out = {
            "kind": self.kind,
            "parent": self.parent,
            "seed": self.seed,
            "factor": self.factor,
            "magnitude": round(float(self.magnitude), 6),
        }
        if self.control_seed is not None:
            out["control_seed"] = self.control_seed
        return out


@dataclasses.dataclass
class Generated:
    """What `generate_targeted` made: verified variants (targeted, then novel) and its effort."""

    variants: list[Variant]
    program: Program
    attempted: int  # targeted candidates tried
    verified: int  # of those, made and verified (including any beyond the B kept)
    edit_failures: int  # candidates the program could not make (no such edit in that scene)
    rejected: Counter  # verification reasons of rejected candidates, by check
    seconds: float

    @property
    def scenes(self) -> list[Scene]:
        return [v.scene for v in self.variants]

    @property
    def pass_rate(self) -> float:
        """Share of attempted targeted candidates that were made and verified."""
        return self.verified / max(self.attempted, 1)


def _check_factor(mode: Any, program: Program) -> str:
    m = mode_spec(mode)
    if program.factor != m.factor:
        raise ValueError(
            f"the program edits {program.factor!r} but the mode's factor is {m.factor!r}; "
            "targeted variants edit only the responsible factor"
        )
    return m.factor


def _usable(program: Program, parents: Sequence[Scene]) -> list[int]:
    idx, first = [], None
    for i, p in enumerate(parents):
        try:
            bind(program, p)
            idx.append(i)
        except RoleBindingError as e:
            first = first or e
    if not idx:
        if first is None:
            raise ValueError("need at least one parent scene")
        raise first
    return idx


def _make_many(
    program: Program, jobs: Sequence[tuple[Scene, int]], isolation: str | None = None
) -> list[tuple[Scene, float] | None]:
    """(variant, magnitude) per (parent, seed), None where the edit cannot be made there."""
    out = []
    made_all = apply_many(program, jobs, isolation=isolation)
    for (parent, _), made in zip(jobs, made_all, strict=True):
        if isinstance(made, Scene):
            out.append((made, factor_magnitude(parent, made, program.factor)))
        else:
            log.debug("edit could not be made: %s", made)
            out.append(None)
    return out


def generate_targeted(
    mode: Any,
    program: Program | None,
    parents: Sequence[Scene],
    B: int,
    seed: int,
    eps: float = 0.0,
    *,
    split: str = "train",
    engine: Engine | None = None,
    memory: Any | None = None,
    max_attempts_factor: int = 4,
    strict: bool = True,
    isolation: str | None = None,
) -> Generated:
    """B verified scenes for `mode`: round(ε B) novel seeds, the rest targeted variants.

    Targeted variant k edits parent k mod P (parents the program binds to) with its own seed
    drawn from `seed`. `program` None: the mode's Ω program in `memory`, else the engine's
    (offline by default). Candidates are verified in batches until enough pass or
    `max_attempts_factor * n_targeted` were tried; then `GenerationError` (or, with
    ``strict=False``, fewer variants). `isolation`: for LLM-written source programs
    (default ``"subprocess"``, one sandbox worker per batch).
    """
    if B < 0 or not 0.0 <= eps <= 1.0:
        raise ValueError(f"need B >= 0 and eps in [0, 1], got B={B}, eps={eps}")
    t0 = time.perf_counter()
    if program is None:
        program = resolve_program(mode, parents, engine=engine, memory=memory, seed=seed)
    program = Program.from_dict(program)
    factor = _check_factor(mode, program)
    n_novel = int(round(eps * B))
    n_target = B - n_novel
    usable = _usable(program, parents)
    rng = np.random.default_rng([int(seed), 0x7A6])
    out: list[Variant] = []
    attempted = failures = verified = 0
    rejected: Counter = Counter()
    k = 0
    while len(out) < n_target and attempted < max_attempts_factor * n_target:
        want = n_target - len(out)
        n = min(want + (want + 3) // 4, max_attempts_factor * n_target - attempted)
        picks = [(usable[(k + j) % len(usable)], int(rng.integers(2**31))) for j in range(n)]
        k, attempted = k + n, attempted + n
        batch = []
        for (i, s), made in zip(
            picks, _make_many(program, [(parents[i], s) for i, s in picks], isolation), strict=True
        ):
            if made is None:
                failures += 1
            else:
                batch.append(Variant(made[0], "targeted", i, s, factor, made[1]))
        for v, (c, verdict) in zip(batch, verify_scenes([v.scene for v in batch]), strict=True):
            v.compiled, v.verdict = c, verdict
            verified += verdict.ok
            if verdict.ok and len(out) < n_target:
                out.append(v)
            elif not verdict.ok:
                rejected.update({r.check for r in verdict.reasons})
    if len(out) < n_target:
        msg = (
            f"{len(out)} of {n_target} targeted variants verified after {attempted} attempts "
            f"({failures} edits impossible; rejected by {dict(rejected)})"
        )
        if strict:
            raise GenerationError(msg)
        log.warning(msg)
    families = [parents[i].task["family"] for i in usable]
    for j in range(n_novel):  # round-robin over the parents' families
        fam = families[j % len(families)]
        s = int(rng.integers(2**31))
        for scene in seed_scenes(fam, 1, split, s):
            out.append(Variant(scene, "novel", -1, s, None, 0.0))
    return Generated(
        out, program, attempted, verified, failures, rejected, time.perf_counter() - t0
    )


# ----------------------------------------------------------------------------- validation


# how the control batch varies its factor (`make_validation_batches(control=...)`)
CONTROLS = ("resample", "matched")
# how a targeted / control pair is made (`make_validation_batches(pairing=...)`, module doc)
PAIRINGS = ("nested", "sibling")


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

    @property
    def magnitude_gap(self) -> float:
        """Mean |targeted magnitude - control magnitude| over the pairs (normalised units)."""
        if not self.targeted:
            return 0.0
        pairs = zip(self.targeted, self.control, strict=True)
        return float(np.mean([abs(t.magnitude - c.magnitude) for t, c in pairs]))


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
    engine: Engine | None = None,
    memory: Any | None = None,
    max_attempts_factor: int = 6,
    isolation: str | None = None,
) -> ValidationBatches:
    """N targeted and N control variants of `parents` for `mode` (module docstring: how the
    control factor and its magnitude are chosen; `control` is ``matched`` or ``resample``; how
    a pair is made, `pairing` ``nested`` or ``sibling``). `GenerationError` if fewer than N
    pairs verify within `max_attempts_factor * N` attempts."""
    if N <= 0:
        raise ValueError(f"N must be positive, got {N}")
    if control not in CONTROLS:
        raise ValueError(f"unknown control kind {control!r}; valid: {list(CONTROLS)}")
    if pairing not in PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; valid: {list(PAIRINGS)}")
    control_kind = control  # `control` below is the control batch
    if program is None:
        program = resolve_program(mode, parents, engine=engine, memory=memory, seed=seed)
    program = Program.from_dict(program)
    factor = _check_factor(mode, program)
    cf = control_factor or CONTROL_FACTOR[factor]
    if cf == factor:
        raise ValueError(f"the control must vary another factor than {factor!r}")
    usable = _usable(program, parents)
    role = program.primary_role or "target"  # the object the difficulty is about
    rng = np.random.default_rng([int(seed), 0xC0])
    targeted: list[Variant] = []
    control: list[Variant] = []
    attempted, k = 0, 0
    while len(targeted) < N and attempted < max_attempts_factor * N:
        want = N - len(targeted)
        n = min(want + (want + 3) // 4, max_attempts_factor * N - attempted)
        picks = [
            (usable[(k + j) % len(usable)], *map(int, rng.integers(2**31, size=2)))
            for j in range(n)
        ]
        k, attempted = k + n, attempted + n
        pairs = []
        made_t = _make_many(program, [(parents[i], st) for i, st, _ in picks], isolation)
        for (i, st, sc), made in zip(picks, made_t, strict=True):
            if made is None:
                continue
            t = Variant(made[0], "targeted", i, st, factor, made[1])
            cprog = control_program(cf, role, made[1], control_kind)
            (cmade,) = _make_many(cprog, [(parents[i], sc)])
            if cmade is None:
                continue
            pairs.append((t, Variant(cmade[0], "control", i, sc, cf, cmade[1])))
        if pairing == "nested":  # the same edit (program, seed) made on the control scene
            on_c = _make_many(program, [(c.scene, t.seed) for t, c in pairs], isolation)
            pairs = [
                (Variant(m[0], "targeted", t.parent, t.seed, factor, m[1], control_seed=c.seed), c)
                for (t, c), m in zip(pairs, on_c, strict=True)
                if m is not None
            ]
        flat = [v.scene for p in pairs for v in p]
        checked = verify_scenes(flat)
        for j, (t, c) in enumerate(pairs):
            (ct, vt), (cc, vc) = checked[2 * j], checked[2 * j + 1]
            t.compiled, t.verdict, c.compiled, c.verdict = ct, vt, cc, vc
            if vt.ok and vc.ok and len(targeted) < N:
                targeted.append(t)
                control.append(c)
    if len(targeted) < N:
        raise GenerationError(
            f"{len(targeted)} of {N} targeted/control pairs verified after {attempted} attempts"
        )
    return ValidationBatches(targeted, control, program, factor, cf, attempted, pairing)


# ----------------------------------------------------------------------------- rollouts


def _policy_for(policy: Any) -> Callable[[Any], Any]:
    """A ChunkPolicy, or a factory bucket -> ChunkPolicy (e.g. `planner_for`)."""
    if hasattr(policy, "act"):
        return lambda bucket: policy
    if callable(policy):
        return policy
    raise TypeError(
        f"policy must be a ChunkPolicy or a bucket -> ChunkPolicy factory, got {policy}"
    )


def rollout_success(
    variants: Sequence[Variant | Scene | CompiledScene],
    policy: Any,
    params: Any,
    backend: Any,
    key: jax.Array,
    num_chunks: int,
    *,
    batch_size: int | None = None,
) -> np.ndarray:
    """ν at the end of one rollout of `policy` per variant -> success [N] bool, in order.

    Variants are grouped into same-structure buckets (`make_buckets`); each bucket gets its own
    key split from `key`.
    """
    compiled = []
    for v in variants:
        if isinstance(v, CompiledScene):
            compiled.append(v)
        elif isinstance(v, Variant):
            compiled.append(v.compiled if v.compiled is not None else compile_scene(v.scene))
        else:
            compiled.append(compile_scene(v))
    index = {id(c): i for i, c in enumerate(compiled)}
    if len(index) != len(compiled):  # the same object twice: give each its own slot
        compiled = [dataclasses.replace(c) for c in compiled]
        index = {id(c): i for i, c in enumerate(compiled)}
    success = np.zeros(len(compiled), bool)
    factory = _policy_for(policy)
    mult = getattr(backend, "n_devices", 1)
    for bucket in make_buckets(compiled, batch_size=batch_size, multiple_of=mult, pow2=True):
        key, sub = jax.random.split(key)
        r = backend.rollout(bucket, factory(bucket), params, sub, num_chunks)
        ok = np.asarray(r.success)
        for j, c in enumerate(bucket.variants):
            success[index[id(c)]] = bool(ok[j])
    return success


def validation_success(
    batches: ValidationBatches,
    policy: Any,
    params: Any,
    backend: Any,
    key: jax.Array,
    num_chunks: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(targeted_success [N], control_success [N]) of the current policy, one rollout each."""
    kt, kc = jax.random.split(key)
    t = rollout_success(batches.targeted, policy, params, backend, kt, num_chunks)
    c = rollout_success(batches.control, policy, params, backend, kc, num_chunks)
    return t, c


def targeted_control_success(
    mode: Any,
    parents: Sequence[Scene],
    policy: Any,
    params: Any,
    backend: Any,
    key: jax.Array,
    num_chunks: int,
    *,
    N: int = 32,
    seed: int = 0,
    program: Program | None = None,
    control_factor: str | None = None,
    control: str = "matched",
    pairing: str = "sibling",
) -> tuple[np.ndarray, np.ndarray]:
    """Mode + parents + policy -> (targeted_success [N], control_success [N]) in one call
    (`make_validation_batches` then `validation_success`)."""
    vb = make_validation_batches(
        mode,
        parents,
        N,
        seed,
        program=program,
        control_factor=control_factor,
        control=control,
        pairing=pairing,
    )
    return validation_success(vb, policy, params, backend, key, num_chunks)


@dataclasses.dataclass
class ValidationOutcome:
    result: V.TestResult
    batches: ValidationBatches
    targeted_success: np.ndarray  # [N] bool
    control_success: np.ndarray  # [N] bool
    program_id: int | None  # Ω entry, only when validated


def validate_mode(
    store: Any,
    mode: Any,
    parents: Sequence[Scene],
    policy: Any,
    params: Any,
    backend: Any,
    key: jax.Array,
    num_chunks: int,
    *,
    N: int = 32,
    seed: int = 0,
    round: int = 0,
    method: str = "fisher",
    alpha: float = V.DEFAULT_ALPHA,
    critic: str | None = None,
    program: Program | None = None,
    engine: Engine | None = None,
    control_factor: str | None = None,
    control: str = "matched",
    pairing: str = "sibling",
) -> ValidationOutcome:
    """Targeted vs control for a candidate mode: batches, rollouts, the one-sided test, the
    decision in memory, and — only if validated — the program in Ω with its variants."""
    m = mode_spec(mode)
    if m.id is None:
        raise ValueError("validate_mode needs a mode with an id (a memory Mode)")
    batches = make_validation_batches(
        m,
        parents,
        N,
        seed,
        program=program,
        control_factor=control_factor,
        control=control,
        pairing=pairing,
        engine=engine,
    )
    t, c = validation_success(batches, policy, params, backend, key, num_chunks)
    result = V.one_sided_test(int(t.sum()), N, int(c.sum()), N, method=method, alpha=alpha)
    V.apply_validation(store, m.id, result, round=round, critic=critic)
    pid = None
    if result.accepted:
        pid = store_program(
            store,
            batches.program,
            round=round,
            mode_id=m.id,
            variants=[v.record() for v in batches.targeted],
            compile_checks=[
                {"kind": "targeted", "attempted": batches.attempted, "verified": N},
                {"kind": "control", "factor": batches.control_factor, "verified": N},
            ],
            meta={
                "engine": (engine.name if engine is not None else "offline"),
                "validation": result.as_dict(),
                "control_factor": batches.control_factor,
                "control": control,
                "pairing": pairing,
                "magnitude_gap": batches.magnitude_gap,
                "families": sorted({p.task["family"] for p in parents}),
            },
        )
    return ValidationOutcome(result, batches, t, c, pid)


def differs_only_in(parent: Scene, child: Scene, factor: str) -> bool:
    """True if `child` equals `parent` except (possibly) in `factor` (objects, table equal)."""
    return set(changed_factors(parent, child)) <= {factor}
