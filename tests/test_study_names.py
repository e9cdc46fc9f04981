"""Every study variant keeps its run names (``experiments/study_names.py``): a
change of code or config that renamed them would orphan the finished runs in
``runs/studies`` and the committed run records (``docs/runs``)."""

import json
import os
import subprocess
import sys

from tests.helpers import ROOT

COMMITTED = os.path.join(ROOT, "tests", "data", "study_run_names.json")


def test_every_study_variant_keeps_its_run_names(tmp_path):
  out = tmp_path / "names.json"
  subprocess.run(
      [sys.executable, "-m", "experiments.study_names", f"--out={out}"],
      cwd=ROOT,
      check=True,
  )
  with open(COMMITTED) as f:
    committed = json.load(f)
  with open(out) as f:
    now = json.load(f)
  assert sorted(now) == sorted(committed)
  changed = [k for k in committed if now[k] != committed[k]]
  assert not changed, f"run names changed in {changed}"
  assert sum(v["runs"] for v in now.values()) > 1000
