"""DDP: the fully synchronous baseline on the same replica axis.

Every inner step all-reduces the gradients (mean over the K workers) and every
worker applies the same AdamW step, so all workers hold identical parameters and
optimizer states: one model trained on the global batch ``K × B``. It pays one
all-reduce of the parameter size per step and is the quality ceiling the
low-communication methods are measured against (``docs/algorithms.md`` §1).

A DDP "round" is only a chunk of ``config.interval.h`` steps between two
metric reads; its sync exchanges nothing beyond what the steps already did.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from autoloco_jax import inner, replicas
from autoloco_jax.algorithms import Algorithm, jit_inner, jit_sync
from autoloco_jax.state import TrainState, round_metrics, scalar


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  num_workers = config.num_workers
  lr_schedule = inner.schedule(config.inner, config.total_steps)
  inner_tx = inner.optimizer(config.inner, lr_schedule)
  h = int(config.interval.h)

  def init_state(params) -> TrainState:
    params_K = replicas.stack_workers(params, num_workers)
    return TrainState(
        params_K=params_K, anchor_K=None,
        inner_opt_K=jax.vmap(inner_tx.init)(params_K), outer_opt_K=None,
        acc=inner.RoundAcc.zeros(num_workers),
        step=scalar(0), round=scalar(0), interval=scalar(h), controller=scalar(h))

  def sync_block(state: TrainState):
    metrics = round_metrics(state, lr_schedule)
    metrics["param_norm"] = jnp.sqrt(
        replicas.worker_mean(replicas.sq_norm_K(state.params_K)))
    return state._replace(acc=inner.reset(state.acc), round=state.round + 1), metrics

  return Algorithm(
      name="ddp", init_state=init_state,
      inner=jit_inner(inner.make_inner_loop(loss_fn, inner_tx, lr_schedule,
                                            sync_grads=True), mesh),
      sync=jit_sync(sync_block, mesh),
      allreduces_per_round=lambda steps: steps,
      h_max=h)
