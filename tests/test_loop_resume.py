"""SIGKILL a smoke run at random points several times; each resume finishes, memory loses and
duplicates nothing, and the final metrics equal an uninterrupted run's (slow: ~4 smoke runs).

The smoke loop's critic, engine and compiler are the offline ones: it makes no LLM calls, so
there is nothing to replay; everything else is replayed from the seeds and the checkpoints.
"""

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = ("scene_programs", "deployments", "diagnoses", "modes", "mode_members", "mode_events")
# wall-clock fields differ between runs; everything else must match exactly
VOLATILE = ("seconds", "budget/rollout_seconds", "budget/update_seconds")


def _cmd(workdir):
    return [
        sys.executable,
        "-m",
        "launch.main",
        "--config=configs/coda.py:smoke",
        "--config.loop.rounds=1",
        f"--workdir={workdir}",
    ]


def _env():
    env = dict(os.environ)
    env.setdefault(
        "CODA_CACHE_DIR", os.environ.get("CODA_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
    )
    return env


def _metrics(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def _memory(workdir):
    db = sqlite3.connect(os.path.join(workdir, "memory.sqlite"))
    counts = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    per_round = db.execute(
        "SELECT round, COUNT(*) FROM scene_programs GROUP BY round ORDER BY round"
    ).fetchall()
    modes = db.execute(
        "SELECT id, factor, phase, status, n_trials, n_successes FROM modes"
    ).fetchall()
    db.close()
    return counts, per_round, modes


@pytest.mark.slow
@pytest.mark.timeout(5400)
def test_sigkill_at_random_points_then_resume_equals_an_uninterrupted_run(tmp_path):
    ref = tmp_path / "reference"
    subprocess.run(_cmd(ref), cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=1800)
    work = tmp_path / "killed"
    rng = random.Random(0)
    kills = 0
    # kill points by progress, not by a fraction of the reference's time (a warm compile cache
    # makes later runs much faster than the reference): during round 0, a few seconds into
    # round 1, and early in the resumed run
    round0 = os.path.join("checkpoints", "round_0000", "COMPLETE")
    for marker, (lo, hi) in (("config.json", (1, 6)), (round0, (1, 6)), (round0, (2, 12))):
        p = subprocess.Popen(_cmd(work), cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)  # fmt: skip
        while p.poll() is None and not (work / marker).exists():
            time.sleep(0.2)
        time.sleep(rng.uniform(lo, hi))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
    assert kills >= 2, "the run finished before it could be killed; the test measured nothing"
    out = subprocess.run(_cmd(work), cwd=ROOT, env=_env(), capture_output=True, text=True,
                         timeout=1800)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert _metrics(work) == _metrics(ref)
    assert _memory(work) == _memory(ref)  # nothing lost, nothing duplicated
    ref_sum = json.loads((ref / "summary.json").read_text())
    got = json.loads((work / "summary.json").read_text())
    assert got["headline"] == ref_sum["headline"]


def test_a_run_s_acting_policy_path_is_resolved_or_refused_in_one_line(tmp_path):
    """`--config.policy=<run folder | round folder>`: file checks only (no JAX, no weights)."""
    from coda.loop import acting

    run = tmp_path / "run"
    with pytest.raises(ValueError, match="neither planner | random | hold nor an existing run"):
        acting.resolve(str(run))
    run.mkdir()
    with pytest.raises(ValueError, match="is not a run folder \\(no config.json\\)"):
        acting.resolve(str(run))
    (run / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds no complete round under checkpoints/"):
        acting.resolve(str(run))
    for r in (0, 3):
        (run / "checkpoints" / f"round_{r:04d}").mkdir(parents=True)
        (run / "checkpoints" / f"round_{r:04d}" / "COMPLETE").write_text("ok\n")
    (run / "checkpoints" / "round_0004.tmp").mkdir()  # an interrupted save is not a round
    assert acting.resolve(str(run)) == (str(run), 3)
    assert acting.resolve(str(run / "checkpoints" / "round_0000")) == (str(run), 0)
    with pytest.raises(ValueError, match="is not a complete round of"):
        acting.resolve(str(run / "checkpoints" / "round_0002"))
