"""The CoDA loop (§3.5): rounds over an explicit run state, strategies, evaluation, resume.

* `state`: `RunState` (host part, JSON) + `Budgets`;
* `strategies`: the registry (coda, baselines, ablations) — small objects the steps consult;
* `rounds`: steps 1-7 of a round; `driver`: round 0, the round sequence, stop decisions, `run`;
* `evaluation`: the fixed ID / OOD suites and the loop's metrics;
* `checkpoint`: atomic per-round checkpoints (orbax learner, SQLite backup, state) and resume;
* `collect`: shared compiled agents, rollouts, demos, the obs norm.

`run` is imported lazily so that `coda.loop.strategies` stays importable without JAX
(`coda.runconfig` checks strategy names before JAX is imported).
"""

from __future__ import annotations

from typing import Any


def run(config: Any, workdir: str, resume: bool = True, release: bool = True) -> dict[str, Any]:
    """Run (or resume) the loop described by `config` in `workdir`; returns the summary.

    `release`: when the run ends, drop what it compiled (`coda.lifetime.release`) so that the
    process can go on to another run; False keeps it (e.g. to measure what it holds)."""
    from coda.loop.driver import run as _run  # lazy: keeps coda.loop.strategies JAX-free

    return _run(config, workdir, resume=resume, release=release)


__all__ = ["run"]
