"""Every study variant keeps its run names (``experiments/study_names.py``): a
change of code or config that renamed them would orphan the finished runs in
``runs/studies`` and the committed run records (``docs/runs``)."""

import json
import os

from experiments import study_names
from tests.helpers import ROOT

COMMITTED = os.path.join(ROOT, "tests", "data", "study_run_names.json")


def test_every_study_variant_keeps_its_run_names(monkeypatch):
  monkeypatch.chdir(ROOT)  # the committed reports, read by relative paths
  with open(COMMITTED) as f:
    committed = json.load(f)
  now = study_names.manifest()
  assert sorted(now) == sorted(committed)
  changed = [k for k in committed if now[k] != committed[k]]
  assert not changed, f"run names changed in {changed}"
  assert sum(v["runs"] for v in now.values()) > 4000
