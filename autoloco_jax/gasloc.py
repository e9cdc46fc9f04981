"""GASLoC: local steps, then one accelerated gossip step on any topology.

Round ``t``: worker ``k`` starts from its own ``θ_{t,k}^{start}`` (the state's
``anchor_K``), takes ``H_k`` inner steps and drifts by
``g_{t,k} = θ_{t,k} − θ_{t,k}^{start}``. Then, with ``Λ`` the Laplacian of the
round's active edges (``topology.py``: a random matching, ring, torus,
exponential or complete graph),

.. math::

  y_{t,k} = θ^{start}_{t,k} + η\\, g_{t,k}, \\qquad
  θ_{t+1} = y_t − α Λ y_t + γ (y_t − y_{t−1})

with ``y_{−1} = θ_0``; ``y_{t−1}`` is kept per worker in ``outer_opt_K``. Each
worker sends its ``y_{t,k}`` to its neighbours once: ``Λ y`` needs nothing more.
The step ``α`` defaults to ``1/(d+1)`` for a ``d``-regular graph, which makes
``y − α Λ y`` the uniform average over each worker and its neighbours.

Mode ``mix_momentum=True`` gossips the momentum term as well,
``θ_{t+1} = (I − α Λ) z_t`` with ``z_t = y_t + γ (y_t − y_{t−1})`` (the same one
message per neighbour). The mean over workers is the same in both modes; on the
complete graph with ``α = 1/K`` this mode is DiLoCo exactly, with
``η = α_DiLoCo`` and ``γ = β_DiLoCo`` (derivation in ``docs/algorithms.md`` §5;
``tests/test_gasloc.py``). In the default mode the replicas keep their own
momentum and stay apart by ``γ (I − J/K)(y_t − y_{t−1})``.

Heterogeneous speeds: with ``config.network.speed_factors`` ``f_k`` (compute
time per step relative to 1), worker ``k`` takes
``H_k = max(1, floor(H · min_j f_j / f_k))`` steps, so every worker spends the
same compute time per round and fast workers do more steps; the trainer stages
``H`` batches per round and a worker past its ``H_k`` leaves them unused.

Reference:
  Cagnasso, Belilovsky, Oyallon, GASLoC, 2026. arXiv 2606.11081 (its update is
  known to us from a third-party rendering only; see ``docs/algorithms.md``).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh

from autoloco_jax import comm, inner, replicas, topology
from autoloco_jax import state as state_lib
from autoloco_jax.algorithms import Algorithm, jit_inner, jit_sync
from autoloco_jax.noloco import gossip_pattern, make_eval_params, move_stats
from autoloco_jax.state import TrainState, scalar


def worker_steps(h: int, speed_K: np.ndarray) -> np.ndarray:
  """``H_k = max(1, floor(H · min_j f_j / f_k))``: the same compute time per
  worker, the fastest taking ``H`` steps."""
  speed_K = np.asarray(speed_K, np.float64)
  return np.maximum(1, np.floor(h * speed_K.min() / speed_K + 1e-9)).astype(np.int32)


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  """Builds GASLoC from ``config.outer`` (``lr`` = η, ``momentum`` = γ),
  ``config.gossip`` (``alpha`` = α, 0 for ``1/(d+1)``; ``mix_momentum``;
  ``topology``, ``group_size``, ``pool_size``), ``config.interval.h`` (``H``)
  and ``config.network.speed_factors`` (``H_k``)."""
  num_workers = config.num_workers
  lr_schedule = inner.schedule(config.inner, config.total_steps)
  inner_tx = inner.optimizer(config.inner, lr_schedule)
  topo = topology.from_config(config)
  g = config.get("gossip", None)
  get = (lambda key, default: default) if g is None else g.get
  eta, gamma = float(config.outer.lr), float(config.outer.momentum)
  alpha = float(get("alpha", 0.0) or 0.0) or 1.0 / (topo.degree + 1)
  mix_momentum = bool(get("mix_momentum", False))
  if eta <= 0 or not 0 <= gamma < 1 or alpha < 0:
    raise ValueError(f"GASLoC needs eta > 0, gamma in [0, 1), alpha >= 0; got "
                     f"eta={eta}, gamma={gamma}, alpha={alpha}")
  if config.interval.get("controller", "fixed") != "fixed":
    raise ValueError("GASLoC runs a fixed interval (interval.controller='fixed')")
  h = int(config.interval.h)
  steps_K = worker_steps(h, comm.speed_factors(config.get("network", None), num_workers))
  heterogeneous = bool(np.any(steps_K != h))
  inner_run = inner.make_inner_loop(loss_fn, inner_tx, lr_schedule)

  def init_state(params) -> TrainState:
    params_K = replicas.stack_workers(params, num_workers)
    return TrainState(
        params_K=params_K, anchor_K=params_K,
        inner_opt_K=jax.vmap(inner_tx.init)(params_K),
        outer_opt_K=params_K,                       # y_{-1} = θ_0
        acc=inner.RoundAcc.zeros(num_workers),
        step=scalar(0), round=scalar(0), interval=scalar(h), controller=scalar(h))

  def local_steps(b: int) -> jax.Array:
    """This device's block of ``H_k``."""
    if b == num_workers:
      return jnp.asarray(steps_K)
    start = lax.axis_index(replicas.REPLICA) * b
    return lax.dynamic_slice_in_dim(jnp.asarray(steps_K), start, b)

  def sync_block(state: TrainState):
    start_K, theta_K, y_prev_K = state.anchor_K, state.params_K, state.outer_opt_K
    y_K = jax.tree.map(lambda s, t: s + eta * (t - s), start_K, theta_K)
    if mix_momentum:
      z_K = jax.tree.map(lambda y, yp: y + gamma * (y - yp), y_K, y_prev_K)
      lz_K = topology.laplacian(topo, z_K, state.round)             # the exchange
      new_K = jax.tree.map(lambda z, lz: z - alpha * lz, z_K, lz_K)
    else:
      ly_K = topology.laplacian(topo, y_K, state.round)             # the exchange
      new_K = jax.tree.map(lambda y, ly, yp: y - alpha * ly + gamma * (y - yp),
                           y_K, ly_K, y_prev_K)

    b = jax.tree.leaves(theta_K)[0].shape[0]
    done_K = jnp.minimum(state.acc.steps, local_steps(b)) if heterogeneous else None
    metrics = state_lib.round_metrics(state, lr_schedule, done_K)
    metrics.update(move_stats(start_K, theta_K))
    metrics.update(
        spread=topology.spread(new_K),
        pool_index=topology.pool_index(topo.seed, state.round, topo.pool_size),
        worker_steps_mean=(metrics["interval"].astype(jnp.float32) if done_K is None
                           else replicas.worker_mean(done_K.astype(jnp.float32))))
    new_state = state._replace(
        params_K=new_K, anchor_K=new_K, outer_opt_K=y_K, acc=inner.reset(state.acc),
        round=state.round + 1)
    return new_state, metrics

  return Algorithm(
      name="gasloc",
      init_state=init_state,
      inner=jit_inner(inner_run, mesh, local_steps if heterogeneous else None),
      sync=jit_sync(sync_block, mesh),
      allreduces_per_round=lambda steps: 1 if topo.complete else 0,
      h_max=h,
      eval_params=make_eval_params(mesh),
      comm_pattern=gossip_pattern(topo, lambda steps: np.minimum(steps_K, steps)))
