"""``python -m experiments.sweep --phases``: a cell's phases in order, each by
``--copies`` sweeps pinned one per core, stopping at a failed phase; and every
``--phases`` command a study's docstring shows names phases the study has."""

import ast
import glob
import os
import re
import shlex

import pytest

from experiments import sweep
from tests.helpers import ROOT

G1 = os.path.join(ROOT, "configs/studies/gossip_g1.py")
EVIDENCE = os.path.join(ROOT, "configs/studies/evidence.py")


def test_phase_args_keep_the_cells_words_in_phase_order():
  assert sweep.phase_args(f"{G1}:quick", ["coarse", "tune"]) == [
      f"{G1}:coarse,quick",
      f"{G1}:tune,quick",
  ]
  # `all`: the phases the cell runs; a pruned regime has no `regime` phase.
  base = sweep.phase_args(f"{EVIDENCE}:base,python", ["all"])
  many = sweep.phase_args(f"{EVIDENCE}:report,many,python", ["all"])
  assert [a.split(":")[1] for a in base] == [
      f"{p},base,python" for p in ("regime", "coarse", "tune", "design", "report")
  ]
  assert [a.split(":")[1].split(",")[0] for a in many] == ["coarse", "tune", "design", "report"]


@pytest.mark.parametrize(
    "spec, phases, message",
    [
        (G1, ["coarse", "bogus"], "not phases"),
        (os.path.join(ROOT, "configs/studies/ablations.py"), ["all"], "has no phases"),
    ],
)
def test_phase_args_refuse_what_a_study_does_not_have(spec, phases, message):
  with pytest.raises(ValueError, match=message):
    sweep.phase_args(spec, phases)


class _Proc:
  """A stand-in ``subprocess.Popen`` that records its command and its pin."""

  calls: list = []

  def __init__(self, cmd, preexec_fn=None):
    self.args = cmd
    self.pinned = preexec_fn is not None
    _Proc.calls.append(self)

  def wait(self):
    return 3 if any("coarse" in a for a in self.args) and _Proc.fail else 0


def test_copies_start_one_pinned_sweep_each_and_a_failure_stops(monkeypatch):
  import subprocess

  monkeypatch.setattr(subprocess, "Popen", _Proc)
  monkeypatch.setattr(sweep.time, "sleep", lambda s: None)
  monkeypatch.setattr(sweep.os, "sched_getaffinity", lambda pid: {0, 1})
  _Proc.calls, _Proc.fail = [], False
  sweep.run_copies(f"{G1}:tune", 2, ["--root=r"])
  assert len(_Proc.calls) == 2 and all(p.pinned for p in _Proc.calls)
  assert all(f"--study={G1}:tune" in p.args and "--root=r" in p.args for p in _Proc.calls)
  _Proc.calls, _Proc.fail = [], True
  with pytest.raises(RuntimeError, match="2 of 2 sweeps"):
    sweep.run_copies(f"{G1}:coarse", 2, [])
  # More copies than cores: none pinned.
  _Proc.calls, _Proc.fail = [], False
  sweep.run_copies(f"{G1}:tune", 3, [])
  assert not any(p.pinned for p in _Proc.calls)


def _documented():
  """``(study file, cell, phases)`` of each ``--phases`` command in the
  docstrings of ``configs/studies``."""
  found = []
  for path in sorted(glob.glob(os.path.join(ROOT, "configs", "studies", "*.py"))):
    with open(path) as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
    doc = re.sub(r"\\\n\s*", " ", doc)
    for line in re.findall(r"python -m experiments\.sweep (--study \S+ --phases [^`\n]+)", doc):
      args = shlex.split(line)
      found.append((path, args[1], args[3].split(",")))
  return found


def test_documented_phase_commands_name_the_studys_phases():
  documented = _documented()
  assert len(documented) >= 6
  for path, spec, phases in documented:
    assert spec.split(":")[0] == os.path.relpath(path, ROOT), spec
    args = sweep.phase_args(os.path.join(ROOT, spec), phases)
    assert len(args) == len(phases) if phases != ["all"] else args
