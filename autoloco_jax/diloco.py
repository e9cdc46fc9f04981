"""DiLoCo and AutoLoCo rounds: local AdamW steps, then an outer step on the
averaged pseudo-gradient.

Round ``t`` (notation of ``docs/algorithms.md``): every worker starts from the
global parameters ``θ_t``, takes ``H_t`` inner steps to ``θ_{t,k}``, and then

.. math::

  Δ_{t,k} = θ_t − θ_{t,k}, \\qquad Δ_t = \\frac{1}{K}\\sum_k Δ_{t,k}
  \\quad\\text{(one all-reduce)}, \\qquad θ_{t+1} = θ_t + \\mathrm{outer}(Δ_t).

DiLoCo's outer step is Nesterov SGD (``outer.diloco``) and ``H`` is fixed.
AutoLoCo corrects the outer step by the round's accumulated inner learning rate
``S_t`` against the reference ``S_ref,t`` (``outer.autoloco``) and lets an
interval controller (``intervals``) choose ``H_{t+1}`` from scalar statistics of
the round. Both are this one round with different components.

The global parameters ``θ_t`` and the outer optimizer state exist once per
device (replicated over the mesh), as in MaxText's DiLoCo trainer: only the fast
weights and the inner optimizer state carry the replica axis, and the outer step
runs once per device, not once per worker.

References:
  Douillard et al., DiLoCo: Distributed Low-Communication Training of Language
  Models, 2023. https://arxiv.org/abs/2311.08105
  AutoLoCo: Communication Efficient Distributed LLM Training via Adaptive
  Synchronization, arXiv, Sept 2026.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from autoloco_jax import codecs, comm, exchange as exchange_lib, fragments, inner
from autoloco_jax import intervals, outer, replicas, streaming
from autoloco_jax import state as state_lib
from autoloco_jax.algorithms import Algorithm, Setup, jit_inner, jit_sync


class ExchangeState(NamedTuple):
  """What streaming, overlapped and compressed syncs carry between rounds
  (``None`` fields are not used by the run's settings).

  Attributes:
    residual_K: error feedback's per-worker residuals ``e_k`` (float32,
      ``params_K``-shaped, sharded on the replica axis); None without it.
    lr_sum_P: per fragment, the inner learning rate accumulated since its last
      sync (``S`` of its next sync; float32, P); None for one fragment.
    steps_P: per fragment, inner steps since its last sync (int32, P).
    pending_K: eager overlap: per worker, ``θ' − θ'_k`` on the fragment in
      flight (the true new global minus the worker's provisional one), added
      on arrival; None otherwise.
  """

  residual_K: Any = None
  lr_sum_P: Any = None
  steps_P: Any = None
  pending_K: Any = None

  def specs(self) -> "ExchangeState":
    w, r = replicas.WORKERS, replicas.REPLICATED
    on = lambda field, spec: None if field is None else spec
    return ExchangeState(
        residual_K=on(self.residual_K, w),
        lr_sum_P=on(self.lr_sum_P, r),
        steps_P=on(self.steps_P, r),
        pending_K=on(self.pending_K, w),
    )


class DiLoCoState(NamedTuple):
  """DiLoCo's state between rounds, one copy per device (replicated).

  Attributes:
    params: the global parameters ``θ_t`` (the round's anchor; with streaming,
      every fragment as of its last sync).
    opt: the outer optimizer's state (``outer.AutoLoCoState``: momentum ``m``,
      count and the last round's ``α_t``, ``β_t``, ``r_t``); with streaming the
      momentum of fragment ``p`` changes only at ``p``'s syncs.
    controller: the interval controller's state; its ``h`` is the next round's.
    exchange: an :class:`ExchangeState` for streaming, overlapped or
      compressed syncs; None for DiLoCo's own (the default config), whose
      checkpoints keep their layout.
  """

  params: Any
  opt: outer.AutoLoCoState
  controller: Any
  exchange: Any = None

  def specs(self) -> "DiLoCoState":
    r = replicas.REPLICATED
    ex = None if self.exchange is None else self.exchange.specs()
    return DiLoCoState(params=r, opt=r, controller=r, exchange=ex)


@dataclasses.dataclass(frozen=True)
class DiLoCo:
  """DiLoCo's hyperparameters.

  Attributes:
    alpha: outer learning rate ``α`` (paper: 0.7).
    beta: outer Nesterov momentum ``β`` (paper: 0.9).
    controller: chooses each round's ``H`` (``intervals.fixed(H)`` for DiLoCo).
    h0: the first round's ``H``.
    stream: fragments, overlap and eager updates (``streaming.Stream``; the
      default is DiLoCo's sync of the whole model).
    compression: the codec of every message and error feedback
      (``exchange.Compression``; the default sends float32 as it is).
  """

  alpha: float
  beta: float
  controller: intervals.IntervalController
  h0: int
  stream: streaming.Stream = streaming.Stream()
  compression: exchange_lib.Compression = exchange_lib.Compression()

  name = "diloco"

  @classmethod
  def from_config(cls, config: Any) -> "DiLoCo":
    """From ``config.diloco`` (``alpha``, ``beta``), ``config.interval``
    (``h`` is the first ``H``; a ``schedule`` controller starts at its own first
    value), ``config.stream`` and ``config.compress``."""
    controller = intervals.from_config(config.interval, config.inner.lr)
    h0 = int(config.interval.h)
    if config.interval.controller == "schedule":
      h0 = int(controller.init().h)
    return cls(
        alpha=float(config.diloco.alpha),
        beta=float(config.diloco.beta),
        controller=controller,
        h0=h0,
        stream=streaming.Stream.from_config(config),
        compression=exchange_lib.Compression.from_config(config),
    )

  def outer_tx(self, setup: Setup) -> optax.GradientTransformationExtraArgs:
    return outer.diloco(self.alpha, self.beta)

  def reference_lr_sum(self, setup: Setup, start_step: jax.Array) -> jax.Array:
    """``S_ref,t``: DiLoCo applies no correction; the value is only logged."""
    return outer.reference_lr_sum(setup.lr_schedule, start_step, self.h0)

  def build(self, setup: Setup) -> Algorithm:
    outer_tx = self.outer_tx(setup)
    controller = self.controller
    lr_schedule = setup.lr_schedule
    k = setup.num_workers
    stream, compression = self.stream, self.compression
    P, tau = stream.fragments, stream.tau
    plain = stream.plain and compression.plain
    if not stream.plain:
      stream.check_intervals(min(self.h0, controller.h_min))
    # The parameters' shapes, known once init_state has seen them: the clock's
    # payload of each fragment depends on them.
    layout: dict = {}

    def init_state(params) -> state_lib.TrainState:
      params_K, inner_opt_K = setup.init_workers(params)
      layout["shapes"] = jax.tree.map(
          lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), params
      )
      ex = None
      if not plain:
        zeros_K = lambda: jax.tree.map(
            lambda x: jnp.zeros(jnp.shape(x), jnp.float32), params_K
        )
        ex = ExchangeState(
            residual_K=zeros_K() if compression.ef_beta is not None else None,
            lr_sum_P=jnp.zeros((P,), jnp.float32) if P > 1 else None,
            steps_P=jnp.zeros((P,), jnp.int32) if P > 1 else None,
            pending_K=zeros_K() if stream.eager else None,
        )
      own = DiLoCoState(
          params=params,
          opt=outer_tx.init(params),
          controller=controller.init(self.h0),
          exchange=ex,
      )
      return state_lib.init(params_K, inner_opt_K, own, k)

    def picker(params, fragment):
      """``pick(new, old)``: per leaf, ``new`` on ``fragment``'s leaves."""
      if P == 1:
        return lambda new, old: new
      ids = fragments.leaf_fragments(params, P, stream.mode)
      return lambda new, old: fragments.select(ids, fragment, new, old)

    def outer_metrics(stats, grad_norm, params, present, ref_sum, opt, next_h, extra):
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

    def send_block(state: state_lib.TrainState, present_K):
      """The sync of one fragment (the whole model for ``P = 1``): exchange,
      outer step and, without overlap, the workers' reset."""
      own, acc, ex = state.outer, state.acc, state.outer.exchange
      fragment = stream.fragment_of_round(state.round)
      pick = picker(own.params, fragment)
      # Means over the workers present this round (all of them without faults).
      mean = lambda tree_K: replicas.worker_weighted_mean(tree_K, present_K)
      delta_K = jax.tree.map(lambda a, p: a[None] - p, own.params, state.params_K)
      residual_K = None if ex is None else ex.residual_K
      sent_K, new_residual_K = exchange_lib.encode_workers(
          compression, delta_K, residual_K
      )
      delta = mean(sent_K)  # the all-reduce (all-gather for sparse or scaled codecs)
      zeros = lambda tree: jax.tree.map(jnp.zeros_like, tree)
      own_delta_K = delta_K if P == 1 else pick(delta_K, zeros(delta_K))
      worker_sq = mean(replicas.sq_norm_K(own_delta_K))  # a scalar
      present = jax.lax.psum(jnp.sum(present_K), replicas.REPLICA)

      if P > 1:
        lr_sum_P = ex.lr_sum_P + acc.lr_sum
        steps_P = ex.steps_P + acc.steps
        lr_sum, steps = lr_sum_P[fragment], steps_P[fragment]
        lr_sum_P = lr_sum_P.at[fragment].set(0.0)
        steps_P = steps_P.at[fragment].set(0)
      else:
        lr_sum, steps = acc.lr_sum, acc.steps
      ref_sum = self.reference_lr_sum(setup, state.step - steps)
      updates, opt = outer_tx.update(
          delta, own.opt, own.params, inner_lr_sum=lr_sum, reference_lr_sum=ref_sum
      )
      params = pick(optax.apply_updates(own.params, updates), own.params)
      if P > 1:
        opt = opt._replace(momentum=pick(opt.momentum, own.opt.momentum))

      round_stats = inner.round_stats(acc, state.step, lr_schedule, mean)
      grad_norm = round_stats.pop("grad_norm")
      if P > 1:  # the fragment's own period, not the driver round's
        round_stats.update(h=steps, lr_sum=lr_sum)
      stats = intervals.sync_stats(
          round=state.round,
          **round_stats,
          delta_sq_norm=replicas.sq_norm(delta if P == 1 else pick(delta, zeros(delta))),
          worker_sq_norm=worker_sq,
          num_workers=present.astype(jnp.int32),
      )
      next_h, ctrl = controller.next_h(own.controller, stats)

      params_K, pending_K = state.params_K, None if ex is None else ex.pending_K
      if tau == 0:
        params_K = pick(replicas.broadcast_block(params, state.params_K), params_K)
        round_h = next_h if P == 1 else jnp.maximum(next_h // P, 1)
      else:
        if stream.eager:
          # The worker's provisional outer step with its own pseudo-gradient.
          step_K = jax.vmap(
              lambda d: outer_tx.update(
                  d, own.opt, own.params, inner_lr_sum=lr_sum, reference_lr_sum=ref_sum
              )[0]
          )(delta_K)
          provisional_K = jax.tree.map(lambda a, u: a[None] + u, own.params, step_K)
          params_K = pick(provisional_K, params_K)
          pending_K = pick(
              jax.tree.map(lambda a, q: a[None] - q, params, provisional_K),
              zeros(pending_K),
          )
        round_h = jnp.asarray(tau, jnp.int32)

      extra = {}
      if not plain:
        extra.update(fragment=jnp.asarray(fragment, jnp.int32), interval=next_h)
        extra.update(sent=jnp.ones((), jnp.int32))
      if compression.ef_beta is not None:
        new_residual_K = pick(new_residual_K, residual_K)
        extra.update(ef_residual_norm=jnp.sqrt(mean(replicas.sq_norm_K(new_residual_K))))
      metrics = outer_metrics(
          stats, grad_norm, params, present, ref_sum, opt, round_h, extra
      )
      if ex is not None:
        ex = ExchangeState(
            residual_K=new_residual_K,
            lr_sum_P=lr_sum_P if P > 1 else None,
            steps_P=steps_P if P > 1 else None,
            pending_K=pending_K,
        )
      new_state = state._replace(
          params_K=params_K,
          outer=DiLoCoState(params=params, opt=opt, controller=ctrl, exchange=ex),
          acc=inner.reset(acc),
          round=state.round + 1,
      )
      return new_state, metrics

    def arrive_block(state: state_lib.TrainState, present_K):
      """An overlapped fragment arrives ``τ`` steps after its send: merge it
      into the workers' copies. Nothing is sent; the round's accumulators go
      on (the next send reads the whole slot)."""
      own, acc, ex = state.outer, state.acc, state.outer.exchange
      fragment = stream.fragment_of_round(state.round)
      pick = picker(own.params, fragment)
      pending_K = ex.pending_K
      if stream.eager:
        params_K = pick(jax.tree.map(jnp.add, state.params_K, pending_K), state.params_K)
        pending_K = jax.tree.map(jnp.zeros_like, pending_K)
      else:
        lam = jnp.float32(stream.mix)
        merged_K = jax.tree.map(
            lambda x, a: lam * x + (1 - lam) * a[None], state.params_K, own.params
        )
        params_K = pick(merged_K, state.params_K)
      mean = replicas.worker_mean
      present = jax.lax.psum(jnp.sum(present_K), replicas.REPLICA)
      round_stats = inner.round_stats(acc, state.step, lr_schedule, mean)
      grad_norm = round_stats.pop("grad_norm")
      stats = intervals.sync_stats(
          round=state.round,
          **round_stats,
          delta_sq_norm=0.0,
          worker_sq_norm=0.0,
          num_workers=present.astype(jnp.int32),
      )
      h = own.controller.h
      round_h = (jnp.maximum(h // P, 1) - tau).astype(jnp.int32)
      extra = dict(
          fragment=jnp.asarray(fragment, jnp.int32),
          interval=jnp.asarray(h, jnp.int32),
          sent=jnp.zeros((), jnp.int32),
      )
      if compression.ef_beta is not None:
        extra.update(ef_residual_norm=jnp.sqrt(mean(replicas.sq_norm_K(ex.residual_K))))
      ref_sum = jnp.zeros((), jnp.float32)
      metrics = outer_metrics(
          stats, grad_norm, own.params, present, ref_sum, own.opt, round_h, extra
      )
      new_state = state._replace(
          params_K=params_K,
          outer=own._replace(exchange=ex._replace(pending_K=pending_K)),
          round=state.round + 1,
      )
      return new_state, metrics

    def sync_block(state: state_lib.TrainState, present_K):
      if tau == 0:
        return send_block(state, present_K)
      return jax.lax.cond(
          state.round % 2 == 0, send_block, arrive_block, state, present_K
      )

    def payload_bytes(fragment: int) -> float:
      """Encoded bytes of fragment ``fragment`` of one worker's message."""
      if "shapes" not in layout:
        raise ValueError(
            "the payload of a streaming or compressed sync is known once "
            "init_state has seen the parameters; call it before comm_pattern"
        )
      shapes = layout["shapes"]
      ids = fragments.leaf_fragments(shapes, P, stream.mode)
      leaves = [x for f, x in zip(ids, jax.tree.leaves(shapes)) if f == fragment]
      return codecs.tree_encoded_bytes(compression.codec, leaves)

    def comm_pattern(round_index: int, h: int) -> comm.RoundComm:
      steps_K = np.full(k, h, np.int64)
      if plain:
        return comm.RoundComm("allreduce", steps_K)
      fragment = stream.fragment_of_round(round_index)
      message = dict(payload_bytes=payload_bytes(fragment), dense=compression.codec.dense)
      if tau == 0:
        return comm.RoundComm("allreduce", steps_K, **message)
      if round_index % 2 == 0:
        return comm.RoundComm("send", steps_K, window=tau, **message)
      return comm.RoundComm("arrive", steps_K)

    eval_params = None
    if not stream.plain:
      # Worker 0 holds a mix of fresh and stale fragments; evaluate the global
      # parameters, every fragment as of its last sync.
      replicated = jax.sharding.NamedSharding(setup.mesh, replicas.REPLICATED)
      eval_params = jax.jit(
          lambda state: {"": state.outer.params}, out_shardings=replicated
      )

    def host_next_h(round_index: int) -> int:
      """The ``next_h`` of the sync ending ``round_index``, as ``send_block`` and
      ``arrive_block`` compute it, from the controller's host-known intervals."""
      if tau == 0:
        interval = controller.host_h(round_index + 1)
        return interval if P == 1 else max(interval // P, 1)
      if round_index % 2 == 0:  # a send: the exchange is in flight for tau steps
        return tau
      interval = controller.host_h((round_index + 1) // 2)  # after the sends so far
      return max(interval // P, 1) - tau

    h_longest = max(self.h0, controller.h_max)
    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner(setup.inner_loop(), setup.mesh),
        sync=jit_sync(sync_block, setup.mesh),
        comm_pattern=comm_pattern,
        h_max=h_longest if stream.plain else stream.slot_length(h_longest),
        supports_faults=tau == 0,
        eval_params=eval_params,
        first_h=None if stream.plain else stream.slot_length(self.h0),
        host_next_h=None if controller.host_h is None else host_next_h,
    )


@dataclasses.dataclass(frozen=True)
class AutoLoCo(DiLoCo):
  """AutoLoCo's hyperparameters: DiLoCo's, an adaptive ``controller``, and the
  outer-step correction by the accumulated inner learning rate.

  Attributes:
    correction: ``none | momentum | lr | both | table`` (``outer.autoloco``).
    reference: ``schedule`` (``S_ref,t`` = the schedule summed over ``H_ref``
      steps from the round's start) or ``peak`` (``H_ref · η_peak``).
    h_ref: ``H_ref``, the interval ``(α, β)`` were tuned for.
    tuned: for ``correction=table``: DiLoCo's outer pairs tuned at fixed
      intervals, ``((H_i, α_i, β_i), ...)``, one of them ``(H_ref, α, β)``; the
      round's ``(α_t, β_t)`` is interpolated between them at ``H = r_t H_ref``.
    on_change: ``keep | restart | rescale``: the outer momentum buffer when a
      round's ratio differs from the last round's (``outer.autoloco``).
  """

  correction: str = "both"
  reference: str = "schedule"
  h_ref: int = 0
  tuned: tuple = ()
  on_change: str = "keep"

  name = "autoloco"

  def __post_init__(self):
    if self.reference not in outer.REFERENCES:
      raise ValueError(
          f"autoloco.reference must be one of {outer.REFERENCES}, "
          f"got {self.reference!r}"
      )
    if self.h_ref < 1:
      raise ValueError(f"autoloco.h_ref must be >= 1, got {self.h_ref}")
    outer.autoloco(  # validates correction, table and on_change
        self.alpha,
        self.beta,
        self.correction,
        table=self.table,
        on_change=self.on_change,
    )

  @property
  def table(self) -> tuple:
    """``tuned`` as the outer transform's ``(r_i, α_i/α, β_i)`` points."""
    rows = sorted(tuple(row) for row in self.tuned)
    if any(len(row) != 3 for row in rows):
      raise ValueError(f"autoloco.tuned rows are (H, alpha, beta), got {self.tuned!r}")
    return tuple((h / self.h_ref, a / self.alpha, b) for h, a, b in rows)

  @classmethod
  def from_config(cls, config: Any) -> "AutoLoCo":
    """DiLoCo's fields, and ``config.autoloco`` (``correction``, ``reference``,
    ``h_ref``: 0 = ``interval.h``; ``tuned`` and ``on_change``, absent in older
    configs)."""
    d = DiLoCo.from_config(config)
    a = config.autoloco
    return cls(
        **{f.name: getattr(d, f.name) for f in dataclasses.fields(DiLoCo)},
        correction=a.correction,
        reference=a.reference,
        h_ref=int(a.h_ref or config.interval.h),
        tuned=tuple(tuple(row) for row in a.get("tuned", ())),
        on_change=a.get("on_change", "keep"),
    )

  def outer_tx(self, setup: Setup) -> optax.GradientTransformationExtraArgs:
    return outer.autoloco(
        self.alpha,
        self.beta,
        correction=self.correction,
        table=self.table,
        on_change=self.on_change,
    )

  def reference_lr_sum(self, setup: Setup, start_step: jax.Array) -> jax.Array:
    if self.reference == "peak":
      return outer.peak_reference_lr_sum(setup.peak_lr, self.h_ref)
    return outer.reference_lr_sum(setup.lr_schedule, start_step, self.h_ref)
