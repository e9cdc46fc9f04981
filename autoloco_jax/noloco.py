"""NoLoCo: local AdamW steps, then a Nesterov-like outer step with a random peer.

No all-reduce. Each worker ``k`` keeps its own outer weights ``φ_k`` (the
``anchor_K`` of the state) and outer momentum ``m_k`` (``outer_opt_K``). After
``H`` inner steps from ``φ_k`` to the fast weights ``θ_k``, the workers are split
into groups ``G`` (a random perfect matching by default, the same on every
worker: it derives from the seed and the round index, ``topology.py``), and

.. math::

  \\bar Δ = \\operatorname{mean}_{j \\in G}(θ_j − φ_j), \\quad
  \\bar φ = \\operatorname{mean}_{j \\in G} φ_j, \\quad
  m_k ← β m_k + α \\bar Δ + γ (\\bar φ − φ_k), \\quad
  φ_k ← φ_k + m_k, \\quad θ_k ← φ_k.

One message per peer suffices: the group mean is linear, so
``α Δ̄ + γ φ̄ = mean_G z`` with ``z_j = α θ_j + (γ − α) φ_j``; each worker sends
its ``z_j`` and the step is ``m_k ← β m_k + mean_G z − γ φ_k``. (With the
default ``γ = α``, ``z_j = α θ_j``.) In place of groups any topology of
``topology.py`` works: ``mean_G`` is then the mean over a worker and its
neighbours; on the complete graph with ``γ = 0`` the step is DiLoCo with
heavy-ball momentum, ``m ← β m − α Δ_t``, ``φ ← φ + m``.

Replicas drift apart a little; the sync reports their spread
``mean_k ‖φ_k − mean_j φ_j‖`` and :func:`make`'s ``eval_params`` gives both the
replicas' mean and replica 0 for evaluation. Both all-reduce the parameters:
they are measurements of the simulation, not part of the algorithm.

Reference:
  Kolehmainen et al., NoLoCo: No-all-reduce Low Communication Training Method
  for Large Models, 2025. https://arxiv.org/abs/2506.10911 (public code:
  gensyn-ai/noloco; defaults α = 0.7, β = 0.5, γ = α, H = 50, pairs).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from autoloco_jax import comm, inner, intervals, replicas, topology
from autoloco_jax.algorithms import Algorithm, jit_inner, jit_sync
from autoloco_jax import state as state_lib
from autoloco_jax.state import TrainState, scalar


def move_stats(start_K, end_K) -> dict:
  """``‖mean_k Δ_k‖``, ``mean_k ‖Δ_k‖²`` and their ratio for ``Δ_k = start − end``
  (monitoring: the mean all-reduces the parameters)."""
  delta_K = jax.tree.map(jnp.subtract, start_K, end_K)
  delta = replicas.worker_mean(delta_K)
  delta_sq = replicas.sq_norm(delta)
  worker_sq = replicas.worker_mean(replicas.sq_norm_K(delta_K))
  return dict(delta_norm=jnp.sqrt(delta_sq), worker_sq_norm=worker_sq,
              agreement=intervals.agreement_ratio(delta_sq, worker_sq))


def mean_and_replica(state: TrainState) -> dict:
  """The models a decentralized run evaluates: the replicas' mean and replica 0."""
  return {"mean": jax.tree.map(lambda x: jnp.mean(x, axis=0), state.params_K),
          "replica": jax.tree.map(lambda x: x[0], state.params_K)}


def make_eval_params(mesh: Mesh) -> Callable[[TrainState], dict]:
  """:func:`mean_and_replica`, jitted, its models replicated on the mesh so
  every process can evaluate them (monitoring: the mean all-reduces)."""
  return jax.jit(mean_and_replica,
                 out_shardings=NamedSharding(mesh, replicas.REPLICATED))


def gossip_pattern(topo: topology.Topology, steps_K: Callable[[int], np.ndarray]
                   ) -> Callable[[int, int], comm.RoundComm]:
  """``(round_index, h) -> RoundComm`` of a gossip algorithm on ``topo``."""

  def pattern(round_index: int, h: int) -> comm.RoundComm:
    steps = steps_K(h)
    if topo.complete:
      return comm.RoundComm("allreduce", steps)
    return comm.RoundComm("gossip", steps, topo.neighbors(round_index))

  return pattern


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  """Builds NoLoCo from ``config.outer`` (``lr`` = α, ``momentum`` = β),
  ``config.gossip`` (``gamma`` = γ, None for α; ``topology``, ``group_size``,
  ``pool_size``) and ``config.interval.h`` (fixed H)."""
  num_workers = config.num_workers
  lr_schedule = inner.schedule(config.inner, config.total_steps)
  inner_tx = inner.optimizer(config.inner, lr_schedule)
  g = config.get("gossip", None)
  gamma = g.get("gamma", None) if g is not None else None
  alpha, beta = float(config.outer.lr), float(config.outer.momentum)
  gamma = alpha if gamma is None else float(gamma)
  if not 0 <= beta < 1:
    raise ValueError(f"NoLoCo's momentum beta must be in [0, 1), got {beta}")
  if alpha <= 0 or gamma < 0:
    raise ValueError(f"NoLoCo needs alpha > 0 and gamma >= 0, got {alpha}, {gamma}")
  topo = topology.from_config(config)
  h = int(config.interval.h)
  if config.interval.get("controller", "fixed") != "fixed":
    raise ValueError("NoLoCo runs a fixed interval (interval.controller='fixed')")

  def init_state(params) -> TrainState:
    params_K = replicas.stack_workers(params, num_workers)
    return TrainState(
        params_K=params_K, anchor_K=params_K,
        inner_opt_K=jax.vmap(inner_tx.init)(params_K),
        outer_opt_K=jax.tree.map(jnp.zeros_like, params_K),
        acc=inner.RoundAcc.zeros(num_workers),
        step=scalar(0), round=scalar(0), interval=scalar(h), controller=scalar(h))

  def sync_block(state: TrainState):
    theta_K, phi_K, m_K = state.params_K, state.anchor_K, state.outer_opt_K
    z_K = jax.tree.map(lambda t, p: alpha * t + (gamma - alpha) * p, theta_K, phi_K)
    zbar_K = topology.neighborhood_mean(topo, z_K, state.round)   # the exchange
    m_K = jax.tree.map(lambda m, z, p: beta * m + z - gamma * p, m_K, zbar_K, phi_K)
    phi_K = jax.tree.map(jnp.add, phi_K, m_K)

    metrics = state_lib.round_metrics(state, lr_schedule)
    metrics.update(move_stats(state.anchor_K, theta_K))
    metrics.update(spread=topology.spread(phi_K),
                   pool_index=topology.pool_index(topo.seed, state.round, topo.pool_size))
    new_state = state._replace(
        params_K=phi_K, anchor_K=phi_K, outer_opt_K=m_K, acc=inner.reset(state.acc),
        round=state.round + 1)
    return new_state, metrics

  return Algorithm(
      name="noloco",
      init_state=init_state,
      inner=jit_inner(inner.make_inner_loop(loss_fn, inner_tx, lr_schedule), mesh),
      sync=jit_sync(sync_block, mesh),
      allreduces_per_round=lambda steps: 1 if topo.complete else 0,
      h_max=h,
      eval_params=make_eval_params(mesh),
      comm_pattern=gossip_pattern(
          topo, lambda steps: np.full(num_workers, steps, np.int64)))
