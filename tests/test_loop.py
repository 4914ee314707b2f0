"""The smoke loop once (module fixture), several tests reading its run folder; resume loads it.

One loop run is shared by every test here (the default suite's budget: see tests/conftest.py).
"""

import importlib.util
import json
import os
import sqlite3

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the module fixture's cold smoke loop took 761 s on a 2-core machine shared by 5 jobs (load ~16),
# 94 s on a fresh clone of an idle one; slow-marked to keep `make test` inside its 10 minutes
# (10:45 with it): tests/test_notebook.py runs the same smoke loop end to end in the default suite
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def smoke_config(strategy: str = "coda", **loop):
    path = os.path.join(ROOT, "configs", "coda.py")
    spec = importlib.util.spec_from_file_location("coda_cfg_loop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cfg = mod.get_config("smoke", strategy=strategy)
    for k, v in loop.items():
        cfg.loop[k] = v
    return cfg


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    from coda import loop

    workdir = str(tmp_path_factory.mktemp("smoke_run"))
    cfg = smoke_config(rounds=1)  # one round after round 0: the default suite's budget
    summary = loop.run(cfg, workdir)
    return cfg, workdir, summary


def _rows(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_every_round_is_evaluated_on_id_and_ood_with_standard_errors(smoke_run):
    cfg, workdir, summary = smoke_run
    rows = _rows(workdir)
    assert [r["round"] for r in rows] == list(range(cfg.loop.rounds + 1))
    for r in rows:
        for suite in cfg.eval.suites:
            assert 0.0 <= r[f"success/{suite}"] <= 1.0
            assert r[f"se/{suite}"] >= 0.0
        assert "success/ood" in r
    assert summary["history"][0]["untrained_id"]["n"] == cfg.eval.episodes
    assert summary["stopped"]
    # suites are fixed: saved once, the same episodes every round
    suites = json.load(open(os.path.join(workdir, "suites.json")))
    assert set(suites) == set(cfg.eval.suites)
    assert all(len(s["programs"]) == len(s["seeds"]) for s in suites.values())


def test_rounds_run_the_loop_steps_and_record_them(smoke_run):
    cfg, workdir, summary = smoke_run
    later = summary["history"][1:]
    assert later, "no round after round 0"
    for h in later:
        assert h["accepted"] > 0 and 0.0 <= h["verification_pass_rate"] <= 1.0
        # scenes of a held-out (ood_tasks) task are dropped before any rollout
        used = h["accepted"] - h["heldout_tasks_dropped"]
        assert h["rollouts"] == used * cfg.loop.rollouts_per_variant
        assert h["transitions"] > 0
        assert h["update"]["blocks"] >= 1
        assert sum(h["allocation"].values()) == cfg.loop.budget
    b = summary["history"][-1]["budgets"]
    assert b["critic_updates"] == cfg.loop.critic_updates * sum(
        h["update"]["blocks"] for h in later
    )
    assert b["policy_updates"] >= cfg.loop.bc_steps
    db = sqlite3.connect(os.path.join(workdir, "memory.sqlite"))
    n_dep = db.execute("SELECT COUNT(*) FROM deployments").fetchone()[0]
    used = sum(h["accepted"] - h["heldout_tasks_dropped"] for h in later)
    assert n_dep == used  # one deployment per collected scene


def test_report_plots_costs_and_tensorboard_are_written(smoke_run):
    cfg, workdir, summary = smoke_run
    md = open(os.path.join(workdir, "report.md")).read()
    assert "## Success per round (ID / OOD" in md and "## Costs" in md and "## Modes" in md
    assert "<table>" in open(os.path.join(workdir, "report.html")).read()
    assert os.path.exists(os.path.join(workdir, "plots", "success.png"))
    assert os.path.exists(os.path.join(workdir, "plots", "allocation.png"))
    c = json.load(open(os.path.join(workdir, "costs.json")))
    assert c["env_steps"] == summary["history"][-1]["budgets"]["env_steps"] > 0
    assert c["per_1000_accepted"]["env_steps"] == pytest.approx(
        c["env_steps"] * 1000 / c["accepted_environments"], abs=1e-6
    )
    assert any(f.startswith("events") for f in os.listdir(os.path.join(workdir, "tb")))
    # per-episode outcomes reach the history, so the learning section is paired by episode
    r0 = summary["history"][0]["suites"]["id"]
    assert len(r0["outcomes"]) == r0["n"] and r0["outcomes"].count("1") == r0["successes"]
    lr = summary["learning"]
    assert lr["start"] == 0 and lr["late"] and all(x["paired"] for x in lr["suites"].values())
    assert "## Did the policy learn? Round 0 against" in md and "learning (" in summary["headline"]


def test_resume_of_a_finished_run_changes_nothing(smoke_run):
    from coda import loop

    cfg, workdir, summary = smoke_run
    before = _rows(workdir)
    db = sqlite3.connect(os.path.join(workdir, "memory.sqlite"))
    counts = {
        t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("scene_programs", "deployments", "diagnoses", "modes")
    }
    db.close()
    again = loop.run(cfg, workdir)
    assert _rows(workdir) == before
    dump = lambda h: json.dumps(h, sort_keys=True, default=str)  # noqa: E731 (NaN-safe equality)
    assert dump(again["history"]) == dump(summary["history"])
    db = sqlite3.connect(os.path.join(workdir, "memory.sqlite"))
    for t, n in counts.items():
        assert db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] == n


def test_a_changed_config_does_not_resume_into_the_run(smoke_run):
    from coda import loop, runconfig

    cfg, workdir, _ = smoke_run
    other = smoke_config(budget=cfg.loop.budget + 1)
    with pytest.raises(runconfig.ConfigError, match="loop.budget"):
        loop.run(other, workdir)


def got_start_rows(summary: dict) -> int:
    return int(summary["history"][0]["demo_rows"])


def test_novel_demos_add_planner_demos_of_the_fresh_scenes(smoke_run, tmp_path):
    """`loop.novel_demos`: the round's fresh scenes get planner demos that join the AWR demo rows
    (the smoke run itself, without it, adds none); round 0 adopted from the smoke run."""
    from coda import loop

    cfg, workdir, summary = smoke_run
    assert "novel" not in summary["history"][1]["update"].get("demo_rows_added", {})
    nd = smoke_config(rounds=1, start_from=workdir, novel_demos=True)
    got = loop.run(nd, str(tmp_path / "nd"))["history"][1]
    fresh = got["kinds"].get("novel", 0)
    up = got["update"]
    assert fresh > 0 and up["demo_rows_added"]["novel"] > 0
    # the new rows are kept beside round 0's and carry their row share of the demo weight
    assert up["demo_rows"]["novel"] == up["demo_rows_added"]["novel"]
    assert up["demo_rows"]["start"] == got_start_rows(summary)
    assert up["shares"]["demos/novel"] > 0
    assert sum(up["shares"].values()) == pytest.approx(1.0, abs=1e-5)
