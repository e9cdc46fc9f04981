"""The loss curve in bfloat16 against float32, the same run otherwise.

  python -m benchmarks.bf16 --config configs/default.py:study --out docs/bf16_cpu.json

Trains ``--config`` twice with ``trainer.train_and_evaluate``: ``model.dtype``
float32, then bfloat16 (activations and matmuls; the parameters, gradients and
both optimizers' states stay float32, the master weights), and records each
run's evaluation losses and mean training loss at every evaluation step. The
``gpu`` size computes in bfloat16 by default; this is the evidence, at a size
two CPU cores train in minutes, that the curve follows float32's
(docs/bf16_cpu.md renders the JSON). XLA:CPU has no bf16 matmul units, so the
wall times here say nothing about a GPU's.
"""

from __future__ import annotations

import sys
import tempfile
import time
from typing import Any

import jax
from absl import app, flags

from autoloco_jax.run import metrics as metrics_lib, trainer
from benchmarks import render
from benchmarks.render import Lines, Table


def _define_flags() -> None:
  """Flags only when run as a program (``render.py`` imports :data:`TABLES`)."""
  from ml_collections import config_flags

  global _CONFIG, _OUT
  _CONFIG = config_flags.DEFINE_config_file(
      "config", "configs/default.py:study", "Run config."
  )
  _OUT = flags.DEFINE_string("out", "", "Write the JSON here as well.")


def curve(config: Any, dtype: str) -> dict:
  """One run of ``config`` with ``model.dtype = dtype``: its evaluations."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.model.dtype = dtype
    config.log.progress = config.log.tensorboard = False
  with tempfile.TemporaryDirectory() as workdir:
    start = time.perf_counter()
    summary = trainer.train_and_evaluate(config, workdir)
    wall = time.perf_counter() - start
    records = metrics_lib.read(f"{workdir}/metrics.jsonl")
  evals = [r for r in records if "eval_loss" in r and not r.get("summary")]
  return dict(
      dtype=dtype,
      steps=[r["step"] for r in evals],
      eval_loss=[r["eval_loss"] for r in evals],
      final_eval_loss=summary["final_eval_loss"],
      wall_seconds=wall,
  )


def prepare(result: dict) -> dict:
  """One row per evaluation step with both losses and their difference."""
  f32, bf16 = result["runs"]["float32"], result["runs"]["bfloat16"]
  rows = [
      dict(step=s, f32=a, bf16=b, diff=b - a, rel=(b - a) / a)
      for s, a, b in zip(f32["steps"], f32["eval_loss"], bf16["eval_loss"])
  ]
  worst = max(abs(r["rel"]) for r in rows)
  return dict(result, rows=rows, worst=worst, f32=f32, bf16=bf16)


#: The generated blocks of docs/bf16_cpu.md (``benchmarks/render.py``).
TABLES = {
    "summary": Lines(
        (
            "`{command}` ({config}; JAX {jax}, {backend}): final eval loss "
            "{f32[final_eval_loss]:.4f} nats/token in float32, "
            "{bf16[final_eval_loss]:.4f} in bfloat16; the largest gap at an "
            "evaluation, {worst:.2%} of the float32 loss.",
        )
    ),
    "curve": Table(
        lambda r: r["rows"],
        (
            ("step", "{step}"),
            ("eval loss float32", "{f32:.4f}"),
            ("eval loss bfloat16", "{bf16:.4f}"),
            ("bf16 - f32", "{diff:+.4f}"),
            ("relative", "{rel:+.2%}"),
        ),
    ),
}


def _without_out(args: list[str]) -> list[str]:
  """The command line's arguments less ``--out`` and its value."""
  kept, skip = [], False
  for arg in args:
    if skip or arg.startswith("--out"):
      skip = arg == "--out"
      continue
    kept.append(arg)
  return kept


def main(argv):
  del argv
  config = _CONFIG.value
  runs = {dtype: curve(config, dtype) for dtype in ("float32", "bfloat16")}
  m = config.model
  result = dict(
      command=" ".join(["python -m benchmarks.bf16", *_without_out(sys.argv[1:])]),
      config=f"{config.algorithm}, K = {config.num_workers}, d = {m.d_model}, "
      f"{m.num_layers} layers, B = {config.data.batch_size}, L = "
      f"{config.data.seq_len}, {config.total_steps} steps",
      backend=jax.default_backend(),
      jax=jax.__version__,
      runs=runs,
  )
  render.emit(result, _OUT.value)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
