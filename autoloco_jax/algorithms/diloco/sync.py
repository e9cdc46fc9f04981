r"""DiLoCo's sync, in pieces: average the pseudo-gradients, take the outer step,
choose the next ``H``.

At the end of round ``t`` (notation of ``docs/algorithms.md``) every worker has
moved from the global parameters ``θ_t`` to ``θ_{t,k}``, and

.. math::

  Δ_{t,k} = θ_t − θ_{t,k}, \qquad Δ_t = \frac{1}{K}\sum_k Δ_{t,k}
  \quad\text{(one all-reduce)}, \qquad θ_{t+1} = θ_t + \mathrm{outer}(Δ_t),

after which the controller reads the round's scalar statistics and returns
``H_{t+1}``. :class:`WholeModelSync` is that sync for the whole model; streaming,
overlapped and compressed syncs (``streaming.StreamedSync``) are built from the
same functions: :func:`pseudo_gradients_K`, :func:`outer_step`,
:func:`statistics` and :func:`round_metrics`.

Every function here runs per device inside ``replicas.map_workers``: a tree
named ``_K`` holds the device's block of workers, the rest is replicated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from autoloco_jax.algorithms.diloco import intervals
from autoloco_jax.runtime import contract, inner, replicas, signals, state as state_lib


@dataclasses.dataclass(frozen=True)
class Outer:
  """The outer side of a DiLoCo-family sync.

  Attributes:
    tx: the outer transform (``outer.diloco`` or ``outer.autoloco``), called with
      the round's ``inner_lr_sum`` and ``reference_lr_sum``.
    controller: the interval controller that chooses the next ``H``.
    lr_schedule: the inner learning rate ``η(s)`` (for the round's statistics).
    reference_lr_sum: ``start_step -> S_ref,t`` for the round that started at
      ``start_step``.
  """

  tx: optax.GradientTransformationExtraArgs
  controller: intervals.IntervalController
  lr_schedule: optax.Schedule
  reference_lr_sum: Callable[[jax.Array], jax.Array]


def pseudo_gradients_K(params: Any, params_K: Any) -> Any:
  """``Δ_{t,k} = θ_t − θ_{t,k}`` for the device's workers."""
  return jax.tree.map(lambda a, p: a[None] - p, params, params_K)


def workers_present(present_K: jax.Array) -> jax.Array:
  """How many workers' rounds count, over the whole mesh (a float32 scalar)."""
  return jax.lax.psum(jnp.sum(present_K), replicas.REPLICA)


def outer_step(
    outer: Outer, own: Any, delta: Any, lr_sum: jax.Array, ref_sum: jax.Array
) -> tuple[Any, Any]:
  """``(θ_t + outer(Δ_t), outer state)`` from the averaged pseudo-gradient
  ``delta``, the accumulated inner learning rate ``S_t = lr_sum`` and
  ``S_ref,t = ref_sum``; ``own`` is the algorithm's state (``params``, ``opt``)."""
  updates, opt = outer.tx.update(
      delta, own.outer_opt, own.global_params, inner_lr_sum=lr_sum, reference_lr_sum=ref_sum
  )
  return optax.apply_updates(own.global_params, updates), opt


def statistics(
    outer: Outer,
    state: state_lib.TrainState,
    mean: Callable[[Any], Any],
    present: jax.Array,
    delta_sq_norm: Any,
    worker_sq_norm: Any,
    **period: Any,
) -> tuple[signals.SyncStats, jax.Array]:
  """The round's scalar statistics, which the controller reads, and the mean
  gradient norm. ``period`` (``h``, ``lr_sum``) replaces the round's own count
  and ``S`` when the sync covers more than the round (a streaming fragment)."""
  stats = inner.round_stats(state.acc, state.step, outer.lr_schedule, mean)
  grad_norm = stats.pop("grad_norm")
  stats.update(period)
  sync_stats = signals.sync_stats(
      round=state.round,
      **stats,
      delta_sq_norm=delta_sq_norm,
      worker_sq_norm=worker_sq_norm,
      num_workers=present.astype(jnp.int32),
  )
  return sync_stats, grad_norm


def round_metrics(
    stats: signals.SyncStats,
    grad_norm: jax.Array,
    params: Any,
    present: jax.Array,
    ref_sum: jax.Array,
    opt: Any,
    next_h: jax.Array,
    **extra: Any,
) -> dict:
  """The sync's scalar metrics: the statistics, norms, the outer step's
  ``α_t, β_t, r_t`` and ``next_h``, the next round's number of inner steps."""
  metrics = dict(stats._asdict())
  metrics.update(
      grad_norm=grad_norm,
      param_norm=jnp.sqrt(replicas.sq_norm(params)),
      workers_present=present,
      reference_lr_sum=ref_sum,
      ratio=opt.ratio,
      outer_lr=opt.alpha,
      outer_momentum=opt.beta,
      next_h=next_h,
  )
  metrics.update(extra)
  return metrics


@dataclasses.dataclass(frozen=True)
class WholeModelSync:
  """DiLoCo's sync of the whole model, ``(state, present_K) -> (state,
  metrics)``: average (over the workers present), outer step, next ``H``, and
  every worker restarts from the new global parameters.

  A sync piece also says what it keeps between rounds (:meth:`init`), how long
  the next driver round is (:meth:`round_length`, on the device and the host),
  and what it sends (:meth:`comm_pattern`); ``streaming.StreamedSync`` is the
  other piece of the DiLoCo family. A variant is a new piece: a subclass or a
  class with these methods, returned by the algorithm's ``sync_piece``.

  Attributes:
    outer: the outer transform, controller, schedule and ``S_ref``.
  """

  outer: Outer

  #: Driver syncs per call of the controller (1: every sync is a round's end).
  events_per_interval = 1

  def init(self, params_K: Any) -> Any:
    """The exchange state the piece carries between rounds: none."""
    del params_K
    return None

  def round_length(self, round_index: Any, interval: Any) -> Any:
    """Inner steps of the next driver round: the controller's interval."""
    del round_index
    return interval

  def comm_pattern(self, shapes: Any, num_workers: int) -> Callable:
    """``(round_index, h) -> contract.RoundComm``: one all-reduce of the model
    (``shapes``, an ``contract.ParamShapes``, is not needed for it)."""
    del shapes
    return lambda round_index, h: contract.RoundComm(
        "allreduce", np.full(num_workers, h, np.int64)
    )

  def __call__(self, state: state_lib.TrainState, present_K: jax.Array):
    outer, own, acc = self.outer, state.algo, state.acc
    mean = lambda tree_K: replicas.worker_weighted_mean(tree_K, present_K)
    delta_K = pseudo_gradients_K(own.global_params, state.params_K)
    delta = mean(delta_K)  # the all-reduce
    worker_sq = mean(replicas.sq_norm_K(delta_K))
    present = workers_present(present_K)
    ref_sum = outer.reference_lr_sum(state.step - acc.steps)
    params, opt = outer_step(outer, own, delta, acc.lr_sum, ref_sum)
    stats, grad_norm = statistics(
        outer, state, mean, present, replicas.sq_norm(delta), worker_sq
    )
    next_h, controller = outer.controller.next_h(own.controller, stats)
    new_state = state._replace(
        params_K=replicas.broadcast_block(params, state.params_K),
        algo=own._replace(global_params=params, outer_opt=opt, controller=controller),
        acc=inner.reset(acc),
        round=state.round + 1,
    )
    return new_state, round_metrics(
        stats, grad_norm, params, present, ref_sum, opt, next_h
    )


def planned_h(controller: intervals.IntervalController, piece: Any) -> Callable | None:
  """``round_index -> H``: the ``next_h`` the sync ending driver round
  ``round_index`` returns, computed on the host by the functions the sync runs
  (the controller's ``plan`` and the piece's ``round_length``), or None when
  the controller is adaptive."""
  if controller.plan is None:
    return None
  events = piece.events_per_interval
  intervals_at = _blocks(controller.plan)

  def planned(round_index: int) -> int:
    interval = intervals_at(round_index // events + 1)
    return int(piece.round_length(round_index, interval))

  return planned


def _blocks(plan: Callable, block: int = 4096) -> Callable[[int], int]:
  """``t -> int(plan(t))`` for host code that asks round after round: ``plan``
  (a pure JAX function of ``t``) is evaluated a block of ``t`` at a time by one
  ``vmap`` (eager: a few ops per block, no compile) and kept, not dispatched
  once per round (the planner replays hundreds of thousands)."""
  plan_B = jax.vmap(plan)
  cache: dict[int, np.ndarray] = {}

  def at(t: int) -> int:
    b, i = divmod(int(t), block)
    if b not in cache:
      cache[b] = np.asarray(plan_B(jnp.arange(b * block, (b + 1) * block, dtype=jnp.int32)))
    return int(cache[b][i])

  return at
