"""The CoDA run: one call from `launch.main`, a run folder out.

What exists today is round 0 of the loop — the foundation every later round builds on:
  seed scene programs per family → Exec(g) → verify (batched) → compile + bucket →
  batched chunked rollouts of the scripted planner (demos D_t) and of a random policy →
  summary.json + report.md with rendered frames.
Later issues add the policy, critic, memory and engine rounds to this same command.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from typing import Any

import jax
import numpy as np
from absl import logging
from ml_collections import ConfigDict

from coda import report, runconfig
from coda.engine.seeding import propose_scenes
from coda.sim import tasks
from coda.sim.compile import CompiledScene, compile_scene
from coda.sim.planner import RandomPolicy, planner_for
from coda.sim.rollout import RolloutResult, make_backend, make_buckets
from coda.sim.verify import summarize, verify


def seed_scenes(config: ConfigDict, rng: np.random.Generator) -> dict[str, list]:
    """Scene programs per family, executed for several seeds each: {family: [Scene]}
    (the engine's seeding, `coda.engine.seeding.propose_scenes`; verified below)."""
    return {
        name: propose_scenes(
            name,
            config.sim.programs_per_family,
            config.sim.seeds_per_program,
            config.sim.split,
            rng,
        )
        for name in config.sim.families
    }


def _rollout_all(
    backend, compiled: list[CompiledScene], policy_for, num_chunks: int, key: jax.Array
) -> tuple[list[tuple[CompiledScene, RolloutResult, int]], int, float]:
    """Rolls every bucket; returns [(variant, result, index in result)], env steps, seconds."""
    rows, steps, seconds = [], 0, 0.0
    for bucket in make_buckets(compiled, multiple_of=getattr(backend, "n_devices", 1)):
        key, sub = jax.random.split(key)
        t0 = time.perf_counter()
        r = backend.rollout(bucket, policy_for(bucket), None, sub, num_chunks)
        jax.block_until_ready(r.success)
        seconds += time.perf_counter() - t0
        steps += r.env_steps
        rows += [(v, r, i) for i, v in enumerate(bucket.variants)]
    return rows, steps, seconds


def run(config: ConfigDict, workdir: str) -> dict[str, Any]:
    runconfig.validate(config, families=tasks.FAMILIES)  # before anything is written
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(config.to_json_best_effort(indent=2))
    rng = np.random.default_rng(config.seed)
    key = jax.random.PRNGKey(config.seed)
    t_start = time.perf_counter()

    logging.info("[1/5] seeding scene programs for %s", ", ".join(config.sim.families))
    scenes = seed_scenes(config, rng)
    all_scenes = [(f, s) for f, ss in scenes.items() for s in ss]
    logging.info("      %d scenes", len(all_scenes))

    logging.info("[2/5] compiling and verifying")
    compiled = [compile_scene(s) for _, s in all_scenes]
    verdicts = verify(compiled)
    vsum = summarize(verdicts)
    logging.info("      pass rate %.3f, reasons %s", vsum["pass_rate"], vsum["reasons"])
    by_family: dict[str, list[CompiledScene]] = defaultdict(list)
    for (fam, _), c, v in zip(all_scenes, compiled, verdicts, strict=True):
        if v.ok:
            by_family[fam].append(c)

    backend = make_backend(config.sim.backend, nthread=config.sim.nthread or None)
    logging.info("[3/5] planner rollouts on the %s backend", backend.name)
    families: dict[str, dict[str, Any]] = {}
    total_steps, total_s = 0, 0.0
    demos: dict[str, list] = {}
    for fam in config.sim.families:
        valid = by_family.get(fam, [])
        n_scenes = len(scenes.get(fam, []))
        entry = {"scenes": n_scenes, "verified": len(valid)}
        if valid:
            key, k1, k2 = jax.random.split(key, 3)
            rows, steps, secs = _rollout_all(
                backend,
                valid,
                lambda b: planner_for(b, config.sim.horizon),
                config.sim.num_chunks,
                k1,
            )
            total_steps, total_s = total_steps + steps, total_s + secs
            entry["planner_success"] = float(np.mean([bool(r.success[i]) for _, r, i in rows]))
            demos[fam] = rows
            logging.info(
                "      %-16s planner success %.3f over %d variants",
                fam,
                entry["planner_success"],
                len(rows),
            )
            if config.eval.random_policy:
                rrows, steps, secs = _rollout_all(
                    backend,
                    valid,
                    lambda b: RandomPolicy(config.sim.horizon),
                    config.sim.num_chunks,
                    k2,
                )
                total_steps, total_s = total_steps + steps, total_s + secs
                entry["random_success"] = float(np.mean([bool(r.success[i]) for _, r, i in rrows]))
        else:
            entry["planner_success"] = entry["random_success"] = None
        families[fam] = entry
    logging.info("[4/5] random policy evaluated; %d env steps in %.1f s", total_steps, total_s)

    logging.info("[5/5] writing the report")
    frames = report.render_demos(demos, config, workdir) if config.render.enabled else {}
    summary = {
        "what_ran": report.what_ran(config),
        "backend": backend.name,
        "devices": [str(d) for d in jax.devices()],
        "verification": vsum,
        "families": families,
        "env_steps": int(total_steps),
        "rollout_seconds": total_s,
        "env_steps_per_s": total_steps / max(total_s, 1e-9),
        "wall_seconds": time.perf_counter() - t_start,
        "rendering": frames.get("_status", "disabled"),
    }
    summary["headline"] = (
        ", ".join(
            f"{f}: scripted planner {e['planner_success']}, random {e.get('random_success')}"
            for f, e in families.items()
        )
        + " (no learned policy ran; planner success is not a learning result)"
    )
    with open(os.path.join(workdir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    with open(os.path.join(workdir, "scenes.jsonl"), "w") as f:
        for (fam, s), v in zip(all_scenes, verdicts, strict=True):
            f.write(
                json.dumps({"family": fam, "scene": s.to_dict(), "verification": v.to_dict()})
                + "\n"
            )
    report.write_markdown(summary, frames, config, workdir)
    return summary
