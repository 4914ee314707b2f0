"""`benchmarks/study_cells.py`: a study's finished cells carried to the repository and back."""

import importlib.util
import json
import pathlib

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "study_cells", pathlib.Path(__file__).parents[1] / "benchmarks" / "study_cells.py"
)
SC = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(SC)


def _cell(root: pathlib.Path, arm: str, seed: int, summary: dict | None, extra=()) -> None:
    cdir = root / arm / f"seed{seed}"
    cdir.mkdir(parents=True)
    (cdir / "config.json").write_text(json.dumps({"arm": arm, "seed": seed}))
    (cdir / "metrics.jsonl").write_text("{}\n")  # a run file that is not carried
    if summary is not None:
        (cdir / "summary.json").write_text(json.dumps(summary))
    for name in extra:
        (cdir / name).write_text("x\n")


def test_finished_cells_go_to_the_store_and_come_back_byte_for_byte(tmp_path):
    """Only cells with a summary and a config are carried (a cell in progress is not), with
    their commit and error files; a cell already stored with the same summary is left alone;
    restoring into a fresh workdir gives `coda.study` the files it reads to skip the cell."""
    run, store, fresh = tmp_path / "run", tmp_path / "store", tmp_path / "fresh"
    _cell(run, "sft", 0, {"rounds": 3}, extra=("commit.txt",))
    _cell(run, "coda", 0, {"rounds": 3}, extra=("error.txt",))
    _cell(run, "coda", 1, None)  # in progress
    assert SC.main(["save", f"--workdir={run}", f"--store={store}"]) == 0
    assert sorted(SC.finished_cells(str(store))) == ["coda/seed0", "sft/seed0"]
    assert not (store / "sft" / "seed0" / "metrics.jsonl").exists()
    assert (store / "sft" / "seed0" / "commit.txt").exists()
    assert (store / "coda" / "seed0" / "error.txt").exists()
    assert SC.copy_cells(str(run), str(store)) == []  # unchanged: nothing copied again
    assert SC.main(["restore", f"--workdir={fresh}", f"--store={store}"]) == 0
    for cell in ("sft/seed0", "coda/seed0"):
        for name in ("summary.json", "config.json"):
            assert (fresh / cell / name).read_bytes() == (run / cell / name).read_bytes()
    assert not (fresh / "coda" / "seed1").exists()


def test_a_missing_argument_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        SC.main(["save", "--workdir=x"])
    assert "--store" in capsys.readouterr().err


def _finish(root: pathlib.Path, cell: str, summary: dict) -> None:
    cdir = root / cell
    cdir.mkdir(parents=True, exist_ok=True)
    (cdir / "config.json").write_text("{}")
    (cdir / "summary.json").write_text(json.dumps(summary))


def test_a_start_other_cells_still_adopt_is_withheld_until_they_finish(tmp_path):
    """The store has no checkpoints, so a restored SFT cell could not give its round 0 to the
    seed's other arms (v6's first restart failed exactly so): it is withheld, and rerun by the
    study, while any arm of its seed has not finished; once they all have, it is restored."""
    config = SC.load_study("configs/libero_study.py:pro_goal")
    work, store = tmp_path / "run", tmp_path / "store"
    _finish(store, "sft/seed0", {"rounds": 3})
    assert SC.starts_needed(config, str(work), str(store)) == [
        "sft/seed0",
        "sft/seed1",
        "sft/seed2",
    ]
    for arm in config.study.strategies:
        _finish(store, f"{arm}/seed0", {"rounds": 3})
    assert SC.starts_needed(config, str(work), str(store)) == ["sft/seed1", "sft/seed2"]
    cfg = "--config=configs/libero_study.py:pro_goal"
    assert SC.main(["restore", f"--workdir={work}", f"--store={store}", cfg]) == 0
    assert (work / "sft" / "seed0" / "summary.json").exists()
    # a round 0 in the workdir is a start the arms can adopt: nothing to withhold for seed 1
    (work / "sft" / "seed1" / "checkpoints" / "round_0000").mkdir(parents=True)
    (work / "sft" / "seed1" / "checkpoints" / "round_0000" / "COMPLETE").write_text("")
    assert SC.starts_needed(config, str(work), str(store)) == ["sft/seed2"]


def test_a_rerun_never_overwrites_the_stored_summary(tmp_path):
    """A withheld start that reruns to another summary is kept beside the stored one."""
    run, store = tmp_path / "run", tmp_path / "store"
    _finish(store, "sft/seed0", {"ood": 0.25})
    _finish(run, "sft/seed0", {"ood": 0.25, "wall_seconds": 9.0, "x": [float("nan")]})
    (store / "sft/seed0/summary.json").write_text(
        json.dumps({"ood": 0.25, "wall_seconds": 7.0, "x": [float("nan")]})
    )
    assert SC.copy_cells(str(run), str(store)) == []  # only its wall clock differs
    _finish(run, "sft/seed0", {"ood": 0.30})
    assert SC.copy_cells(str(run), str(store)) == ["sft/seed0 (rerun differs: summary.rerun.json)"]
    assert json.loads((store / "sft/seed0/summary.json").read_text())["ood"] == 0.25
    assert json.loads((store / "sft/seed0/summary.rerun.json").read_text()) == {"ood": 0.30}
    assert SC.copy_cells(str(run), str(store)) == []
