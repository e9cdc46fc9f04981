"""The inner loop: ``n`` local AdamW steps on each worker, ``n`` a traced integer.

A round of ``H_t`` inner steps is one or more calls of the function built here
(chunks of at most ``C`` staged batches each), followed by the algorithm's sync.
The trip count is a traced value, so changing ``H`` never recompiles, and the
round's statistics accumulate on device in :class:`RoundAcc` until the sync
reads them (no host round-trip inside a round).

Inner optimizer (DiLoCo, arXiv 2311.08105, section 2): global-norm gradient
clipping, then AdamW with decoupled weight decay on matrices only, under a linear
warmup + cosine schedule ``η(s)`` indexed by the global inner step ``s``. Its
state is per worker and persists across rounds; it is never averaged (DDP's
workers share one model and its state, :func:`make_synced_loop`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

from autoloco_jax.runtime import replicas


class RoundAcc(NamedTuple):
  """Statistics of the current round, accumulated step by step on device.

  Attributes:
    steps: inner steps taken so far in this round (scalar int32).
    lr_sum: ``S_t = Σ_s η(s)`` over those steps (scalar float32).
    loss_sum_K: per worker, sum of training losses.
    loss_first_K: per worker, loss of the round's first step.
    loss_last_K: per worker, loss of the latest step.
    grad_norm_sum_K: per worker, sum of pre-clipping gradient norms.
  """

  steps: jax.Array
  lr_sum: jax.Array
  loss_sum_K: jax.Array
  loss_first_K: jax.Array
  loss_last_K: jax.Array
  grad_norm_sum_K: jax.Array

  @classmethod
  def zeros(cls, num_workers: int) -> "RoundAcc":
    z = jnp.zeros((num_workers,), jnp.float32)
    return cls(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32), z, z, z, z)

  @classmethod
  def specs(cls) -> "RoundAcc":
    r, w = replicas.REPLICATED, replicas.WORKERS
    return cls(r, r, w, w, w, w)


def reset(acc: RoundAcc) -> RoundAcc:
  """Zeroed accumulators for the next round (keeps each field's sharding)."""
  return jax.tree.map(jnp.zeros_like, acc)


def round_stats(
    acc: RoundAcc,
    step: jax.Array,
    lr_schedule: optax.Schedule,
    mean: Callable = replicas.worker_mean,
    steps_done_K=None,
) -> dict:
  """Scalar statistics of the round that just ended, from its accumulators.

  Called inside :func:`replicas.map_workers` at a sync. ``mean`` reduces a
  per-worker array over the workers (the default; DiLoCo passes the mean over
  the workers present). ``steps_done_K``: per-worker step counts when workers
  take different numbers of steps (GASLoC's ``H_k``).

  Returns:
    ``step``, ``h`` (steps the round ran), ``lr_sum`` (``S_t``), ``lr``
    (``η(s)`` now), ``loss_mean`` (over steps and workers), ``loss_start``,
    ``loss_end``, ``grad_norm`` (mean pre-clipping norm).
  """
  if steps_done_K is None:
    steps = jnp.maximum(acc.steps, 1).astype(jnp.float32)
  else:
    steps = jnp.maximum(replicas.worker_mean(steps_done_K.astype(jnp.float32)), 1.0)
  return dict(
      step=step,
      h=acc.steps,
      lr_sum=acc.lr_sum,
      lr=lr_schedule(step),
      loss_mean=mean(acc.loss_sum_K) / steps,
      loss_start=mean(acc.loss_first_K),
      loss_end=mean(acc.loss_last_K),
      grad_norm=mean(acc.grad_norm_sum_K) / steps,
  )


def schedule(cfg: Any, total_steps: int) -> optax.Schedule:
  """Inner learning rate ``η(s)``: linear warmup then cosine decay to ``min_lr``.

  The warmup starts at ``lr / warmup_steps`` rather than 0 so that every step,
  the first included, has a positive learning rate (AutoLoCo divides by sums of
  ``η``).
  """
  warmup = max(int(cfg.warmup_steps), 1)
  return optax.warmup_cosine_decay_schedule(
      init_value=cfg.lr / warmup,
      peak_value=cfg.lr,
      warmup_steps=warmup,
      decay_steps=max(total_steps, warmup + 1),
      end_value=cfg.lr * cfg.min_lr_ratio,
  )


def optimizer(cfg: Any, lr_schedule: optax.Schedule) -> optax.GradientTransformation:
  """Clip-by-global-norm then AdamW; weight decay applies to matrices only."""
  decay_mask = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)
  return optax.chain(
      optax.clip_by_global_norm(cfg.clip_norm),
      optax.adamw(
          lr_schedule,
          b1=cfg.b1,
          b2=cfg.b2,
          eps=cfg.eps,
          weight_decay=cfg.weight_decay,
          mask=decay_mask,
      ),
  )


