"""`loop.start_from`: a run adopts another run's round 0 (the SFT start a study shares per seed),
and round 0 survives checkpoint pruning so that it can be adopted later."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from coda import runconfig
from coda.loop import checkpoint as ckpt
from coda.loop.compat import START_FILES, adopt_start
from coda.loop.strategies import get_strategy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def smoke_config(strategy: str = "coda"):
    path = os.path.join(ROOT, "configs", "coda.py")
    spec = importlib.util.spec_from_file_location("coda_cfg_start", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config("smoke", strategy=strategy)


def _source(tmp_path, strategy: str = "coda"):
    """A run folder with a complete round 0 (file contents are markers, not real artifacts)."""
    src = tmp_path / "src"
    r0 = ckpt.round_dir(str(src), 0)
    os.makedirs(r0)
    for name in ("state.json", "extras.npz", ckpt.MARKER):
        with open(os.path.join(r0, name), "w") as f:
            f.write(f"round0 {name}")
    for name in START_FILES:
        (src / name).write_text(f"source {name}")
    (src / "config.json").write_text(smoke_config(strategy).to_json_best_effort())
    return str(src)


def test_adopts_round_0_of_a_run_that_differs_only_in_strategy(tmp_path):
    src = _source(tmp_path)
    cfg = smoke_config("sft")
    cfg.loop.start_from = src
    cfg.critic.name = "vlm"  # round 0 calls no critic: free to differ
    cfg.loop.collect_noise_scale = 0.5  # nor collects training rollouts
    cfg.loop.epsilon = 0.5  # nor allocates a round's budget
    cfg.loop.retest_after = 2  # nor validates
    cfg.loop.demo_fraction = 0.75  # only whether it is > 0 (it keeps the demos)
    dst = tmp_path / "dst"
    dst.mkdir()
    adopt_start(cfg, str(dst), get_strategy("sft"))
    for name in START_FILES:
        assert (dst / name).read_text() == f"source {name}"
    assert ckpt.latest_round(str(dst)) == 0
    r0 = ckpt.round_dir(str(dst), 0)
    assert open(os.path.join(r0, "state.json")).read() == "round0 state.json"


def test_refuses_another_round_0_or_a_missing_one(tmp_path):
    src = _source(tmp_path)
    cfg = smoke_config("sft")
    cfg.loop.start_from, cfg.loop.bc_steps = src, 7
    with pytest.raises(runconfig.ConfigError, match=r"ran another round 0 \(loop.bc_steps"):
        adopt_start(cfg, str(tmp_path), get_strategy("sft"))
    cfg.loop.bc_steps = smoke_config().loop.bc_steps
    cfg.loop.demo_fraction = 0.0  # no demos kept at round 0: another start
    with pytest.raises(runconfig.ConfigError, match=r"loop.demo_fraction: 0.5 -> 0.0"):
        adopt_start(cfg, str(tmp_path), get_strategy("sft"))
    cfg = smoke_config("zero_shot")  # no BC at round 0: not the same start
    cfg.loop.start_from = src
    with pytest.raises(runconfig.ConfigError, match="clones the planner"):
        adopt_start(cfg, str(tmp_path), get_strategy("zero_shot"))
    cfg.loop.start_from = str(tmp_path / "nowhere")
    with pytest.raises(runconfig.ConfigError, match="holds no complete round 0"):
        adopt_start(cfg, str(tmp_path), get_strategy("zero_shot"))
    # the config file types the field (a str): a number cannot get in through an override
    with pytest.raises(TypeError, match="start_from"):
        cfg.loop.start_from = 3
    assert "loop.start_from=3 must be a run folder path ('' = none)" in runconfig.problems(
        {"loop": {"start_from": 3}}
    )


def test_pruning_keeps_round_0_and_the_last_two(tmp_path):
    class _Learner:
        def save(self, path):
            os.makedirs(path)

    import sqlite3
    import threading

    from coda.loop.state import RunState

    mem = type("M", (), {"_conn": sqlite3.connect(":memory:"), "_lock": threading.Lock()})()
    for r in range(5):
        ckpt.save_round(str(tmp_path), RunState(round=r), _Learner(), mem)
    assert ckpt.complete_rounds(str(tmp_path)) == [0, 3, 4]
    assert (
        json.loads(open(os.path.join(ckpt.round_dir(str(tmp_path), 4), "state.json")).read())[
            "round"
        ]
        == 4
    )
