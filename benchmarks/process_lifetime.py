"""What a long-lived process holds: memory mappings, resident memory and compiled executables
across several loop runs in ONE process, before and after `coda.lifetime` (issue: long runs
crash with a segmentation fault past vm.max_map_count).

Arms, each in its own fresh process, run one after another in this invocation:
  before  the code at --before (a commit; checked out as a git worktree in a temp folder): the
          runs in turn in one process, numbers after each run (that code releases nothing)
  after   this checkout: the same runs; after each, the mappings the run's objects held (read
          at its last round end, `process.jsonl`), what is still held when `coda.loop.run`
          returns without releasing (`release=False`), then `coda.lifetime.release(measure=True)`
          — the mappings each registered cache, JAX's caches and MuJoCo's rollout pool free, in
          that order — i.e. what `coda.loop.run` does by default, attributed by source.
  libero  (--libero) this checkout on a LIBERO source (`configs/libero_loop.py:smoke,<suite>`),
          the same numbers over --libero_runs runs.
Per round (after arm): mappings, RSS and executables built at every round end (`process.jsonl`).

    python benchmarks/process_lifetime.py --out=benchmarks/results/process_lifetime \\
        --before=de4ab4c --libero

Writes <out>.json (every number) and <out>.md (tables). No persistent compilation cache in any
arm (every executable is built in the process that maps it; a cache hit maps the same code).

One long run's process.jsonl as a table (e.g. the 15-round default run):
    python benchmarks/process_lifetime.py --run_folder=runs/r15 --run_command="..." \
        --out=benchmarks/results/process_lifetime_15rounds
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STRATEGIES = "coda,sft,domain_randomization,uniform_variants,success_rate_guided"


def _maps() -> int:
    with open("/proc/self/maps", "rb") as f:
        return sum(1 for _ in f)


def _status_mb(field: str) -> float:
    """A /proc/self/status memory field in MiB (VmRSS now, VmHWM peak). Not coda.lifetime's:
    the `before` arm imports a checkout that has no coda.lifetime."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


# ----------------------------------------------------------------------------- worker

_TIMES = ("second", "wall", "hours", "time")


def _strip_times(x):
    if isinstance(x, dict):
        return {k: _strip_times(v) for k, v in x.items() if not any(t in k for t in _TIMES)}
    if isinstance(x, list):
        return [_strip_times(v) for v in x]
    return x


def summary_digest(workdir: str) -> str:
    """sha256 of the run's summary.json without wall times: every number the run reports
    (per-round suites with per-episode outcomes, modes, budgets, costs) — what must not change."""
    import hashlib

    with open(os.path.join(workdir, "summary.json")) as f:
        s = _strip_times(json.load(f))
    return hashlib.sha256(json.dumps(s, sort_keys=True, default=str).encode()).hexdigest()[:16]


def worker(args: argparse.Namespace) -> None:
    """Runs inside the arm's process: `--root` first on sys.path (that checkout's coda)."""
    sys.path.insert(0, args.root)
    os.chdir(args.root)
    import logging

    import jax

    logging.disable(logging.WARNING)
    jax.config.update("jax_enable_compilation_cache", False)
    counts = {"executables": 0}

    def on_duration(event: str, duration: float, **_) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            counts["executables"] += 1

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    import importlib.util

    import coda.loop as loop

    has_lifetime = importlib.util.find_spec("coda.lifetime") is not None
    spec = importlib.util.spec_from_file_location("cfgmod", os.path.join(args.root, args.config))
    cfgmod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cfgmod)
    start = {"maps": _maps(), "rss_mb": _status_mb("VmRSS")}
    out = {"arm": args.arm, "root": args.root, "start": start}
    runs = []
    names = args.strategies.split(",") if args.strategies else [""] * args.runs
    for i, strategy in enumerate(names):
        cfg = (
            cfgmod.get_config(args.variant, strategy=strategy)
            if strategy
            else cfgmod.get_config(args.variant)
        )
        wd = os.path.join(args.workdir, f"run{i}_{strategy or 'run'}")
        ex0, t0 = counts["executables"], time.perf_counter()
        row: dict = {"run": i, "strategy": strategy or cfg.strategy}
        if has_lifetime and args.arm != "before":
            from coda import lifetime

            loop.run(cfg, wd, release=False)
            import gc

            gc.collect()
            row["held_after_return"] = _maps()
            rel = lifetime.release(measure=True)
            row["freed"] = rel["freed"]
            with open(os.path.join(wd, "process.jsonl")) as f:
                row["rounds"] = [json.loads(line) for line in f]
            row["at_last_round_end"] = row["rounds"][-1]["maps"]
        else:
            loop.run(cfg, wd)
        row.update(
            maps=_maps(),
            rss_mb=round(_status_mb("VmRSS"), 1),
            peak_rss_mb=round(_status_mb("VmHWM"), 1),
            executables=counts["executables"] - ex0,
            seconds=round(time.perf_counter() - t0, 1),
        )
        with open(os.path.join(wd, "metrics.jsonl")) as f:
            row["metrics_last"] = json.loads(f.read().splitlines()[-1])
        row["summary_digest"] = summary_digest(wd)
        runs.append(row)
        print(json.dumps(row)[:300], flush=True)
    out["runs"] = runs
    with open(args.result, "w") as f:
        json.dump(out, f, indent=1)


