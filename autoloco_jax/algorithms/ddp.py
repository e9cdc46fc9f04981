"""DDP: the fully synchronous baseline on the same replica axis.

Every inner step all-reduces the gradients (mean over the K workers) and applies
one AdamW step: one model trained on the global batch ``K × B``. It pays one
all-reduce of the parameter size per step and is the quality ceiling the
low-communication methods are measured against (``docs/algorithms.md`` §1).

Since the workers always agree, the parameters and their AdamW state exist once
per device (:class:`DDPState`, replicated over the mesh), as DiLoCo's global
parameters do; only the round's per-worker statistics carry the replica axis,
and ``TrainState.params_K`` and ``inner_opt_K`` are ``None``. Within one inner
call each device steps its block of workers' copies as before
(:func:`inner.make_synced_loop` says why).

A DDP "round" is only a chunk of ``config.interval.h`` steps between two
metric reads; its sync exchanges nothing beyond what the steps already did.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from autoloco_jax.algorithms.diloco import streaming
from autoloco_jax.compression import exchange
from autoloco_jax.runtime import contract, inner, replicas, state as state_lib
from autoloco_jax.runtime.contract import Algorithm, Setup
from autoloco_jax.runtime.jitting import jit_inner_block, jit_sync


class DDPState(NamedTuple):
  """DDP's one model, one copy per device (replicated).

  Attributes:
    params: the one model's parameters ``θ_s``.
    inner_opt: their inner optimizer state (clipping and AdamW moments).
  """

  params: Any
  inner_opt: Any

  def specs(self) -> "DDPState":
    return DDPState(params=replicas.REPLICATED, inner_opt=replicas.REPLICATED)


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
      model = DDPState(params=params, inner_opt=setup.inner_tx.init(params))
      return state_lib.init(None, None, model, k)

    loop = setup.synced_loop()

    def inner_block(state: state_lib.TrainState, tokens_KxCxBxL1, num_steps):
      model = state.algo
      params, opt, acc = loop(
          model.params, model.inner_opt, state.acc, tokens_KxCxBxL1, num_steps, state.step
      )
      return state._replace(
          algo=DDPState(params, opt), acc=acc, step=state.step + num_steps
      )

    def sync_block(state: state_lib.TrainState, present_K):
      del present_K  # DDP does not support faults
      metrics = inner.round_stats(state.acc, state.step, setup.lr_schedule)
      metrics.update(
          round=state.round,
          next_h=jnp.asarray(self.h, jnp.int32),
          param_norm=jnp.sqrt(replicas.sq_norm(state.algo.params)),
      )
      return state._replace(acc=inner.reset(state.acc), round=state.round + 1), metrics

    def comm_pattern(round_index: int, h: int) -> contract.RoundComm:
      return contract.RoundComm("allreduce_every_step", np.full(k, h, np.int64))

    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner_block(inner_block, setup.mesh),
        sync=jit_sync(sync_block, setup.mesh),
        eval_params=lambda state: {"": state.algo.params},
        comm_pattern=comm_pattern,
        h_max=self.h,
        h_min=self.h,
        planned_h=lambda round_index: self.h,
        supports_faults=False,
    )
