"""``experiments/evidence.sh``, the evidence study's runner: which phases it
starts, in which order, how many copies, and where it starts for ``many``,
``long`` or
``EVIDENCE_FROM``. A stand-in ``python`` on the PATH records each call instead
of training (the phases themselves: tests/test_studies_quick.py)."""

import os
import subprocess

import pytest

from tests.helpers import ROOT

SCRIPT = os.path.join(ROOT, "experiments", "evidence.sh")


def calls(tmp_path, *args, **env):
  """The ``--study`` arguments of the sweeps the script starts, in order."""
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir(exist_ok=True)
  log = tmp_path / "calls.txt"
  fake = bin_dir / "python"
  fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
  fake.chmod(0o755)
  path = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
  proc = subprocess.run(
      [SCRIPT, *args], cwd=ROOT, capture_output=True, text=True, timeout=120,
      env=dict(os.environ, PATH=path, **env),
  )
  if proc.returncode:
    return proc
  lines = log.read_text().split("\n") if log.exists() else []
  return [l.split("configs/studies/evidence.py:")[1] for l in lines if l]


def test_every_phase_in_order_two_copies_each(tmp_path):
  out = calls(tmp_path, "base", "python", "quick")
  phases = ("regime", "coarse", "tune", "design", "report")
  assert out == [f"{p},base,python,quick" for p in phases for _ in range(2)]


@pytest.mark.parametrize("regime", ["many", "long"])
def test_pruned_regimes_start_at_coarse_and_evidence_from_skips_phases(tmp_path, regime):
  from configs.studies import evidence

  assert calls(tmp_path, regime, "python", EVIDENCE_COPIES="1") == [
      f"{p},{regime},python" for p in evidence.regime_phases(regime)
  ]
  assert evidence.regime_phases(regime)[0] == "coarse"
  (tmp_path / "calls.txt").unlink()
  assert calls(tmp_path, "base", "python", EVIDENCE_FROM="report", EVIDENCE_COPIES="1") == [
      "report,base,python"
  ]


@pytest.mark.parametrize("args, env, message", [
    (("base",), {}, "corpus"),
    (("base", "python"), {"EVIDENCE_FROM": "nope"}, "unknown phase nope"),
])
def test_bad_arguments_fail_with_a_message(tmp_path, args, env, message):
  proc = calls(tmp_path, *args, **env)
  assert proc.returncode != 0 and message in proc.stderr
