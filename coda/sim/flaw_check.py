"""Whether a planted flaw is valid (`coda.sim.flaws`): the plain expert succeeds, the flawed one
fails where its condition holds and succeeds where it does not, on the family's own scenes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from coda.sim.bucket import make_buckets
from coda.sim.compile import compile_scene
from coda.sim.flaws import Flaw
from coda.sim.planner import planner_for
from coda.sim.sdk import exec_program
from coda.sim.tasks import get_family
from coda.sim.verify import verify

# ----------------------------------------------------------------------------- validity


def flaw_scenes(
    flaw: Flaw,
    n_true: int,
    n_false: int,
    seed: int = 0,
    seeds_per_program: int = 4,
    max_programs: int = 200,
    split: str = "train",
) -> tuple[list[Any], list[Any]]:
    """(condition-true, condition-false) verified compiled scenes of the flaw's family: fresh
    proposals of the family (`seeds_per_program` executions each, seeded by `seed`), kept
    when in the flaw's scope and verified, split by the condition until both lists are full."""
    fam = get_family(flaw.family)
    rng = np.random.default_rng([seed, 0xF1A])
    true, false = [], []
    for _ in range(max_programs):
        if len(true) >= n_true and len(false) >= n_false:
            break
        src = fam.propose(rng, split=split)
        if src is None:
            continue
        scenes = []
        for s in rng.integers(2**31, size=seeds_per_program):
            sc = exec_program(src, int(s), split, isolation="inprocess")
            if not flaw.in_scope(sc):
                break
            want = true if flaw.condition(sc) else false
            if len(want) < (n_true if want is true else n_false):
                scenes.append(sc)
        if not scenes:
            continue
        compiled = [compile_scene(s) for s in scenes]
        for c, v in zip(compiled, verify(compiled), strict=True):
            if not v.ok:
                continue
            if flaw.condition(c.scene):
                if len(true) < n_true:
                    true.append(c)
            elif len(false) < n_false:
                false.append(c)
    return true, false


@dataclasses.dataclass
class Validity:
    """A flaw's validity numbers (success rates over n scenes each)."""

    flaw: str
    n_true: int
    n_false: int
    plain: float  # plain planner over all scenes
    plain_true: float
    plain_false: float
    flawed_true: float  # must be <= 0.2
    flawed_false: float  # must be >= 0.8

    @property
    def valid(self) -> bool:
        return self.plain >= 0.9 and self.flawed_true <= 0.2 and self.flawed_false >= 0.8

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "valid": self.valid}


def _success(backend, compiled: Sequence[Any], factory, key, num_chunks: int, pad: int) -> list:
    out = {}
    for i, b in enumerate(make_buckets(list(compiled), multiple_of=pad)):
        r = backend.rollout(b, factory(b), None, jax.random.fold_in(key, i), num_chunks)
        for c, s in zip(b.variants, np.asarray(r.success).tolist(), strict=False):
            out[id(c)] = bool(s)
    return [out[id(c)] for c in compiled]


def check_flaw(
    flaw: Flaw,
    backend,
    n: int = 16,
    seed: int = 0,
    num_chunks: int = 14,
    pad: int = 8,
    scenes: tuple[list[Any], list[Any]] | None = None,
) -> Validity:
    """Rolls the plain and the flawed planner out on `n` condition-true and `n` condition-false
    scenes (`flaw_scenes`, or `scenes`) and returns the rates (`Validity.valid`: plain >= 90 %,
    flawed <= 20 % under the condition, >= 80 % outside it)."""
    true, false = scenes if scenes is not None else flaw_scenes(flaw, n, n, seed)
    if not true or not false:
        raise ValueError(f"{flaw.name}: {len(true)} condition-true, {len(false)} -false scenes")
    key = jax.random.PRNGKey(seed)
    both = true + false
    plain = _success(backend, both, planner_for, key, num_chunks, pad)
    flawed = _success(backend, both, flaw.policy, key, num_chunks, pad)
    nt = len(true)

    def rate(x):
        return float(np.mean(x)) if len(x) else float("nan")

    return Validity(
        flaw=flaw.name,
        n_true=nt,
        n_false=len(false),
        plain=rate(plain),
        plain_true=rate(plain[:nt]),
        plain_false=rate(plain[nt:]),
        flawed_true=rate(flawed[:nt]),
        flawed_false=rate(flawed[nt:]),
    )
