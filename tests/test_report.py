"""report.md / report.html say what ran and show success ± s.e. per round, modes and costs."""

import importlib.util
import math
import os

import pytest

from coda import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(strategy: str = "coda"):
    spec = importlib.util.spec_from_file_location("coda_cfg", os.path.join(ROOT, "configs/coda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config("smoke", strategy=strategy)


def _suite(k, n):
    rate = k / n
    return {
        "suite": "x",
        "n": n,
        "successes": k,
        "rate": rate,
        "se": math.sqrt(rate * (1 - rate) / n),
    }


def _summary(cfg):
    budgets = {"env_steps": 5000, "scenes_accepted": 10, "rollout_seconds": 36.0,
               "update_seconds": 36.0}  # fmt: skip
    hist = [
        {
            "round": 0,
            "suites": {"id": _suite(2, 8), "ood_layouts": _suite(1, 8)},
            "ood": _suite(1, 8),
            "untrained_id": _suite(0, 8),
        },  # fmt: skip
        {
            "round": 1,
            "suites": {"id": _suite(4, 8), "ood_layouts": _suite(3, 8)},
            "ood": _suite(3, 8),
            "allocation": {"3": 4, "novel": 2},
            "accepted": 6,
            "generated": 7,
            "verification_pass_rate": 6 / 7,
            "coverage_entropy": 0.5,
            "targeting_precision": 0.25,
            "critique": {
                "critiqued": 2,
                "validated": [{"mode": 3, "targeted": 1, "control": 4, "n": 8, "p_value": 0.03}],
                "refuted": [],
            },  # fmt: skip
            "refutation_rate": {"offline": 0.0},
            "mode_table": [
                {
                    "id": 3,
                    "factor": "spatial",
                    "phase": "grasp",
                    "cause": "blocked",
                    "status": "validated",
                    "hardness": 0.5,
                    "lp": 0.1,
                    "diagnoses": 2,
                    "trials": 6,
                }
            ],  # fmt: skip
        },
    ]
    return {
        "what_ran": report.what_ran(cfg),
        "history": hist,
        "stopped": "1 rounds done",
        "wall_seconds": 12.0,
        "backend": "native",
        "costs": report.costs(budgets, None, accelerator=False),
    }


def test_markdown_states_what_ran_success_modes_and_costs():
    cfg = _config()
    md = report.markdown(_summary(cfg), {"success": "plots/success.png"}, [], cfg)
    head = md.split("## Success per round")[0]
    assert "Learned policy: **trained**" in head and "Critic: offline" in head
    assert "| 1 | 50.0 ± 17.7 (n=8) | 37.5 ± 17.1 (n=8) | 37.5 ± 17.1 (n=8) |" in md
    assert "Untrained policy on ID before BC (round 0): 0.0 ± 0.0 (n=8)" in md
    assert "| 3 | spatial | grasp | blocked | validated | 0.500 |" in md
    assert "mode 3: targeted 1/8, control 4/8, p = 0.030" in md
    assert "none (offline critic, engine and compiler: no LLM calls)" in md
    html = report.to_html(md, "t")
    assert "<table>" in html and "<img alt='success' src='plots/success.png'>" in html


def test_zero_shot_report_says_the_policy_was_not_trained():
    cfg = _config("zero_shot")
    md = report.markdown(_summary(cfg), {}, [], cfg)
    assert "Learned policy: **not trained (start policy)**" in md


def test_costs_are_per_thousand_accepted_environments():
    c = report.costs({"env_steps": 5000, "scenes_accepted": 10, "rollout_seconds": 1800.0,
                      "update_seconds": 1800.0}, {"critic": {"tokens": 100, "usd": 0.5}}, True)  # fmt: skip
    assert c["per_1000_accepted"]["env_steps"] == pytest.approx(500_000, abs=1e-6)
    assert c["per_1000_accepted"]["llm_tokens"] == pytest.approx(10_000, abs=1e-6)
    assert c["accelerator_hours"] == pytest.approx(1.0, abs=1e-9)
    assert c["sim_hours"] == pytest.approx(5000 * 0.004 / 3600, abs=1e-12)
