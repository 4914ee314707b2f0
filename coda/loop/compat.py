"""Which configs may continue a run folder (resume) or adopt its round 0 (`loop.start_from`).

A resumed run must have the run folder's config up to `_RESUMABLE`; a run adopting another's
round 0 may differ only in what round 0 does not read (`_START_FREE`, and `_START_SAME_SIGN`
fields on the same side of 0). Saved configs are read with the fields added since they were
written filled in (`runconfig.with_added_defaults`).
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from ml_collections import ConfigDict

from coda import runconfig
from coda.loop import checkpoint as ckpt
from coda.loop.strategies import Strategy, get_strategy

# may change on resume (data parallelism: the same arithmetic up to reduction order)
_RESUMABLE = ("loop.rounds", "loop.max_env_steps", "render", "cache_dir", "loop.data_parallel")

# the run-folder files of round 0 an adopting run copies beside its checkpoint
START_FILES = ("pool.jsonl", "scenes.jsonl", "heldout_tasks.json", "suites.json")
_START_FREE = ("strategy", "loop.start_from", "loop.memory_from", "loop.no_mode_budget")
_START_FREE += ("loop.validate_n", "loop.validation_bases", "loop.validation_control")
_START_FREE += ("loop.validation_correction", "loop.validation_pairing", "loop.validation_rest")
_START_FREE += ("loop.retest_after", "loop.max_retests")
# round 0 does not read these, nor the stop rules:
_START_FREE += ("critic", "engine", "llm", "potentials")
_START_FREE += ("loop.min_stop_round", "loop.min_modes_in_band", "loop.plateau_updates")
# nor the rounds' collection sampler (only step 3's rollouts sample with it), nor the rounds'
# share of fresh programs (step 1's allocation)
_START_FREE += ("loop.collect_noise_scale", "loop.epsilon", "loop.novel_demos")
_START_FREE += ("loop.finetune_ema",)  # the rounds' EMA horizon (round 0 keeps policy_ema)
_START_FREE += _RESUMABLE
# round 0 reads the AWR batches' demo share only as "any?" (it stores the demos when > 0)
_START_SAME_SIGN = ("loop.demo_fraction",)


def config_diff(old: Any, new: Any, free: tuple[str, ...]) -> list[str]:
    """Every field that differs outside `free` (dotted prefixes), as 'path: old -> new'."""
    diff: list[str] = []
    if isinstance(old, dict):
        old = runconfig.with_added_defaults(old)

    def walk(a: Any, b: Any, where: str) -> None:
        if any(where == p or where.startswith(p + ".") for p in free):
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in sorted(set(a) | set(b)):
                walk(a.get(k), b.get(k), f"{where}.{k}" if where else k)
        elif a != b:
            diff.append(f"{where}: {a!r} -> {b!r}")

    walk(old, new, "")
    return diff


def _lookup(d: dict, path: str) -> Any:
    for p in path.split("."):
        d = d[p]
    return d


def adopt_start(config: ConfigDict, workdir: str, strategy: Strategy) -> None:
    """Round 0 of another run (`loop.start_from`) as this run's round 0.

    Round 0 (seeding, planner demos, BC, suites, first evaluation) depends on the strategy only
    through its `start` (whether it clones the planner), so runs that differ in strategy (and
    critic / engine / LLM settings, which round 0 does not use) can share it: a study trains the
    SFT start once per seed. The copy carries round 0's budgets, so every run is charged for the
    start it uses.
    """
    src = str(config.loop.start_from)
    if not os.path.exists(os.path.join(ckpt.round_dir(src, 0), ckpt.MARKER)):
        raise runconfig.ConfigError(f"loop.start_from={src!r} holds no complete round 0")
    with open(os.path.join(src, "config.json")) as f:
        old = runconfig.with_added_defaults(json.load(f))
    new = json.loads(config.to_json_best_effort())
    diff = config_diff(old, new, _START_FREE + _START_SAME_SIGN)
    for path in _START_SAME_SIGN:
        a, b = _lookup(old, path), _lookup(new, path)
        if (a > 0) != (b > 0):
            diff.append(f"{path}: {a!r} -> {b!r}")
    if diff:
        raise runconfig.ConfigError(
            f"loop.start_from={src!r} ran another round 0 ({'; '.join(diff[:5])})"
        )
    theirs = get_strategy(old["strategy"])
    if theirs.start.clones != strategy.start.clones:
        raise runconfig.ConfigError(
            f"loop.start_from={src!r}: its strategy {theirs.name!r} "
            f"{'clones' if theirs.start.clones else 'does not clone'} the planner at round 0, "
            f"{strategy.name!r} {'does' if strategy.start.clones else 'does not'}"
        )
    for name in START_FILES:
        shutil.copy2(os.path.join(src, name), os.path.join(workdir, name))
    shutil.copytree(ckpt.round_dir(src, 0), ckpt.round_dir(workdir, 0))


def check_same_config(workdir: str, config: ConfigDict) -> None:
    """Refuses a workdir holding a run with another config (beyond `_RESUMABLE`)."""
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        old = json.load(f)
    diff = config_diff(old, json.loads(config.to_json_best_effort()), _RESUMABLE)
    if diff:
        raise runconfig.ConfigError(
            f"--workdir={workdir!r} holds a run with another config ({'; '.join(diff[:5])}); "
            "use a new workdir, or the same config to resume"
        )
