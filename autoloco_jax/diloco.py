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

from autoloco_jax import comm, inner, intervals, outer, replicas
from autoloco_jax import state as state_lib
from autoloco_jax.algorithms import Algorithm, Setup, jit_inner, jit_sync


class DiLoCoState(NamedTuple):
  """DiLoCo's state between rounds, one copy per device (replicated).

  Attributes:
    params: the global parameters ``θ_t`` (the round's anchor).
    opt: the outer optimizer's state (``outer.AutoLoCoState``: momentum ``m``,
      count and the last round's ``α_t``, ``β_t``, ``r_t``).
    controller: the interval controller's state; its ``h`` is the next round's.
  """

  params: Any
  opt: outer.AutoLoCoState
  controller: Any

  def specs(self) -> "DiLoCoState":
    r = replicas.REPLICATED
    return DiLoCoState(params=r, opt=r, controller=r)


@dataclasses.dataclass(frozen=True)
class DiLoCo:
  """DiLoCo's hyperparameters.

  Attributes:
    alpha: outer learning rate ``α`` (paper: 0.7).
    beta: outer Nesterov momentum ``β`` (paper: 0.9).
    controller: chooses each round's ``H`` (``intervals.fixed(H)`` for DiLoCo).
    h0: the first round's ``H``.
  """

  alpha: float
  beta: float
  controller: intervals.IntervalController
  h0: int

  name = "diloco"

  @classmethod
  def from_config(cls, config: Any) -> "DiLoCo":
    """From ``config.diloco`` (``alpha``, ``beta``) and ``config.interval``
    (``h`` is the first ``H``; a ``schedule`` controller starts at its own first
    value)."""
    controller = intervals.from_config(config.interval, config.inner.lr)
    h0 = int(config.interval.h)
    if config.interval.controller == "schedule":
      h0 = int(controller.init().h)
    return cls(
        alpha=float(config.diloco.alpha),
        beta=float(config.diloco.beta),
        controller=controller,
        h0=h0,
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

    def init_state(params) -> state_lib.TrainState:
      params_K, inner_opt_K = setup.init_workers(params)
      own = DiLoCoState(
          params=params, opt=outer_tx.init(params), controller=controller.init(self.h0)
      )
      return state_lib.init(params_K, inner_opt_K, own, k)

    def sync_block(state: state_lib.TrainState, present_K):
      own, acc = state.outer, state.acc
      # Means over the workers present this round (all of them without faults).
      mean = lambda tree_K: replicas.worker_weighted_mean(tree_K, present_K)
      delta_K = jax.tree.map(lambda a, p: a[None] - p, own.params, state.params_K)
      delta = mean(delta_K)  # the all-reduce
      worker_sq = mean(replicas.sq_norm_K(delta_K))  # a scalar
      present = jax.lax.psum(jnp.sum(present_K), replicas.REPLICA)

      ref_sum = self.reference_lr_sum(setup, state.step - acc.steps)
      updates, opt = outer_tx.update(
          delta, own.opt, own.params, inner_lr_sum=acc.lr_sum, reference_lr_sum=ref_sum
      )
      params = optax.apply_updates(own.params, updates)

      round_stats = inner.round_stats(acc, state.step, lr_schedule, mean)
      grad_norm = round_stats.pop("grad_norm")
      stats = intervals.sync_stats(
          round=state.round,
          **round_stats,
          delta_sq_norm=replicas.sq_norm(delta),
          worker_sq_norm=worker_sq,
          num_workers=present.astype(jnp.int32),
      )
      next_h, ctrl = controller.next_h(own.controller, stats)

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
      new_state = state._replace(
          params_K=replicas.broadcast_block(params, state.params_K),
          outer=DiLoCoState(params=params, opt=opt, controller=ctrl),
          acc=inner.reset(acc),
          round=state.round + 1,
      )
      return new_state, metrics

    def comm_pattern(round_index: int, h: int) -> comm.RoundComm:
      return comm.RoundComm("allreduce", np.full(k, h, np.int64))

    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner(setup.inner_loop(), setup.mesh),
        sync=jit_sync(sync_block, setup.mesh),
        comm_pattern=comm_pattern,
        h_max=max(self.h0, controller.h_max),
        supports_faults=True,
    )


@dataclasses.dataclass(frozen=True)
class AutoLoCo(DiLoCo):
  """AutoLoCo's hyperparameters: DiLoCo's, an adaptive ``controller``, and the
  outer-step correction by the accumulated inner learning rate.

  Attributes:
    correction: ``none | momentum | lr | both`` (``outer.autoloco``).
    reference: ``schedule`` (``S_ref,t`` = the schedule summed over ``H_ref``
      steps from the round's start) or ``peak`` (``H_ref · η_peak``).
    h_ref: ``H_ref``, the interval ``(α, β)`` were tuned for.
  """

  correction: str = "both"
  reference: str = "schedule"
  h_ref: int = 0

  name = "autoloco"

  def __post_init__(self):
    if self.reference not in outer.REFERENCES:
      raise ValueError(
          f"autoloco.reference must be one of {outer.REFERENCES}, "
          f"got {self.reference!r}"
      )
    if self.h_ref < 1:
      raise ValueError(f"autoloco.h_ref must be >= 1, got {self.h_ref}")

  @classmethod
  def from_config(cls, config: Any) -> "AutoLoCo":
    """DiLoCo's fields, and ``config.autoloco`` (``correction``, ``reference``,
    ``h_ref``: 0 = ``interval.h``)."""
    d = DiLoCo.from_config(config)
    a = config.autoloco
    return cls(
        alpha=d.alpha,
        beta=d.beta,
        controller=d.controller,
        h0=d.h0,
        correction=a.correction,
        reference=a.reference,
        h_ref=int(a.h_ref or config.interval.h),
    )

  def outer_tx(self, setup: Setup) -> optax.GradientTransformationExtraArgs:
    return outer.autoloco(self.alpha, self.beta, correction=self.correction)

  def reference_lr_sum(self, setup: Setup, start_step: jax.Array) -> jax.Array:
    if self.reference == "peak":
      return outer.peak_reference_lr_sum(setup.peak_lr, self.h_ref)
    return outer.reference_lr_sum(setup.lr_schedule, start_step, self.h_ref)
