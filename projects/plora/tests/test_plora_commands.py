"""Every command PLoRA's docstrings show runs, at its smallest size.

The commands are read from the docstrings themselves, so a moved module, a
renamed flag or a function that moved elsewhere in the core breaks this test,
not a user.
"""

import ast
import glob
import json
import math
import os
import re
import subprocess
import sys

import pytest

from projects.plora import report
from tests.helpers import ROOT

PLORA = os.path.join(ROOT, "projects", "plora")
CONFIG = "projects/plora/config.py"


def documented_commands() -> list[str]:
  """The ``python -m ...`` lines of every module docstring under projects/plora."""
  commands = []
  for path in sorted(glob.glob(os.path.join(PLORA, "*.py"))):
    with open(path) as f:
      doc = ast.get_docstring(ast.parse(f.read())) or ""
    for line in doc.splitlines():
      if line.strip().startswith("python -m "):
        commands.append(line.strip())
  return list(dict.fromkeys(commands))


def smallest(command: str, tmp: str) -> list[str]:
  """The command at its smallest size, writing only under ``tmp``.

  ``--config X`` becomes ``--config X:tiny``, ``--workdir`` points under ``tmp``
  and ``--docs_dir tmp`` is added, so ``docs/`` is never overwritten.
  """
  args = command.split()
  assert args[:2] == ["python", "-m"], command
  for i, arg in enumerate(args):
    if args[i - 1] == "--config":
      args[i] = arg.split(":")[0] + ":tiny"
    if args[i - 1] == "--workdir":
      args[i] = os.path.join(tmp, "workdir")
  assert "--docs_dir" not in args, command
  return [sys.executable] + args[1:] + ["--docs_dir", tmp]


def test_docstrings_show_the_sweep_and_its_renderer():
  commands = documented_commands()
  runs = [c for c in commands if "--config" in c]
  assert runs and all(f"--config {CONFIG}" in c for c in runs), commands
  assert any("--render_only" in c for c in commands), commands
  for c in commands:
    module = c.split()[2]
    assert os.path.exists(os.path.join(ROOT, *module.split(".")) + ".py"), c


def test_docs_plora_md_renders_from_its_json():
  """``docs/plora.md`` is what the renderer makes of ``docs/plora.json``."""
  with open(os.path.join(ROOT, "docs", "plora.json")) as f:
    out = json.load(f)
  with open(os.path.join(ROOT, "docs", "plora.md")) as f:
    assert f.read() == report.render(out)


@pytest.mark.slow
def test_every_documented_command_runs_at_tiny(tmp_path):
  # Runs before renders: --render_only reads the JSON the sweep wrote.
  commands = sorted(documented_commands(), key=lambda c: "--render_only" in c)
  md = tmp_path / "plora.md"
  for command in commands:
    if "--render_only" in command:
      first = md.read_text()
      md.unlink()
    out = subprocess.run(
        smallest(command, str(tmp_path)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert out.returncode == 0, f"{command}\n{out.stderr[-4000:]}"
  assert md.read_text() == first

  out = json.loads((tmp_path / "plora.json").read_text())
  assert out["meta"]["command"].startswith("python -m projects.plora.sweep --config")
  assert list((tmp_path / "workdir").glob("base_*.npz"))
  names = [c["name"] for c in out["configs"]]
  assert len(names) == len(out["runs"]["packed"]["eval_loss"]) > 1
  assert all(name in md.read_text() for name in names)
  base = out["base"]["ft_eval_loss"]
  assert math.isfinite(base) and base < math.log(256)
  for key in ("sequential", "packed"):
    run = out["runs"][key]
    assert run["train_s"] > 0 and run["tokens_per_s"] > 0
    for name in names:
      # A few steps at a small lr move the loss from the base's, but only a
      # little (at :tiny by 0.0016-0.0069 nats/byte); an adapter that did not
      # train would leave it where it was (LoRA's B starts at zero).
      assert 1e-4 < abs(run["eval_loss"][name] - base) < 0.1, (key, name)
  # Packed training is each job's own run, up to float32 summation order.
  assert out["equality"]["max_eval_loss_diff"] < 1e-4
  assert max(out["equality"]["max_param_diff"].values()) < 1e-3
  assert all(r > 0 for r in out["ratios"].values())
  assert re.search(r"PLoRA plan: \d+ configs", out["plans"]["pad"])
