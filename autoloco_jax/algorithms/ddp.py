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

A DDP "round" is only a chunk of ``steps_per_read = config.interval.h`` steps
between two metric reads; its sync (:class:`DDPSync`) exchanges nothing beyond
what the steps already did.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax.numpy as jnp
import numpy as np
import optax

from autoloco_jax.algorithms.interval import Interval
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
    interval: ``config.interval``, typed; DDP reads only its ``h``, the inner
      steps between two metric reads (:attr:`steps_per_read`; no effect on
      training).
  """

  interval: Interval

  name = "ddp"
  #: The shared settings it implements (``registry.refuse_unsupported``): no
  #: streaming, no compression; any interval controller (it reads only ``h``).
  streams = False
  compresses = False
  averages = False
  controllers = None
  #: Whether ``build`` reads ``config.seed`` (``assembly.setup`` reuses a build
  #: across seeds otherwise).
  seeded_build = False

  @classmethod
  def from_config(cls, config: Any) -> "DDP":
    return cls(interval=Interval.from_config(config))

  @property
  def steps_per_read(self) -> int:
    """Inner steps between two metric reads (a driver round)."""
    return self.interval.h

  def build(self, setup: Setup) -> Algorithm:
    steps = self.steps_per_read
    sync = DDPSync(steps, setup.inner_tx, setup.lr_schedule)
    loop = setup.synced_loop()

    def init_state(params) -> state_lib.TrainState:
      return state_lib.init(None, None, sync.init(params, None), setup.num_workers)

    def inner_block(state: state_lib.TrainState, tokens_KxCxBxL1, num_steps):
      model = state.algo
      params, opt, acc = loop(
          model.params, model.inner_opt, state.acc, tokens_KxCxBxL1, num_steps, state.step
      )
      return state._replace(
          algo=DDPState(params, opt), acc=acc, step=state.step + num_steps
      )

    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner_block(inner_block, setup.layout),
        sync=jit_sync(sync, setup.layout),
        eval_params=lambda state: {"": state.algo.params},
        comm_pattern=sync.comm_pattern(None, setup.num_workers),
        max_round_steps=steps,
        min_round_steps=steps,
        first_round_steps=steps,
        next_round_steps=lambda round_index: sync.round_length(round_index, steps),
        supports_faults=False,
    )


@dataclasses.dataclass(frozen=True)
class DDPSync:
  """DDP's end of a driver round: read the round's statistics; the gradients
  were all-reduced at every step already.

  Attributes:
    steps_per_read: inner steps between two metric reads.
    inner_tx: the inner optimizer (for the state's AdamW moments).
    lr_schedule: the inner learning rate ``η(s)``.
  """

  steps_per_read: int
  inner_tx: optax.GradientTransformation
  lr_schedule: optax.Schedule

  def init(self, params: Any, params_K: Any) -> DDPState:
    """The one model and its fresh inner optimizer state (no ``params_K``:
    the workers share the model)."""
    del params_K
    return DDPState(params=params, inner_opt=self.inner_tx.init(params))

  def round_length(self, round_index: Any, interval: Any) -> Any:
    """A driver round is ``interval`` steps, every one."""
    del round_index
    return interval

  def comm_pattern(self, shapes: Any, num_workers: int) -> Callable:
    """``(round_index, steps) -> RoundComm``: a gradient all-reduce per step."""
    del shapes
    return lambda round_index, steps: contract.RoundComm(
        "allreduce_every_step", np.full(num_workers, steps, np.int64)
    )

  def __call__(self, state: state_lib.TrainState, present_K):
    del present_K  # DDP does not support faults
    metrics = inner.round_stats(state.acc, state.step, self.lr_schedule)
    metrics.update(
        round=state.round,
        next_h=jnp.asarray(self.steps_per_read, jnp.int32),
        param_norm=jnp.sqrt(replicas.sq_norm(state.algo.params)),
    )
    return state._replace(acc=inner.reset(state.acc), round=state.round + 1), metrics
