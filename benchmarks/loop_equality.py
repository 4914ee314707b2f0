"""Same config, same seed, same numbers: a loop run's record (every metric of every round and
every evaluation episode's outcome) and the comparison of two records, to show that a change of
code (issue 27's redesign) changed no behaviour.

    # a run's record (the run folder's summary.json, minus wall-clock times)
    python benchmarks/loop_equality.py record --run_folder=runs/smoke \
        --command="python -m launch.main --config=configs/coda.py:smoke --workdir=runs/smoke" \
        --out=benchmarks/results/loop_equality_smoke_<machine>.json
    # a later run against it: exit 0 when every metric and every episode is the same
    python benchmarks/loop_equality.py compare \
        --a=benchmarks/results/loop_equality_smoke_<machine>.json --b_run_folder=runs/smoke_after

A record names the machine it ran on: XLA compiles for the host's instruction set, so a run on
a CPU with AVX-512 and one without differ in float rounding and hence in episodes; records are
comparable only between machines with the same signature (`compare` refuses otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _strip(x: Any) -> Any:
    """The value without wall-clock entries (keys 'seconds' or '*_seconds': they measure the
    machine, not the run)."""
    if isinstance(x, dict):
        wall = lambda k: k == "seconds" or str(k).endswith("_seconds")  # noqa: E731
        return {k: _strip(v) for k, v in x.items() if not wall(k)}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def machine(xla_flags: str | None = None) -> dict[str, Any]:
    """What decides the floats of a CPU run: the CPU's instruction set, the library versions and
    the XLA flags (`xla_flags`; None: this process's XLA_FLAGS)."""
    from importlib import metadata

    flags, model = set(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    versions = {}
    for pkg in ("jax", "jaxlib", "mujoco", "flax", "numpy"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "cpu": model,
        "arch": platform.machine(),
        "avx512f": "avx512f" in flags,
        "avx2": "avx2" in flags,
        "fma": "fma" in flags,
        "versions": versions,
        "xla_flags": os.environ.get("XLA_FLAGS", "") if xla_flags is None else xla_flags,
    }


def signature(m: dict[str, Any]) -> tuple:
    """The part of `machine()` two records must share to be compared."""
    return (
        m["arch"],
        m["avx512f"],
        m["avx2"],
        m["fma"],
        tuple(sorted(m["versions"].items())),
        m["xla_flags"],
    )


def _commit() -> str:
    """The checkout the command runs in (run `record` from the checkout that made the run)."""
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=os.getcwd(), capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "coda", "configs", "launch"],
        cwd=os.getcwd(),
        capture_output=True,
        text=True,
    ).stdout.strip()
    return head + ("+dirty" if dirty else "")


def record(run_folder: str, command: str) -> dict[str, Any]:
    """The run's history without wall-clock times, with the episodes' outcomes per suite."""
    with open(os.path.join(run_folder, "summary.json")) as f:
        summary = json.load(f)
    history = _strip(summary["history"])
    episodes = {
        f"round {row['round']}: {name}": s.get("outcomes", "")
        for row in history
        for name, s in row.get("suites", {}).items()
    }
    missing = [k for k, v in episodes.items() if not v]
    if missing:
        raise SystemExit(f"{run_folder}: no per-episode outcomes for {missing[:3]}")
    return {
        "command": command,
        "commit": _commit(),
        "machine": machine(),
        "strategy": summary.get("strategy"),
        "rounds": summary.get("rounds"),
        "stopped": summary.get("stopped"),
        "headline": summary.get("headline"),
        "episodes": episodes,
        "history": history,
    }


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where two records differ: 'path: a != b' (empty when every metric and episode agrees)."""
    out: list[str] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y), key=str):
                if k not in x or k not in y:
                    out.append(f"{path}.{k}: only in {'a' if k in x else 'b'}")
                else:
                    walk(x[k], y[k], f"{path}.{k}")
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{path}[{i}]")
        elif x != y and not (x != x and y != y):  # NaN == NaN here
            out.append(f"{path}: {str(x)[:80]} != {str(y)[:80]}")

    for key in ("strategy", "rounds", "stopped", "episodes", "history"):
        walk(a.get(key), b.get(key), key)
    return out


def episode_summary(a: dict[str, Any], b: dict[str, Any]) -> str:
    """'N of M evaluation episodes identical' over the suites both records hold."""
    same = total = 0
    for k, oa in a["episodes"].items():
        ob = b["episodes"].get(k, "")
        total += len(oa)
        same += sum(u == v for u, v in zip(oa, ob, strict=False))
    return f"{same} of {total} evaluation episodes identical"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="a run folder's record")
    r.add_argument("--run_folder", required=True)
    r.add_argument("--command", required=True, help="the command that made the run")
    r.add_argument("--out", required=True, help="the record's .json path")
    c = sub.add_parser("compare", help="two records (or a record and a run folder)")
    c.add_argument("--a", required=True, help="a record (.json)")
    c.add_argument("--b", help="a record (.json)")
    c.add_argument("--b_run_folder", help="a run folder, recorded on the fly")
    args = ap.parse_args()
    if args.cmd == "record":
        rec = record(args.run_folder, args.command)
        with open(args.out, "w") as f:
            json.dump(rec, f, indent=1)
        print(f"{args.out}: {rec['headline']}; {sum(map(len, rec['episodes'].values()))} episodes")
        return
    with open(args.a) as f:
        a = json.load(f)
    if (args.b is None) == (args.b_run_folder is None):
        raise SystemExit("compare: give exactly one of --b, --b_run_folder")
    if args.b:
        with open(args.b) as f:
            b = json.load(f)
    else:
        b = record(args.b_run_folder, "")
    if signature(a["machine"]) != signature(b["machine"]):
        raise SystemExit(
            f"the records come from different machines ({signature(a['machine'])} vs "
            f"{signature(b['machine'])}): their floats are not comparable"
        )
    diffs = differences(a, b)
    print(f"a: {a['commit']}  b: {b['commit']}  {episode_summary(a, b)}")
    if diffs:
        print(f"{len(diffs)} differences:\n  " + "\n  ".join(diffs[:40]))
        sys.exit(1)
    print("identical: every metric of every round and every evaluation episode")


if __name__ == "__main__":
    main()
