"""`run(config, workdir)`: the run folder, round 0, the rounds, checkpoints and resume, the report.

Run folder:
    config.json  pool.jsonl (training pool)  scenes.jsonl  suites.json (fixed suites)
    memory.sqlite (live)  checkpoints/round_XXXX/ (learner, memory snapshot, state.json)
    metrics.jsonl  tb/ (TensorBoard)  failures/ (diagnosed failure traces)  report.md/.html
Re-running with the same workdir (or `--resume`) continues after the last complete round.

The host loop is thin: `round.run_round(services, state, r, key)` returns the next `RunState`
and the round's row; this module records, checkpoints and decides whether to go on.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import time
from typing import Any

import jax
import numpy as np
from ml_collections import ConfigDict
from tqdm.auto import tqdm

from coda import lifetime, runconfig
from coda.loop import checkpoint as ckpt
from coda.loop import distributed, records, report, transfer
from coda.loop.compat import adopt_start, check_same_config
from coda.loop.evaluation import load_suites, save_suites
from coda.loop.round import Start, decide, run_round, start
from coda.loop.services import Services, learner_config, make_services, policy_overrides
from coda.loop.state import RunState
from coda.loop.strategies import get_strategy
from coda.sim import tasks
from coda.train.learner import empty_demos

log = logging.getLogger(__name__)

__all__ = ["learner_config", "policy_overrides", "run"]


def _write_start(workdir: str, svc: Services, made: Start) -> None:
    """Host 0 writes round 0's scenes.jsonl, pool.jsonl, heldout_tasks.json and suites.json."""
    if not distributed.is_primary():  # every host seeds the same pool; host 0 writes it
        return
    with open(os.path.join(workdir, "scenes.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in made.rows)
    with open(os.path.join(workdir, "pool.jsonl"), "w") as f:
        f.writelines(json.dumps(p.scene.to_dict()) + "\n" for p in made.pool)
    with open(os.path.join(workdir, "heldout_tasks.json"), "w") as f:
        json.dump(made.held, f)
    save_suites(dict(svc.suites), os.path.join(workdir, "suites.json"))


def _restore(workdir: str, svc: Services, last: int) -> tuple[Services, RunState]:
    """Services and run state of the last complete round: learner and memory restored in place,
    the pool rebuilt from pool.jsonl, the suites and the saved demo rows read back."""
    state, extras = ckpt.load_round(workdir, last, svc.learner, svc.memory)
    with open(os.path.join(workdir, "pool.jsonl")) as f:
        pool = [svc.source.compile(json.loads(line)) for line in f if line.strip()]
    svc = svc.with_start(pool, load_suites(os.path.join(workdir, "suites.json")))
    # the saved demo rows, in the tree structure of a demo batch (no re-collection)
    demos = ckpt.restore_batch(extras.get("sft_demos"), empty_demos(svc.policy))
    return svc, state.replace(demos=demos)


def _end_round(
    svc: Services, state: RunState, row: dict, r: int, bar: Any
) -> tuple[RunState, dict]:
    """The round's row into the state, hosts agreed, checkpoint, metrics, progress line."""
    budgets = svc.usage(state.budgets)
    row["budgets"] = budgets.as_dict()
    state = state.replace(round=r, budgets=budgets, history=[*state.history, row])
    decided = decide(svc, state, row)
    # round 0's stop decision waits for the loop (`_stop_after_load`): only its counters count
    state = decided if r > 0 else decided.replace(stopped=state.stopped)
    state, digests = _settle(svc, state)
    ckpt.save_round(svc.workdir, state, svc.learner, svc.memory, {"sft_demos": state.demos})
    primary = distributed.is_primary()
    records.process(svc.workdir, r, primary)
    if primary:
        records.write_metrics(svc.workdir, state)
        records.tensorboard(svc.workdir, [row], r)
        bar.write(records.progress_line(row, state.budgets))
    return state, digests


def _drop_partial(workdir: str, last: int | None) -> None:
    """What a killed run left beyond its last complete round: with no complete round, the live
    memory, TensorBoard events and failure traces (round 0 starts over); else failure traces of
    later rounds (memory is restored from the round's snapshot, TensorBoard purged)."""
    if last is None:
        for f in glob.glob(os.path.join(workdir, "memory.sqlite*")):
            os.remove(f)
        for d in ("tb", "failures", ckpt.CKPT_DIR):
            shutil.rmtree(os.path.join(workdir, d), ignore_errors=True)
        return
    for f in glob.glob(os.path.join(workdir, "failures", "round*_*")):
        if int(os.path.basename(f)[len("round") :].split("_")[0]) > last:
            os.remove(f)


def run(
    config: ConfigDict, workdir: str, resume: bool = True, release: bool = True
) -> dict[str, Any]:
    """The whole run (or its continuation after the last complete round); returns the summary.

    With `release`, what the run compiled is released when it ends, however it ends
    (`coda.lifetime.release`): a process can run one run after another (a study, a notebook,
    the test suite) without its memory mappings growing towards vm.max_map_count."""
    lifetime.count_compiles()
    try:
        return _run(config, workdir, resume)
    finally:
        if release:
            lifetime.release()


def _prepare_folder(config: ConfigDict, workdir: str, resume: bool) -> int | None:
    """The run folder checked (same config to resume), cleaned of a killed run's partial round,
    round 0 adopted from `loop.start_from`, config.json written; the last complete round."""
    strategy = get_strategy(config.strategy)
    primary = distributed.is_primary()  # host 0 alone writes the run folder
    os.makedirs(workdir, exist_ok=True)
    last = distributed.broadcast_json(ckpt.latest_round(workdir))  # host 0's view of the folder
    if last is not None and not resume:
        raise runconfig.ConfigError(
            f"--workdir={workdir!r} already holds rounds 0..{last}; resume, or use a new folder"
        )
    if last is not None:
        check_same_config(workdir, config)
    if primary:
        _drop_partial(workdir, last)
    if last is None and config.loop.get("start_from"):
        if primary:
            adopt_start(config, workdir, strategy)
        last = 0
    if primary:  # replaced atomically: on a resume the other hosts may be reading it (above)
        path = os.path.join(workdir, "config.json")
        with open(path + ".tmp", "w") as f:
            f.write(config.to_json_best_effort(indent=2))
        os.replace(path + ".tmp", path)
    distributed.barrier("run_folder_ready")
    return last


def _run(config: ConfigDict, workdir: str, resume: bool) -> dict[str, Any]:
    runconfig.validate(config, families=tasks.FAMILIES)  # before anything is written
    distributed.check_devices(config)
    last = _prepare_folder(config, workdir, resume)
    primary = distributed.is_primary()
    t_start = time.perf_counter()
    svc = make_services(config, workdir, get_strategy(config.strategy))
    base = jax.random.PRNGKey(config.seed)
    total = int(config.loop.rounds) + 1
    bar = tqdm(total=total, unit="round", dynamic_ncols=True, mininterval=1.0, disable=not primary)
    digests: dict[str, str] = {}  # multi-host: what the hosts agreed on last round
    if last is None:
        state = RunState(key=[int(x) for x in np.asarray(jax.random.key_data(base)).ravel()])
        svc, state, row, made = start(svc, state, jax.random.fold_in(base, 0), bar)
        _write_start(workdir, svc, made)
        state, digests = _end_round(svc, state, row, 0, bar)
    else:
        svc, state = _restore(workdir, svc, last)
        if primary:
            records.write_metrics(workdir, state)
            records.tensorboard(workdir, [], state.round + 1)
            bar.write(f"resuming after round {last} from {ckpt.round_dir(workdir, last)}")
    if state.round == 0 and config.loop.get("memory_from"):  # coda.loop.transfer
        state, rec = transfer.seed_run(svc, state, workdir)
        if rec["created"]:  # round 0 again, with the memory
            ckpt.save_round(workdir, state, svc.learner, svc.memory, {"sft_demos": state.demos})
    svc.strategy.update.after_start(svc.learner)
    bar.update(state.round + 1)
    while not state.stopped:
        state = state.replace(stopped=_stop_after_load(config, state))
        if state.stopped:
            break
        r = state.round + 1
        state, row, failures = run_round(svc, state, r, jax.random.fold_in(base, r), bar)
        records.save_failures(svc, failures, r)
        state, digests = _end_round(svc, state, row, r, bar)
        bar.update(1)
    bar.close()
    if not primary:  # host 0 writes the report; this host's record is what it agreed to
        svc.memory.close()
        host = distributed.process_index()
        return {"headline": f"host {host}: {state.stopped}", "digests": digests}
    if svc.llm is not None:
        svc.llm.save_usage()  # <workdir>/llm/usage.json (this process's calls, by role and round)
    summary = report.write_report(workdir, config, state, svc, time.perf_counter() - t_start)
    svc.memory.close()
    return summary


def _settle(svc: Services, state: RunState) -> tuple[RunState, dict[str, str]]:
    """Round end of a multi-host run: the hosts check they agree (run state without wall
    times and LLM spend, learner parameters, memory), then adopt host 0's run state (its
    budgets included). Identity otherwise."""
    if distributed.process_count() == 1:
        return state, {}
    mine = distributed.digests(state, svc.learner.state, svc.memory)
    agreed = distributed.check_agreement(f"round {state.round}", mine, state)
    log.info("round %d: %d hosts agree: %s", state.round, distributed.process_count(), mine)
    return distributed.adopt_primary_state(state), agreed


def _stop_after_load(config: ConfigDict, state: RunState) -> str:
    """A run restored at its last round (or whose limits were lowered) stops here."""
    if state.round >= int(config.loop.rounds):
        return state.stopped or f"{config.loop.rounds} rounds done"
    return state.stopped
