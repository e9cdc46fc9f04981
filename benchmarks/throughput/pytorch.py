"""The PyTorch rows: ``benchmarks/torch_reference.py`` (the reference's model and
inner optimizer in eager PyTorch) in a child process of its own, timed unit by
unit from this process and bracketed by its JAX reference like every row.

torch is optional (not in ``requirements.txt``): without it there is no row and
the report says so in one line.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from typing import Any

from autoloco_jax.data import corpus as data_lib
from autoloco_jax.run import distributed
from benchmarks.throughput.child import ROOT
from benchmarks.throughput.workload import Model, Workload
from benchmarks.throughput.runners import RemoteRow
from benchmarks.unit_server import Served

NOT_INSTALLED = (
    "torch is not installed, so there is no PyTorch row "
    "(optional, not a dependency: `pip install torch` adds it)"
)


def torch_available() -> bool:
  """Whether ``import torch`` would work (without importing it here)."""
  return importlib.util.find_spec("torch") is not None


def wanted(workload: Workload) -> bool:
  return not workload.rows or "pytorch" in workload.rows


def spec(workload: Workload, config: Any, model: Model) -> dict:
  """What ``torch_reference`` builds: the model, the inner optimizer's
  hyperparameters and schedule length, the global batch ``K × B``, the threads."""
  m = config.model
  return dict(
      model=dict(
          vocab_size=data_lib.VOCAB_SIZE,
          d_model=m.d_model,
          num_layers=m.num_layers,
          num_heads=m.num_heads,
          mlp_dim=m.mlp_dim,
          seq_len=config.data.seq_len,
      ),
      inner=config.inner.to_dict(),
      total_steps=config.total_steps,
      global_batch=config.num_workers * config.data.batch_size,
      threads=workload.torch_threads or distributed.usable_cores(),
      compile=workload.torch_compile,
      expect_params=model.num_params,
      seed=config.seed,
  )


def start(
    workload: Workload, config: Any, model: Model, steps: int
) -> tuple[list[RemoteRow], dict, Served | None]:
  """Starts and warms up the PyTorch child (it checks its parameter count
  against ``model.num_params`` first). Returns its rows, what it reported (or
  ``{"skipped": why}`` when torch is absent or the config is not the PyTorch
  model's), and the child to close after timing.

  Raises:
    RuntimeError: when the child fails (a crash is never reported as a skip).
  """
  if not torch_available():
    return [], dict(skipped=NOT_INSTALLED), None
  m = config.model
  if not m.tie_embeddings or m.dtype != "float32":
    why = "the PyTorch model is the tied-readout float32 one"
    return [], dict(skipped=f"{why}; this config is not"), None
  args = [
      sys.executable,
      "-m",
      "benchmarks.torch_reference",
      "--spec",
      json.dumps(spec(workload, config, model)),
  ]
  served = Served(args, dict(os.environ), ROOT)
  ready = served.ready()
  if "error" in ready:  # torch is there and the config fits: a crash, not a skip
    served.close()
    raise RuntimeError(f"the PyTorch child failed: {ready['error'][-2000:]}")
  tokens_per_step = config.num_workers * config.data.batch_size * config.data.seq_len
  warm = ready["warm_up_seconds"]
  rows = [
      RemoteRow(
          name,
          served,
          steps,
          tokens_per_step,
          model.flops_per_token,
          # Eager PyTorch compiles nothing; torch.compile's warm-up is its compile.
          warm[name] if name != "pytorch" else float("nan"),
      )
      for name in ready["rows"]
  ]
  return rows, ready, served
