"""Targeted generation and the targeted-vs-control validation batches (§3.1, §3.3).

`generate_targeted(mode, program, parents, B, seed, eps)`: B verified scenes, (1 - ε) of them
variants of the parents that recreate the mode's difficulty by editing only its factor (the
program's), ε of them novel seeds from the parents' families.

`make_validation_batches(mode, parents, N, seed)` (`coda.engine.pairs`, re-exported here): N
paired targeted / control variants; how a pair is made (``pairing`` recreate | nested |
sibling) and how the control varies (``control`` resample | matched) are documented there.

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
from coda.engine.edits import changed_factors
from coda.engine.engines import Engine, mode_spec, resolve_program
from coda.engine.pairs import (
    CONTROL_FACTOR,
    CONTROLS,
    PAIRINGS,
    RESTS,
    ValidationBatches,
    control_program,
    make_validation_batches,
)
from coda.engine.programs import Program, store_program
from coda.engine.seeding import seed_scenes, verify_scenes
from coda.engine.variants import GenerationError, Variant, check_factor, make_many, usable_parents
from coda.sim.compile import CompiledScene, compile_scene
from coda.sim.rollout import make_buckets
from coda.sim.scene import Scene

__all__ = [
    "CONTROLS",
    "CONTROL_FACTOR",
    "PAIRINGS",
    "RESTS",
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
    evidence: Sequence[Scene] | None = None,
    max_attempts_factor: int = 4,
    strict: bool = True,
    isolation: str | None = None,
) -> Generated:
    """B verified scenes for `mode`: round(ε B) novel seeds, the rest targeted variants.

    Targeted variant k edits parent k mod P (parents the program binds to) with its own seed
    drawn from `seed`. `program` None: the mode's Ω program in `memory`, else the engine's
    (offline by default), written from `evidence` (the mode's diagnosed failures; default the
    parents). Candidates are verified in batches until enough pass or
    `max_attempts_factor * n_targeted` were tried; then `GenerationError` (or, with
    ``strict=False``, fewer variants). `isolation`: for LLM-written source programs
    (default ``"subprocess"``, one sandbox worker per batch).
    """
    if B < 0 or not 0.0 <= eps <= 1.0:
        raise ValueError(f"need B >= 0 and eps in [0, 1], got B={B}, eps={eps}")
    t0 = time.perf_counter()
    if program is None:
        program = resolve_program(
            mode, parents, engine=engine, memory=memory, seed=seed, evidence=evidence
        )
    program = Program.from_dict(program)
    factor = check_factor(mode, program)
    n_novel = int(round(eps * B))
    n_target = B - n_novel
    usable = usable_parents(program, parents)
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
            picks, make_many(program, [(parents[i], s) for i, s in picks], isolation), strict=True
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
    rest: str = "keep",
    evidence: Sequence[Scene] | None = None,
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
        rest=rest,
        evidence=evidence,
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
    rest: str = "keep",
    evidence: Sequence[Scene] | None = None,
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
        rest=rest,
        evidence=evidence,
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
                "rest": rest,
                "magnitude_gap": batches.magnitude_gap,
                "families": sorted({p.task["family"] for p in parents}),
            },
        )
    return ValidationOutcome(result, batches, t, c, pid)


def differs_only_in(parent: Scene, child: Scene, factor: str) -> bool:
    """True if `child` equals `parent` except (possibly) in `factor` (objects, table equal)."""
    return set(changed_factors(parent, child)) <= {factor}
