"""Each study's page (``experiments.study_page``) is generated: the committed
``docs/studies/<name>/README.md`` equals what the command writes from the
committed reports, so its tables cannot drift from the reports."""

import os

import pytest

from experiments import study_page
from tests.helpers import ROOT


@pytest.mark.parametrize("name", study_page.STUDIES)
def test_committed_study_pages_are_the_generated_ones(name, monkeypatch):
  monkeypatch.chdir(ROOT)
  module = __import__(f"configs.studies.{name}", fromlist=["x"])
  with open(os.path.join(study_page.docs_dir(module), "README.md")) as f:
    committed = f.read()
  assert committed == study_page.page(name), (
      f"regenerate: python -m experiments.study_page --study configs/studies/{name}.py"
  )


def test_a_page_shows_at_most_four_plots_and_every_cell(monkeypatch):
  monkeypatch.chdir(ROOT)
  from configs.studies import decentralized, evidence

  assert len(study_page.plots(decentralized)) <= study_page.MAX_PLOTS
  text = study_page.page("evidence")
  for regime, corpus in evidence.CELLS:
    assert f"## {regime}/{corpus}" in text


def test_the_command_writes_the_pages(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  monkeypatch.setattr(study_page, "docs_dir", lambda m: str(tmp_path / m.__name__))
  paths = study_page.write(("heterogeneity",))
  assert paths == [str(tmp_path / "configs.studies.heterogeneity" / "README.md")]
  assert open(paths[0]).read().startswith("# The `heterogeneity` study")
