"""What a run writes after every round besides its checkpoint: metrics.jsonl, TensorBoard
scalars, the diagnosed failure traces the report renders, the one-line progress summary, and
process.jsonl (the process's memory mappings, resident memory and compiled executables at each
round end: what bounds how long a process can live, `coda.lifetime`).

Host 0 alone writes these in a multi-host run (`coda.loop.distributed`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from coda import lifetime
from coda.loop import distributed
from coda.loop.state import Budgets, RunState

log = logging.getLogger(__name__)


def write_metrics(workdir: str, state: RunState) -> None:
    tmp = os.path.join(workdir, "metrics.jsonl.tmp")
    with open(tmp, "w") as f:
        for row in state.history:
            f.write(json.dumps(scalars(row), default=float) + "\n")
    os.replace(tmp, os.path.join(workdir, "metrics.jsonl"))


def scalars(row: dict) -> dict:
    """The flat numbers of a history row (what metrics.jsonl and TensorBoard get)."""
    out: dict[str, Any] = {"round": row["round"]}
    for n, r in row.get("suites", {}).items():
        out[f"success/{n}"], out[f"se/{n}"] = r["rate"], r["se"]
    if "ood" in row:
        out["success/ood"], out["se/ood"] = row["ood"]["rate"], row["ood"]["se"]
    for k in (
        "collect_success",
        "coverage_entropy",
        "targeting_precision",
        "verification_pass_rate",
        "modes_in_band",
        "seconds",
    ):
        if k in row and row[k] is not None:
            out[k] = row[k]
    for k, v in row.get("update", {}).get("shares", {}).items():  # the gradient's sources
        out[f"share/{k}"] = v
    for k, v in row.get("update", {}).get("critic_ranking", {}).items():  # held-out AUCs
        out[f"critic_ranking/{k}"] = v
    for k, v in row.get("refutation_rate", {}).items():
        out[f"refutation_rate/{k}"] = v
    for k, v in row.get("critique", {}).get("round_refutations", {}).items():
        for name in ("validated", "refuted"):  # this round's validation tests, per critic
            out[f"round_{name}/{k}"] = v[name]
    for k, v in row.get("budgets", {}).items():
        if isinstance(v, dict):  # llm spend per role
            for role, t in v.items():
                for name, x in t.items():
                    out[f"budget/{k}/{role}/{name}"] = x
        else:
            out[f"budget/{k}"] = v
    return {k: v for k, v in out.items() if not (isinstance(v, float) and not math.isfinite(v))}


def tensorboard(workdir: str, rows: list[dict], purge_step: int) -> None:
    try:
        from tensorboardX import SummaryWriter
    except ImportError:  # pinned dependency; absent only in a broken environment
        log.warning("tensorboardX missing: no TensorBoard scalars")
        return
    with SummaryWriter(os.path.join(workdir, "tb"), purge_step=purge_step) as w:
        for row in rows:
            for k, v in scalars(row).items():
                if k != "round" and isinstance(v, (int, float)) and math.isfinite(v):
                    w.add_scalar(k, v, row["round"])


PROCESS_LOG = "process.jsonl"


def process(workdir: str, r: int, primary: bool) -> lifetime.ProcessStats:
    """After round r: the process's numbers (one warning near vm.max_map_count, `lifetime.check`),
    appended to <workdir>/process.jsonl by host 0 (one row per round end and process: a resumed
    run's rows carry another pid). Not part of the run state: hosts and resumes differ here."""
    s = lifetime.check(f"round {r}")
    log.info("round %d: process holds %s", r, s.line())
    if primary:
        with open(os.path.join(workdir, PROCESS_LOG), "a") as f:
            f.write(json.dumps({"round": r, "pid": os.getpid(), **s.to_dict()}) + "\n")
    return s


def save_failures(svc: Any, failures: Sequence[Any], r: int) -> None:
    """Diagnosed failures of round r (qpos trace + ψ + scene + phases per endpoint) for the
    report's GIFs and keyframe sheets."""
    keep = list(failures)[: int(svc.config.render.failures_per_round)]
    if not keep or not distributed.is_primary():
        return
    d = os.path.join(svc.workdir, "failures")
    os.makedirs(d, exist_ok=True)
    for i, c in enumerate(keep):
        stem = os.path.join(d, f"round{r:03d}_{i}")
        np.save(stem + ".npy", np.asarray(c.episode.qpos))
        with open(stem + ".json", "w") as f:
            json.dump(
                {
                    "round": r,
                    "scene": c.episode.compiled.scene.to_dict(),
                    "phase_names": list(c.episode.phase_names),  # the sheet's labels
                    "phase_index": [int(k) for k in c.episode.phase_index],
                    "diagnosis": c.diagnosis.to_json(),
                    "mode": None if c.assignment is None else int(c.assignment.mode_id),
                },
                f,
                default=str,
            )


def progress_line(row: dict, budgets: Budgets) -> str:
    def fmt(d: dict | None) -> str:
        if not d or d.get("n", 0) == 0:
            return "n/a"
        return f"{100 * d['rate']:.1f}±{100 * d['se']:.1f}%"

    return (
        f"round {row['round']}: ID {fmt(row.get('suites', {}).get('id'))}, "
        f"OOD {fmt(row.get('ood'))}, modes in band {row.get('modes_in_band', 0)}, "
        f"{budgets.env_steps:,} env steps, {budgets.scenes_accepted} scenes accepted"
    )
