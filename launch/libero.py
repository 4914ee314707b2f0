"""LIBERO evaluation entry point: `python -m launch.libero --config=configs/libero.py
--config.suite=libero_spatial --config.perturbation=swap --config.policy=random --workdir=runs/l`
-> per-task and per-suite success over the fixed initial states (results.json, results.md) and
agent-view GIFs of each task's first episodes (gifs/; `--config.gifs=0` turns them off).

The robot is LIBERO's Panda with LIBERO's protocol (coda.libero.evaluate_panda): `planner`,
`hold`, `random`, or an openpi pi0.5 checkpoint, `--config.policy=openpi:<dir>` (README:
"Evaluating an openpi pi0.5 LIBERO checkpoint"). `--config.robot=floating` evaluates our
floating gripper (coda.libero.evaluate), which also takes a trained CoDA run,
`--config.policy=<run folder>` (a `launch.main` workdir's last complete round, or
`<run>/checkpoints/round_000k`). A misspelt suite, perturbation, robot or policy, a policy the
robot does not take, a task id or initial-state offset out of range, an incomplete checkpoint:
one line naming the valid values or the missing files, no traceback; so is a checkpoint whose
files are there but unreadable (corrupt params, another model's, a bad tokenizer). On the Panda,
the same command on the same workdir goes on after the last finished batch (`units.jsonl`); a
workdir holding another evaluation is refused in one line."""

from __future__ import annotations

import json
import pathlib
import sys

from absl import app, flags
from ml_collections import config_flags

from launch import cli

_DEFAULT_CONFIG = "configs/libero.py"
if __name__ == "__main__":  # a typo in the config arguments: one line, before JAX
    cli.check_argv(sys.argv, _DEFAULT_CONFIG)
_CONFIG = config_flags.DEFINE_config_file(
    "config", _DEFAULT_CONFIG, "LIBERO evaluation config.", lock_config=True
)
_WORKDIR = flags.DEFINE_string("workdir", "runs/libero", "Run folder (created if missing).")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from coda.libero.evaluate import IncompatibleRun, config_problems, evaluate, is_run_path
    from coda.loop import acting

    cfg = _CONFIG.value
    bad = config_problems(cfg)
    trained = None
    if is_run_path(cfg.policy):
        try:
            acting.resolve(cfg.policy)
        except ValueError as e:
            bad.append(str(e))
    if bad:
        raise app.UsageError("; ".join(bad))
    if cfg.robot == "panda":
        from coda.libero import evaluate_panda

        try:
            res = evaluate_panda.evaluate(cfg, _WORKDIR.value)
        except evaluate_panda.US.OtherEvaluation as e:  # the folder holds another evaluation
            raise app.UsageError(str(e)) from None
        except evaluate_panda.OP.CheckpointError as e:  # files there, but not a usable policy
            raise app.UsageError(str(e)) from None
    else:
        if is_run_path(cfg.policy):
            trained = acting.load(cfg.policy)
        try:
            res = evaluate(cfg, _WORKDIR.value, trained)
        except IncompatibleRun as e:
            raise app.UsageError(str(e)) from None
    res["command"] = " ".join(["python -m launch.libero"] + sys.argv[1:])
    pathlib.Path(_WORKDIR.value, "results.json").write_text(json.dumps(res, indent=1))
    summary = {k: v for k, v in res.items() if k not in ("per_task", "per_episode")}
    with open(f"{_WORKDIR.value}/config.json", "w") as f:
        f.write(cfg.to_json(indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    app.run(main)
