"""Per-device memory with and without remat, K workers on one device.

  python -m benchmarks.remat --out docs/remat_gpu.json

For each ``model.remat`` and each K (``--remats``, ``--workers``) on one
device, at ``--config`` (the ``gpu`` size: bfloat16, L = 1024, B = 32 per
worker) with ``model.attention = xla`` (what a GPU runs without cuDNN; the
CPU's own ``einsum`` path keeps the same activations): the run state, the
activations the forward pass keeps for the backward pass
(``aot.saved_activation_bytes``, of which the L x L attention scores, which
cuDNN's fused attention never keeps), and XLA:CPU's analysis of the compiled
inner loop (``aot.compile_config``: arguments, temporaries, one step's FLOPs,
where remat's recomputation shows). Nothing is allocated: abstract shapes only.
"""

from __future__ import annotations

import json
import time
from typing import Any

import jax
from absl import app, flags

from benchmarks import aot, render
from benchmarks.render import Table


def _define_flags() -> None:
  """Flags only when run as a program (``render.py`` imports :data:`TABLES`)."""
  from ml_collections import config_flags

  global _CONFIG, _WORKERS, _REMATS, _OUT
  _CONFIG = config_flags.DEFINE_config_file("config", "configs/default.py:gpu", "Config.")
  _WORKERS = flags.DEFINE_list("workers", ["1", "4", "8"], "K on the one device.")
  _REMATS = flags.DEFINE_list("remats", ["none", "full"], "model.remat values.")
  _OUT = flags.DEFINE_string("out", "", "Write the JSON here as well.")


def row(config: Any, num_workers: int, remat: str) -> dict:
  """One (K, remat) probe of ``config`` on one device, attention through XLA."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.num_workers, config.num_devices = num_workers, 1
    config.model.remat, config.model.attention = remat, "xla"
  start = time.perf_counter()
  compiled = aot.compile_config(config)
  activations = aot.saved_activation_bytes(config)
  inner = compiled["inner"]
  return dict(
      num_workers=num_workers,
      remat=remat,
      state_bytes=compiled["state_bytes_total"],
      activation_bytes=activations["bytes"],
      score_bytes=activations["score_bytes"],
      xla_cpu_temp_bytes=inner["temp_bytes"],
      xla_cpu_peak_bytes=inner["argument_bytes"]
      + inner["output_bytes"]
      - inner["alias_bytes"]
      + inner["temp_bytes"],
      flops_per_step=inner["flops_per_step"],
      model_flops_per_step=compiled["model_flops_per_step"],
      compile_seconds=time.perf_counter() - start,
  )


_GIB = ":/1073741824:.1f}"

#: The generated block of docs/device.md (``benchmarks/render.py``).
TABLES = {
    "table": Table(
        lambda r: r["rows"],
        (
            ("K", "{num_workers}"),
            ("remat", "`{remat}`"),
            ("state GiB", "{state_bytes" + _GIB),
            ("activations kept GiB", "**{activation_bytes" + _GIB + "**"),
            ("of which L x L scores", "{score_bytes" + _GIB),
            ("XLA:CPU temp GiB", "{xla_cpu_temp_bytes" + _GIB),
            ("XLA FLOPs / model FLOPs", "{flop_ratio:.2f}"),
        ),
        title="`{command}` ({config}; JAX {jax}, {backend}), bytes per device:",
    )
}


def prepare(result: dict) -> dict:
  """Each row's XLA FLOPs of one step over the model's 6 N D estimate."""
  rows = [
      dict(r, flop_ratio=r["flops_per_step"] / r["model_flops_per_step"])
      for r in result["rows"]
  ]
  return dict(result, rows=rows)


def main(argv):
  del argv
  config = _CONFIG.value
  rows = [row(config, int(k), remat) for remat in _REMATS.value for k in _WORKERS.value]
  for r in rows:
    print(json.dumps(r), flush=True)
  result = dict(
      command="python -m benchmarks.remat",
      config=f"B = {config.data.batch_size}, L = {config.data.seq_len}, "
      f"{config.model.dtype}, {config.model.num_layers} layers, d = "
      f"{config.model.d_model}",
      backend=jax.default_backend(),
      jax=jax.__version__,
      rows=rows,
  )
  render.emit(result, _OUT.value, echo=False)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
