r"""Streaming and overlapped syncs: which fragment a round syncs, and when.

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) syncs the ``P``
fragments of the model (``fragments.py``) one after another: fragment ``p``
syncs every ``H`` inner steps at offset ``p H / P``, so the network carries
``1/P`` of the model every ``H/P`` steps instead of all of it every ``H``
steps. On the round driver (``rounds.run_round``) one driver round is
``h_f = max(1, ⌊H / P⌋)`` inner steps and the sync that ends round ``r``
handles fragment ``r mod P`` only. ``H`` is the controller's interval (fixed,
or AutoLoCo's adaptive one), the period of each fragment; when ``P`` does not
divide ``H`` each fragment syncs every ``P ⌊H/P⌋ ≤ H`` steps (the remainder is
dropped, never carried), and ``P > H`` gives rounds of one step.

The first sync of fragment ``p`` covers the ``(p + 1) h_f`` steps since the
start, the later ones ``P h_f``: each fragment keeps its own accumulated inner
learning rate ``S`` and step count since its last sync (:class:`ExchangeState`),
which AutoLoCo's corrected outer step and its controller read.

Overlap (``τ >= 1``, the paper's section 2.3): a fragment's exchange is in
flight for ``τ`` inner steps while training goes on. The driver runs two events
per fragment slot: a *send* sync after the slot's steps (pseudo-gradient,
exchange, outer step: the new global fragment is determined now, it is only
not yet known to the workers), then ``τ`` steps later an *arrive* sync that
merges it into the workers' copies,

.. math:: θ_{k,p} ← λ\, θ_{k,p} + (1 − λ)\, θ_{p}^{\text{global}},

with the mixing factor ``λ = stream.mix`` (the weight of the local copy). The
round lengths alternate ``τ`` (after a send) and ``h_f − τ`` (after an
arrival), so sends happen at the same steps as without overlap; ``τ < h_f``
is required. ``τ = 0`` is no overlap: the send also resets the fragment to the
new global parameters, as DiLoCo does, and ``λ`` is not used.

Eager (Kale et al. 2025, arXiv 2502.12996), ``stream.eager`` with ``τ >= 1``:
at the send each worker applies the outer step at once with its *own*
pseudo-gradient ``Δ_k`` in place of the average that has not arrived
(``θ'_k = θ + outer(Δ_k)``, with the outer state as it was before the sync:
the same ``m``, ``α_t``, ``β_t``; the shared state is advanced only by the
true average) and keeps training from ``θ'_k``. When the average arrives the
provisional step is replaced by the true one, ``θ_k ← θ_k + (θ' − θ'_k)``:
the worker keeps its ``τ`` steps of progress, now on top of the true global
fragment (``λ`` is not used). This is the paper's idea (a local proxy for the
outer gradient while the all-reduce is in flight) for an exchange that
arrives within the same fragment slot; the paper's own proxy,
``(1/K) Δ_k + ((K − 1)/K)`` times the previous round's average of the other
workers, is built for a delay of a whole outer step and is not implemented.

The plain sync of the whole model is ``sync.WholeModelSync``; :class:`StreamedSync`
is the general one, built from the same pieces (``sync.py``): fragments,
overlap (a *send* and an *arrive* event per fragment slot), eager updates, and
compressed messages with error feedback behind the one codec interface
(``exchange.encode_workers``).

References:
  Douillard et al., Streaming DiLoCo with overlapping communication: Towards a
  Distributed Free Lunch, 2025. https://arxiv.org/abs/2501.18512
  Kale, Douillard, Donchev, Eager Updates For Overlapped Communication and
  Computation in DiLoCo, 2025. https://arxiv.org/abs/2502.12996
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from autoloco_jax import ranges
from autoloco_jax.algorithms.diloco import fragments, sync
from autoloco_jax.compression import codecs, exchange as exchange_lib
from autoloco_jax.runtime import contract, inner, replicas

#: ``stream.mix`` default: the paper's mixing factor as we read it (equal
#: weights for the local and the arriving global copy). It only acts with
#: ``τ >= 1``, so the default config is DiLoCo.
DEFAULT_MIX = 0.5


@dataclasses.dataclass(frozen=True)
class Stream:
  """How the DiLoCo family syncs its parameters (``config.stream``).

  Attributes:
    fragments: ``P``, fragments synced in turn (1: the whole model, DiLoCo).
    mode: ``strided`` or ``contiguous`` (``fragments.py``).
    tau: ``τ``, inner steps an exchange is in flight (0: no overlap).
    mix: ``λ``, weight of the worker's own copy when a fragment arrives.
    eager: apply the outer step with the worker's own pseudo-gradient until
      the average arrives (needs ``τ >= 1``; ``mix`` is then not used).
  """

  fragments: int = 1
  mode: str = "strided"
  tau: int = 0
  mix: float = DEFAULT_MIX
  eager: bool = False

  def __post_init__(self):
    for name in ("fragments", "tau", "mix"):
      ranges.check(f"stream.{name}", getattr(self, name))
    if self.mode not in fragments.MODES:
      raise ValueError(f"stream.mode must be one of {fragments.MODES}, got {self.mode!r}")
    if self.eager and self.tau < 1:
      raise ValueError(
          "stream.eager needs an exchange in flight (stream.tau >= 1); with "
          "tau = 0 the average is there at once"
      )

  @classmethod
  def from_config(cls, config: Any) -> "Stream":
    """From ``config.stream``."""
    cfg = config.stream
    return cls(
        fragments=int(cfg.fragments),
        mode=str(cfg.mode),
        tau=int(cfg.tau),
        mix=float(cfg.mix),
        eager=bool(cfg.eager),
    )

  @property
  def plain(self) -> bool:
    """True for DiLoCo's sync: one fragment, no overlap."""
    return self.fragments == 1 and self.tau == 0

  @property
  def events_per_slot(self) -> int:
    """Driver syncs per fragment slot: 1 (send) or 2 (send, arrive)."""
    return 2 if self.tau else 1

  def slot_length(self, h: int) -> int:
    """``h_f = max(1, ⌊H / P⌋)``, inner steps per fragment slot."""
    return max(1, int(h) // self.fragments)

  def fragment_of_round(self, round_index: Any) -> Any:
    """The fragment the sync ending driver round ``round_index`` handles
    (Python ints or traced)."""
    return (round_index // self.events_per_slot) % self.fragments

  def check_intervals(self, h_min: int) -> None:
    """Refuses an overlap the shortest interval cannot hold (``τ < h_f``)."""
    if self.tau and self.tau >= self.slot_length(h_min):
      raise ValueError(
          f"stream.tau ({self.tau}) must be < H/P = {self.slot_length(h_min)} for "
          f"the shortest interval H = {h_min} and P = {self.fragments}: an exchange "
          "must arrive before its fragment's slot ends"
      )


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


def require_unstreamed(config: Any, algorithm: str) -> None:
  """Refuses ``config.stream`` settings an algorithm does not implement (DDP,
  NoLoCo, GASLoC).

  Raises:
    ValueError: naming the setting.
  """
  if not Stream.from_config(config).plain:
    raise ValueError(
        f"{algorithm} does not stream: stream.fragments must be 1 and stream.tau 0 "
        "(streaming and overlapped syncs are implemented for diloco and autoloco)"
    )


def _zeros(tree: Any) -> Any:
  return jax.tree.map(jnp.zeros_like, tree)


@dataclasses.dataclass(frozen=True)
class StreamedSync:
  """The DiLoCo family's sync with fragments, overlap, eager updates or
  compressed messages: ``(state, present_K) -> (state, metrics)``, one driver
  event per call (a send, or with ``τ >= 1`` alternately a send and an arrival).

  The algorithm's own state (``state.algo``) has ``global_params``, ``outer_opt``,
  ``controller`` and ``exchange`` (an :class:`ExchangeState`).

  Attributes:
    stream: fragments, overlap and eager updates.
    compression: the codec and error feedback of every message.
    outer: the outer transform, controller, schedule and ``S_ref``.
  """

  stream: Stream
  compression: exchange_lib.Compression
  outer: sync.Outer

  @property
  def events_per_interval(self) -> int:
    """Driver syncs per controller call: a send, and an arrival with ``τ >= 1``."""
    return self.stream.events_per_slot

  def init(self, params_K: Any) -> ExchangeState:
    """The exchange state before the first round."""
    P = self.stream.fragments
    zeros_K = lambda: jax.tree.map(
        lambda x: jnp.zeros(jnp.shape(x), jnp.float32), params_K
    )
    return ExchangeState(
        residual_K=zeros_K() if self.compression.ef_beta is not None else None,
        lr_sum_P=jnp.zeros((P,), jnp.float32) if P > 1 else None,
        steps_P=jnp.zeros((P,), jnp.int32) if P > 1 else None,
        pending_K=zeros_K() if self.stream.eager else None,
    )

  def __call__(self, state, present_K):
    if self.stream.tau == 0:
      return self.send(state, present_K)
    return jax.lax.cond(state.round % 2 == 0, self.send, self.arrive, state, present_K)

  def picker(self, params: Any, fragment: Any) -> Callable:
    """``pick(new, old)``: per leaf, ``new`` on ``fragment``'s leaves."""
    if self.stream.fragments == 1:
      return lambda new, old: new
    ids = fragments.leaf_fragments(params, self.stream.fragments, self.stream.mode)
    return lambda new, old: fragments.select(ids, fragment, new, old)

  def round_length(self, round_index: Any, interval: Any) -> jax.Array:
    """Inner steps of the driver round after the event that ends driver round
    ``round_index``, when the controller's interval is ``interval``: the slot
    ``h_f = max(1, ⌊H / P⌋)``, split into ``τ`` (after a send) and ``h_f − τ``
    (after an arrival). Python ints or traced: the sync and the host call it
    (the host with NumPy, not one dispatched JAX op per round: the planner
    replays hundreds of thousands of rounds)."""
    P, tau = self.stream.fragments, self.stream.tau
    traced = isinstance(round_index, jax.Array) or isinstance(interval, jax.Array)
    xp = jnp if traced else np
    slot = interval if P == 1 else xp.maximum(interval // P, 1)
    if tau == 0:
      return slot
    return xp.where(round_index % 2 == 0, tau, slot - tau).astype(xp.int32)

  def _period(self, ex: ExchangeState, acc: inner.RoundAcc, fragment: Any):
    """``(S, steps, ex)`` of the fragment's sync: since its last sync."""
    if self.stream.fragments == 1:
      return acc.lr_sum, acc.steps, ex
    lr_sum_P, steps_P = ex.lr_sum_P + acc.lr_sum, ex.steps_P + acc.steps
    lr_sum, steps = lr_sum_P[fragment], steps_P[fragment]
    ex = ex._replace(lr_sum_P=lr_sum_P.at[fragment].set(0.0))
    return lr_sum, steps, ex._replace(steps_P=steps_P.at[fragment].set(0))

  def _workers_after_send(self, state, params, pick, provisional_step_K):
    """``(params_K, pending_K)`` after a send: without overlap the fragment
    restarts from the new global; eager, from each worker's provisional step;
    else the workers go on until the fragment arrives."""
    params_K, pending_K = state.params_K, state.algo.exchange.pending_K
    if self.stream.tau == 0:
      return pick(replicas.broadcast_block(params, params_K), params_K), pending_K
    if self.stream.eager:
      own = state.algo
      step_K = provisional_step_K()
      provisional_K = jax.tree.map(lambda a, u: a[None] + u, own.global_params, step_K)
      params_K = pick(provisional_K, params_K)
      pending_K = pick(
          jax.tree.map(lambda a, q: a[None] - q, params, provisional_K),
          _zeros(pending_K),
      )
    return params_K, pending_K

  def send(self, state, present_K):
    """A fragment's sync: exchange, outer step and, without overlap, the
    workers' reset."""
    own, acc, ex = state.algo, state.acc, state.algo.exchange
    P, outer = self.stream.fragments, self.outer
    fragment = self.stream.fragment_of_round(state.round)
    pick = self.picker(own.global_params, fragment)
    only = lambda tree: tree if P == 1 else pick(tree, _zeros(tree))
    # Means over the workers present this round (all of them without faults).
    mean = lambda tree_K: replicas.worker_weighted_mean(tree_K, present_K)
    delta_K = sync.pseudo_gradients_K(own.global_params, state.params_K)
    sent_K, residual_K = exchange_lib.encode_workers(
        self.compression, delta_K, ex.residual_K
    )
    delta = mean(sent_K)  # the all-reduce (all-gather for sparse or scaled codecs)
    worker_sq = mean(replicas.sq_norm_K(only(delta_K)))
    present = sync.workers_present(present_K)
    lr_sum, steps, ex = self._period(ex, acc, fragment)
    ref_sum = outer.reference_lr_sum(state.step - steps)
    new_params, opt = sync.outer_step(outer, own, delta, lr_sum, ref_sum)
    params = pick(new_params, own.global_params)
    if P > 1:
      opt = opt._replace(momentum=pick(opt.momentum, own.outer_opt.momentum))
    period = dict(h=steps, lr_sum=lr_sum) if P > 1 else {}  # the fragment's own
    stats, grad_norm = sync.statistics(
        outer, state, mean, present, replicas.sq_norm(only(delta)), worker_sq, **period
    )
    next_h, controller = outer.controller.next_h(own.controller, stats)
    provisional_step_K = lambda: jax.vmap(
        lambda d: outer.tx.update(
            d, own.outer_opt, own.global_params, inner_lr_sum=lr_sum, reference_lr_sum=ref_sum
        )[0]
    )(
        delta_K
    )  # eager: the worker's own outer step with its own Δ_k
    params_K, pending_K = self._workers_after_send(
        state, params, pick, provisional_step_K
    )
    extra = dict(fragment=jnp.asarray(fragment, jnp.int32), interval=next_h)
    extra.update(sent=jnp.ones((), jnp.int32))
    if self.compression.ef_beta is not None:
      residual_K = pick(residual_K, ex.residual_K)
      extra.update(ef_residual_norm=jnp.sqrt(mean(replicas.sq_norm_K(residual_K))))
    metrics = sync.round_metrics(
        stats,
        grad_norm,
        params,
        present,
        ref_sum,
        opt,
        self.round_length(state.round, next_h),
        **extra,
    )
    ex = ex._replace(residual_K=residual_K, pending_K=pending_K)
    new_state = state._replace(
        params_K=params_K,
        algo=own._replace(global_params=params, outer_opt=opt, controller=controller, exchange=ex),
        acc=inner.reset(acc),
        round=state.round + 1,
    )
    return new_state, metrics

  def arrive(self, state, present_K):
    """An overlapped fragment arrives ``τ`` steps after its send: merge it
    into the workers' copies. Nothing is sent; the round's accumulators go
    on (the next send reads the whole slot)."""
    own, ex = state.algo, state.algo.exchange
    fragment = self.stream.fragment_of_round(state.round)
    pick = self.picker(own.global_params, fragment)
    pending_K = ex.pending_K
    if self.stream.eager:
      params_K = pick(jax.tree.map(jnp.add, state.params_K, pending_K), state.params_K)
      pending_K = _zeros(pending_K)
    else:
      lam = jnp.float32(self.stream.mix)
      merged_K = jax.tree.map(
          lambda x, a: lam * x + (1 - lam) * a[None], state.params_K, own.global_params
      )
      params_K = pick(merged_K, state.params_K)
    mean = replicas.worker_mean
    present = sync.workers_present(present_K)
    stats, grad_norm = sync.statistics(self.outer, state, mean, present, 0.0, 0.0)
    h = own.controller.h
    extra = dict(
        fragment=jnp.asarray(fragment, jnp.int32),
        interval=jnp.asarray(h, jnp.int32),
        sent=jnp.zeros((), jnp.int32),
    )
    if self.compression.ef_beta is not None:
      extra.update(ef_residual_norm=jnp.sqrt(mean(replicas.sq_norm_K(ex.residual_K))))
    ref_sum = jnp.zeros((), jnp.float32)
    metrics = sync.round_metrics(
        stats,
        grad_norm,
        own.global_params,
        present,
        ref_sum,
        own.outer_opt,
        self.round_length(state.round, h),
        **extra,
    )
    new_state = state._replace(
        params_K=params_K,
        algo=own._replace(exchange=ex._replace(pending_K=pending_K)),
        round=state.round + 1,
    )
    return new_state, metrics

  def comm_pattern(self, shapes: Any, num_workers: int) -> Callable:
    """``(round_index, h) -> contract.RoundComm`` for the simulated clock: the
    encoded payload of the round's fragment, from the parameters' shapes
    (``shapes``, an ``contract.ParamShapes``)."""
    stream, codec = self.stream, self.compression.codec
    sizes = {}  # fragment -> encoded bytes, computed once (the shapes are fixed)

    def payload(fragment: int) -> float:
      if fragment not in sizes:
        tree = shapes.get()
        ids = fragments.leaf_fragments(tree, stream.fragments, stream.mode)
        mine = [x for f, x in zip(ids, jax.tree.leaves(tree)) if f == fragment]
        sizes[fragment] = codecs.tree_encoded_bytes(codec, mine)
      return sizes[fragment]

    def pattern(round_index: int, h: int) -> contract.RoundComm:
      steps_K = np.full(num_workers, h, np.int64)
      fragment = stream.fragment_of_round(round_index)
      message = dict(payload_bytes=payload(int(fragment)), dense=codec.dense)
      if stream.tau == 0:
        return contract.RoundComm("allreduce", steps_K, **message)
      if round_index % 2 == 0:
        return contract.RoundComm("send", steps_K, window=stream.tau, **message)
      return contract.RoundComm("arrive", steps_K)

    return pattern
