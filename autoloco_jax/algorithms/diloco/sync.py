r"""DiLoCo's sync, in pieces: average the pseudo-gradients, take the outer step,
choose the next ``H``.

At the end of round ``t`` (notation of ``docs/algorithms.md``) every worker has
moved from the global parameters ``θ_t`` to ``θ_{t,k}``, and

.. math::

  Δ_{t,k} = θ_t − θ_{t,k}, \qquad Δ_t = \frac{1}{K}\sum_k Δ_{t,k}
  \quad\text{(one all-reduce)}, \qquad θ_{t+1} = θ_t + \mathrm{outer}(Δ_t),

after which the controller reads the round's scalar statistics and returns
``H_{t+1}``. :class:`WholeModelSync` is that sync for the whole model; the
streaming, overlapped and compressed sync (``streaming.StreamingSync``, whose
fragments send and arrive in ``fragment_sync.py``) is built from the same
functions: :func:`pseudo_gradients_K`, :func:`outer_step`, :func:`statistics`
and :func:`round_metrics`. Both keep a :class:`DiLoCoState` between rounds.

Every function here runs per device inside ``replicas.map_workers``: a tree
named ``_K`` holds the device's block of workers, the rest is replicated.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from autoloco_jax.algorithms.diloco import intervals
from autoloco_jax.runtime import contract, inner, replicas, signals, state as state_lib


class DiLoCoState(NamedTuple):
  """The DiLoCo family's state between rounds, one copy per device (replicated
  but for the per-worker ``_K`` fields, which the replica axis shards).

  Attributes:
    global_params: the global parameters ``θ_t`` (the round's anchor; with
      streaming, every fragment as of its last send).
    outer_opt: the outer optimizer's state (momentum ``m``, count and the last
      round's ``α_t``, ``β_t``, ``r_t``); with streaming the momentum of
      fragment ``p`` changes only at ``p``'s sends.
    controller: the interval controller's state; its ``h`` is the next ``H``.
    fragments: streaming with ``P > 1``: per fragment, what it has run since
      its last send (``fragment_sync.FragmentState``: ``S`` and steps); None
      otherwise.
    pending_K: eager overlap: per worker, ``θ' − θ'_k`` on the fragment in
      flight, added when it arrives (``fragment_sync.Fragment.arrive``); None
      otherwise.
    residual_K: error feedback's per-worker residuals ``e_k``
      (``exchange.Compression.init_residual``); None without it.

  DiLoCo's own sync (the default config) keeps the last three None.
  """

  global_params: Any
  outer_opt: Any
  controller: Any
  fragments: Any = None
  pending_K: Any = None
  residual_K: Any = None

  def specs(self) -> "DiLoCoState":
    w, r = replicas.WORKERS, replicas.REPLICATED
    on = lambda field, spec: None if field is None else spec
    return DiLoCoState(
        global_params=r,
        outer_opt=r,
        controller=r,
        fragments=on(self.fragments, r),
        pending_K=on(self.pending_K, w),
        residual_K=on(self.residual_K, w),
    )


@dataclasses.dataclass(frozen=True)
class OuterRule:
  """How a DiLoCo-family sync steps the global model and times the next round.

  Attributes:
    tx: the outer transform (``outer.diloco`` or ``outer.autoloco``), called with
      the round's ``inner_lr_sum`` and ``reference_lr_sum``.
    controller: the interval controller that chooses the next ``H``.
    first_interval: ``H_0``, the controller's first interval.
    lr_schedule: the inner learning rate ``η(s)`` (for the round's statistics).
    reference_lr_sum: ``start_step -> S_ref,t`` for the round that started at
      ``start_step``.
  """

  tx: optax.GradientTransformationExtraArgs
  controller: intervals.IntervalController
  first_interval: int
  lr_schedule: optax.Schedule
  reference_lr_sum: Callable[[jax.Array], jax.Array]

  def init(self, params: Any, **carried: Any) -> DiLoCoState:
    """The state before the first round: ``θ_0 = params``, a fresh outer
    optimizer and controller, and what a sync piece carries (``carried``)."""
    return DiLoCoState(
        global_params=params,
        outer_opt=self.tx.init(params),
        controller=self.controller.init(self.first_interval),
        **carried,
    )


def pseudo_gradients_K(params: Any, params_K: Any) -> Any:
  """``Δ_{t,k} = θ_t − θ_{t,k}`` for the device's workers."""
  return jax.tree.map(lambda a, p: a[None] - p, params, params_K)


def workers_present(present_K: jax.Array) -> jax.Array:
  """How many workers' rounds count, over the whole mesh (a float32 scalar)."""
  return replicas.psum(jnp.sum(present_K))


def outer_step(
    rule: OuterRule, own: DiLoCoState, delta: Any, lr_sum: jax.Array, ref_sum: jax.Array
) -> tuple[Any, Any]:
  """``(θ_t + outer(Δ_t), outer state)`` from the averaged pseudo-gradient
  ``delta``, the accumulated inner learning rate ``S_t = lr_sum`` and
  ``S_ref,t = ref_sum``."""
  updates, opt = rule.tx.update(
      delta,
      own.outer_opt,
      own.global_params,
      inner_lr_sum=lr_sum,
      reference_lr_sum=ref_sum,
  )
  return optax.apply_updates(own.global_params, updates), opt


def statistics(
    rule: OuterRule,
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
  stats = inner.round_stats(state.acc, state.step, rule.lr_schedule, mean)
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

  It has the shape of every algorithm's sync (``algorithms/round_sync.py``):
  what it keeps between rounds (:meth:`init`), how long the next driver round
  is (:meth:`round_length`, on the device and the host) and what it sends
  (:meth:`comm_pattern`); ``streaming.StreamingSync`` is the other sync of the
  DiLoCo family. A variant is a new sync: a subclass, or a class with these
  methods, returned by the algorithm's ``sync_piece``.

  Attributes:
    rule: the outer transform, controller, schedule and ``S_ref``.
  """

  rule: OuterRule

  def init(self, params: Any, params_K: Any) -> DiLoCoState:
    """The state before the first round: nothing beyond the outer rule's."""
    del params_K
    return self.rule.init(params)

  def round_length(self, round_index: Any, interval: Any) -> Any:
    """Inner steps of the next driver round: the controller's interval."""
    del round_index
    return interval

  def controller_calls(self, round_index: int) -> int:
    """How many times the controller has chosen ``H`` by the end of driver
    round ``round_index``: once per round."""
    return round_index + 1

  def comm_pattern(self, shapes: Any, num_workers: int) -> Callable:
    """``(round_index, steps) -> contract.RoundComm``: one all-reduce of the
    model (``shapes``, a ``contract.ParamShapes``, is not needed for it)."""
    del shapes
    return lambda round_index, steps: contract.RoundComm(
        "allreduce", np.full(num_workers, steps, np.int64)
    )

  def __call__(self, state: state_lib.TrainState, present_K: jax.Array):
    rule, own, acc = self.rule, state.algo, state.acc
    mean = lambda tree_K: replicas.worker_weighted_mean(tree_K, present_K)
    delta_K = pseudo_gradients_K(own.global_params, state.params_K)
    delta = mean(delta_K)  # the all-reduce
    worker_sq = mean(replicas.sq_norm_K(delta_K))
    present = workers_present(present_K)
    ref_sum = rule.reference_lr_sum(state.step - acc.steps)
    params, opt = outer_step(rule, own, delta, acc.lr_sum, ref_sum)
    stats, grad_norm = statistics(
        rule, state, mean, present, replicas.sq_norm(delta), worker_sq
    )
    next_h, controller = rule.controller.next_h(own.controller, stats)
    new_state = state._replace(
        params_K=replicas.broadcast_block(params, state.params_K),
        algo=own._replace(global_params=params, outer_opt=opt, controller=controller),
        acc=inner.reset(acc),
        round=state.round + 1,
    )
    return new_state, round_metrics(
        stats, grad_norm, params, present, ref_sum, opt, next_h
    )


def open_loop_next_h(
    controller: intervals.IntervalController, piece: Any
) -> Callable[[int], int] | None:
  """``round_index -> next_h``: the length of the driver round after driver
  round ``round_index``, which the sync ending it returns, computed on the host
  by the functions the sync runs (the controller's ``open_loop`` and the
  piece's ``round_length``); None when the controller is adaptive (only the
  sync knows its ``H``). It is ``Algorithm.next_round_steps``."""
  if controller.open_loop is None:
    return None
  intervals_at = _blocks(controller.open_loop)

  def next_h(round_index: int) -> int:
    interval = intervals_at(piece.controller_calls(round_index))
    return int(piece.round_length(round_index, interval))

  return next_h


def _blocks(open_loop: Callable, block: int = 4096) -> Callable[[int], int]:
  """``t -> int(open_loop(t))`` for host code that asks round after round:
  ``open_loop`` (a pure JAX function of ``t``) is evaluated a block of ``t`` at
  a time by one ``vmap`` (eager: a few ops per block, no compile) and kept, not
  dispatched once per round (the planner replays hundreds of thousands)."""
  open_loop_B = jax.vmap(open_loop)
  cache: dict[int, np.ndarray] = {}

  def at(t: int) -> int:
    b, i = divmod(int(t), block)
    if b not in cache:
      cache[b] = np.asarray(
          open_loop_B(jnp.arange(b * block, (b + 1) * block, dtype=jnp.int32))
      )
    return int(cache[b][i])

  return at
