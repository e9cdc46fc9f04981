"""What the gossip algorithms (NoLoCo, GASLoC) share: their monitoring, the
models they evaluate, and their round's communication pattern.

Gossip methods keep one set of outer weights per worker, so there is no single
global model: a run evaluates the replicas' mean and one replica, and reports
how far the replicas spread. These measurements all-reduce the parameters; they
belong to the simulation, not to the algorithms, and the simulated clock does
not count them.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from autoloco_jax import comm, inner, intervals, replicas, topology


def move_stats(start_K: Any, end_K: Any) -> dict:
  """``‖mean_k Δ_k‖``, ``mean_k ‖Δ_k‖²`` and their ratio for ``Δ_k = start − end``
  (inside :func:`replicas.map_workers`; monitoring)."""
  delta_K = jax.tree.map(jnp.subtract, start_K, end_K)
  delta = replicas.worker_mean(delta_K)
  delta_sq = replicas.sq_norm(delta)
  worker_sq = replicas.worker_mean(replicas.sq_norm_K(delta_K))
  return dict(
      delta_norm=jnp.sqrt(delta_sq),
      worker_sq_norm=worker_sq,
      agreement=intervals.agreement_ratio(delta_sq, worker_sq),
  )


def mean_and_replica(params_K: Any) -> dict:
  """The models a decentralized run evaluates: the replicas' mean and replica 0."""
  return {
      "mean": jax.tree.map(lambda x: jnp.mean(x, axis=0), params_K),
      "replica": jax.tree.map(lambda x: x[0], params_K),
  }


def make_eval_params(mesh: Mesh) -> Callable[[Any], dict]:
  """``state -> {"mean": ..., "replica": ...}``, jitted, the models replicated on
  the mesh so every process can evaluate them."""
  return jax.jit(
      lambda state: mean_and_replica(state.params_K),
      out_shardings=NamedSharding(mesh, replicas.REPLICATED),
  )


def comm_pattern(
    topo: topology.Topology, steps_K: Callable[[int], np.ndarray]
) -> Callable[[int, int], comm.RoundComm]:
  """``(round_index, h) -> RoundComm`` of a gossip round on ``topo``: each
  worker exchanges its parameters with the round's neighbours (the complete
  graph is an all-reduce)."""

  def pattern(round_index: int, h: int) -> comm.RoundComm:
    steps = steps_K(h)
    if topo.complete:
      return comm.RoundComm("allreduce", steps)
    return comm.RoundComm("gossip", steps, topo.neighbors(round_index))

  return pattern


def round_metrics(
    topo: topology.Topology,
    state: Any,
    start_K: Any,
    new_K: Any,
    lr_schedule: Any,
    h: int,
    steps_done_K=None,
) -> dict:
  """The metrics of a gossip round (inside :func:`replicas.map_workers`): the
  inner round's statistics, the move statistics from ``start_K`` to the fast
  weights, the replicas' spread after the exchange and the round's table."""
  metrics = inner.round_stats(
      state.acc, state.step, lr_schedule, steps_done_K=steps_done_K
  )
  metrics.update(move_stats(start_K, state.params_K))
  metrics.update(
      round=state.round,
      next_h=jnp.asarray(h, jnp.int32),
      spread=topology.spread(new_K),
      pool_index=topology.pool_index(topo.seed, state.round, topo.pool_size),
  )
  return metrics
