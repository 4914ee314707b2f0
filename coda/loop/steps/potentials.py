"""Step 5: Text2potential Φ for validated modes that have none yet, and routing of the modes by
their success band (BC on planner demos below it, shaped AWR inside, re-evaluation above)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax

from coda.engine.kinds import kind_of_record
from coda.loop import collect, distributed
from coda.loop.state import RunState, Spend
from coda.potentials import CompileRequest, FailureRecord, compile_with_repair
from coda.potentials.checks import Demos
from coda.potentials.task import make_compiler
from coda.train.routing import RoutingConfig, route


@dataclasses.dataclass(frozen=True)
class Potentials:
    """Φ programs compiled this round."""

    programs: Mapping[int, str]  # mode -> accepted Φ source
    compiled: tuple[dict, ...]  # one record per mode tried
    spend: Spend


@dataclasses.dataclass(frozen=True)
class Routing:
    """Where each mode's data goes ("bc" / "awr" / ...) and the modes whose LP weight drops."""

    tools: Mapping[str, str]
    lower_importance: bool | None = None  # None: no mode was rolled out this round


def compile_potentials(
    svc: Any, state: RunState, r: int, key: jax.Array, *, task_description: bool, max_rounds: int
) -> Potentials:
    """Φ for each validated mode without one: the compiler (`potentials.compiler`) writes a
    staged potential from the diagnosis (or, `task_description`, from τ alone), checked on a
    planner demo of the mode's first parent and repaired up to `max_rounds` times."""
    validated = [m for m in svc.memory.modes(status="validated") if m.id in state.mode_parents]
    name = str(svc.config.get("potentials", {}).get("compiler", "offline"))
    compiler = make_compiler(name, svc.llm)  # R_hone: offline templates | the llm client
    todo = [m for m in validated if m.id not in state.mode_potentials]
    firsts = [state.mode_parents[m.id][0] for m in todo]
    # a scene kind with no Φ template (LIBERO's goals): its modes train without a potential
    records = [
        {"mode": m.id, "accepted": False, "attempts": 0, "why": "no Φ template for this scene"}
        for m, d in zip(todo, firsts, strict=True)
        if not kind_of_record(d).has_potential(d["task"])
    ]
    skip = {r["mode"] for r in records}
    todo = [m for m in todo if m.id not in skip]
    scenes = [svc.source.compile(state.mode_parents[m.id][0]) for m in todo]
    # one scene per mode, padded to a multiple of the devices MJX shards a bucket over
    mult = int(getattr(svc.backend, "n_devices", 1))
    buckets = [collect.buckets_of([c], 1, multiple_of=mult)[0] for c in scenes]
    demos = collect.rollouts_of(  # the modes' planner demos spread over the hosts of a run
        svc.backend,
        buckets,
        lambda b: (svc.source.planner(b), None),
        key,
        svc.config.sim.num_chunks,
        1,
        distributed.host_split(objects=True),
        key_of=lambda i, n: key,
    )
    programs, spend = {}, Spend()
    parents = [state.mode_parents[m.id][0] for m in todo]
    for m, comp, bucket, parent, ((res, sec),) in zip(
        todo, scenes, buckets, parents, demos, strict=True
    ):
        spend = spend + Spend(res.env_steps, sec)
        req = CompileRequest(
            task=comp.scene.task,
            diagnosis=FailureRecord(m.factor, m.phase, m.label),
            mode_id=m.id,
            round=r,
            ablation=task_description,
        )
        pot, attempts = compile_with_repair(
            compiler,
            req,
            bucket.sym,
            Demos.from_rollout(res, bucket, kind_of_record(parent).demos_until_success),
            svc.memory,
            max_rounds=max_rounds,
            probe=False,
        )
        if pot is not None:
            programs[m.id] = attempts[-1].source
        records.append({"mode": m.id, "accepted": pot is not None, "attempts": len(attempts)})
    return Potentials(programs, tuple(records), spend)


def route_modes(svc: Any, r: int, per_mode: Mapping[int, list[int]]) -> Routing:
    """Each mode rolled out this round routed by its success rate against `loop.band`: below
    the band -> "bc" (planner demos on its targeted variants), inside -> "awr", above ->
    re-evaluation."""
    rates = {str(m): k / n for m, (k, n) in per_mode.items() if n}
    if not rates:
        return Routing({})
    lo, hi = (float(x) for x in svc.config.loop.band)
    band = RoutingConfig(band=(lo, hi), zero_tol=lo)
    routing = route(rates, {k: True for k in rates}, band, r)
    return Routing(dict(routing.tools), routing.lower_importance)


def potentials_row(pot: Potentials | None, routing: Routing) -> dict[str, Any]:
    """The metrics row's "potentials" entry."""
    out: dict[str, Any] = {"compiled": list(pot.compiled) if pot else []}
    out["routing"] = dict(routing.tools)
    if routing.lower_importance is not None:
        out["lower_importance"] = routing.lower_importance
    return out
