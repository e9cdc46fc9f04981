"""The committed studies' runs keep their names under today's configs.

A run's directory is named by the hash of its trajectory fields
(``sweep.run_dir``); a field added to the configs must keep every finished run's
name (``config_check.VALUES_BEFORE_THE_FIELD``), or the committed runs would no
longer be found and would silently be trained again. Each evidence report's
``summary.json`` records the directory of every run; the study, rebuilt from
today's configs, must name the same ones.
"""

import glob
import json
import os

import pytest

from configs.studies import evidence
from experiments import engine, sweep
from tests.helpers import ROOT

REPORTS = sorted(
    glob.glob(os.path.join(ROOT, evidence.DOCS_DIR, "*_*", "report", "summary.json"))
)


def test_there_are_committed_reports():
  assert len(REPORTS) >= 5


@pytest.mark.parametrize(
    "path", REPORTS, ids=lambda p: os.path.basename(os.path.dirname(os.path.dirname(p)))
)
def test_committed_runs_keep_their_names(path):
  regime, corpus = os.path.basename(os.path.dirname(os.path.dirname(path))).split("_")
  study = engine.build(evidence, f"report,{regime},{corpus}")
  with open(path) as f:
    recorded = json.load(f)["runs"]
  checked = 0
  for label in study.labels:
    config = study.runs[label].copy_and_resolve_references()
    for run in recorded[label]:
      with config.unlocked():
        config.seed = run["seed"]
      assert os.path.basename(sweep.run_dir("runs", config)) == os.path.basename(
          run["workdir"]
      ), (label, run["seed"])
      checked += 1
  assert checked >= len(study.labels)
