"""``benchmarks/device_check.sh --dry_run``: the accelerator check runs end to end
on CPU at toy sizes and writes its report (structure only, no speed), and the
memory benchmark's search finds the boundary it is given."""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import device_check, memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize(
    "kind, name, peak",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989e12),
        ("NVIDIA H200", "H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", "A100", 312e12),
        ("TPU v4", "TPU v4", 275e12),
        ("TPU v5 lite", "TPU v5e", 197e12),
        ("TPU v5p", "TPU v5p", 459e12),
        ("TPU v6 lite", "TPU v6e", 918e12),
        ("NVIDIA H100 PCIe", "unknown", None),
        ("cpu", "unknown", None),
    ],
)
def test_nominal_peaks_by_device_kind(kind, name, peak):
  assert device_check.nominal_peak(kind) == (name, peak)


def test_largest_fitting_is_the_boundary():
  assert memory.largest_fitting(lambda k: k <= 77, 8, 512) == 77
  assert memory.largest_fitting(lambda k: k <= 900, 8, 512) == 512
  assert memory.largest_fitting(lambda k: k <= 3, 8, 512) is None
  assert memory.parse_bytes("8GiB") == 8 * 2**30
  assert memory.parse_bytes("512 MiB") == 512 * 2**20


@pytest.mark.slow
def test_dry_run_writes_a_report(tmp_path):
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)  # one CPU device, as on a one-chip accelerator
  proc = subprocess.run(
      ["benchmarks/device_check.sh", "--dry_run", f"--out_dir={tmp_path}"],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  (name,) = [n for n in os.listdir(tmp_path) if n.endswith(".json")]
  report = json.load(open(tmp_path / name))
  assert report["dry_run"] and report["device_kind"]
  names = [r["name"] for r in report["throughput"]["rows"]]
  assert names == ["reference", "diloco"]
  assert report["training"]["tokens_per_sec"] > 0
  assert report["training"]["steps"] == 20
  text = open(tmp_path / name.replace(".json", ".md")).read()
  assert "## Throughput rows" in text and "## Training run" in text


def test_importing_the_memory_benchmark_defines_no_flags():
  # The throughput report imports benchmarks.memory for its "Memory scale"
  # section; flags defined on import clashed with the importer's --num_workers.
  code = (
      "from absl import flags; flags.DEFINE_integer('num_workers', 4, 'K');"
      "from benchmarks import memory; print(memory.parse_bytes('1KiB'))"
  )
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  done = subprocess.run(
      [sys.executable, "-c", code], cwd=root, capture_output=True, text=True
  )
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.strip() == "1024"
