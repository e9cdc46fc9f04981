"""A first look at one accelerator: throughput rows, a short training run, MFU.

  benchmarks/device_check.sh              # one GPU or TPU: under 5 minutes
  benchmarks/device_check.sh --dry_run    # CPU, toy sizes, seconds (the CI test)

Writes ``<out_dir>/<device kind>.json`` and ``.md`` (``docs/device/`` by
default) with:

1. The throughput benchmark's rows (``python -m benchmarks.throughput
   --rows_only``, in a child process) at a GPU-sized model: the ``gpu`` preset's
   width and depth (d_model 768, 12 layers, about 85M parameters) in bfloat16
   with L = 512 and B = 4 sequences per worker, K = 8 workers on one device,
   units of H = 10 steps: the reference (one model, global batch K x B), DiLoCo,
   AutoLoCo and the naive per-worker loop, each ratio measured side by side.
2. A short training run (``train.train_and_evaluate``) of ``configs/default.py:gpu``
   (AutoLoCo, K = 4 on the one device) on the embedded Shakespeare plays with
   the gpu model shape in bfloat16, B = 8, L = 1024, 200 inner steps in rounds
   of 12 to 100 (H_0 = 50): tokens/s after the first round, model FLOP/s, and
   MFU against the device's nominal dense bf16 peak (:data:`NOMINAL_BF16_PEAKS`;
   "unknown" for other devices); peak device memory from
   ``jax.devices()[0].memory_stats()`` where the backend reports it.

``--dry_run`` runs the same steps at toy sizes (the throughput benchmark's
``--quick`` model, ``configs/default.py:tiny``) to check the script end to end on
CPU; its numbers mean nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time

import jax
from absl import app, flags

from autoloco_jax import train
from benchmarks import render
from benchmarks.render import Lines, Table

_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Toy sizes on any backend (CI).")
_OUT_DIR = flags.DEFINE_string("out_dir", "docs/device", "Where the report goes.")
_STEPS = flags.DEFINE_integer("steps", 0, "Training steps (0: 200, dry run 20).")

#: Dense bf16 peak FLOP/s by device kind: (pattern of jax's device_kind,
#: lower-cased; name; FLOP/s). First match wins, so more specific names come first.
NOMINAL_BF16_PEAKS = (
    (r"h100.*pcie", "H100 PCIe", None),  # 756 TFLOP/s; not in our table: unknown
    (r"h200", "H200", 989e12),
    (r"h100", "H100 SXM", 989e12),
    (r"a100", "A100", 312e12),
    (r"v6", "TPU v6e", 918e12),
    (r"v5 ?lite|v5e", "TPU v5e", 197e12),
    (r"v5p|v5", "TPU v5p", 459e12),
    (r"v4", "TPU v4", 275e12),
)

#: The throughput rows' model: the gpu preset's width and depth, bf16.
GPU_ROWS = dict(
    size="gpu",
    model="seq_len=512,batch_size=4,dtype=bfloat16",
    num_workers=8,
    h=10,
    repeats=2,
    rows="diloco,autoloco,naive",
)


def nominal_peak(device_kind: str) -> tuple[str, float | None]:
  """``(name, dense bf16 FLOP/s)`` of a device kind, or ``('unknown', None)``."""
  kind = device_kind.lower()
  for pattern, name, peak in NOMINAL_BF16_PEAKS:
    if re.search(pattern, kind):
      return (name, peak) if peak else ("unknown", None)
  return "unknown", None


def slug(device_kind: str) -> str:
  """A file name for a device kind: ``NVIDIA H200`` -> ``nvidia_h200``."""
  return re.sub(r"[^a-z0-9]+", "_", device_kind.lower()).strip("_") or "device"


def throughput_rows(dry_run: bool, workdir: str) -> dict:
  """The throughput benchmark's rows, run as a child process (its flags are
  its own); returns its JSON's main rows."""
  out = os.path.join(workdir, "throughput.json")
  if dry_run:
    args = ["--quick", "--num_workers=2", "--rows=diloco", "--repeats=1"]
  else:
    args = [f"--{k}={v}" for k, v in GPU_ROWS.items()]
  command = [sys.executable, "-m", "benchmarks.throughput", *args]
  command += ["--sim_devices=0", "--rows_only", f"--out={out}", "--md="]
  subprocess.run(command, check=True)
  with open(out) as f:
    main = json.load(f)["main"]
  return dict(command=" ".join(command[1:]), **main)


def training_config(dry_run: bool, steps: int):
  """``configs/default.py`` at the gpu size (tiny for a dry run), shortened."""
  from configs import default

  config = default.get_config("tiny" if dry_run else "gpu")
  config.total_steps = steps
  config.num_devices = 1
  config.log.progress = False
  config.log.tensorboard = False
  config.checkpoint.every_rounds = 1000  # one save, at the end
  config.eval.every_steps = steps
  config.eval.num_batches = 2
  config.network.step_time = 0.01  # no probe round for the simulated clock
  if not dry_run:
    config.model.dtype = "bfloat16"
    config.data.batch_size = 8
    # AutoLoCo's rounds at H_ref = 25: several rounds in 200 steps.
    config.autoloco.h_ref = 25
    config.interval.h, config.interval.h_min, config.interval.h_max = 50, 12, 100
  return config


