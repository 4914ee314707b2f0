"""report.md / report.html say what ran and show success ± s.e. per round, modes and costs."""

import importlib.util
import math
import os

import numpy as np
import pytest

from coda.loop import report
from coda.loop.evaluation import learning

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


def _row(r, **outcomes):
    suites = {}
    for name, o in outcomes.items():
        s = _suite(o.count("1"), len(o))
        suites[name] = {**s, "suite": name, "outcomes": o}
    ood = "".join(o for n, o in outcomes.items() if n.startswith("ood"))
    row = {"round": r, "suites": suites}
    if ood:
        row["ood"] = {**_suite(ood.count("1"), len(ood)), "outcomes": ood}
    return row


def test_learning_compares_round_0_with_the_later_rounds_episode_by_episode():
    hist = [
        _row(0, id="0011", ood_layouts="0000"),
        {"round": 1},  # a round without evaluation is skipped
        _row(2, id="0000", ood_layouts="0000"),
        _row(3, id="1111", ood_layouts="1111"),
        _row(4, id="0111", ood_layouts="1111"),
    ]
    lr = learning(hist)
    assert (lr["start"], lr["late"]) == (0, [3, 4])  # the later half of the evaluated rounds
    x = lr["suites"]["id"]
    d = np.array([0.5, 1.0, 0.0, 0.0])  # per episode: late rate - round-0 outcome
    assert x["paired"] and x["n"] == 4
    assert x["start"] == pytest.approx(0.5, abs=1e-12)
    assert x["late"] == pytest.approx(0.875, abs=1e-12)
    assert x["delta"] == pytest.approx(d.mean(), abs=1e-12)
    assert x["se"] == pytest.approx(d.std(ddof=1) / 2, abs=1e-12)
    assert x["reading"] == "flat"  # z = 1.6
    assert lr["suites"]["ood_layouts"]["reading"] == "up"  # every episode 0 -> 1
    assert lr["suites"]["ood"]["delta"] == pytest.approx(1.0, abs=1e-12)
    down = learning([_row(0, id="1" * 50), _row(1, id="0" * 50)])
    assert down["suites"]["id"]["reading"] == "down"
    assert learning(hist, late=[2])["suites"]["id"]["delta"] == pytest.approx(-0.5, abs=1e-12)
    with pytest.raises(ValueError, match="no evaluated round"):
        learning(hist, late=[1])
    assert learning(hist[:1]) == {}


def test_learning_without_outcomes_is_the_unpaired_binomial_difference():
    hist = [{"round": r, "suites": {"id": _suite(k, 4)}} for r, k in ((0, 2), (1, 4), (2, 3))]
    x = learning(hist)["suites"]["id"]
    assert not x["paired"] and x["late"] == pytest.approx(0.75, abs=1e-12)
    assert x["se"] == pytest.approx(math.sqrt(0.25 / 4 + 0.75 * 0.25 / 4), abs=1e-12)


def test_report_says_whether_the_policy_learned():
    cfg = _config()
    s = _summary(cfg)
    s["history"] = [_row(0, id="0" * 40 + "1" * 24), _row(1, id="1" * 64)]
    s["learning"] = learning(s["history"])
    md = report.markdown(s, {}, [], cfg)
    assert "## Did the policy learn? Round 0 against round 1 pooled" in md
    assert "paired by episode" in md
    assert "| id | 37.5 | 100.0 | +62.5 ± 6.1 | **up** |" in md
    assert report.learning_line(s["learning"]).startswith("learning (round 1 vs round 0): ID +62.5")


def test_validation_tests_show_raw_and_adjusted_p_and_the_rounds_refutations():
    """A corrected test lists its raw p, its adjusted p and that the adjusted p decided; the
    rounds table gives each critic's refuted / tested of that round's tests."""
    cfg = _config()
    s = _summary(cfg)
    held = {"targeted": 3, "control": 4, "n": 8, "p_value": 0.02, "p_adjusted": 0.06}
    held.update(correction="holm", n_tests=3, alpha=0.05, decided_by="p_adjusted")
    s["history"][1]["critique"]["refuted"] = [{"mode": 5, **held}]
    s["history"][1]["critique"]["round_refutations"] = {
        "vlm": {"validated": 0, "refuted": 1, "rate": 1.0},
        "offline": {"validated": 1, "refuted": 0, "rate": 0.0},
    }
    md = report.markdown(s, {}, [], cfg)
    assert "| critiqued | validated | refuted | refuted / tested this round, per critic |" in md
    assert "| 2 | 1 | 1 | offline: 0/1, vlm: 1/1 |" in md
    assert (
        "- round 1, mode 5: targeted 3/8, control 4/8, p = 0.020, Holm-adjusted p = 0.060 over "
        "3 tests → **refuted** (decided by the adjusted p against α = 0.05)"
    ) in md
    # a row from before corrections: the raw p decided
    assert (
        "- round 1, mode 3: targeted 1/8, control 4/8, p = 0.030 → **validated** (decided by "
        "the raw p)" in md
    )
