"""A study's table: per-cell records from run summaries, per-strategy aggregates over the seeds
(mean ± seed-level s.e., pooled counts, costs per 1,000 accepted environments), the ordering,
and table1.md (with the transfer pair's section). Pure Python over summaries.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from coda.loop.strategies import STRATEGIES
from coda.study import paired as paired_lib

# The paper's Table 1, OOD success (%), for reference beside ours (zero_shot is not in it).
PAPER_OOD = {
    "coda": 27.6,
    "no_memory": 19.2,
    "success_rate_guided": 18.1,
    "uniform_variants": 8.5,
    "domain_randomization": 7.9,
    "sft": 5.3,
}

# The paper's backbone-transfer result (OpenVLA-OFT from scratch vs. seeded with CoDA's memory),
# success in %, as quoted in the project's issue 15; shown beside the transfer pair.
PAPER_TRANSFER = {"scratch": 3.8, "memory": 21.1}
TRANSFER_STRATEGY = "coda"  # the strategy both cells of the transfer pair run
TRANSFER_KINDS = ("scratch", "memory")


def _rate(d: dict | None) -> dict[str, Any] | None:
    """{n, successes, rate} of a suite result dict; None when absent or empty."""
    if not d or not d.get("n"):
        return None
    n, k = int(d["n"]), int(d["successes"])
    return {"n": n, "successes": k, "rate": k / n}


def _ood_of(row: dict) -> dict | None:
    if row.get("ood"):
        return row["ood"]
    ood = [r for n, r in row.get("suites", {}).items() if n.startswith("ood")]
    if not ood:
        return None
    return {"n": sum(r["n"] for r in ood), "successes": sum(r["successes"] for r in ood)}


def cell_record(summary: dict[str, Any]) -> dict[str, Any]:
    """What the table needs from a run's summary: last evaluated round's ID / OOD, costs."""
    hist = summary.get("history") or []
    last = next((h for h in reversed(hist) if "suites" in h), None)
    c = summary.get("costs", {})
    suites = _suites(last["suites"]) if last else {}
    return {
        "id": _rate(last["suites"].get("id")) if last else None,
        "ood": _rate(_ood_of(last)) if last else None,
        "ood_average": paired_lib.ood_average(suites),  # the headline: mean of OOD suites' rates
        "suites": suites,  # each suite's counts and per-episode outcomes ("1" = success)
        "eval_round": None if last is None else int(last["round"]),
        "rounds": summary.get("rounds"),
        "stopped": summary.get("stopped"),
        "accepted_environments": int(c.get("accepted_environments", 0)),
        "llm_tokens": int(c.get("llm_tokens", 0)),
        "sim_hours": float(c.get("sim_hours", 0.0)),
        "env_steps": int(c.get("env_steps", 0)),
        "wall_seconds": float(summary.get("wall_seconds", math.nan)),
    }


def _suites(results: dict) -> dict[str, dict[str, Any]]:
    """{suite: {n, successes, outcomes}} of a row's suite results (outcomes "" where only
    counts were kept)."""
    return {
        name: {
            "n": int(r["n"]),
            "successes": int(r["successes"]),
            "outcomes": r.get("outcomes", ""),
        }
        for name, r in results.items()
        if r.get("n")
    }


def _transfer_record(summary: dict[str, Any]) -> dict[str, Any] | None:
    """Round 0's `memory_transfer` record of a transfer cell (what it was seeded with)."""
    row0 = next((h for h in summary.get("history") or [] if h.get("round") == 0), None)
    rec = None if row0 is None else row0.get("memory_transfer")
    if not rec:
        return None
    return {
        "source": rec.get("source", {}),
        "modes": len(rec.get("mode_map", {})),
        "counts": rec.get("counts", {}),
        "skipped": len(rec.get("skipped", {})),
        "validated_in_source": rec.get("validated_in_source"),
        "parents": rec.get("parents"),
        "loop_potentials": rec.get("loop_potentials"),
    }


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and seed-level standard error (ddof = 1); se is nan with fewer than 2 values."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    m = sum(values) / n
    if n < 2:
        return m, math.nan
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var / n)


def aggregate(records: list[dict[str, Any]], strategies: Sequence[str]) -> dict[str, dict]:
    """Per strategy: success mean ± s.e. over seeds, pooled counts, costs per 1,000 accepted."""
    rows: dict[str, dict] = {}
    for s in strategies:
        mine = [r for r in records if r["strategy"] == s]
        ok = [r for r in mine if r["status"] != "failed"]
        row: dict[str, Any] = {
            "seeds": [r["seed"] for r in ok],
            "failed": {str(r["seed"]): r["error"] for r in mine if r["status"] == "failed"},
            "paper_ood_percent": PAPER_OOD.get(s),
        }
        m, se = mean_se([r["ood_average"] for r in ok if paired_lib.finite(r.get("ood_average"))])
        row["ood_average"] = {"mean": m, "se": se}
        for key in ("ood", "id"):
            got = [r[key] for r in ok if r.get(key)]
            m, se = mean_se([g["rate"] for g in got])
            k, n = sum(g["successes"] for g in got), sum(g["n"] for g in got)
            row[key] = {
                "mean": m,
                "se": se,
                "seeds": len(got),
                "pooled_successes": k,
                "pooled_episodes": n,
            }
        acc = sum(r["accepted_environments"] for r in ok)
        per = 1000.0 / acc if acc else math.nan
        row["accepted_environments"] = acc
        row["llm_tokens_per_1000"] = sum(r["llm_tokens"] for r in ok) * per
        row["sim_hours_per_1000"] = sum(r["sim_hours"] for r in ok) * per
        row["wall_seconds_per_cell"] = mean_se([r["wall_seconds"] for r in ok])[0]
        rows[s] = row
    return rows


