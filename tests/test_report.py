"""report.md says plainly which policies ran, so planner success is not read as learning."""

import importlib.util
import os

from coda import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(random_policy: bool):
    spec = importlib.util.spec_from_file_location("coda_cfg", os.path.join(ROOT, "configs/coda.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config("smoke")
    cfg.eval.random_policy = random_policy
    return cfg


def _summary(cfg):
    return {
        "what_ran": report.what_ran(cfg),
        "backend": "native",
        "env_steps": 100,
        "env_steps_per_s": 50.0,
        "wall_seconds": 2.0,
        "verification": {"pass_rate": 1.0, "n": 3, "reasons": {"scale": 0}},
        "families": {"pick_place": {"scenes": 3, "verified": 3, "planner_success": 1.0}},
    }


def test_report_states_what_ran_and_what_did_not(tmp_path):
    cfg = _config(random_policy=True)
    ran = report.what_ran(cfg)
    assert ran["scripted_planner"] and ran["random_policy"] and not ran["learned_policy"]
    text = open(report.write_markdown(_summary(cfg), {}, cfg, str(tmp_path))).read()
    head = text.split("## Verification")[0]  # stated before any number is shown
    assert "## What ran" in head
    assert "Scripted planner" in head and "not a learning result" in head
    assert "Learned policy: not run" in head
    assert "Random policy**: uniform random actions" in head
    assert "Not run: learned policy" in head
    assert "scripted planner (privileged, not learned)" in text


def test_report_says_when_the_random_policy_was_skipped(tmp_path):
    cfg = _config(random_policy=False)
    text = open(report.write_markdown(_summary(cfg), {}, cfg, str(tmp_path))).read()
    assert "Random policy**: not run (`eval.random_policy=False`)" in text
    assert "| pick_place | 3 | 3 | 1.000 | – |" in text
