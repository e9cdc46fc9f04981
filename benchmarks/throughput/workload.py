"""What is run: the sizes of a mode, the configs, the model, synthetic data."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from autoloco_jax.data import corpus as data_lib
from autoloco_jax.model import transformer as model_lib
from configs import common


@dataclasses.dataclass
class Workload:
  """Sizes of one benchmark mode."""

  size: str  # configs/common.py size preset
  model: dict  # overrides of config.model (and data.seq_len)
  num_workers: int  # K
  h: int  # inner steps per timed unit, the longest round (0: config's H)
  repeats: int  # timed units per row
  sweep_repeats: int  # timed units per sweep point
  scale_workers: list  # K of the scaling sweep
  scale_widths: list  # d_model of the width sweep
  scale_steps: int  # inner steps per round and per unit in the sweeps
  matmul_n: tuple  # sides of the square matmuls that measure the peak
  head_dim: int  # head size kept when the width sweep changes d_model
  rows: tuple = ()  # rows to measure besides the reference ("naive", "pytorch"); () = all
  torch_threads: int = 0  # torch.set_num_threads of the PyTorch rows; 0 = usable cores
  torch_compile: bool = False  # also a torch.compile row


def make_workload(
    *,
    quick: bool,
    num_workers: int,
    h: int,
    repeats: int,
    sweep_repeats: int,
    scale_workers: list,
    scale_widths: list,
    scale_steps: int,
    size: str = "cpu",
    model: dict | None = None,
    rows: tuple = (),
    torch_threads: int = 0,
    torch_compile: bool = False,
) -> Workload:
  """The workload of ``--quick`` (a one-layer toy model) or of a full run; ``repeats``
  and ``sweep_repeats`` of 0 take the mode's default. A full run is at the
  ``size`` preset (``configs/common.py``) with ``model`` overrides: fields of
  ``config.model``, and ``seq_len``, ``batch_size`` (per worker)."""
  if quick:
    return Workload(
        "tiny",
        dict(d_model=32, num_layers=1, num_heads=2, mlp_dim=128, seq_len=32),
        num_workers,
        3,
        repeats or 1,
        sweep_repeats or 1,
        [1, 4],
        [16, 32],
        2,
        (256,),
        16,
        tuple(rows),
        torch_threads,
        torch_compile,
    )
  return Workload(
      size,
      dict(model or {}),
      num_workers,
      h,
      repeats or 3,
      sweep_repeats or 2,
      [int(k) for k in scale_workers],
      [int(d) for d in scale_widths],
      scale_steps,
      # An accelerator reaches its matmul peak only at larger sides (an H200:
      # 154 TFLOP/s in bf16 at 2048, 770 at 8192).
      (1024, 2048) if jax.default_backend() == "cpu" else (4096, 8192),
      32,
      tuple(rows),
      torch_threads,
      torch_compile,
  )


def algorithm_config(
    workload: Workload,
    name: str,
    num_workers: int = 0,
    num_devices: int = 1,
    d_model: int = 0,
    h: int = 0,
) -> Any:
  """``configs/<name>.py`` at the workload's size (the common base if there is no
  such file), with K, devices, model overrides and optionally ``H`` set."""
  try:
    config = importlib.import_module(f"configs.{name}").get_config(workload.size)
  except ModuleNotFoundError:
    config = common.base(workload.size)
  config.algorithm = name
  config.num_workers = num_workers or workload.num_workers
  config.num_devices = num_devices
  model = dict(workload.model)
  if d_model:
    model.update(
        d_model=d_model,
        num_heads=max(d_model // workload.head_dim, 1),
        mlp_dim=4 * d_model,
    )
  for key, value in model.items():
    if key == "batch_size":
      config.data.batch_size = value
      continue
    if key == "seq_len":
      config.data.seq_len = value
    config.model[key] = value
  if h:
    config.interval.h = h
    config.interval.h_max = 0
  return config


class Model(NamedTuple):
  loss_fn: Callable
  params: Any
  num_params: int
  flops_per_token: float


_models: dict = {}


def build_model(config: Any) -> Model:
  """The model ``trainer.setup`` builds (byte vocabulary), cached by shape."""
  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = data_lib.VOCAB_SIZE
    model_cfg.seq_len = config.data.seq_len
  key = (json.dumps(model_cfg.to_dict(), sort_keys=True), config.seed)
  if key not in _models:
    init, apply = model_lib.make(model_cfg)
    params = init(jax.random.key(config.seed))
    num_params = model_lib.param_count(params)
    _models[key] = Model(
        functools.partial(model_lib.loss_fn, apply),
        params,
        num_params,
        model_lib.flops_per_token(model_cfg, num_params),
    )
  return _models[key]


def synthetic_data(config: Any) -> data_lib.WorkerData:
  """Random bytes in the trainer's ``WorkerData``: the reading and staging code
  of a real run without building a dataset (speed does not depend on the text)."""
  K, L1 = config.num_workers, config.data.seq_len + 1
  per_worker = 4 * config.data.batch_size * 32
  rng = np.random.default_rng(config.seed)
  tokens_NxL1 = rng.integers(0, data_lib.VOCAB_SIZE, (K * per_worker, L1), np.uint8)
  shards = list(np.arange(K * per_worker).reshape(K, per_worker))
  return data_lib.WorkerData(tokens_NxL1, shards, tokens_NxL1[:8], config.seed)


class Reader:
  """``read(n) -> tokens_KxnxBxL1``: the next ``n`` batches of every worker, read
  from ``data`` as ``trainer.py`` reads them (the ``rounds.Reader`` of a row)."""

  def __init__(
      self, data: data_lib.WorkerData, batch: int, positions_K: np.ndarray | None = None
  ):
    self.data, self.batch = data, batch
    self.positions_K = data.init_positions() if positions_K is None else positions_K

  def __call__(self, n: int) -> np.ndarray:
    batch_KxnxBxL1, self.positions_K = self.data.train_batches(
        self.positions_K, n, self.batch
    )
    return batch_KxnxBxL1

  def fork(self) -> "Reader":
    """A reader from the same positions that leaves this one where it is."""
    return Reader(self.data, self.batch, np.array(self.positions_K))