def accumulated(value_and_grad: Callable, microbatches: int) -> Callable:
  r"""``value_and_grad`` over a batch split into ``m`` equal micro-batches,
  run one after another and summed (gradient accumulation):

  .. math:: \big(ℓ, ∇ℓ\big)(θ; x) = \frac{1}{m} \sum_{j=1}^{m} \big(ℓ, ∇ℓ\big)(θ; x_j)

  which is the whole batch's mean loss and gradient, since every micro-batch
  holds ``B / m`` sequences and ``ℓ`` is a mean over tokens; only the peak
  activation memory changes (that of ``B / m`` sequences). ``m = 1`` returns
  ``value_and_grad`` itself, so the step is today's bit for bit.

  Raises:
    ValueError: a batch of ``B`` sequences that ``m`` does not divide.
  """
  if microbatches == 1:
    return value_and_grad

  def f(params, tokens_BxL1):
    b = tokens_BxL1.shape[0]
    if b % microbatches:
      raise ValueError(
          f"inner.microbatches={microbatches} must divide the batch of {b} sequences"
      )
    tokens_MxbxL1 = tokens_BxL1.reshape((microbatches, b // microbatches) + tokens_BxL1.shape[1:])

    def body(total, tokens_bxL1):
      return jax.tree.map(jnp.add, total, value_and_grad(params, tokens_bxL1)), None

    # The first micro-batch starts the sums, so they carry its types (under
    # shard_map a value varies over the replica axis; a zero would not).
    first = value_and_grad(params, tokens_MxbxL1[0])
    (loss, grads), _ = lax.scan(body, first, tokens_MxbxL1[1:])
    return jax.tree.map(lambda x: x / microbatches, (loss, grads))

  return f


def make_inner_loop(
    loss_fn: Callable,
    tx: optax.GradientTransformation,
    lr_schedule: optax.Schedule,
    *,
    sync_grads: bool = False,
    microbatches: int = 1,
) -> Callable:
  """Builds the per-device inner loop over a block of workers.

  Args:
    loss_fn: ``loss_fn(params, tokens_BxL1) -> scalar`` for one worker.
    tx: the inner optimizer (applied per worker with ``vmap``).
    lr_schedule: ``η(s)``; must be the schedule inside ``tx`` so ``S_t`` is the
      sum of the learning rates actually applied.
    sync_grads: average gradients over all workers before every update (DDP);
      the block's parameters and optimizer states are then identical copies,
      the same on every device (replicated, not per-worker values).
    microbatches: each step's gradient accumulated over this many equal
      micro-batches of the worker's batch (:func:`accumulated`).

  Returns:
    ``run(params_K, opt_K, acc, tokens_KxCxBxL1, num_steps, step0, steps_K=None)
    -> (params_K, opt_K, acc)``: runs ``num_steps <= C`` steps; step ``i``
    reads batch ``tokens_KxCxBxL1[:, i]`` and uses learning rate
    ``η(step0 + i)``. Must be called inside :func:`replicas.map_workers`.

    ``steps_K`` (optional, int per local worker) gives each worker its own
    step count for the round (heterogeneous speeds, GASLoC's ``H_k``): a worker
    takes a step only while the round's position ``acc.steps < steps_K[k]``;
    afterwards its parameters, optimizer state and loss statistics stay as they
    are (it still computes the step, which the ``where`` discards). ``acc.steps``
    and ``acc.lr_sum`` count the round's longest worker. Without ``steps_K``
    the loop is exactly the homogeneous one.
  """
  grad_fn = jax.vmap(accumulated(jax.value_and_grad(loss_fn), microbatches))
  update_fn = jax.vmap(tx.update)

  def step(i, params_K, opt_K, acc, tokens_KxCxBxL1, step0, steps_K):
    tokens_KxBxL1 = lax.dynamic_index_in_dim(tokens_KxCxBxL1, i, 1, keepdims=False)
    # Each worker differentiates its own device-varying copy: the gradient of
    # a replicated value would be summed over the devices.
    own_K = (
        lax.pcast(params_K, replicas.REPLICA, to="varying") if sync_grads else params_K
    )
    loss_K, grads_K = grad_fn(own_K, tokens_KxBxL1)
    grad_norm_K = jax.vmap(optax.tree.norm)(grads_K)
    if sync_grads:
      grads_K = replicas.broadcast_block(replicas.worker_mean(grads_K), grads_K)
    updates_K, new_opt_K = update_fn(grads_K, opt_K, params_K)
    new_params_K = optax.apply_updates(params_K, updates_K)
    first = acc.steps == 0
    if steps_K is None:
      params_K, opt_K = new_params_K, new_opt_K
      loss_last_K = loss_K
    else:
      active_K = acc.steps < steps_K
      keep = lambda new, old: jnp.where(
          active_K.reshape(active_K.shape + (1,) * (new.ndim - 1)), new, old
      )
      params_K = jax.tree.map(keep, new_params_K, params_K)
      opt_K = jax.tree.map(keep, new_opt_K, opt_K)
      loss_last_K = jnp.where(active_K, loss_K, acc.loss_last_K)
      loss_K = jnp.where(active_K, loss_K, 0.0)
      grad_norm_K = jnp.where(active_K, grad_norm_K, 0.0)
    acc = RoundAcc(
        steps=acc.steps + 1,
        lr_sum=acc.lr_sum + lr_schedule(step0 + i),
        loss_sum_K=acc.loss_sum_K + loss_K,
        loss_first_K=jnp.where(first, loss_K, acc.loss_first_K),
        loss_last_K=loss_last_K,
        grad_norm_sum_K=acc.grad_norm_sum_K + grad_norm_K,
    )
    return params_K, opt_K, acc

  def run(params_K, opt_K, acc, tokens_KxCxBxL1, num_steps, step0, steps_K=None):
    if steps_K is not None and sync_grads:
      raise ValueError(
          "per-worker step counts (steps_K) cannot be combined with "
          "sync_grads: DDP's every-step all-reduce needs every worker"
      )

    def body(carry):
      i, params_K, opt_K, acc = carry
      return (i + 1,) + step(i, params_K, opt_K, acc, tokens_KxCxBxL1, step0, steps_K)

    _, params_K, opt_K, acc = lax.while_loop(
        lambda carry: carry[0] < num_steps,
        body,
        (jnp.zeros((), jnp.int32), params_K, opt_K, acc),
    )
    return params_K, opt_K, acc

  return run


def make_synced_loop(
    loss_fn: Callable,
    tx: optax.GradientTransformation,
    lr_schedule: optax.Schedule,
    microbatches: int = 1,
) -> Callable:
  """Builds DDP's per-device inner loop on one model (one copy per device).

  Every step computes each local worker's loss and gradient on its own batch,
  averages the gradients over all K workers (one all-reduce) and applies ``tx``:

  .. math:: θ_{s+1} = θ_s + \\mathrm{tx}\\Big(\\frac{1}{K}\\sum_k ∇ℓ(θ_s; x_{s,k})\\Big)

  For the length of one call the loop carries the block's ``K / D`` identical
  copies and runs :func:`make_inner_loop`'s step on them unchanged, so DDP
  stays bit for bit what it was with K stored copies: XLA CPU compiles the
  fused AdamW update of one copy to code that rounds a few elements one unit
  in the last place away from the update of a block. Between calls, and in
  checkpoints, the model exists once per device.

  Args: as :func:`make_inner_loop`.

  Returns:
    ``run(params, opt, acc, tokens_KxCxBxL1, num_steps, step0) -> (params,
    opt, acc)``: as :func:`make_inner_loop`'s, with one replicated ``params``
    and ``opt`` instead of a block of them; ``acc`` keeps each worker's loss
    and gradient norm. Must be called inside :func:`replicas.map_workers`.
  """
  block_run = make_inner_loop(
      loss_fn, tx, lr_schedule, sync_grads=True, microbatches=microbatches
  )

  def run(params, opt, acc, tokens_KxCxBxL1, num_steps, step0):
    copies = lambda tree: replicas.broadcast_block(tree, tokens_KxCxBxL1)
    params_K, opt_K, acc = block_run(
        copies(params), copies(opt), acc, tokens_KxCxBxL1, num_steps, step0
    )
    params, opt = jax.tree.map(lambda x: x[0], (params_K, opt_K))
    return params, opt, acc

  return run
