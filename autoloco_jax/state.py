"""The training state every algorithm shares, and how it is laid out on the mesh."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from autoloco_jax import replicas
from autoloco_jax.inner import RoundAcc


class TrainState(NamedTuple):
  """Everything a run carries from one round to the next (all on device).

  Per-worker fields have a leading axis of K workers, split over the mesh's
  ``replica`` axis; the rest is replicated.

  Attributes:
    params_K: fast weights ``θ_{t,k}``, the parameters the inner steps move.
    anchor_K: each worker's copy of the global parameters ``θ_t`` of the round's
      start (DiLoCo family); ``None`` for DDP.
    inner_opt_K: inner optimizer state (AdamW moments), local to each worker.
    outer_opt_K: outer optimizer state, one identical copy per worker, as each
      worker applies the same outer step; ``None`` for DDP.
    acc: statistics of the current round (:class:`RoundAcc`).
    step: global inner step ``s`` (number of inner steps taken so far).
    round: number of completed syncs ``t``.
    interval: ``H`` the controller chose for the next round.
    controller: the interval controller's state.
    present_K: 1.0 for each worker whose round counts, 0.0 for one that dropped
      out (worker faults); ``None`` for algorithms without that support.
  """
  params_K: Any
  anchor_K: Any
  inner_opt_K: Any
  outer_opt_K: Any
  acc: RoundAcc
  step: jax.Array
  round: jax.Array
  interval: jax.Array
  controller: Any
  present_K: Any = None

  def specs(self) -> "TrainState":
    """Partition specs (a prefix tree) matching this state's layout."""
    w, r = replicas.WORKERS, replicas.REPLICATED
    return TrainState(
        params_K=w, anchor_K=None if self.anchor_K is None else w,
        inner_opt_K=w, outer_opt_K=None if self.outer_opt_K is None else w,
        acc=RoundAcc.specs(), step=r, round=r, interval=r,
        controller=r, present_K=None if self.present_K is None else w)


def place(state: TrainState, mesh) -> TrainState:
  """Puts every field of ``state`` on the mesh with the sharding its spec names.

  Every leaf gets buffers of its own (``may_alias=False``): the jitted rounds
  donate the state, and two fields sharing a buffer could not both be donated.
  """
  from jax.sharding import NamedSharding, PartitionSpec
  # On a one-device mesh JAX returns P('replica') outputs as P(); lay inputs out
  # the same way so the first call and later ones hit the same compiled round.
  canonical = (lambda spec: PartitionSpec()) if mesh.devices.size == 1 else (lambda spec: spec)
  shardings = jax.tree.map(lambda spec: NamedSharding(mesh, canonical(spec)),
                           state.specs(),
                           is_leaf=lambda x: isinstance(x, PartitionSpec))
  return replicas.put(state, shardings, may_alias=False)


def round_metrics(state: TrainState, lr_schedule, steps_done_K=None) -> dict:
  """Scalar statistics of the round that just ended, from its accumulators
  (inside ``replicas.map_workers``); ``steps_done_K``: per-worker step counts
  when workers take different numbers of steps (GASLoC's ``H_k``)."""
  acc = state.acc
  if steps_done_K is None:
    steps = jnp.maximum(acc.steps, 1).astype(jnp.float32)
  else:
    steps = jnp.maximum(replicas.worker_mean(steps_done_K.astype(jnp.float32)), 1.0)
  return dict(
      round=state.round, step=state.step, interval=acc.steps,
      lr_sum=acc.lr_sum, lr=lr_schedule(state.step),
      loss_mean=replicas.worker_mean(acc.loss_sum_K) / steps,
      loss_start=replicas.worker_mean(acc.loss_first_K),
      loss_end=replicas.worker_mean(acc.loss_last_K),
      grad_norm=replicas.worker_mean(acc.grad_norm_sum_K) / steps,
      next_interval=state.interval)


def scalar(value: int) -> jax.Array:
  return jnp.asarray(value, jnp.int32)
