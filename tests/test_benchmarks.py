"""The throughput benchmark's CI mode (``--quick``): every row present, every
ratio finite and positive, compilations counted. Structure only: these machines
are shared and noisy, so no speed is asserted here (the targets are reported in
``docs/benchmarks.md``, never checked by a test).
"""

import json
import math
import os
import subprocess
import sys

import pytest

from benchmarks.throughput import timing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGORITHMS = ("ddp", "diloco", "autoloco")
OPTIONAL = ("noloco", "gasloc")  # rows when they build, else 'skipped: why'


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
  """One run of ``python -m benchmarks.throughput --quick``: (result, markdown)."""
  out = tmp_path_factory.mktemp("throughput")
  env = dict(os.environ)
  # The benchmark runs on one device and starts its own child for N devices;
  # the test session's four simulated devices must not leak into it.
  env.pop("XLA_FLAGS", None)
  proc = subprocess.run(
      [
          sys.executable,
          "-m",
          "benchmarks.throughput",
          "--quick",
          f"--out={out / 'b.json'}",
          f"--md={out / 'b.md'}",
      ],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=1200,
  )
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
  return json.loads((out / "b.json").read_text()), (out / "b.md").read_text()


def _positive(x) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_every_row_present(quick):
  result, _ = quick
  main = result["main"]
  names = [r["name"] for r in main["rows"]]
  assert names[0] == "reference"
  for name in ALGORITHMS + ("naive",):
    assert name in names
  for name in OPTIONAL:
    # Either measured or skipped with a reason.
    assert (name in names) != (name in main["skipped"]), (name, main["skipped"])
    if name in main["skipped"]:
      assert main["skipped"][name]
  sharded = result["sharded"]
  assert "error" not in sharded, sharded.get("error")
  assert sharded["devices"] == 2 and sharded["process"].startswith("child")
  assert [r["name"] for r in sharded["rows"]] == ["reference"] + [
      f"{a}@2" for a in ALGORITHMS
  ]


@pytest.mark.slow
def test_ratios_finite_and_positive(quick):
  result, _ = quick
  for block in (result["main"], result["sharded"]):
    assert _positive(block["matmul_peak_max"])
    for row in block["rows"]:
      assert _positive(row["tokens_per_sec"]), row["name"]
      assert _positive(row["model_flops_per_sec"]), row["name"]
      assert _positive(row["mfu_vs_measured_peak"]), row["name"]
      if row["name"] != "reference":
        assert _positive(row["ratio"]), row["name"]
        assert len(row["ratios"]) == block["repeats"]
  assert _positive(result["hot_path"]["scan_vs_while"]["ratio"])
  for name in (
      "global_flops_per_sec",
      "batched_flops_per_sec",
      "worker_flops_per_sec",
      "square_flops_per_sec",
  ):
    assert _positive(result["shape_matmul"][name])
  assert _positive(result["machine"]["nominal_peak_flops"]) or (
      result["machine"]["flop_per_cycle_per_core"] == 0
  )


@pytest.mark.slow
def test_compilations_counted_once(quick):
  result, _ = quick
  for block in (result["main"], result["sharded"]):
    assert set(block["compiles"]) == {r["name"] for r in block["rows"]}
    for name, c in block["compiles"].items():
      assert c["distinct_h"] > 1, name  # H changed between rounds...
      assert c["inner"] == 1, name  # ...and nothing recompiled
      if name != "reference":
        assert c["sync"] == 1, name
      assert c["once"]
      assert c["compile_seconds"] > 0, name
  assert result["targets"]["compilations of each round function"]["met"]


@pytest.mark.slow
def test_scaling_and_hot_path_present(quick):
  result, _ = quick
  scaling, plan = result["scaling"], result["plan"]
  assert [p["num_workers"] for p in scaling["by_workers"]] == plan["scale_workers"]
  assert [p["d_model"] for p in scaling["by_width"]] == plan["scale_widths"]
  for point in scaling["by_workers"] + scaling["by_width"]:
    assert _positive(point["ratio"]) and _positive(point["tokens_per_sec"])
    assert point["xla"]["state_bytes"] > 0
    assert point["memory"]["peak_bytes"] > 0 and point["memory"]["method"]
  hot = result["hot_path"]
  assert all(hot["donated"].values()) and not hot["donation_warnings"]
  assert hot["staging"]["seconds"]["int32"] > 0


@pytest.mark.slow
def test_markdown_has_every_row_and_the_command(quick):
  result, md = quick
  assert "python -m benchmarks.throughput" in md
  assert result["machine"]["uptime"] in md
  for row in result["main"]["rows"] + result["sharded"]["rows"]:
    assert f"`{row['name']}`" in md
  for target in result["targets"]:
    assert target in md


class _FakeRunner:
  """A row whose every unit 'takes' a fixed time (no JAX)."""

  def __init__(self, name, seconds, tokens_per_step=10):
    self.name, self.seconds, self.tokens_per_step = name, seconds, tokens_per_step
    self.units = []

  def unit(self, steps, round_h=0):
    self.units.append(steps)


def test_bracketed_pairs_each_row_with_its_neighbouring_reference_units(monkeypatch):
  reference = _FakeRunner("reference", 2.0)
  fast, slow = _FakeRunner("fast", 1.0), _FakeRunner("slow", 4.0, tokens_per_step=20)
  clock = []

  def fake_timed(fn):
    fn()
    runner = next(
        r for r in (reference, fast, slow) if len(r.units) > clock.count(r.name)
    )
    clock.append(runner.name)
    return runner.seconds

  monkeypatch.setattr(timing, "timed", fake_timed)
  out = timing.bracketed(reference, [fast, slow], steps=5, repeats=2)
  # ref, fast, ref, slow, ref | ref, slow, ref, fast, ref
  assert clock == ["reference", "fast", "reference", "slow", "reference"] * 1 + [
      "reference",
      "slow",
      "reference",
      "fast",
      "reference",
  ]
  assert out["fast"]["ratio"] == [2.0, 2.0]  # twice the reference's tokens/s
  assert out["slow"]["ratio"] == [1.0, 1.0]  # twice the tokens in twice the time
  assert len(out["reference"]["seconds"]) == 6
