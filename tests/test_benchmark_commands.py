"""Every command that a benchmark's docstring shows runs, at its smallest size.

The throughput benchmark (``--quick``, ``--render_only``), ``xla_options
--quick`` and ``device_check.sh --dry_run`` have their own test files; this one
runs the rest as a user would, each on a ``:tiny`` config, and checks the JSON
it writes."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = "configs/diloco.py:tiny"

#: (module, its arguments at the smallest size, a key of the JSON it writes).
COMMANDS = [
    ("benchmarks.memory", ["--config", TINY, "--num_workers", "2"], "state_fields"),
    (
        "benchmarks.memory",
        ["--search", "--max_bytes", "1GiB", "--k_range", "1,2", "--search_configs", TINY],
        "results",
    ),
    ("benchmarks.aot", ["--config", "configs/autoloco.py:tiny"], "inner"),
    (
        "benchmarks.every_core",
        ["--config", TINY, "--total_steps", "4", "--repeats", "1"],
        "tokens_per_sec_ratio",
    ),
    (
        "benchmarks.host_wait",
        ["--config", TINY, "--total_steps", "4", "--repeats", "1"],
        None,
    ),
    ("benchmarks.checkpoint_cost", ["--config", TINY, "--repeats", "1"], None),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, args, key",
    COMMANDS,
    ids=[f"{m}{' ' + a[0] if a[0] == '--search' else ''}" for m, a, _ in COMMANDS],
)
def test_docstring_command_runs_at_its_smallest_size(module, args, key, tmp_path):
  out = tmp_path / "out.json"
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)  # one CPU device, as a user's shell has
  proc = subprocess.run(
      [sys.executable, "-m", module, *args, f"--out={out}"],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  result = json.loads(out.read_text())
  assert result and (key is None or key in result), list(result)