def paired_table(
    records: list[dict[str, Any]], strategies: Sequence[str], method: str = "coda"
) -> dict[str, dict]:
    """The method minus each baseline on the OOD average, paired by seed (`study.paired`);
    empty when the method is not among the strategies."""
    if method not in strategies:
        return {}
    values: dict[str, dict[int, float]] = {}
    for r in records:
        if r["status"] != "failed" and paired_lib.finite(r.get("ood_average")):
            values.setdefault(r["strategy"], {})[int(r["seed"])] = float(r["ood_average"])
    base = [s for s in strategies if s in STRATEGIES and STRATEGIES[s].kind == "baseline"]
    return paired_lib.paired_differences(values, method, base)


def ordering(rows: dict[str, dict]) -> list[str]:
    """Strategies by mean OOD success, best first (rows without a number last)."""

    def key(s: str) -> float:
        m = rows[s]["ood"]["mean"]
        return -m if not math.isnan(m) else math.inf

    return sorted(rows, key=key)


def _pct(m: float, se: float) -> str:
    if math.isnan(m):
        return "–"
    return f"{100 * m:.1f}" + ("" if math.isnan(se) else f" ± {100 * se:.1f}")


def _strategy_row(s: str, r: dict[str, Any]) -> str:
    """One strategy's line of the table."""
    kind = r.get("kind") or (STRATEGIES[s].kind if s in STRATEGIES else "?")
    paper = "–" if r["paper_ood_percent"] is None else f"{r['paper_ood_percent']:.1f}"
    if not r["seeds"] and not r["failed"]:
        return f"| {s} | {kind} | not run yet | | | | | | | {paper} |"
    if not r["seeds"]:
        why = "; ".join(f"seed {k}: {e}" for k, e in r["failed"].items())
        return f"| {s} | {kind} | failed: {why} | | | | | | | {paper} |"
    o, i = r["ood"], r["id"]
    note = f" ({len(r['failed'])} seed(s) failed)" if r["failed"] else ""
    return (
        f"| {s}{note} | {kind} | {_pct(o['mean'], o['se'])} (seeds {o['seeds']}) "
        f"| {o['pooled_successes']}/{o['pooled_episodes']} | {_pct(i['mean'], i['se'])} "
        f"| {i['pooled_successes']}/{i['pooled_episodes']} "
        f"| {_num(r['llm_tokens_per_1000'], 0)} | {_num(r['sim_hours_per_1000'], 3)} "
        f"| {_num(r['wall_seconds_per_cell'], 0)} | {paper} |"
    )


def _count(d: dict | None) -> str:
    return "–" if not d else f"{d['successes']}/{d['n']}"


