"""DDP: the fully synchronous baseline on the same replica axis.

Every inner step all-reduces the gradients (mean over the K workers) and every
worker applies the same AdamW step, so all workers hold identical parameters and
optimizer states: one model trained on the global batch ``K × B``. It pays one
all-reduce of the parameter size per step and is the quality ceiling the
low-communication methods are measured against (``docs/algorithms.md`` §1).

A DDP "round" is only a chunk of ``config.interval.h`` steps between two
metric reads; its sync exchanges nothing beyond what the steps already did, and
DDP has no state of its own between rounds (``TrainState.outer`` is ``None``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from autoloco_jax import comm, exchange, inner, replicas
from autoloco_jax import state as state_lib, streaming
from autoloco_jax.algorithms import Algorithm, Setup, jit_inner, jit_sync


@dataclasses.dataclass(frozen=True)
class DDP:
  """DDP's one setting.

  Attributes:
    h: inner steps between two metric reads (no effect on training).
  """

  h: int

  name = "ddp"

  @classmethod
  def from_config(cls, config: Any) -> "DDP":
    exchange.require_uncompressed(config, "DDP")
    streaming.require_unstreamed(config, "DDP")
    return cls(h=int(config.interval.h))

  def build(self, setup: Setup) -> Algorithm:
    k = setup.num_workers

    def init_state(params) -> state_lib.TrainState:
      params_K, inner_opt_K = setup.init_workers(params)
      return state_lib.init(params_K, inner_opt_K, None, k)

    def sync_block(state: state_lib.TrainState, present_K):
      del present_K  # DDP does not support faults
      metrics = inner.round_stats(state.acc, state.step, setup.lr_schedule)
      metrics.update(
          round=state.round,
          next_h=jnp.asarray(self.h, jnp.int32),
          param_norm=jnp.sqrt(replicas.worker_mean(replicas.sq_norm_K(state.params_K))),
      )
      return state._replace(acc=inner.reset(state.acc), round=state.round + 1), metrics

    def comm_pattern(round_index: int, h: int) -> comm.RoundComm:
      return comm.RoundComm("allreduce_every_step", np.full(k, h, np.int64))

    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner(setup.inner_loop(sync_grads=True), setup.mesh),
        sync=jit_sync(sync_block, setup.mesh),
        comm_pattern=comm_pattern,
        h_max=self.h,
        planned_h=lambda round_index: self.h,
        supports_faults=False,
    )