def training_run(dry_run: bool, steps: int, peak: float | None) -> dict:
  """A short run of the trainer; throughput from the end of its first round."""
  config = training_config(dry_run, steps)
  with tempfile.TemporaryDirectory() as workdir:
    start = time.perf_counter()
    summary = train.train_and_evaluate(config, workdir)
    wall = time.perf_counter() - start
  flops = summary["model_flops_per_sec"]
  return dict(
      config="configs/default.py:" + ("tiny" if dry_run else "gpu"),
      algorithm=summary["algorithm"],
      num_workers=config.num_workers,
      batch_per_worker=config.data.batch_size,
      seq_len=config.data.seq_len,
      dtype=config.model.dtype,
      num_params=summary["num_params"],
      steps=steps,
      syncs=summary["syncs"],
      tokens_per_sec=summary["tokens_per_sec"],
      model_flops_per_sec=flops,
      mfu_vs_nominal_bf16=None if peak is None else flops / peak,
      final_eval_loss=summary["final_eval_loss"],
      wall_seconds=wall,
  )


def memory_stats() -> dict:
  """Peak and current bytes on device 0, where the backend reports them."""
  stats = jax.devices()[0].memory_stats() or {}
  keys = ("peak_bytes_in_use", "bytes_in_use", "bytes_limit")
  return {k: int(stats[k]) for k in keys if k in stats}


def prepare(report: dict) -> dict:
  """The report with the derived cells of its page."""
  peak = report["nominal_bf16_peak"]
  rows = [
      dict(r, mfu=None if peak is None else r["model_flops_per_sec"] / peak)
      for r in report["throughput"]["rows"]
  ]
  mfu = report["training"]["mfu_vs_nominal_bf16"]
  return dict(
      report,
      rows=rows,
      peak_cell="unknown"
      if peak is None
      else f"{peak / 1e12:.0f} TFLOP/s ({report['peak_name']})",
      dry_note=" **dry run: toy sizes, the numbers mean nothing**"
      if report["dry_run"]
      else "",
      training_mfu="unknown" if mfu is None else f"{100 * mfu:.1f}%",
  )


#: The page's blocks (``benchmarks/render.py``), in order.
TABLES = {
    "header": Lines(
        (
            "# Device check: {device_kind}",
            "",
            "`{command}`, {date}, JAX {jax} on `{backend}` ({device_count} device(s)); "
            "nominal dense bf16 peak: {peak_cell}{dry_note}",
        )
    ),
    "rows": Table(
        lambda r: r["rows"],
        (
            ("row", "`{name}`"),
            ("tokens/s", "{tokens_per_sec:.0f}"),
            ("x reference", "{ratio:.3f}", "1"),
            ("model TFLOP/s", "{model_flops_per_sec:/1e12:.2f}"),
            ("MFU / nominal bf16", "{mfu:.1%}", "unknown"),
        ),
        title="## Throughput rows\n\n`{throughput[command]}`: K = "
        "{throughput[num_workers]}, B = {throughput[batch_per_worker]}, L = "
        "{throughput[seq_len]}, {throughput[num_params]:,} parameters.",
    ),
    "training": Lines(
        (
            "{training[config]} ({training[algorithm]}, K = {training[num_workers]}, "
            "B = {training[batch_per_worker]}, L = {training[seq_len]}, "
            "{training[dtype]}, {training[num_params]:,} parameters), "
            "{training[steps]} steps in {training[syncs]} syncs: "
            "**{training[tokens_per_sec]:.0f} tokens/s**, "
            "{training[model_flops_per_sec]:/1e12:.2f} model TFLOP/s, MFU "
            "{training_mfu}; final eval loss {training[final_eval_loss]:.3f}; wall "
            "{training[wall_seconds]:.0f} s.",
            "",
            (
                "Peak device memory: {memory[peak_bytes_in_use]:/1073741824:.2f} GiB.",
                "Peak device memory: not reported by this backend.",
            ),
        ),
        title="## Training run",
    ),
}


def markdown(report: dict) -> str:
  """The report's page."""
  return render.page(prepare(report), list(TABLES.values()))


def main(argv):
  del argv
  dry_run = _DRY_RUN.value
  steps = _STEPS.value or (20 if dry_run else 200)
  device = jax.devices()[0]
  name, peak = nominal_peak(device.device_kind)
  start = time.perf_counter()
  with tempfile.TemporaryDirectory() as workdir:
    throughput = throughput_rows(dry_run, workdir)
  print(f"[device_check] throughput rows done ({time.perf_counter() - start:.0f} s)")
  training = training_run(dry_run, steps, peak)
  print(f"[device_check] training run done ({time.perf_counter() - start:.0f} s)")
  report = dict(
      command="benchmarks/device_check.sh" + (" --dry_run" if dry_run else ""),
      date=time.strftime("%Y-%m-%d %H:%M"),
      dry_run=dry_run,
      backend=jax.default_backend(),
      jax=jax.__version__,
      device_kind=device.device_kind,
      device_count=jax.device_count(),
      peak_name=name,
      nominal_bf16_peak=peak,
      throughput=throughput,
      training=training,
      memory=memory_stats(),
      wall_seconds=time.perf_counter() - start,
  )
  os.makedirs(_OUT_DIR.value, exist_ok=True)
  base = os.path.join(_OUT_DIR.value, slug(device.device_kind))
  with open(base + ".json", "w") as f:
    json.dump(report, f, indent=1, default=float)
  with open(base + ".md", "w") as f:
    f.write(markdown(report))
  print(markdown(report))
  print(f"[device_check] wrote {base}.json and .md in {report['wall_seconds']:.0f} s")


if __name__ == "__main__":
  app.run(main)
