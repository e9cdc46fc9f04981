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
the round. Both are this one round with different components: this module holds
their hyperparameters and composes the round from a sync
(``sync.WholeModelSync``; ``streaming.StreamingSync`` for fragments, overlap and
compressed messages).

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
import functools
from typing import Any, Callable

import jax
import optax

from autoloco_jax import outer, ranges
from autoloco_jax.algorithms.diloco import intervals, stream as stream_lib, streaming, sync
from autoloco_jax.algorithms.diloco.sync import DiLoCoState
from autoloco_jax.algorithms.interval import Interval
from autoloco_jax.algorithms.round_sync import RoundSync
from autoloco_jax.compression import exchange
from autoloco_jax.runtime import state as state_lib
from autoloco_jax.runtime.contract import Algorithm, ParamShapes, Setup
from autoloco_jax.runtime.jitting import jit_inner, jit_sync_of

__all__ = ["DiLoCo", "DiLoCoState"]


@dataclasses.dataclass(frozen=True)
class DiLoCo:
  """DiLoCo's hyperparameters: ``config.diloco`` and the groups it composes.

  Attributes:
    alpha: outer learning rate ``α`` (paper: 0.7).
    beta: outer Nesterov momentum ``β`` (paper: 0.9); with ``beta_end``, ``β_0``
      of the momentum schedule.
    beta_end: ``β_1`` of the outer-momentum schedule (``outer.momentum_schedule``:
      ``β(t)`` from ``β`` to ``β_1`` over ``beta_rounds`` outer steps), or None
      for a constant ``β`` (DiLoCo bit for bit).
    beta_shape: ``linear | cosine``, the schedule's shape.
    beta_rounds: its length in outer steps (from ``config.diloco.beta_rounds``;
      0 there is the run's rounds at the first interval).
    interval: ``config.interval``, typed.
    controller: chooses each round's ``H`` (``intervals.fixed(H)`` for DiLoCo),
      built from ``interval``.
    h0: the first round's ``H``.
    stream: fragments, overlap and eager updates (``stream.Stream``; one
      fragment without overlap is DiLoCo's sync of the whole model).
    compression: the codec of every message and error feedback
      (``exchange.Compression``; the identity codec sends float32 as it is).
  """

  alpha: float
  beta: float
  beta_end: float | None
  beta_shape: str
  beta_rounds: int
  interval: Interval
  controller: intervals.IntervalController
  h0: int
  stream: stream_lib.Stream
  compression: exchange.Compression

  name = "diloco"
  #: The shared settings it implements (``registry.refuse_unsupported``):
  #: streaming, compressed messages averaged either way and every interval
  #: controller.
  streams = True
  compresses = True
  averages = True
  controllers = None
  #: Whether ``build`` reads ``config.seed`` (``assembly.setup`` reuses a build
  #: across seeds otherwise).
  seeded_build = False

  def __post_init__(self):
    for name in ("alpha", "beta", "beta_end", "beta_rounds"):
      ranges.check(f"diloco.{name}", getattr(self, name))
    for name in ("alpha", "beta"):
      object.__setattr__(self, name, float(getattr(self, name)))
    if self.beta_shape not in outer.MOMENTUM_SHAPES:
      raise ValueError(
          f"config.diloco.beta_shape must be one of {outer.MOMENTUM_SHAPES}, "
          f"got {self.beta_shape!r}"
      )
    if self.beta_end is not None:
      object.__setattr__(self, "beta_end", float(self.beta_end))
      outer.momentum_schedule(self.beta, self.beta_end, self.beta_rounds, self.beta_shape)

  @classmethod
  def from_config(cls, config: Any) -> "DiLoCo":
    """From ``config.diloco`` (``alpha``, ``beta`` and the momentum schedule's
    ``beta_end``, ``beta_shape``, ``beta_rounds``), ``config.interval``
    (``h`` is the first ``H`` of an adaptive controller; an open-loop one
    starts at its own ``open_loop(0)``), ``config.stream`` and
    ``config.compress``."""
    interval = Interval.from_config(config)
    controller = intervals.from_interval(interval, config.inner.lr, config.total_steps)
    # An open-loop controller (fixed, schedule, budget) starts at its own sequence.
    first = controller.open_loop(0) if controller.open_loop else interval.h
    d = config.diloco
    return cls(
        alpha=d.alpha,
        beta=d.beta,
        beta_end=d.beta_end,
        beta_shape=d.beta_shape,
        beta_rounds=int(d.beta_rounds or max(1, config.total_steps // int(first))),
        interval=interval,
        controller=controller,
        h0=int(first),
        stream=stream_lib.Stream.from_config(config),
        compression=exchange.Compression.from_config(config),
    )

  def outer_hyper(self) -> dict:
    """The outer step's ``(α, β)`` (and ``β_1`` of a momentum schedule), which
    the compiled sync takes as arguments (``jitting.jit_sync_of``): a tuning
    grid's runs share one program."""
    hyper = {"alpha": self.alpha, "beta": self.beta}
    if self.beta_end is not None:
      hyper["beta_end"] = self.beta_end
    return hyper

  def momentum(self, hyper: dict) -> Any:
    """``β``, or the schedule ``β(t)`` from ``β`` to ``β_1``, from ``hyper``'s
    values (traced) or the concrete ones where ``hyper`` has none."""
    beta = hyper.get("beta", self.beta)
    if self.beta_end is None:
      return beta
    beta_end = hyper.get("beta_end", self.beta_end)
    return outer.momentum_schedule(beta, beta_end, self.beta_rounds, self.beta_shape)

  def outer_tx(self, setup: Setup, hyper: dict) -> optax.GradientTransformationExtraArgs:
    """The outer transform with ``hyper``'s ``α`` and momentum (traced), or the
    concrete ones where ``hyper`` has none."""
    return outer.diloco(hyper.get("alpha", self.alpha), self.momentum(hyper))

  def reference_lr_sum(self, setup: Setup, start_step: jax.Array) -> jax.Array:
    """``S_ref,t``: DiLoCo applies no correction; the value is only logged."""
    return outer.reference_lr_sum(setup.lr_schedule, start_step, self.h0)

  def outer_rule(self, setup: Setup, hyper: dict) -> sync.OuterRule:
    """The outer transform with ``hyper``'s ``(α, β)``, the controller and
    ``S_ref``: how the sync steps the global model and times the next round."""
    return sync.OuterRule(
        tx=self.outer_tx(setup, hyper),
        controller=self.controller,
        first_interval=self.h0,
        lr_schedule=setup.lr_schedule,
        reference_lr_sum=functools.partial(self.reference_lr_sum, setup),
    )

  def sync_piece(self, rule: sync.OuterRule) -> RoundSync:
    """The round's sync: DiLoCo's of the whole model (``sync.WholeModelSync``),
    or ``streaming.StreamingSync`` for fragments, overlap or compressed
    messages. A variant of the sync overrides this (``docs/algorithms.md`` §7a)."""
    if self.stream.plain and self.compression.plain:
      return sync.WholeModelSync(rule)
    return streaming.StreamingSync(self.stream, self.compression, rule)

  def build(self, setup: Setup) -> Algorithm:
    """The round on the replica axis: the inner loop, then the sync."""
    hyper, stream, k = self.outer_hyper(), self.stream, setup.num_workers
    piece = self.sync_piece(self.outer_rule(setup, hyper))
    if not stream.plain:
      stream.check_intervals(min(self.h0, self.controller.h_min))
    shapes = ParamShapes()

    def init_state(params) -> state_lib.TrainState:
      params_K, inner_opt_K = setup.init_workers(params)
      shapes.record(params)
      return state_lib.init(params_K, inner_opt_K, piece.init(params, params_K), k)

    def sync_of(hyper: dict) -> RoundSync:
      return self.sync_piece(self.outer_rule(setup, hyper))

    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner(setup.inner_loop(), setup.layout),
        sync=jit_sync_of(sync_of, hyper, setup.layout),
        comm_pattern=piece.comm_pattern(shapes, k),
        max_round_steps=stream.slot_length(max(self.h0, self.controller.h_max)),
        min_round_steps=self.controller.h_min,
        supports_faults=stream.tau == 0,
        eval_params=None if stream.plain else _global_params(setup.layout),
        first_round_steps=stream.slot_length(self.h0),
        next_round_steps=sync.open_loop_next_h(self.controller, piece),
    )


def _global_params(layout) -> Callable:
  """``state -> {'': θ}``: with streaming, worker 0 holds a mix of fresh and
  stale fragments; evaluate the global parameters, every fragment as of its
  last sync (replicated over the workers: ``Layout.jit_models``)."""
  return layout.jit_models(lambda state: {"": state.algo.global_params})