def _cells_section(cells: list[dict[str, Any]]) -> list[str]:
    """Every cell: status, OOD / ID counts, evaluated round, costs."""
    out = [
        "## Cells",
        "",
        "| strategy | seed | status | OOD | ID | eval round | stopped | accepted env | env steps "
        "| wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        if c["status"] == "failed":
            out.append(f"| {c['strategy']} | {c['seed']} | failed | | | | | | | |")
            continue
        out.append(
            f"| {c['strategy']} | {c['seed']} | {c['status']} | {_count(c['ood'])} "
            f"| {_count(c['id'])} | {c['eval_round']} | {c['stopped']} "
            f"| {c['accepted_environments']} | {c['env_steps']:,} | {c['wall_seconds']:.0f} |"
        )
    return out


def markdown(table: dict[str, Any]) -> str:
    """table1.md: the rows, our ordering beside the paper's, failed cells, every cell."""
    rows = table["rows"]
    n_strat = sum(r.get("kind") != "transfer" for r in rows.values())
    out = [
        "# Mini Table 1: CoDA against its baselines",
        "",
        f"Command: `{table['command']}`; code: "
        f"{', '.join(table.get('commits') or ['not recorded'])}",
        "",
        f"{table['cells_total']} of {table['cells_planned']} cells ({n_strat} strategies"
        f"{' + the transfer pair' if table.get('transfer') else ''} x "
        f"{len(table['seeds'])} seeds {list(table['seeds'])}), {table['cells_failed']} failed; "
        "study wall "
        f"{table['wall_seconds']:.0f} s this invocation. Success in % at each cell's last "
        "evaluated round: mean over seeds ± seed-level s.e. (ddof 1; none with 1 seed), then the "
        "pooled episode counts. Costs per 1,000 accepted environments (pooled over seeds).",
        "",
        "| strategy | kind | OOD % | OOD pooled | ID % | ID pooled | LLM tokens / 1k env "
        "| sim-h / 1k env | wall s / cell | paper OOD % |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    out += [_strategy_row(s, r) for s, r in rows.items()]
    ours = [s for s in table["ordering"] if rows[s]["seeds"]]
    paper = sorted((s for s in rows if s in PAPER_OOD), key=lambda s: -PAPER_OOD[s])
    out += [
        "",
        "OOD ordering, ours: "
        + " > ".join(f"{s} {_pct(rows[s]['ood']['mean'], math.nan)}" for s in ours),
        "",
        "OOD ordering, paper: " + " > ".join(f"{s} {PAPER_OOD[s]}" for s in paper),
        "",
    ]
    if all(not r["seeds"] or r["llm_tokens_per_1000"] == 0 for r in rows.values()):
        out += [
            "LLM tokens are 0: the offline critic and engine (critic.name / engine.name = "
            "offline, the embedded defaults) make no LLM calls.",
            "",
        ]
    out += paired_lib.markdown(table.get("paired") or {}, "coda")
    out += _transfer_markdown(table)
    failed = [c for c in table["cells"] if c["status"] == "failed"]
    if failed:
        out += ["## Failed cells", ""]
        out += [f"- {c['strategy']} seed {c['seed']}: {c['error']}" for c in failed]
        out.append("")
    out += _cells_section(table["cells"])
    return "\n".join(out) + "\n"


def _transfer_markdown(table: dict[str, Any]) -> list[str]:
    """The transfer pair: scratch vs. memory per seed and on average, and what was carried."""
    t = table.get("transfer")
    if not t:
        return []
    b, rows = t["backbone"], table["rows"]
    scratch, memory = rows[f"{b}_scratch"], rows[f"{b}_memory"]
    out = [
        f"## Memory transfer across backbones: `{b}` from scratch vs. seeded with "
        f"`{t['source']}`'s memory",
        "",
        f"Both cells run the `{TRANSFER_STRATEGY}` strategy on the `{b}` policy at the same budget "
        f"(`study.base`); `{b}_memory` starts with the validated modes, Ω and Φ of the finished "
        f"`{t['source']}` cell of its seed (`loop.memory_from`; success statistics and episodic "
        "records are not transferred). "
        f"Paper (OpenVLA-OFT): {PAPER_TRANSFER['scratch']} % -> {PAPER_TRANSFER['memory']} %.",
        "",
        "| | OOD % | ID % |",
        "|---|---|---|",
    ]
    for name, r in ((f"{b}_scratch", scratch), (f"{b}_memory", memory)):
        out.append(
            f"| {name} | {_pct(r['ood']['mean'], r['ood']['se'])} "
            f"| {_pct(r['id']['mean'], r['id']['se'])} |"
        )
    d_ood = memory["ood"]["mean"] - scratch["ood"]["mean"]
    d_id = memory["id"]["mean"] - scratch["id"]["mean"]
    out += [f"| memory - scratch | {_pct(d_ood, math.nan)} | {_pct(d_id, math.nan)} |", ""]
    moved = [
        c for c in table["cells"] if c["strategy"] == f"{b}_memory" and c.get("memory_transfer")
    ]
    for c in moved:
        m = c["memory_transfer"]
        n = m.get("counts", {})
        out.append(
            f"- seed {c['seed']}: {m['modes']} of {m['validated_in_source']} validated modes from "
            f"{m['source'].get('run')} (round {m['source'].get('round')}, policy "
            f"{m['source'].get('policy')}), {n.get('generation_programs', 0)} Ω, "
            f"{n.get('training_programs', 0)} Φ, {m['parents']} parent scenes, "
            f"{m['skipped']} skipped"
        )
    if moved:
        out.append("")
    if any(c["memory_transfer"]["modes"] == 0 for c in moved):
        out += [
            "A seed with 0 transferred modes ran the memory cell on an empty memory: its source "
            "run validated no mode (more rounds / a larger budget are needed for one).",
            "",
        ]
    return out


def _num(x: float, p: int) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{p}f}"


def _nan_to_none(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nan_to_none(v) for v in x]
    return x


def _frac(d: dict | None) -> str:
    return "n/a" if not d else f"{100 * d['rate']:.1f}% ({d['successes']}/{d['n']})"


def _none_to_nan(table: dict[str, Any]) -> dict[str, Any]:
    """The rows' undefined numbers back to nan for formatting (JSON keeps them as null)."""
    t = copy.deepcopy(table)
    for r in t["rows"].values():
        for key in ("ood", "id"):
            for f in ("mean", "se"):
                if r[key][f] is None:
                    r[key][f] = math.nan
        for f in ("llm_tokens_per_1000", "sim_hours_per_1000", "wall_seconds_per_cell"):
            if r[f] is None:
                r[f] = math.nan
    for c in t["cells"]:
        if c.get("wall_seconds") is None:
            c["wall_seconds"] = math.nan
    return t
