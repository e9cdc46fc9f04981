"""A run assembled from its config: data, mesh, model, algorithm and the initial state.

``setup(config)`` is everything the trainer builds before its first round, and
what the tools that inspect a run (``trainer.load_run``, the memory and
checkpoint benchmarks) build to get the same shapes and shardings.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax

from autoloco_jax.algorithms import registry
from autoloco_jax.data import corpus as data_lib
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.runtime import contract, replicas, rounds, state as state_lib


class Run(NamedTuple):
  """Everything built from a config before the first round.

  Attributes:
    data: every worker's data and the evaluation sets (``corpus.WorkerData``).
    mesh: the device mesh with its ``replica`` axis.
    model_cfg: the model's config, with the data's vocabulary and length.
    apply: the model's ``apply(params, tokens)``.
    loss_fn: ``loss_fn(params, tokens_BxL1) -> scalar`` for one worker.
    algo: the algorithm (``contract.Algorithm``).
    state: the initial state, placed on the mesh.
    num_params: parameters of one model.
    flops_per_token: the model's training FLOPs per token.
    chunk: ``C``, batches staged per inner call (``rounds.chunk_size``).
  """

  data: data_lib.WorkerData
  mesh: Any
  model_cfg: Any
  apply: Any
  loss_fn: Any
  algo: contract.Algorithm
  state: state_lib.TrainState
  num_params: int
  flops_per_token: float
  chunk: int


def setup(config: Any) -> Run:
  """Builds data, mesh, model, algorithm and the initial state (on the mesh)."""
  K = config.num_workers
  data = data_lib.build(config.data, K, config.seed)
  mesh = replicas.make_mesh(K, config.num_devices)
  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = data.vocab_size
    model_cfg.seq_len = config.data.seq_len
  init, apply = model_lib.make(model_cfg)
  loss_fn = functools.partial(model_lib.loss_fn, apply)
  algo = registry.make(config, loss_fn, mesh)
  params = init(jax.random.key(config.seed))
  num_params = model_lib.param_count(params)
  state = state_lib.place(algo.init_state(params), mesh)
  return Run(
      data,
      mesh,
      model_cfg,
      apply,
      loss_fn,
      algo,
      state,
      num_params,
      model_lib.flops_per_token(model_cfg, num_params),
      rounds.chunk_size(config.chunk_steps, algo.max_round_steps),
  )
