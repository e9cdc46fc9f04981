"""``experiments/phases.sh``, a study's runner: which sweeps it starts, in which
order, how many copies, and that a failed phase stops it. A stand-in ``python``
records each call instead of training. Every ``experiments/phases.sh`` line of a
config's docstring starts only sweeps that the docstring also shows as
``python -m experiments.sweep`` commands, which tests/test_study_modules.py runs
at their quick size."""

import ast
import glob
import os
import re
import shlex

import pytest

from tests.helpers import ROOT, script_calls

SCRIPT = "experiments/phases.sh"
G1 = "configs/studies/gossip_g1.py"


def studies(lines):
  """The ``--study`` argument of each recorded ``python -m experiments.sweep``."""
  out = []
  for line in lines:
    args = shlex.split(line)
    assert args[:2] == ["-m", "experiments.sweep"], line
    out.append(args[args.index("--study") + 1])
  return out


def test_each_phase_in_order_by_two_copies(tmp_path):
  out = script_calls(tmp_path, SCRIPT, G1, "coarse,quick", "tune,quick")
  assert studies(out) == [f"{G1}:{p}" for p in ("coarse,quick", "tune,quick") for _ in range(2)]


def test_phases_copies_sets_the_sweeps_per_phase(tmp_path):
  out = script_calls(tmp_path, SCRIPT, G1, "coarse", "tune", PHASES_COPIES="1")
  assert studies(out) == [f"{G1}:coarse", f"{G1}:tune"]


def test_a_failed_sweep_stops_before_the_next_phase(tmp_path):
  fail_coarse = 'echo "$@" >> {log}; case "$*" in *coarse*) exit 3;; esac'
  proc = script_calls(tmp_path, SCRIPT, G1, "coarse", "tune", fake=fail_coarse)
  assert proc.returncode != 0
  assert "tune" not in (tmp_path / "calls.txt").read_text()


@pytest.mark.parametrize(
    "args, message",
    [((), "usage"), ((G1,), "no phase"), (("configs/studies/nope.py", "coarse"), "no study file")],
)
def test_bad_arguments_fail_with_a_message(tmp_path, args, message):
  proc = script_calls(tmp_path, SCRIPT, *args)
  assert proc.returncode != 0 and message in proc.stderr


def _documented():
  """``(config file, [phase arg, ...])`` of each ``experiments/phases.sh`` line of
  the configs' docstrings, with the ``--study`` args of their sweep commands."""
  found = []
  for path in sorted(glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)):
    with open(path) as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
    doc = re.sub(r"\\\n\s*", " ", doc)
    sweeps = set(re.findall(r"python -m experiments\.sweep --study (\S+)", doc))
    for line in re.findall(r"experiments/phases\.sh ([^`\n]+)", doc):
      study, *phases = shlex.split(line)
      found.append((os.path.relpath(path, ROOT), study, phases, sweeps))
  return found


def test_documented_phase_lines_start_the_documented_sweeps():
  documented = _documented()
  assert {where for where, *_ in documented} >= {G1, "configs/studies/noloco_n1.py"}
  for where, study, phases, sweeps in documented:
    assert study == where, f"{where}: its phases.sh line runs another study, {study}"
    assert os.path.exists(os.path.join(ROOT, study))
    for phase in phases:
      assert f"{study}:{phase}" in sweeps, (
          f"{where}: phases.sh runs {study}:{phase}, which its docstring does not "
          "show as a sweep command (so no quick test covers it)"
      )
