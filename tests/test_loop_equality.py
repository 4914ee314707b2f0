"""Same config, same seed, same numbers: the smoke run equals its committed record in every
metric of every round and every evaluation episode (a regression pin: re-record it, in its own
commit, when a change is meant to change behaviour). Records are comparable only on a machine
with the same signature (instruction set, library versions: XLA's float rounding follows them),
so there is one record per machine kind (`benchmarks/results/loop_equality_smoke*.json`);
elsewhere the test says which it would need."""

import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = sorted(
    glob.glob(os.path.join(ROOT, "benchmarks", "results", "loop_equality_smoke*.json"))
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # one smoke run: ~100 s idle


def _equality():
    spec = importlib.util.spec_from_file_location(
        "loop_equality", os.path.join(ROOT, "benchmarks", "loop_equality.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["loop_equality"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_smoke_run_equals_its_record_episode_for_episode(tmp_path):
    """The run is the record's command (launch.main, XLA's default optimisation: the suite's
    -O0 flags would change the floats), in a subprocess."""
    eq = _equality()
    records = []
    for path in RECORDS:
        with open(path) as f:
            records.append(json.load(f))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    here = eq.machine(xla_flags="")  # the subprocess below runs without the suite's flags
    mine = [r for r in records if eq.signature(r["machine"]) == eq.signature(here)]
    if not mine:
        made = [eq.signature(r["machine"]) for r in records]
        pytest.skip(
            f"records made on {made}, this machine is {eq.signature(here)}: "
            "record one with benchmarks/loop_equality.py at the current commit"
        )
    want = mine[0]
    workdir = str(tmp_path / "smoke")
    cmd = [sys.executable, "-m", "launch.main", "--config=configs/coda.py:smoke"]
    out = subprocess.run(
        [*cmd, f"--workdir={workdir}"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = eq.record(workdir, "test")
    assert eq.differences(want, got) == []
    assert sum(map(len, got["episodes"].values())) == sum(map(len, want["episodes"].values()))
