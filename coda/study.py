"""A study: every (strategy, seed) cell of a table run through `coda.loop.run`, then aggregated.

`configs/table1.py` describes one (`study.strategies`, `study.seeds`, `study.base`: the loop
config every cell shares); `launch.study` runs it. Cell k of strategy s lives in
`<workdir>/<s>/seed<k>/`, a normal run folder. Re-running the same command resumes: a finished
cell (its `summary.json` exists and its `config.json` is this cell's config) is read back, not
re-run; any other cell goes to `coda.loop.run`, which continues after its last complete round
(or refuses a folder holding another config: that cell is then recorded as failed, with why).

The transfer pair (`study.transfer = (backbone, source_strategy)`, `()` = none): after the
strategy cells, two more cells per seed run the `coda` strategy on `backbone` at the same budget,
`<backbone>_scratch` with a fresh memory and `<backbone>_memory` seeded with the final memory of
the finished `<source_strategy>` cell of the same seed (`loop.memory_from`, coda.loop.transfer).
With `study.share_start` the memory cell adopts the scratch cell's round 0, so the two differ in
nothing but the memory. Their rows (kind `transfer`) sit in the table beside the strategies, and
table1.md gets a section comparing the pair (with what was transferred).

A cell that raises is recorded with its error (`<cell>/error.txt` has the traceback) and the
study goes on; its row in the table says why. Host code only: no JAX here (the loop imports it).

Aggregates (`aggregate`), per strategy over the seeds that finished:
* OOD / ID success: the mean of the per-seed rates ± the seed-level standard error
  (sample std with ddof = 1 over sqrt(#seeds); undefined with one seed), beside the pooled
  episode counts (successes / episodes over all seeds). OOD is the loop's pooled OOD suites
  (`coda.loop.evaluation.pooled_ood`) at the last evaluated round; ID the `id` suite there;
* LLM tokens and sim-hours per 1,000 accepted environments: totals over the seeds divided by
  the accepted environments over the seeds (`coda.report.costs`' fields);
* wall time per cell (mean of the cells' `summary.wall_seconds`).
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from ml_collections import ConfigDict

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

# (loop config, cell workdir) -> the run's summary (what `coda.loop.run` returns)
CellRunner = Callable[[ConfigDict, str], dict[str, Any]]


class StudyError(ValueError):
    """A study config field is invalid; the message names the field and the valid choices."""


def check_study(config: ConfigDict) -> None:
    """`StudyError` for unknown / repeated strategies or bad seeds (pure Python, before JAX)."""
    from coda.loop.strategies import STRATEGIES

    names = list(config.study.strategies)
    if not names or isinstance(config.study.strategies, str):
        raise StudyError(
            f"study.strategies={config.study.strategies!r} must be a non-empty list "
            f"(valid: {', '.join(STRATEGIES)})"
        )
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise StudyError(f"study.strategies: unknown {unknown} (valid: {', '.join(STRATEGIES)})")
    if len(set(names)) != len(names):
        raise StudyError(f"study.strategies lists a strategy twice: {names}")
    seeds = config.study.seeds
    if isinstance(seeds, (str, int)) or not seeds:
        raise StudyError(f"study.seeds={seeds!r} must be a non-empty list of integers >= 0")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or s < 0]
    if bad or len(set(seeds)) != len(seeds):
        raise StudyError(f"study.seeds={list(seeds)!r} must be distinct integers >= 0")
    isolate = config.study.get("cell_process", False)
    if not isinstance(isolate, bool):
        raise StudyError(
            f"study.cell_process={isolate!r} must be True (each cell in its own process) or "
            "False (every cell in this process)"
        )
    _check_transfer(config)


def transfer_pair(config: ConfigDict) -> tuple[str, str] | None:
    """(backbone, source strategy) of `study.transfer`, None when the study has no pair."""
    t = config.study.get("transfer", ())
    return None if not t else (str(t[0]), str(t[1]))


def _check_transfer(config: ConfigDict) -> None:
    from coda import runconfig
    from coda.loop.strategies import STRATEGIES
    from coda.loop.transfer import usable_strategy

    t = config.study.get("transfer", ())
    if not t:
        return
    if isinstance(t, str) or len(t) != 2 or not all(isinstance(x, str) for x in t):
        raise StudyError(
            f"study.transfer={t!r} must be (backbone, source_strategy), e.g. ('oft', 'coda'), "
            "or () for none"
        )
    backbone, source = t
    if backbone not in runconfig.POLICY_NAMES:
        raise StudyError(
            f"study.transfer: backbone {backbone!r} unknown (valid: "
            f"{', '.join(runconfig.POLICY_NAMES)})"
        )
    names = list(config.study.strategies)
    if source not in names:
        raise StudyError(
            f"study.transfer: source strategy {source!r} is not one of study.strategies "
            f"({', '.join(names)}): its finished cells are the memory the pair transfers"
        )
    if STRATEGIES[source].memory.name != "full":
        raise StudyError(
            f"study.transfer: source strategy {source!r} keeps no full memory "
            f"(memory {STRATEGIES[source].memory.name!r})"
        )
    why = usable_strategy(TRANSFER_STRATEGY)
    if why:  # a registry change would break the pair: say so rather than run it
        raise StudyError(f"study.transfer: {why}")
    clash = [f"{backbone}_{k}" for k in TRANSFER_KINDS if f"{backbone}_{k}" in STRATEGIES]
    if clash:
        raise StudyError(f"study.transfer: row names {clash} clash with strategy names")


def cell_config(
    config: ConfigDict, strategy: str, seed: int, workdir: str | None = None
) -> ConfigDict:
    """The loop config of one cell: `study.base` with `strategy` and `seed` set.

    With `study.share_start` and a `workdir`, a strategy that starts from BC adopts the round 0
    of the study's first BC-start strategy at the same seed (`loop.start_from`): the SFT start
    is trained once per seed instead of once per cell.
    """
    from coda.loop.strategies import get_strategy

    c = copy.deepcopy(config.study.base)
    c.strategy = strategy
    c.seed = int(seed)
    if workdir is not None and config.study.get("share_start", False):
        first = next((s for s in config.study.strategies if get_strategy(s).start.clones), None)
        if first is not None and first != strategy and get_strategy(strategy).start.clones:
            c.loop.start_from = cell_dir(workdir, first, seed)
    return c


def transfer_cells(config: ConfigDict) -> list[tuple[str, int]]:
    """(row name, seed) of the transfer pair, seed-major (scratch before memory), run after the
    strategy cells so that every source cell has finished."""
    pair = transfer_pair(config)
    if pair is None:
        return []
    return [(f"{pair[0]}_{k}", int(s)) for s in config.study.seeds for k in TRANSFER_KINDS]


def transfer_cell_config(
    config: ConfigDict, name: str, seed: int, workdir: str | None = None
) -> ConfigDict:
    """The loop config of a transfer cell: `study.base` with the `coda` strategy, the pair's
    backbone and `seed`; the memory cell (with a `workdir`) takes `loop.memory_from` = the
    source strategy's cell of this seed and, with `study.share_start`, adopts the scratch cell's
    round 0 (`loop.start_from`)."""
    pair = transfer_pair(config)
    if pair is None or name not in {f"{pair[0]}_{k}" for k in TRANSFER_KINDS}:
        raise StudyError(f"{name!r} is not a transfer cell of study.transfer={pair!r}")
    backbone, source = pair
    c = copy.deepcopy(config.study.base)
    c.strategy = TRANSFER_STRATEGY
    c.seed = int(seed)
    c.policy.name = backbone
    if workdir is not None and name.endswith("_memory"):
        c.loop.memory_from = cell_dir(workdir, source, seed)
        if config.study.get("share_start", False):
            c.loop.start_from = cell_dir(workdir, f"{backbone}_scratch", seed)
    return c


def cell_dir(workdir: str, strategy: str, seed: int) -> str:
    return os.path.join(workdir, strategy, f"seed{int(seed)}")


def cells(config: ConfigDict) -> list[tuple[str, int]]:
    """(strategy, seed) in run order: strategy-major, so a partial study has whole rows first."""
    return [(s, int(k)) for s in config.study.strategies for k in config.study.seeds]


def _finished(workdir: str, cfg: ConfigDict) -> dict[str, Any] | None:
    """The saved summary of a finished cell run with exactly this config, else None."""
    spath, cpath = os.path.join(workdir, "summary.json"), os.path.join(workdir, "config.json")
    if not (os.path.exists(spath) and os.path.exists(cpath)):
        return None
    from coda.runconfig import with_added_defaults

    with open(cpath) as f:
        if with_added_defaults(json.load(f)) != json.loads(cfg.to_json_best_effort()):
            return None  # changed config: the loop resumes it (more rounds) or refuses it
    with open(spath) as f:
        return json.load(f)


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
    return {
        "id": _rate(last["suites"].get("id")) if last else None,
        "ood": _rate(_ood_of(last)) if last else None,
        "eval_round": None if last is None else int(last["round"]),
        "rounds": summary.get("rounds"),
        "stopped": summary.get("stopped"),
        "accepted_environments": int(c.get("accepted_environments", 0)),
        "llm_tokens": int(c.get("llm_tokens", 0)),
        "sim_hours": float(c.get("sim_hours", 0.0)),
        "env_steps": int(c.get("env_steps", 0)),
        "wall_seconds": float(summary.get("wall_seconds", math.nan)),
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


def markdown(table: dict[str, Any]) -> str:
    """table1.md: the rows, our ordering beside the paper's, failed cells, every cell."""
    from coda.loop.strategies import STRATEGIES

    rows = table["rows"]
    n_strat = sum(r.get("kind") != "transfer" for r in rows.values())
    out = [
        "# Mini Table 1: CoDA against its baselines",
        "",
        f"Command: `{table['command']}`",
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
    for s, r in rows.items():
        kind = r.get("kind") or (STRATEGIES[s].kind if s in STRATEGIES else "?")
        paper = "–" if r["paper_ood_percent"] is None else f"{r['paper_ood_percent']:.1f}"
        if not r["seeds"] and not r["failed"]:
            out.append(f"| {s} | {kind} | not run yet | | | | | | | {paper} |")
            continue
        if not r["seeds"]:
            why = "; ".join(f"seed {k}: {e}" for k, e in r["failed"].items())
            out.append(f"| {s} | {kind} | failed: {why} | | | | | | | {paper} |")
            continue
        o, i = r["ood"], r["id"]
        note = f" ({len(r['failed'])} seed(s) failed)" if r["failed"] else ""
        out.append(
            f"| {s}{note} | {kind} | {_pct(o['mean'], o['se'])} (seeds {o['seeds']}) "
            f"| {o['pooled_successes']}/{o['pooled_episodes']} | {_pct(i['mean'], i['se'])} "
            f"| {i['pooled_successes']}/{i['pooled_episodes']} "
            f"| {_num(r['llm_tokens_per_1000'], 0)} | {_num(r['sim_hours_per_1000'], 3)} "
            f"| {_num(r['wall_seconds_per_cell'], 0)} | {paper} |"
        )
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
    out += _transfer_markdown(table)
    failed = [c for c in table["cells"] if c["status"] == "failed"]
    if failed:
        out += ["## Failed cells", ""]
        out += [f"- {c['strategy']} seed {c['seed']}: {c['error']}" for c in failed]
        out.append("")
    out += [
        "## Cells",
        "",
        "| strategy | seed | status | OOD | ID | eval round | stopped | accepted env | env steps "
        "| wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in table["cells"]:
        if c["status"] == "failed":
            out.append(f"| {c['strategy']} | {c['seed']} | failed | | | | | | | |")
            continue

        def frac(d: dict | None) -> str:
            return "–" if not d else f"{d['successes']}/{d['n']}"

        out.append(
            f"| {c['strategy']} | {c['seed']} | {c['status']} | {frac(c['ood'])} "
            f"| {frac(c['id'])} | {c['eval_round']} | {c['stopped']} "
            f"| {c['accepted_environments']} | {c['env_steps']:,} | {c['wall_seconds']:.0f} |"
        )
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


def _run_cell(cfg: ConfigDict, workdir: str) -> None:
    """Child-process entry of `_process_runner` (top level: spawn pickles it by name)."""
    from coda import loop

    loop.run(cfg, workdir, resume=True)


def _summary(workdir: str) -> dict[str, Any]:
    with open(os.path.join(workdir, "summary.json")) as f:
        return json.load(f)


def _in_process_runner(cfg: ConfigDict, workdir: str) -> dict[str, Any]:
    """One cell in this process (the default). `coda.loop.run` releases what the cell compiled
    when it ends (`coda.lifetime.release`), so the process's memory mappings return to where
    they were before the cell (benchmarks/results/process_lifetime.md); `lifetime.check` warns
    if they nevertheless near vm.max_map_count."""
    from coda import lifetime, loop

    loop.run(cfg, workdir, resume=True)
    lifetime.check(f"study cell {workdir}")
    return _summary(workdir)


def _process_runner(cfg: ConfigDict, workdir: str) -> dict[str, Any]:
    """One cell in its own spawned process (`study.cell_process`): a crashed or killed cell
    takes only itself down, and its memory goes back to the OS. The child writes
    `summary.json` like any run."""
    import multiprocessing

    proc = multiprocessing.get_context("spawn").Process(target=_run_cell, args=(cfg, workdir))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(
            f"cell process exited with {proc.exitcode} (negative: killed by that signal); "
            f"its output is above; re-running the study resumes the cell from {workdir}"
        )
    return _summary(workdir)


def run_study(
    config: ConfigDict,
    workdir: str,
    command: str = "",
    runner: CellRunner | None = None,
) -> dict[str, Any]:
    """Runs (or resumes) every cell, writes `<workdir>/table1.{json,md}`, returns the table."""
    from tqdm.auto import tqdm

    check_study(config)
    if runner is None:
        isolate = bool(config.study.get("cell_process", False))
        runner = _process_runner if isolate else _in_process_runner
    os.makedirs(workdir, exist_ok=True)
    t0 = time.perf_counter()
    todo = cells(config) + transfer_cells(config)
    pair = {name for name, _ in transfer_cells(config)}
    records: list[dict[str, Any]] = []
    bar = tqdm(total=len(todo), desc="study cells", unit="cell", dynamic_ncols=True)
    for strategy, seed in todo:
        cdir = cell_dir(workdir, strategy, seed)
        if strategy in pair:
            cfg = transfer_cell_config(config, strategy, seed, workdir)
        else:
            cfg = cell_config(config, strategy, seed, workdir)
        rec: dict[str, Any] = {"strategy": strategy, "seed": seed, "workdir": cdir}
        summary = _finished(cdir, cfg)
        t_cell = time.perf_counter()
        if summary is not None:
            rec["status"] = "skipped (finished earlier)"
        else:
            try:
                summary = runner(cfg, cdir)
                rec["status"] = "ran"
            except Exception as e:  # noqa: BLE001 - one cell's failure is recorded, not fatal
                rec["status"], rec["error"] = "failed", f"{type(e).__name__}: {e}"
                os.makedirs(cdir, exist_ok=True)
                with open(os.path.join(cdir, "error.txt"), "w") as f:
                    f.write(traceback.format_exc())
        rec["study_seconds"] = time.perf_counter() - t_cell
        if summary is not None:
            rec.update(cell_record(summary))
            if strategy in pair:
                rec["memory_transfer"] = _transfer_record(summary)
            line = (
                f"{strategy} seed {seed}: {rec['status']}, OOD {_frac(rec['ood'])}, "
                f"ID {_frac(rec['id'])}, {rec['study_seconds']:.0f} s"
            )
        else:
            line = f"{strategy} seed {seed}: FAILED ({rec['error']})"
        records.append(rec)
        table = _write(config, workdir, records, command, t0)  # after every cell: partial table
        bar.update(1)
        bar.write(line)
    bar.close()
    return table


def _write(
    config: ConfigDict, workdir: str, records: list[dict], command: str, t0: float
) -> dict[str, Any]:
    """table1.json / table1.md from the cells recorded so far."""
    names = list(config.study.strategies) + list(
        dict.fromkeys(n for n, _ in transfer_cells(config))
    )
    rows = aggregate(records, names)
    pair = transfer_pair(config)
    if pair is not None:
        for k in TRANSFER_KINDS:
            rows[f"{pair[0]}_{k}"]["kind"] = "transfer"
            rows[f"{pair[0]}_{k}"]["paper_transfer_percent"] = PAPER_TRANSFER[k]
    table = {
        "command": command,
        "config": json.loads(config.to_json_best_effort()),
        "seeds": [int(k) for k in config.study.seeds],
        "cells_total": len(records),
        "cells_planned": len(cells(config)) + len(transfer_cells(config)),
        "transfer": None if pair is None else {"backbone": pair[0], "source": pair[1]},
        "cells_failed": sum(r["status"] == "failed" for r in records),
        "wall_seconds": time.perf_counter() - t0,
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
        "ordering": ordering(rows),
        "paper_ood_percent": PAPER_OOD,
        "cells": records,
    }
    table = _nan_to_none(table)
    with open(os.path.join(workdir, "table1.json"), "w") as f:
        json.dump(table, f, indent=1)
    with open(os.path.join(workdir, "table1.md"), "w") as f:
        f.write(markdown(_none_to_nan(table)))
    return table


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
