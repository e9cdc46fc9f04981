"""What a gossip round reports: the round's statistics, how the workers moved,
and how far the replicas spread.

Gossip methods keep one set of outer weights per worker, so there is no single
global model: a round reports the spread of the replicas
``mean_k ‖φ_k − mean_j φ_j‖`` and the agreement of the workers' moves. These
measurements all-reduce the parameters; they belong to the simulation, not to
the algorithms, and the simulated clock does not count them.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from autoloco_jax.algorithms.gossip import topology
from autoloco_jax.algorithms.gossip.compressed_exchange import GossipExchangeState
from autoloco_jax.runtime import inner, replicas, signals


def move_stats(start_K: Any, end_K: Any) -> dict:
  """``‖mean_k Δ_k‖``, ``mean_k ‖Δ_k‖²`` and their ratio for ``Δ_k = start − end``
  (inside :func:`replicas.map_workers`; monitoring)."""
  delta_K = jax.tree.map(jnp.subtract, start_K, end_K)
  delta = replicas.worker_mean_unrolled(delta_K)
  delta_sq = replicas.sq_norm(delta)
  worker_sq = replicas.worker_mean(replicas.sq_norm_K(delta_K))
  return dict(
      delta_norm=jnp.sqrt(delta_sq),
      worker_sq_norm=worker_sq,
      agreement=signals.agreement_ratio(delta_sq, worker_sq),
  )


def round_metrics(
    topo: topology.Topology,
    state: Any,
    start_K: Any,
    new_K: Any,
    lr_schedule: Any,
    interval: int,
    steps_done_K=None,
    ex: GossipExchangeState | None = None,
) -> dict:
  """The metrics of a gossip round (inside :func:`replicas.map_workers`): the
  inner round's statistics, the move statistics from ``start_K`` to the fast
  weights, the replicas' spread after the exchange, the round's table,
  ``next_h`` (the fixed ``interval``) and, with error feedback, the residuals'
  norm ``ef_residual_norm``."""
  metrics = inner.round_stats(
      state.acc, state.step, lr_schedule, steps_done_K=steps_done_K
  )
  metrics.update(move_stats(start_K, state.params_K))
  metrics.update(
      round=state.round,
      next_h=jnp.asarray(interval, jnp.int32),
      spread=topology.spread(new_K),
      pool_index=topology.pool_index(topo.seed, state.round, topo.pool_size),
  )
  if ex is not None and ex.residual_K is not None:
    residual_sq = replicas.worker_mean(replicas.sq_norm_K(ex.residual_K))
    metrics.update(ef_residual_norm=jnp.sqrt(residual_sq))
  return metrics
