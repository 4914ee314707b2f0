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
import os
import subprocess
import time
import traceback
from collections.abc import Callable
from typing import Any

from ml_collections import ConfigDict

from coda import lifetime, loop, runconfig
from coda.loop.strategies import STRATEGIES, get_strategy
from coda.loop.transfer import usable_strategy
from coda.study.table import (  # re-exported: the study's public names
    PAPER_OOD,
    PAPER_TRANSFER,
    TRANSFER_KINDS,
    TRANSFER_STRATEGY,
    _frac,
    _nan_to_none,
    _none_to_nan,
    _transfer_record,
    aggregate,
    cell_record,
    markdown,
    mean_se,  # noqa: F401 - re-exported (tests, callers)
    ordering,
    paired_table,
)

# (loop config, cell workdir) -> the run's summary (what `coda.loop.run` returns)
CellRunner = Callable[[ConfigDict, str], dict[str, Any]]


class StudyError(ValueError):
    """A study config field is invalid; the message names the field and the valid choices."""


def check_study(config: ConfigDict) -> None:
    """`StudyError` for unknown / repeated strategies or bad seeds (pure Python, before JAX)."""

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
    """(strategy, seed) in run order: seed-major, so a partial study has whole seeds first
    (every arm of a seed, the pairs its comparisons need) and the seed's round 0 is trained
    by its first cell before the others adopt it."""
    return [(s, int(k)) for k in config.study.seeds for s in config.study.strategies]


def _finished(workdir: str, cfg: ConfigDict) -> dict[str, Any] | None:
    """The saved summary of a finished cell run with exactly this config, else None."""
    spath, cpath = os.path.join(workdir, "summary.json"), os.path.join(workdir, "config.json")
    if not (os.path.exists(spath) and os.path.exists(cpath)):
        return None

    with open(cpath) as f:
        if runconfig.with_added_defaults(json.load(f)) != json.loads(cfg.to_json_best_effort()):
            return None  # changed config: the loop resumes it (more rounds) or refuses it
    with open(spath) as f:
        return json.load(f)


def _run_cell(cfg: ConfigDict, workdir: str) -> None:
    """Child-process entry of `_process_runner` (top level: spawn pickles it by name)."""

    loop.run(cfg, workdir, resume=True)


def read_cells(workdir: str) -> dict[str, dict[int, dict[str, Any]]]:
    """strategy -> seed -> the summary.json of every cell of a study workdir that has one
    (`<workdir>/<strategy>/seed<k>/`), for analyses of a study's cells."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for arm in sorted(os.listdir(workdir)):
        folder = os.path.join(workdir, arm)
        if not os.path.isdir(folder):
            continue
        for sd in sorted(os.listdir(folder)):
            if sd.startswith("seed") and os.path.exists(os.path.join(folder, sd, "summary.json")):
                out.setdefault(arm, {})[int(sd[4:])] = _summary(os.path.join(folder, sd))
    return out


def _summary(workdir: str) -> dict[str, Any]:
    with open(os.path.join(workdir, "summary.json")) as f:
        return json.load(f)


def _in_process_runner(cfg: ConfigDict, workdir: str) -> dict[str, Any]:
    """One cell in this process (the default). `coda.loop.run` releases what the cell compiled
    when it ends (`coda.lifetime.release`), so the process's memory mappings return to where
    they were before the cell (benchmarks/results/process_lifetime.md); `lifetime.check` warns
    if they nevertheless near vm.max_map_count."""

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


def code_commit() -> str:
    """The git commit of the code this process runs ("<sha>+dirty" with uncommitted changes to
    tracked files; "unknown" outside a git checkout): every cell records the code it ran."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    sha = git("rev-parse", "HEAD")
    if not sha:
        return "unknown"
    return sha + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def _cell_commit(cdir: str, ran_now: bool, commit: str) -> str:
    """The commit a cell ran at: this process's when it ran now (written beside the cell), the
    one written then when it finished earlier ("unknown" for cells from before this record)."""
    path = os.path.join(cdir, "commit.txt")
    if ran_now:
        with open(path, "w") as f:
            f.write(commit + "\n")
        return commit
    if os.path.exists(path):
        with open(path) as f:
            return f.read().strip()
    return "unknown"


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
    t0, commit = time.perf_counter(), code_commit()
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
            rec["commit"] = _cell_commit(cdir, rec["status"] == "ran", commit)
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
        # the code every finished cell ran at: a registered study runs at one commit
        "commits": sorted({r["commit"] for r in records if r.get("commit")}),
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
        "paired": paired_table(records, names),
        "paper_ood_percent": PAPER_OOD,
        "cells": records,
    }
    table = _nan_to_none(table)
    with open(os.path.join(workdir, "table1.json"), "w") as f:
        json.dump(table, f, indent=1)
    with open(os.path.join(workdir, "table1.md"), "w") as f:
        f.write(markdown(_none_to_nan(table)))
    return table
