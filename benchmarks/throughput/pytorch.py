"""The PyTorch rows, each in a child process of its own, timed unit by unit from
this process and bracketed by its JAX reference like every row:

* ``pytorch`` (and ``pytorch_compile``): ``benchmarks/torch_reference.py``, the
  reference's model and inner optimizer in eager PyTorch (and under torch.compile);
* ``pytorch_diloco``: ``benchmarks/torch_diloco.py``, K-worker DiLoCo as a simulator
  user runs it, one single-threaded process per worker.

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


def wanted(workload: Workload, row: str = "pytorch") -> bool:
  return not workload.rows or row in workload.rows


def spec(config: Any, num_params: int, threads: int = 0, compile_: bool = False) -> dict:
  """What ``torch_reference`` builds: the model, the inner optimizer's
  hyperparameters and schedule length, the global batch ``K × B``, the threads
  (0: every usable core) and whether to add the torch.compile row."""
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
      threads=threads or distributed.usable_cores(),
      compile=compile_,
      expect_params=num_params,
      seed=config.seed,
  )


def diloco_spec(config: Any, num_params: int) -> dict:
  """What ``torch_diloco`` builds: the one-model spec at the per-worker batch, with
  K, H and the outer step's ``(α, β)`` (each process one thread)."""
  return dict(
      spec(config, num_params, threads=1),
      batch=config.data.batch_size,
      num_workers=config.num_workers,
      h=int(config.interval.h),
      alpha=config.diloco.alpha,
      beta=config.diloco.beta,
  )


def _serve(module: str, spec_: dict) -> tuple[Served, dict]:
  """Starts ``python -m module --spec JSON`` and waits for its announcement.

  Raises:
    RuntimeError: when the child fails (a crash is never reported as a skip).
  """
  args = [sys.executable, "-m", module, "--spec", json.dumps(spec_)]
  served = Served(args, dict(os.environ), ROOT)
  ready = served.ready()
  if "error" in ready:  # torch is there and the config fits: a crash, not a skip
    served.close()
    raise RuntimeError(f"the PyTorch child {module} failed: {ready['error'][-2000:]}")
  return served, ready


#: Every PyTorch child by its row: its module, its spec ``(workload, config,
#: num_params) -> dict``, and where its report goes in the block's ``pytorch``
#: entry (None: merged in; else under that key).
CHILDREN = {
    "pytorch": (
        "benchmarks.torch_reference",
        lambda w, c, n: spec(c, n, w.torch_threads, w.torch_compile),
        None,
    ),
    "pytorch_diloco": (
        "benchmarks.torch_diloco",
        lambda w, c, n: diloco_spec(c, n),
        "diloco",
    ),
}


def start(
    workload: Workload,
    config: Any,
    model: Model,
    steps: int,
    names: tuple = tuple(CHILDREN),
) -> tuple[list[RemoteRow], dict, list[Served]]:
  """Starts and warms up the PyTorch children named in ``names`` that the
  workload wants (each checks its parameter count against ``model.num_params``
  first). Returns their rows; what the one-model child reported (with the
  DiLoCo child's report under ``"diloco"``), or ``{"skipped": why}`` when torch
  is absent or the config is not the PyTorch model's; and the children to close
  after timing.

  Raises:
    RuntimeError: when a child fails.
  """
  if not torch_available():
    return [], dict(skipped=NOT_INSTALLED), []
  m = config.model
  if not m.tie_embeddings or m.dtype != "float32":
    why = "the PyTorch model is the tied-readout float32 one"
    return [], dict(skipped=f"{why}; this config is not"), []
  tokens_per_step = config.num_workers * config.data.batch_size * config.data.seq_len
  rows, info, children = [], {}, []
  try:
    for row, (module, make_spec, key) in CHILDREN.items():
      if row not in names or not wanted(workload, row):
        continue
      served, ready = _serve(module, make_spec(workload, config, model.num_params))
      children.append(served)
      if key:
        info[key] = ready
      else:
        info.update(ready)
      warm = ready["warm_up_seconds"]
      rows += [
          RemoteRow(
              name,
              served,
              steps,
              tokens_per_step,
              model.flops_per_token,
              # torch.compile's warm-up is its compile; eager compiles nothing.
              warm[name] if name == "pytorch_compile" else float("nan"),
          )
          for name in ready["rows"]
      ]
  except BaseException:
    for served in children:
      served.close()
    raise
  return rows, info, children
