"""`benchmarks/libero_pro_study.py`: the LIBERO-PRO study's table from the registered readouts."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest

_SPEC = importlib.util.spec_from_file_location(
    "libero_pro_study", pathlib.Path(__file__).parents[1] / "benchmarks" / "libero_pro_study.py"
)
LPS = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(LPS)

SUITES = ("id", "ood_layouts", "ood_swap", "ood_tasks", "ood_language", "ood_objects")


def _readout(wins: dict[str, list[int]]) -> dict:
    """A readout of 10-episode suites: `wins[arm][seed]` successes on every suite."""
    arms, outcomes = {}, {}
    for arm, per_seed in wins.items():
        outcomes[arm] = {
            str(s): {k: "1" * w + "0" * (10 - w) for k in SUITES} for s, w in enumerate(per_seed)
        }
        rate = float(np.mean(per_seed)) / 10
        arms[arm] = {"seeds": list(range(len(per_seed))), "success": dict.fromkeys(SUITES, rate)}
    family = {
        "ood_swap: coda_demos − sft": {
            "mean": 0.1, "se": 0.02, "ci": [0.01, 0.19], "p_holm": 0.03
        }
    }  # fmt: skip
    return {"command": "readout", "arms": arms, "outcomes": outcomes, "family": family}


def test_the_table_pairs_standard_libero_by_seed_and_keeps_the_primaries(tmp_path):
    r = _readout({"coda_demos": [6, 7, 8], "sft": [6, 6, 6]})
    res = LPS.study({"libero_spatial": r})["libero_spatial"]
    std = res["standard_vs_bc"]
    np.testing.assert_allclose(std["differences"], [0.0, 0.1, 0.2], atol=1e-9)
    np.testing.assert_allclose(std["mean"], 0.1, atol=1e-9)
    np.testing.assert_allclose(std["se"], 0.1 / np.sqrt(3), atol=1e-9)
    assert std["non_inferior"] is (std["ci"][0] > -LPS.MARGIN)
    assert res["primary"] == r["family"]
    path = tmp_path / "readout.json"
    path.write_text(json.dumps(r))
    LPS.main([f"--readouts=libero_spatial={path}", f"--out={tmp_path / 'study'}"])
    md = (tmp_path / "study.md").read_text()
    assert "| libero_spatial | coda_demos | 3 | 70.0 |" in md
    assert "| libero_spatial | ood_swap: coda_demos − sft | +10.0 | 2.0 | [+1.0, +19.0] |" in md
    assert "60.0 → 70.0 (+10.0 pts, × 1.17)" in md


def test_a_suite_without_the_method_and_a_bad_argument_are_said_plainly(tmp_path):
    res = LPS.study({"libero_goal": _readout({"sft": [3, 4, 5]})})
    assert res["libero_goal"]["standard_vs_bc"] is None
    assert "no coda_demos arm" in LPS.markdown(res, "cmd")
    with pytest.raises(SystemExit, match="is not suite=<an existing readout JSON>"):
        LPS.main([f"--readouts=libero_goal={tmp_path / 'missing.json'}", "--out=x"])
