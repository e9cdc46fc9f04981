"""Every command the README and the config docstrings show runs, at its smallest
size: a moved function breaks CI, not a user.

Commands are read from the README's code and from each config file's docstring.
Each entry point has one rule for its smallest size (:data:`SMALLEST`); a command
whose module has no rule fails :func:`test_every_documented_command_has_a_rule`,
so a new documented command cannot go untested. Study commands
(``experiments.sweep``) run in ``tests/test_study_modules.py``, on the quick
studies that file runs once on synthetic runs; ``experiments.time_to_target``'s
in ``tests/test_studies_quick.py``, on runs trained for real; PLoRA's in
``projects/plora/tests``.
"""

import ast
import glob
import json
import math
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.helpers import ROOT

#: Modules whose commands another test file runs at their smallest size.
ELSEWHERE = {
    "experiments.sweep": "tests/test_study_modules.py",
    "experiments.time_to_target": "tests/test_studies_quick.py",
    "experiments.results_page": "tests/test_results_page.py",
    "projects.plora.sweep": "projects/plora/tests/test_plora_commands.py",
    # The planner's docstring and docs/planning.md examples.
    "experiments.plan": "tests/test_plan.py",
    # The README's set-up (``python3 -m venv``) and test command: what CI runs.
    "pytest": ".ci/run",
    "venv": ".ci/run",
}


def _python_commands(text: str) -> list[str]:
  """``python -m ...`` commands in ``text``: continuation lines joined, shell
  prefixes (``... &&``) and trailing comments dropped."""
  text = re.sub(r"\\\n\s*", " ", text)
  found = []
  for line in text.splitlines():
    for part in line.split("&&"):
      match = re.search(r"python3? -m [^`#]+", part)
      if match:
        found.append(match.group(0).strip().rstrip("`").strip())
  return found


def documented_commands() -> list[tuple[str, str]]:
  """``(where, command)`` for each command of the README and the configs."""
  found = []
  with open(os.path.join(ROOT, "README.md")) as f:
    found += [("README.md", c) for c in _python_commands(f.read())]
  for path in sorted(
      glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)
  ):
    with open(path) as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
    where = os.path.relpath(path, ROOT)
    found += [(where, c) for c in _python_commands(doc)]
  return found


def _module(command: str) -> str:
  return shlex.split(command)[2]


def _run_tiny(args: list[str], tmp_path) -> list[str]:
  """``experiments.run`` at its smallest size: the config's ``:tiny`` size, the
  command's overrides, a temporary workdir."""
  out, i = [], 0
  while i < len(args):
    flag, value = (args[i].split("=", 1) + [None])[:2]
    if value is None and flag in ("--config", "--workdir"):
      value, i = args[i + 1], i + 1
    if flag == "--config":
      out.append(f"--config={value.split(':')[0]}:tiny")
    elif flag == "--workdir":
      out.append(f"--workdir={tmp_path / os.path.basename(value)}")
    else:
      out.append(args[i])
    i += 1
  return out


#: Entry point -> its smallest size (a function of the command's arguments).
SMALLEST = {"experiments.run": _run_tiny}


def test_every_documented_command_has_a_rule():
  commands = documented_commands()
  assert len(commands) >= 9, commands  # the README's and every config's command
  for where, command in commands:
    module = _module(command)
    assert (
        module in SMALLEST or module in ELSEWHERE
    ), f"{where}: no test runs `{command}` at its smallest size; add a rule"
  for path in ELSEWHERE.values():
    assert os.path.exists(os.path.join(ROOT, path)), path


RUNS = sorted({c for _, c in documented_commands() if _module(c) == "experiments.run"})


@pytest.mark.slow
@pytest.mark.parametrize("command", RUNS)
def test_documented_run_command_runs(command, tmp_path):
  args = _run_tiny(shlex.split(command)[3:], tmp_path)
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)  # one CPU device, as a user's shell has
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.run", *args, "--config.log.progress=False"],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  workdir = next(a.split("=", 1)[1] for a in args if a.startswith("--workdir="))
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    summary = [json.loads(line) for line in f][-1]
  assert summary["summary"] and math.isfinite(summary["final_eval_bpb"])
  assert summary["inner_compilations"] == 1