# ----------------------------------------------------------------------------- parent


def _git(*a: str, cwd: str = ROOT) -> str:
    return subprocess.run(["git", *a], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _arm(name: str, root: str, tmp: str, extra: list[str]) -> dict:
    result = os.path.join(tmp, f"{name}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", f"--arm={name}"]
    cmd += [f"--root={root}", f"--result={result}", f"--workdir={os.path.join(tmp, name)}"]
    print(f"arm {name}: {' '.join(cmd + extra)}", flush=True)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    t0 = time.perf_counter()
    p = subprocess.run(cmd + extra, env=env, capture_output=True, text=True)
    print(p.stdout[-2000:], flush=True)
    if p.returncode != 0:
        return {"arm": name, "exit_code": p.returncode, "stderr_tail": p.stderr[-3000:]}
    with open(result) as f:
        out = json.load(f)
    out["exit_code"], out["seconds"] = 0, round(time.perf_counter() - t0, 1)
    return out


def markdown(res: dict) -> str:
    L = [
        "# Process lifetime: memory mappings across loop runs in one process",
        "",
        f"Command: `{res['command']}`  ",
        f"Commit: {res['commit']} (before: {res.get('before_commit') or '-'}); machine: "
        f"{res['machine']}; vm.max_map_count = {res['max_map_count']:,}. Generated by the "
        "script; not edited.",
        "",
    ]
    by = {a["arm"]: a for a in res["arms"]}
    if "before" in by and "after" in by and "runs" in by["before"] and "runs" in by["after"]:
        pairs = list(zip(by["before"]["runs"], by["after"]["runs"], strict=False))
        same = [b["summary_digest"] == a["summary_digest"] for b, a in pairs]
        L += [
            "Same numbers before and after (summary.json without wall times: every round's "
            f"suites with per-episode outcomes, modes, budgets, costs): {sum(same)}/{len(same)} "
            "runs identical.",
            "",
        ]
    for arm in res["arms"]:
        L += [f"## Arm `{arm['arm']}`", ""]
        if arm.get("exit_code"):
            L += [f"exit code {arm['exit_code']} (negative: killed by that signal)", "", "```"]
            L += [arm.get("stderr_tail", "")[-1500:], "```", ""]
            if "runs" not in arm:
                continue
        s = arm["start"]
        L += [f"At start: {s['maps']:,} mappings, RSS {s['rss_mb']:,.0f} MiB.", ""]
        L += [
            "| run | strategy | mappings after | RSS MiB | peak RSS MiB | executables built "
            "| s | at last round end | held at return | summary digest |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in arm.get("runs", []):
            L.append(
                f"| {r['run']} | {r['strategy']} | {r['maps']:,} | {r['rss_mb']:,.0f} | "
                f"{r['peak_rss_mb']:,.0f} | {r['executables']} | {r['seconds']:.0f} | "
                f"{r.get('at_last_round_end', '-')} | {r.get('held_after_return', '-')} | "
                f"`{r['summary_digest']}` |"
            )
        L.append("")
        freed = [r["freed"] for r in arm.get("runs", []) if "freed" in r]
        if freed:
            keys = list(dict.fromkeys(k for f in freed for k in f))
            L += ["Mappings freed by `coda.lifetime.release` after each run, by source:", ""]
            L += ["| run | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
            for r in arm["runs"]:
                if "freed" in r:
                    cells = " | ".join(f"{r['freed'].get(k, 0):,}" for k in keys)
                    L.append(f"| {r['run']} | {cells} |")
            L.append("")
        rounds = [r for r in arm.get("runs", []) if r.get("rounds")]
        if rounds:
            L += ["Per round (mappings / RSS MiB / executables built that round):", ""]
            n = max(len(r["rounds"]) for r in rounds)
            L += ["| run | " + " | ".join(f"round {k}" for k in range(n)) + " |"]
            L += ["|---|" + "---|" * n]
            runs = arm["runs"]
            base = {r["run"]: sum(x["executables"] for x in runs[: r["run"]]) for r in rounds}
            for r in rounds:  # the counts are the process's: from the executables before the run
                prev, cells = base[r["run"]], []
                for x in r["rounds"]:
                    cells.append(f"{x['maps']:,} / {x['rss_mb']:,.0f} / {x['executables'] - prev}")
                    prev = x["executables"]
                L.append(f"| {r['run']} {r['strategy']} | " + " | ".join(cells) + " |")
            L.append("")
    return "\n".join(L) + "\n"


def summarize_run(folder: str, out: str, run_command: str) -> None:
    """A finished run folder's process.jsonl (one row per round end) -> <out>.json / .md: its
    mappings, RSS and executables per round and the peaks (e.g. the 15-round default run)."""
    with open(os.path.join(folder, "process.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    with open(os.path.join(folder, "summary.json")) as f:
        summary = json.load(f)
    res = {
        "command": " ".join(["python", "benchmarks/process_lifetime.py", *sys.argv[1:]]),
        "run_command": run_command,
        "commit": _git("rev-parse", "--short", "HEAD").strip(),
        "pids": sorted({r["pid"] for r in rows}),
        "rounds": rows,
        "peak_maps": max(r["maps"] for r in rows),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in rows),
        "max_map_count": rows[0]["max_maps"],
        "wall_seconds": summary.get("wall_seconds"),
        "stopped": summary.get("stopped"),
    }
    L = [
        "# Process lifetime of one long run",
        "",
        f"Run: `{run_command}` ({len(rows)} round ends in {len(res['pids'])} process(es); "
        f"stopped: {res['stopped']}; wall {res['wall_seconds'] or 0:.0f} s).  ",
        f"Table: `{res['command']}` at {res['commit']}. Generated; not edited.",
        "",
        f"Peak: {res['peak_maps']:,} memory mappings "
        f"({100 * res['peak_maps'] / res['max_map_count']:.0f}% of vm.max_map_count "
        f"{res['max_map_count']:,}), peak RSS {res['peak_rss_mb']:,.0f} MiB.",
        "",
        "| round | mappings | RSS MiB | peak RSS MiB | executables built (total) | that round |",
        "|---|---|---|---|---|---|",
    ]
    prev = 0
    for r in rows:
        L.append(
            f"| {r['round']} | {r['maps']:,} | {r['rss_mb']:,.0f} | {r['peak_rss_mb']:,.0f} | "
            f"{r['executables']:,} | {r['executables'] - prev:,} |"
        )
        prev = r["executables"]
    with open(out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    with open(out + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"wrote {out}.json and .md")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--arm", default="after")
    ap.add_argument("--root", default=ROOT)
    ap.add_argument("--result", default="")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--config", default="configs/coda.py")
    ap.add_argument("--variant", default="smoke")
    ap.add_argument("--strategies", default=STRATEGIES)
    ap.add_argument("--runs", type=int, default=2, help="runs when --strategies is empty")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "process_lifetime"))
    ap.add_argument("--before", default="", help="commit of the 'before' arm ('' = none)")
    ap.add_argument("--libero", default="", help="LIBERO suite of the libero arm ('' = none)")
    ap.add_argument("--libero_runs", type=int, default=3)
    ap.add_argument("--run_folder", default="", help="summarize this run folder's process.jsonl")
    ap.add_argument("--run_command", default="", help="the command that made --run_folder")
    ap.add_argument("--from_json", default="", help="re-render <out>.md from this result JSON")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            res = json.load(f)
        with open(args.out + ".md", "w") as f:
            f.write(markdown(res))
        return
    if args.run_folder:
        summarize_run(args.run_folder, args.out, args.run_command)
        return
    if args.worker:
        worker(args)
        return
    tmp = tempfile.mkdtemp(prefix="process_lifetime_")
    arms = []
    common = [f"--config={args.config}", f"--variant={args.variant}"]
    common += [f"--strategies={args.strategies}"]
    try:
        if args.before:
            wt = os.path.join(tmp, "before_tree")
            _git("worktree", "add", "--detach", wt, args.before)
            try:
                arms.append(_arm("before", wt, tmp, common))
            finally:
                _git("worktree", "remove", "--force", wt)
        arms.append(_arm("after", ROOT, tmp, common))
        if args.libero:
            lib = ["--config=configs/libero_loop.py", f"--variant=smoke,{args.libero}"]
            lib += ["--strategies=", f"--runs={args.libero_runs}"]
            arms.append(_arm("libero", ROOT, tmp, lib))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with open("/proc/sys/vm/max_map_count") as f:
        max_maps = int(f.read())
    res = {
        "command": " ".join(["python", "benchmarks/process_lifetime.py", *sys.argv[1:]]),
        "commit": _git("rev-parse", "--short", "HEAD").strip(),
        "before_commit": args.before,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
        "max_map_count": max_maps,
        "arms": arms,
    }
    with open(args.out + ".json", "w") as f:
        json.dump(res, f, indent=1)
    with open(args.out + ".md", "w") as f:
        f.write(markdown(res))
    print(f"wrote {args.out}.json and .md")


if __name__ == "__main__":
    main()
