r"""One fragment of a streaming sync: what it owns, and its ``send`` and ``arrive``.

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) syncs the ``P``
fragments of the model (``fragments.py`` says which leaf is whose) one after
another. A :class:`Fragment` is one of them, as torchft's
``_StreamingDiLoCoFragment`` is (``torchft/local_sgd.py``): it owns its leaves
of the global parameters and of the outer momentum (only its own send changes
them), what it has run since its last send (:class:`FragmentState`), its turn
in the cycle (its index ``p``: it sends after ``(p + 1) h_f`` steps of each
cycle of ``P h_f``), the delay ``τ`` of its exchange and the mixing ``λ`` of
its arrival, and it has two named steps:

* :meth:`Fragment.send`, the end of its slot: pseudo-gradients of its leaves,
  the exchange (encoded by the run's codec, with error feedback), the outer step
  on its leaves, the controller's next ``H``; without overlap (``τ = 0``) the
  workers restart the fragment from the new global parameters, as DiLoCo does.
  With overlap the exchange is in flight for ``τ`` steps: the new global
  fragment is determined now, it is only not yet known to the workers; eager
  (Kale et al. 2025, arXiv 2502.12996) each worker meanwhile trains on from its
  own provisional outer step ``θ'_k = θ + outer(Δ_k)`` (the outer state as it
  was before the send; the shared state is advanced only by the true average).
* :meth:`Fragment.arrive`, ``τ`` steps later: the workers merge the new global
  fragment, ``θ_{k,p} ← λ θ_{k,p} + (1 − λ) θ_p``, or, eager, swap the
  provisional step for the true one, ``θ_k ← θ_k + (θ' − θ'_k)``, keeping their
  ``τ`` steps of progress. Nothing is sent.

Which fragment sends or arrives at which driver round is the schedule of
``stream.py``; every function here runs per device inside
``replicas.map_workers``, with the fragment's index static.

References:
  Douillard et al., Streaming DiLoCo with overlapping communication: Towards a
  Distributed Free Lunch, 2025. https://arxiv.org/abs/2501.18512
  Kale, Douillard, Donchev, Eager Updates For Overlapped Communication and
  Computation in DiLoCo, 2025. https://arxiv.org/abs/2502.12996
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from autoloco_jax.algorithms.diloco import sync
from autoloco_jax.algorithms.diloco.stream import ARRIVE, SEND, Stream
from autoloco_jax.compression import exchange, wire
from autoloco_jax.runtime import inner, replicas, state as state_lib


class FragmentState(NamedTuple):
  """What a fragment has run since its last send (with ``P > 1``; one fragment
  reads the round's own accumulators).

  Attributes:
    lr_sum: the inner learning rate accumulated since, ``S`` of its next send
      (float32 scalar).
    steps: inner steps since (int32 scalar).
  """

  lr_sum: jax.Array
  steps: jax.Array

  @classmethod
  def zero(cls) -> "FragmentState":
    return cls(jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32))


def _zeros(tree: Any) -> Any:
  return jax.tree.map(jnp.zeros_like, tree)


def _varying_like(x: jax.Array, *like: jax.Array) -> jax.Array:
  """``x``, cast (a no-op on its values) to vary over every mesh axis that
  ``x`` or one of ``like`` varies over inside ``shard_map``."""
  varying = lambda y: jax.typeof(y).manual_axis_type.varying
  axes = set().union(*map(varying, like)) - varying(x)
  return jax.lax.pcast(x, tuple(sorted(axes)), to="varying") if axes else x


@dataclasses.dataclass(frozen=True)
class Fragment:
  """Fragment ``p`` of a streaming sync, with its ``send`` and ``arrive``.

  Attributes:
    index: ``p``, its place in the cycle and in ``DiLoCoState.fragments``.
    leaves: per leaf of the parameter tree (``jax.tree.leaves`` order), whether
      it is this fragment's.
    stream: the run's fragments, delay ``τ``, mixing ``λ`` and eager flag.
    compression: the codec and error feedback of its messages.
    rule: the outer transform, controller, schedule and ``S_ref``.
  """

  index: int
  leaves: tuple[bool, ...]
  stream: Stream
  compression: exchange.Compression
  rule: sync.OuterRule

  def pick(self, new: Any, old: Any) -> Any:
    """Per leaf: ``new`` on this fragment's leaves, ``old`` on the others,
    typed as varying over the mesh axes either varies over (the events'
    branches must agree: the global parameters broadcast to the workers are
    invariant, the workers' own copies vary)."""
    new_leaves, treedef = jax.tree.flatten(new)
    old_leaves = jax.tree.leaves(old)
    mine = zip(self.leaves, new_leaves, old_leaves)
    return jax.tree.unflatten(
        treedef, [_varying_like(n if m else o, n, o) for m, n, o in mine]
    )

  def only(self, tree: Any) -> Any:
    """``tree`` on this fragment's leaves, zeros on the others."""
    return self.pick(tree, _zeros(tree))

  def keep_others(self, opt: Any, old_opt: Any) -> Any:
    """The outer state after this fragment's step: its leaves of the momentum
    from ``opt``, the others' as they were (``old_opt``); the scalars
    (count, ``α_t``, ``β_t``, ``r_t``) are the step's."""
    return opt._replace(momentum=self.pick(opt.momentum, old_opt.momentum))

  def period(self, own: sync.DiLoCoState, acc: inner.RoundAcc) -> tuple[Any, Any, Any]:
    """``(S, steps, fragments)``: what this fragment has run since its last
    send, and every fragment's state after it (all grow by the round's; this
    one's restarts)."""
    if own.fragments is None:
      return acc.lr_sum, acc.steps, None
    grown = [
        FragmentState(f.lr_sum + acc.lr_sum, f.steps + acc.steps) for f in own.fragments
    ]
    mine = grown[self.index]
    grown[self.index] = FragmentState(
        jnp.zeros_like(mine.lr_sum), jnp.zeros_like(mine.steps)
    )
    return mine.lr_sum, mine.steps, tuple(grown)

  def send(self, state: state_lib.TrainState, present_K: jax.Array):
    """The end of this fragment's slot: exchange, outer step on its leaves and,
    without overlap, the workers' restart from the new global fragment."""
    own, acc, rule = state.algo, state.acc, self.rule
    # Means over the workers present this round (all of them without faults).
    mean = lambda tree_K: replicas.worker_weighted_mean(tree_K, present_K)
    delta_K = sync.pseudo_gradients_K(own.global_params, state.params_K)
    if wire.carries(self.compression):
      # The encoded payloads of this fragment's leaves, all-gathered.
      delta, residual_K = wire.exchange(
          self.compression, delta_K, own.residual_K, present_K, self.leaves
      )
    else:  # the all-reduce of the decoded messages
      sent_K, residual_K = exchange.encode_workers(
          self.compression, delta_K, own.residual_K
      )
      delta = exchange.average(self.compression, sent_K, mean)
    worker_sq = mean(replicas.sq_norm_K(self.only(delta_K)))
    present = sync.workers_present(present_K)
    lr_sum, steps, fragments = self.period(own, acc)
    ref_sum = rule.reference_lr_sum(state.step - steps)
    new_params, opt = sync.outer_step(rule, own, delta, lr_sum, ref_sum)
    params = self.pick(new_params, own.global_params)
    opt = self.keep_others(opt, own.outer_opt)
    # With P > 1 the statistics are of the fragment's own period.
    period = dict(h=steps, lr_sum=lr_sum) if own.fragments is not None else {}
    stats, grad_norm = sync.statistics(
        rule,
        state,
        mean,
        present,
        replicas.sq_norm(self.only(delta)),
        worker_sq,
        **period,
    )
    next_h, controller = rule.controller.next_h(own.controller, stats)
    params_K, pending_K = self._workers_after_send(
        state, params, delta_K, lr_sum, ref_sum
    )
    extra = dict(fragment=self.index_i32, interval=next_h, sent=jnp.ones((), jnp.int32))
    if self.compression.ef_beta is not None:
      residual_K = self.pick(residual_K, own.residual_K)
      extra.update(ef_residual_norm=jnp.sqrt(mean(replicas.sq_norm_K(residual_K))))
    metrics = sync.round_metrics(
        stats,
        grad_norm,
        params,
        present,
        ref_sum,
        opt,
        self.next_h(SEND, next_h),
        **extra,
    )
    algo = own._replace(
        global_params=params,
        outer_opt=opt,
        controller=controller,
        fragments=fragments,
        pending_K=pending_K,
        residual_K=residual_K,
    )
    new_state = state._replace(
        params_K=params_K, algo=algo, acc=inner.reset(acc), round=state.round + 1
    )
    return new_state, metrics

  def _workers_after_send(self, state, params, delta_K, lr_sum, ref_sum):
    """``(params_K, pending_K)`` after a send: without overlap the fragment
    restarts from the new global; eager, from each worker's provisional step
    with its own ``Δ_k``; else the workers go on until the fragment arrives."""
    own = state.algo
    params_K, pending_K = state.params_K, own.pending_K
    if self.stream.tau == 0:
      return self.pick(replicas.broadcast_block(params, params_K), params_K), pending_K
    if self.stream.eager:
      step_K = jax.vmap(
          lambda d: self.rule.tx.update(
              d,
              own.outer_opt,
              own.global_params,
              inner_lr_sum=lr_sum,
              reference_lr_sum=ref_sum,
          )[0]
      )(delta_K)
      provisional_K = jax.tree.map(lambda a, u: a[None] + u, own.global_params, step_K)
      params_K = self.pick(provisional_K, params_K)
      pending_K = self.only(jax.tree.map(lambda a, q: a[None] - q, params, provisional_K))
    return params_K, pending_K

  def arrive(self, state: state_lib.TrainState, present_K: jax.Array):
    """The exchange of this fragment's last send arrives, ``τ`` steps after it:
    the workers merge it into their copies. Nothing is sent; the round's
    accumulators go on (the next send reads the whole slot)."""
    own = state.algo
    pending_K = own.pending_K
    if self.stream.eager:
      added_K = jax.tree.map(jnp.add, state.params_K, pending_K)
      params_K = self.pick(added_K, state.params_K)
      pending_K = _zeros(pending_K)
    else:
      lam = jnp.float32(self.stream.mix)
      merged_K = jax.tree.map(
          lambda x, a: lam * x + (1 - lam) * a[None], state.params_K, own.global_params
      )
      params_K = self.pick(merged_K, state.params_K)
    mean = replicas.worker_mean
    present = sync.workers_present(present_K)
    stats, grad_norm = sync.statistics(self.rule, state, mean, present, 0.0, 0.0)
    interval = jnp.asarray(own.controller.h, jnp.int32)
    extra = dict(
        fragment=self.index_i32, interval=interval, sent=jnp.zeros((), jnp.int32)
    )
    if self.compression.ef_beta is not None:
      extra.update(ef_residual_norm=jnp.sqrt(mean(replicas.sq_norm_K(own.residual_K))))
    ref_sum = jnp.zeros((), jnp.float32)
    next_h = self.next_h(ARRIVE, interval)
    metrics = sync.round_metrics(
        stats,
        grad_norm,
        own.global_params,
        present,
        ref_sum,
        own.outer_opt,
        next_h,
        **extra,
    )
    new_state = state._replace(
        params_K=params_K,
        algo=own._replace(pending_K=pending_K),
        round=state.round + 1,
    )
    return new_state, metrics

  @property
  def index_i32(self) -> jax.Array:
    """``p`` as the int32 scalar of the ``fragment`` metric."""
    return jnp.asarray(self.index, jnp.int32)

  def next_h(self, kind: str, interval: jax.Array) -> jax.Array:
    """The length of the driver round after this fragment's event of ``kind``
    when the controller's interval is ``interval`` (``Stream.steps_after``,
    which the host's plan calls too), int32."""
    slot = self.stream.slot_length(interval)
    return jnp.asarray(self.stream.steps_after(kind, slot), jnp.int32)
