"""Planner demonstrations: round 0's SFT demos (pool + demo layouts + DART passes), and the
rounds' BC demos on given scenes (routing's "bc", the SFT baseline, `loop.novel_demos`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from coda.loop import collect, distributed
from coda.loop.state import Spend
from coda.sim.planner import Perturbed


def planner_rollouts(
    svc: Any, buckets: Sequence[Any], key: jax.Array, sigma: float | None = None
) -> tuple[list, Spend]:
    """([(bucket, result)], spend): one planner rollout per bucket (bucket i keyed
    fold_in(key, i); DART noise `sigma` on the executed actions), the buckets spread over the
    hosts of a run. A task the source's planner cannot script gets no rollout."""
    keep = [i for i, b in enumerate(buckets) if svc.source.planner(b) is not None]

    def agent_for(b):
        agent = svc.source.planner(b)
        return (agent if sigma is None else Perturbed(agent, sigma)), None

    got = collect.rollouts_of(
        svc.backend,
        [buckets[i] for i in keep],
        agent_for,
        key,
        int(svc.config.sim.num_chunks),
        1,
        distributed.host_split(objects=True),
        key_of=lambda j, n: jax.random.fold_in(key, keep[j]),
    )
    out, spend = [], Spend()
    for i, ((res, sec),) in zip(keep, got, strict=True):
        spend = spend + Spend(res.env_steps, sec)
        out.append((buckets[i], res))
    return out, spend


def bc_demos_for(
    svc: Any, compiled: Sequence[Any], key: jax.Array, dart: Sequence[float] = ()
) -> tuple[Any, Spend]:
    """Planner demos on the given compiled scenes as BC rows (None: no demo), and their spend:
    one clean pass, plus one DART pass per noise sigma in `dart` (perturbed execution, clean
    labels)."""
    buckets = collect.buckets_of(list(compiled), int(svc.config.loop.bucket_size))
    rows, spend = [], Spend()
    for p, sigma in enumerate([None, *(float(x) for x in dart)]):
        k = key if sigma is None else jax.random.fold_in(key, p)
        got, sp = planner_rollouts(svc, buckets, k, sigma)
        spend = spend + sp
        rows += [collect.demo_rows(svc.learner, svc.agents, res, b) for b, res in got]
    return collect.concat_batches(rows), spend


def sft_demos(
    svc: Any, scenes: Sequence[Any], key: jax.Array, fit: bool
) -> tuple[Any, float, Spend]:
    """Planner demos on `scenes` (the pool and the demo layouts; the obs norm fitted on them when
    `fit`), plus one DART pass per `loop.demo_dart` noise sigma (perturbed execution, clean
    planner labels: the planner shows how to recover from the errors a cloned policy makes) ->
    (BC rows, the planner's success on the clean pass, spend)."""
    lc = svc.config.loop
    results, spend = [], Spend()
    buckets = collect.buckets_of(list(scenes), int(lc.bucket_size))
    passes = [None, *(float(s) for s in lc.demo_dart)]
    for p, sigma in enumerate(passes):
        got, sp = planner_rollouts(svc, buckets, jax.random.fold_in(key, p), sigma)
        spend = spend + sp
        results += [(b, res, sigma) for b, res in got]
    if fit:
        collect.fit_norm(svc.learner, [r for _, r, s in results if s is None])
    rows = [collect.demo_rows(svc.learner, svc.agents, r, b) for b, r, _ in results]
    clean = [np.asarray(r.success)[np.asarray(r.valid)].mean() for _, r, s in results if s is None]
    return collect.concat_batches(rows, int(lc.demo_cap)), float(np.mean(clean)), spend
