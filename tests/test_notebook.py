"""notebooks/quickstart.ipynb runs headlessly, top to bottom, with the tiny config."""

import os

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.slow


def test_quickstart_notebook_executes(tmp_path, monkeypatch):
  nb = nbformat.read(os.path.join(ROOT, "notebooks", "quickstart.ipynb"), as_version=4)
  # The kernel inherits these: the tiny size, a fresh workdir, the test's data dir.
  monkeypatch.setenv("QUICKSTART_SIZE", "tiny")
  monkeypatch.setenv("QUICKSTART_WORKDIR", str(tmp_path / "runs"))
  monkeypatch.setenv("MPLBACKEND", "Agg")
  NotebookClient(
      nb,
      timeout=300,
      kernel_name="python3",
      resources={"metadata": {"path": os.path.join(ROOT, "notebooks")}},
  ).execute()
  outputs = "".join(
      out.get("text", "")
      for cell in nb.cells
      if cell.cell_type == "code"
      for out in cell.outputs
  )
  assert "final eval" in outputs and "bits/byte" in outputs and "fewer syncs" in outputs
  for name in ("autoloco", "diloco"):
    assert os.path.exists(tmp_path / "runs" / name / "metrics.jsonl")
  errors = [
      out
      for cell in nb.cells
      if cell.cell_type == "code"
      for out in cell.outputs
      if out.output_type == "error"
  ]
  assert not errors
