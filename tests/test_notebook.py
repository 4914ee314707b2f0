"""The quick-start notebook runs from Jupyter's working directory (notebooks/), at smoke scale."""

import json
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(ROOT, "notebooks", "coda_quickstart.ipynb")


def _text(cell) -> str:
    out = []
    for o in cell.get("outputs", []):
        out.append(o.get("text", ""))
        out += [str(v) for v in o.get("data", {}).values()]
    return "".join(out)


def test_quickstart_notebook_runs_from_the_notebooks_folder(tmp_path, monkeypatch):
    workdir = tmp_path / "run"
    monkeypatch.setenv("CODA_NOTEBOOK_WORKDIR", str(workdir))
    monkeypatch.setenv("CODA_NOTEBOOK_CONFIG", "smoke")
    monkeypatch.setenv("CODA_NOTEBOOK_FAMILIES", "pick_place,articulated")
    cache = os.environ.get("CODA_JAX_CACHE", os.path.join(ROOT, ".jax_cache"))
    monkeypatch.setenv("CODA_CACHE_DIR", cache)  # the kernel shares the tests' compile cache
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}},  # Jupyter's cwd
    )
    client.execute()  # raises CellExecutionError naming the cell that failed

    summary = json.loads((workdir / "summary.json").read_text())
    assert set(summary["families"]) == {"pick_place", "articulated"}
    assert summary["what_ran"]["learned_policy"] is False
    text = "\n".join(_text(c) for c in nb.cells if c.cell_type == "code")
    assert "CoDA checkout: " + ROOT in text
    assert "Learned policy: not run" in text  # the report is displayed
    assert "put the red cube in the white bowl" in text  # the scene-program cell ran
    assert "Failed to import" not in text and "libtpu" not in text  # no import noise shown
