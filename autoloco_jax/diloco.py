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

References:
  Douillard et al., DiLoCo: Distributed Low-Communication Training of Language
  Models, 2023. https://arxiv.org/abs/2311.08105
  AutoLoCo: Communication Efficient Distributed LLM Training via Adaptive
  Synchronization, arXiv, Sept 2026.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from autoloco_jax import inner, intervals, outer, replicas
from autoloco_jax.algorithms import Algorithm, jit_inner, jit_sync
from autoloco_jax.state import TrainState, scalar


def make_controller(config: Any) -> intervals.IntervalController:
  """The interval controller named by ``config.interval.controller``.

  Bounds default to ``h`` (``h_max=0``). ``lr_quadratic``'s constant defaults
  to ``c = sqrt(h) · η_peak``, so that ``H = h`` at the peak inner lr and grows
  as ``(η_peak / η)^2`` times ``h`` while the schedule decays.
  """
  cfg = config.interval
  name, h = cfg.controller, int(cfg.h)
  h_min = int(cfg.get("h_min", 1) or 1)
  h_max = int(cfg.get("h_max", 0) or h)
  if name == "fixed":
    return intervals.make(name, h=h)
  if name == "lr_quadratic":
    c = cfg.get("c", 0.0) or (h ** 0.5) * config.inner.lr
    return intervals.make(name, c=c, h_min=h_min, h_max=h_max)
  if name == "loss_ratio":
    return intervals.make(name, h0=h, h_min=h_min, h_max=h_max)
  if name == "agreement":
    return intervals.make(name, h0=h, h_min=h_min, h_max=h_max, target=cfg.target,
                          grow=cfg.grow, shrink=cfg.shrink, ema=cfg.ema,
                          hysteresis=cfg.hysteresis)
  return intervals.make(name)  # raises the registry's error for unknown names


def make_outer(config: Any) -> optax.GradientTransformationExtraArgs:
  o = config.outer
  if config.algorithm == "diloco":
    return outer.diloco(o.lr, o.momentum)
  return outer.autoloco(o.lr, o.momentum, correction=o.correction,
                        reference=o.reference)


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  """Builds DiLoCo (``config.algorithm='diloco'``) or AutoLoCo ('autoloco')."""
  num_workers = config.num_workers
  lr_schedule = inner.schedule(config.inner, config.total_steps)
  inner_tx = inner.optimizer(config.inner, lr_schedule)
  outer_tx = make_outer(config)
  controller = make_controller(config)
  h0 = int(config.interval.h)
  h_ref = int(config.outer.get("h_ref", 0) or h0)
  peak_reference = config.outer.get("reference", "schedule") == "peak"

  def init_state(params) -> TrainState:
    params_K = replicas.stack_workers(params, num_workers)
    return TrainState(
        params_K=params_K,
        anchor_K=params_K,
        inner_opt_K=jax.vmap(inner_tx.init)(params_K),
        outer_opt_K=jax.vmap(outer_tx.init)(params_K),
        acc=inner.RoundAcc.zeros(num_workers),
        step=scalar(0), round=scalar(0), interval=scalar(h0),
        controller=controller.init(h0),
        present_K=jnp.ones((num_workers,), jnp.float32))

  def sync_block(state: TrainState):
    acc = state.acc
    h = acc.steps
    start_step = state.step - h
    # Means over the workers present this round (all of them without faults).
    mean = lambda tree_K: replicas.worker_weighted_mean(tree_K, state.present_K)
    delta_K = jax.tree.map(jnp.subtract, state.anchor_K, state.params_K)
    delta = mean(delta_K)                                  # the all-reduce
    worker_sq = mean(replicas.sq_norm_K(delta_K))          # a scalar
    delta_sq = replicas.sq_norm(delta)

    lr_sum = acc.lr_sum
    if peak_reference:
      ref_sum = outer.peak_reference_lr_sum(config.inner.lr, h_ref)
    else:
      ref_sum = outer.reference_lr_sum(lr_schedule, start_step, h_ref)

    def apply_outer(opt, anchor):
      updates, opt = outer_tx.update(delta, opt, anchor, inner_lr_sum=lr_sum,
                                     reference_lr_sum=ref_sum)
      return optax.apply_updates(anchor, updates), opt

    anchor_K, outer_K = jax.vmap(apply_outer)(state.outer_opt_K, state.anchor_K)

    steps = jnp.maximum(h, 1).astype(jnp.float32)
    present = jax.lax.psum(jnp.sum(state.present_K), replicas.REPLICA)
    stats = intervals.SyncStats(
        round=state.round, step=state.step, interval=h, lr_sum=lr_sum,
        lr=lr_schedule(state.step),
        loss_mean=mean(acc.loss_sum_K) / steps,
        loss_start=mean(acc.loss_first_K),
        loss_end=mean(acc.loss_last_K),
        delta_norm=jnp.sqrt(delta_sq), worker_sq_norm=worker_sq,
        agreement=intervals.agreement_ratio(delta_sq, worker_sq),
        num_workers=present.astype(jnp.int32))
    next_h, ctrl = controller.next_interval(state.controller, stats)

    metrics = dict(stats._asdict())
    metrics.update(
        grad_norm=mean(acc.grad_norm_sum_K) / steps,
        param_norm=jnp.sqrt(replicas.worker_mean(replicas.sq_norm_K(anchor_K))),
        workers_present=present,
        reference_lr_sum=ref_sum,
        ratio=replicas.worker_mean(outer_K.ratio),
        outer_lr=replicas.worker_mean(outer_K.alpha),
        outer_momentum=replicas.worker_mean(outer_K.beta),
        next_interval=next_h)
    new_state = state._replace(
        params_K=anchor_K, anchor_K=anchor_K, outer_opt_K=outer_K,
        acc=inner.reset(acc),
        round=state.round + 1, interval=next_h, controller=ctrl)
    return new_state, metrics

  h_max = max(h0, int(config.interval.get("h_max", 0) or h0))
  return Algorithm(
      name=config.algorithm,
      init_state=init_state,
      inner=jit_inner(inner.make_inner_loop(loss_fn, inner_tx, lr_schedule), mesh),
      sync=jit_sync(sync_block, mesh),
      allreduces_per_round=lambda h: 1,
      h_max=h_max)
