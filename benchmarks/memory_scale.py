"""Memory at scale: 100k episodic records and 1k modes; retrieval by mode and online clustering.

Usage:
  .venv/bin/python benchmarks/memory_scale.py --out benchmarks/results/memory_scale.json

Everything goes through the public ``MemoryStore`` API with its defaults (WAL,
synchronous=FULL, TF-IDF cause similarity). Causes are synthetic word sequences, so modes stay
distinct: the point is the cost of the data structures, not the quality of the clustering.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from coda.memory import FACTORS, open_memory  # noqa: E402

PHASES = ("approach", "grasp", "lift", "transport", "place")


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _ms(xs: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(1e3 * statistics.median(xs), 3),
        "p95_ms": round(1e3 * _pct(xs, 0.95), 3),
        "mean_ms": round(1e3 * statistics.fmean(xs), 3),
        "n": len(xs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000, help="episodic records to insert")
    ap.add_argument("--modes", type=int, default=1_000, help="difficulty modes to create")
    ap.add_argument("--queries", type=int, default=200, help="timed retrievals / clusterings")
    ap.add_argument("--batch", type=int, default=1_000, help="records per transaction")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/memory_scale.json")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    vocab = [f"w{i}" for i in range(5_000)]
    groups = [(f, p) for f in FACTORS for p in PHASES]  # 20 (δ, p) pairs

    def cause() -> str:
        return " ".join(rng.choice(vocab) for _ in range(8))

    def variant(c: str) -> str:  # same failure, reworded slightly: should join its mode
        words = c.split()
        words[rng.randrange(len(words))] = rng.choice(vocab)
        return " ".join(words)

    tmp = tempfile.mkdtemp(prefix="coda_mem_bench_")
    path = os.path.join(tmp, "memory.db")
    m = open_memory(path)
    exe = os.path.relpath(sys.executable) if sys.executable else "python"
    res: dict = {"command": " ".join([exe] + sys.argv), "config": vars(args)}

    # 1) Modes: one founding diagnosis each (public add_diagnosis, online clustering included).
    t0 = time.perf_counter()
    mode_ids: list[int] = []
    founding: dict[int, tuple[str, str, str]] = {}  # mode -> (δ, p, cause)
    with m.batch():
        while len(mode_ids) < args.modes:
            f, p = groups[len(mode_ids) % len(groups)]
            c = cause()
            a = m.add_diagnosis(round=0, factor=f, phase=p, cause=c, critic="bench")
            if a.created:
                mode_ids.append(a.mode_id)
                founding[a.mode_id] = (f, p, c)
    res["create_modes_s"] = round(time.perf_counter() - t0, 3)
    n_diag_modes = m.counts()["diagnoses"]

    # 2) Episodic bulk: scene programs (targeting modes), deployments, traces, more diagnoses.
    t0 = time.perf_counter()
    remaining = args.records - n_diag_modes
    written = {"scene_programs": 0, "deployments": 0, "generation_traces": 0, "diagnoses": 0}
    last_sp = None
    while remaining > 0:
        with m.batch():
            for _ in range(min(args.batch, remaining)):
                r = rng.random()
                mid = rng.choice(mode_ids)
                if r < 0.5 or last_sp is None:
                    last_sp = m.add_scene_program(
                        f"set_task('t{mid}')\nset_layout(x={rng.random():.3f})",
                        round=rng.randrange(20),
                        mode_id=mid,
                        meta={"family": "pick_place"},
                    )
                    written["scene_programs"] += 1
                elif r < 0.75:
                    n = 16
                    m.add_deployment(
                        round=rng.randrange(20),
                        scene_program_id=last_sp,
                        n_rollouts=n,
                        n_success=rng.randrange(n + 1),
                        learning_progress=rng.uniform(-0.2, 0.2),
                    )
                    written["deployments"] += 1
                elif r < 0.9:
                    m.add_generation_trace(
                        round=rng.randrange(20),
                        scene_program_id=last_sp,
                        violated=["penetration"],
                        repair_steps=["lift 1cm"],
                        outcome="verified",
                    )
                    written["generation_traces"] += 1
                else:
                    # A further diagnosis of an existing mode (clustered on the public path).
                    f, p, c = founding[mid]
                    m.add_diagnosis(round=rng.randrange(20), factor=f, phase=p, cause=variant(c))
                    written["diagnoses"] += 1
                remaining -= 1
    res["bulk_insert_s"] = round(time.perf_counter() - t0, 3)
    res["bulk_written"] = written
    for mid in mode_ids[:50]:
        m.add_generation_program(
            round=1,
            mode_id=mid,
            parent_scene_program_id=None,
            factor="spatial",
            variants=[{"x": 0.1}],
            compile_checks=[],
            roles=["target", "receptacle"],
        )
        m.add_training_program(
            round=1,
            mode_id=mid,
            phase="grasp",
            subgoals=["reach"],
            potential_source="def potential(s):\n    return 0.0\n",
            tools={"reach": "shaping"},
            roles=["target"],
        )
    counts = m.counts()
    res["counts"] = counts
    episodic = sum(
        counts[t]
        for t in ("scene_programs", "verifiers", "generation_traces", "deployments", "diagnoses")
    )
    res["episodic_records"] = episodic
    res["modes"] = counts["modes"]

    # 3) Retrieval by mode.
    sample = [rng.choice(mode_ids) for _ in range(args.queries)]
    timings: dict[str, list[float]] = {
        "diagnoses_for_mode": [],
        "scene_programs_for_mode_limit100": [],
        "procedural_by_mode": [],
        "procedural_by_factor_phase": [],
        "procedural_by_role_signature": [],
    }
    for mid in sample:
        t = time.perf_counter()
        m.diagnoses_for_mode(mid)
        timings["diagnoses_for_mode"].append(time.perf_counter() - t)
        t = time.perf_counter()
        m.scene_programs_for_mode(mid, limit=100)
        timings["scene_programs_for_mode_limit100"].append(time.perf_counter() - t)
        t = time.perf_counter()
        m.generation_programs(mode_id=mid)
        m.training_programs(mode_id=mid)
        timings["procedural_by_mode"].append(time.perf_counter() - t)
        f, p = rng.choice(groups)
        t = time.perf_counter()
        m.generation_programs(factor=f, phase=p)
        timings["procedural_by_factor_phase"].append(time.perf_counter() - t)
        t = time.perf_counter()
        m.training_programs(role_signature="target")
        timings["procedural_by_role_signature"].append(time.perf_counter() - t)
    res["retrieval"] = {k: _ms(v) for k, v in timings.items()}

    # 4) Clustering of a new diagnosis: read-only nearest mode, and the full write path.
    # Half the queries reword a known cause (should join), half are new failures (new mode).
    near, add, joined_right, founded_new = [], [], 0, 0
    modes_per_group = round(m.counts()["modes"] / len(groups), 1)
    for i in range(args.queries):
        if i % 2 == 0:
            target = rng.choice(mode_ids)
            f, p, c0 = founding[target]
            c = variant(c0)
        else:
            target = None
            f, p = rng.choice(groups)
            c = cause()
        t = time.perf_counter()
        m.nearest_mode(factor=f, phase=p, cause=c)
        near.append(time.perf_counter() - t)
        t = time.perf_counter()
        a = m.add_diagnosis(round=21, factor=f, phase=p, cause=c)
        add.append(time.perf_counter() - t)
        joined_right += int(target is not None and a.mode_id == target)
        founded_new += int(target is None and a.created)
    res["clustering"] = {
        "nearest_mode_readonly": _ms(near),
        "add_diagnosis_commit_fsync": _ms(add),
        "modes_per_factor_phase": modes_per_group,
        "reworded_joined_their_mode": f"{joined_right}/{(args.queries + 1) // 2}",
        "new_causes_founded_mode": f"{founded_new}/{args.queries // 2}",
    }

    t = time.perf_counter()
    n_lines = m.export_jsonl(os.path.join(tmp, "memory.jsonl"))
    res["export_jsonl"] = {"s": round(time.perf_counter() - t, 3), "records": n_lines}
    res["integrity_check"] = m.integrity_check()
    m.close()
    res["db_size_mb"] = round(
        sum(
            os.path.getsize(os.path.join(tmp, f))
            for f in os.listdir(tmp)
            if f.startswith("memory.db")
        )
        / 2**20,
        2,
    )
    res["machine"] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "cpus": os.cpu_count(),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
