"""Configs load; the CLI rejects typos; the smoke run writes its summary and report."""

import glob
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def _load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_every_config_loads_with_its_variants(path):
    mod = _load(path)
    for arg in (None, "smoke"):
        cfg = mod.get_config(arg)
        assert cfg.sim.families and cfg.sim.num_chunks > 0
    with pytest.raises(ValueError, match="valid"):
        mod.get_config("nonsense")


def test_cli_rejects_a_misspelt_override(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.main",
            "--config=configs/coda.py:smoke",
            "--config.sim.bakend=mjx",
            f"--workdir={tmp_path}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "bakend" in out.stderr


def test_smoke_run_writes_summary_and_report(tmp_path):
    from coda import loop

    cfg = _load(os.path.join(ROOT, "configs", "coda.py")).get_config("smoke")
    summary = loop.run(cfg, str(tmp_path))
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["verification"]["pass_rate"] == summary["verification"]["pass_rate"]
    assert set(on_disk["verification"]["reasons"]) == {
        "scale",
        "penetration",
        "unsupported",
        "unstable",
    }
    for fam in ("pick_place", "articulated", "put_inside", "stack_or_insert"):
        e = on_disk["families"][fam]
        assert 0.0 <= e["planner_success"] <= 1.0 and 0.0 <= e["random_success"] <= 1.0
        assert e["planner_success"] > e["random_success"]
    assert on_disk["env_steps_per_s"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "Success by ν" in report
    if on_disk["rendering"].startswith("ok"):
        assert glob.glob(str(tmp_path / "frames" / "*.gif"))
        assert "frames/" in report
    assert len((tmp_path / "scenes.jsonl").read_text().splitlines()) == 12
