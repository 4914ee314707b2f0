"""Both notebooks run from Jupyter's working directory (notebooks/), at smoke scale: the quick
start runs a one-round smoke loop, the memory explorer reads that run folder's memory."""

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
