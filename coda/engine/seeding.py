"""Seeding: fresh tasks from a family's pool, executed and verified; failures discarded.

`propose_scenes` is what round 0 of the loop does today (programs per family, several Exec
seeds each, not yet verified); `seed_scenes` returns only verified scenes and is what the
engine spends its ε novel budget on. `verify_scenes` compiles + verifies a batch and turns a
compile error into a failed verdict instead of an exception (one bad variant must not abort a
batch).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from coda.sim import tasks
from coda.sim.compile import CompiledScene, compile_scene
from coda.sim.scene import Scene
from coda.sim.sdk import exec_program
from coda.sim.verify import Reason, Verdict, verify

__all__ = ["propose_scenes", "seed_scenes", "verify_scenes"]

log = logging.getLogger(__name__)


def verify_scenes(scenes: Sequence[Scene]) -> list[tuple[CompiledScene | None, Verdict]]:
    """(compiled scene or None, verdict) per scene, in order; compile errors fail as "compile"."""
    compiled: list[CompiledScene | None] = []
    for s in scenes:
        try:
            compiled.append(compile_scene(s))
        except Exception as e:  # noqa: BLE001 - MuJoCo's compiler raises many types
            log.info("variant failed to compile: %s", e)
            compiled.append(None)
    ok = [c for c in compiled if c is not None]
    verdicts = iter(verify(ok)) if ok else iter(())
    out = []
    for c in compiled:
        if c is None:
            out.append((None, Verdict(False, [Reason("compile", "", float("nan"), "")])))
        else:
            out.append((c, next(verdicts)))
    return out


def propose_scenes(
    family: str, n_programs: int, seeds_per_program: int, split: str, rng: np.random.Generator
) -> list[Scene]:
    """`n_programs` fresh proposals of `family`, each executed with `seeds_per_program` seeds
    (not verified). Proposals without a verifier ν are discarded by `TaskFamily.propose`."""
    fam = tasks.get_family(family)
    scenes = []
    for _ in range(n_programs):
        src = fam.propose(rng, split=split)
        if src is None:
            log.warning("family %s produced no verifiable proposal", family)
            continue
        for _ in range(seeds_per_program):
            seed = int(rng.integers(2**31))
            scenes.append(exec_program(src, seed, split, isolation="inprocess"))
    return scenes


def seed_scenes(
    family: str, n: int, split: str = "train", seed: int = 0, *, max_tries_factor: int = 4
) -> list[Scene]:
    """`n` verified fresh tasks of `family` (one Exec per proposal), deterministic in `seed`.

    Proposals are verified in batches; failures are discarded and replaced, up to
    `max_tries_factor * n` proposals. Fewer than `n` come back only if that runs out (logged).
    """
    if n <= 0:
        return []
    rng = np.random.default_rng([int(seed), 0x5EED])
    out: list[Scene] = []
    tried = 0
    while len(out) < n and tried < max_tries_factor * n:
        need = n - len(out)
        batch = propose_scenes(family, need, 1, split, rng)
        tried += need
        out += [s for s, (_, v) in zip(batch, verify_scenes(batch), strict=True) if v.ok]
    if len(out) < n:
        log.warning(
            "seed_scenes(%s): %d of %d verified after %d proposals", family, len(out), n, tried
        )
    return out[:n]
