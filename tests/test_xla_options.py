"""``benchmarks/xla_options.py --quick``: every variant that runs has a ratio and
a numerics verdict, the bf16 check has its two losses, and a flag this jaxlib
does not know is reported unavailable instead of stopping the run. Structure
only: no speed is asserted (the machines are shared and noisy).
"""

import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers import trains

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = ("fast_math", "bf16", "attention_library")
UNKNOWN = "no_such_flag"


@pytest.fixture(scope="module")
@trains
def quick(tmp_path_factory):
  """One run of the quick mode on a few variants: (result, markdown)."""
  out = tmp_path_factory.mktemp("xla_options")
  env = dict(os.environ)
  # Each child gets its own flags; the session's simulated devices stay out.
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
      [
          sys.executable,
          "-m",
          "benchmarks.xla_options",
          "--quick",
          f"--variants={','.join(RUN)}",
          f"--extra={UNKNOWN}=--xla_cpu_no_such_flag=true",
          f"--out={out / 'x.json'}",
          f"--md={out / 'x.md'}",
      ],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
  return json.loads((out / "x.json").read_text()), (out / "x.md").read_text()


def _positive(x) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_every_variant_that_runs_has_a_ratio_and_numerics(quick):
  result, _ = quick
  rows = {r["name"]: r for r in result["variants"]}
  assert list(rows) == list(RUN) + [UNKNOWN]
  for name in RUN:
    row = rows[name]
    assert row["status"] == "ran", row
    assert _positive(row["ratio"]) and _positive(row["tokens_per_sec"])
    assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"]
    assert len(row["ratios"]) == result["setup"]["repeats"]
    assert isinstance(row["numerics"]["identical"], bool)
  assert _positive(result["default"]["tokens_per_sec"])
  # bf16 compute cannot leave float32 training bit for bit unchanged.
  assert not rows["bf16"]["numerics"]["identical"]
  assert rows["bf16"]["dtype"] == "bfloat16"


@pytest.mark.slow
def test_unknown_flag_is_reported_unavailable(quick):
  result, md = quick
  row = next(r for r in result["variants"] if r["name"] == UNKNOWN)
  assert row["status"] == "unavailable"
  assert "xla_cpu_no_such_flag" in row["reason"]
  assert "ratio" not in row
  assert f"| {UNKNOWN} |" in md and "unavailable" in md


@pytest.mark.slow
def test_bf16_check_has_both_losses(quick):
  result, md = quick
  check = result["bf16_check"]
  f32, b16 = check["final_eval_loss_float32"], check["final_eval_loss_bfloat16"]
  assert _positive(f32) and _positive(b16)
  assert check["difference"] == pytest.approx(b16 - f32)
  for dtype in ("float32", "bfloat16"):
    curve = check[dtype]["curve"]
    assert check[dtype]["dtype"] == dtype
    assert [p["step"] for p in curve][0] == 0 and curve[-1]["step"] == check["steps"]
    # Training lowers the validation loss from its value at initialisation.
    assert curve[-1]["eval_loss"] < curve[0]["eval_loss"]
  assert "bf16 loss check" in md


@pytest.mark.slow
def test_markdown_names_every_variant_and_the_command(quick):
  result, md = quick
  assert "python -m benchmarks.xla_options --quick" in md
  for row in result["variants"]:
    assert f"| {row['name']} |" in md
