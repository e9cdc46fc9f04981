r"""The scalar signals of a round that an interval controller reads.

A sync reduces two squared norms and the inner loop's accumulators to the
scalars of :class:`SyncStats` (no communication beyond them); the controllers
of ``intervals.py`` read nothing else. :func:`agreement_ratio` and
:func:`normalized_agreement` measure how much the workers' moves agree.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class SyncStats(NamedTuple):
  """Scalar statistics of one round, read by a controller at its sync.

  Build it with :func:`sync_stats`, which fills the derived fields and dtypes.

  Attributes:
    round: index ``t`` of the round that just ended (int32, from 0).
    step: global inner step ``s`` at the end of the round (int32).
    h: ``H_t``, inner steps the round ran (int32).
    lr_sum: ``S_t = Σ_{s in round} η(s)`` (float32).
    lr: the current inner learning rate ``η(s)`` (float32).
    loss_mean: training loss averaged over the round's steps and workers.
    loss_start: loss of the round's first step (mean over workers).
    loss_end: loss of the round's last step (mean over workers).
    delta_norm: ``‖Δ_t‖`` of the averaged pseudo-gradient.
    worker_sq_norm: ``mean_k ‖Δ_{t,k}‖²``.
    agreement: ``ρ_t = ‖Δ_t‖² / mean_k ‖Δ_{t,k}‖²`` in ``[0, 1]``: 1 when the
      workers moved identically, about ``1/K`` when their moves are unrelated.
    num_workers: ``K`` (int32).
  """

  round: jax.Array
  step: jax.Array
  h: jax.Array
  lr_sum: jax.Array
  lr: jax.Array
  loss_mean: jax.Array
  loss_start: jax.Array
  loss_end: jax.Array
  delta_norm: jax.Array
  worker_sq_norm: jax.Array
  agreement: jax.Array
  num_workers: jax.Array


def agreement_ratio(delta_sq_norm: Any, worker_sq_norm: Any) -> jax.Array:
  r"""Agreement of the workers' moves, ``ρ = ‖Δ‖² / mean_k ‖Δ_k‖²``.

  .. math::

    ρ_t = \frac{\lVert \tfrac1K \sum_k Δ_{t,k} \rVert^2}
               {\tfrac1K \sum_k \lVert Δ_{t,k} \rVert^2} \in [0, 1]

  By Jensen's inequality ``ρ ≤ 1``, with equality when every worker moved the
  same way; for unrelated moves of equal size ``ρ ≈ 1/K``. When no worker
  moved (``worker_sq_norm == 0``) the moves are identical: ``ρ = 1``.

  Args:
    delta_sq_norm: ``‖Δ_t‖²`` of the averaged pseudo-gradient.
    worker_sq_norm: ``mean_k ‖Δ_{t,k}‖²``.

  Returns:
    ``ρ_t`` as a float32 scalar.
  """
  d = jnp.asarray(delta_sq_norm, jnp.float32)
  w = jnp.asarray(worker_sq_norm, jnp.float32)
  moved = w > 0
  return jnp.where(moved, d / jnp.where(moved, w, 1.0), 1.0)


def normalized_agreement(rho: Any, num_workers: Any) -> jax.Array:
  r"""Rescale ``ρ`` so unrelated moves read 0 and identical moves read 1.

  .. math::

    a_t = \frac{ρ_t - 1/K}{1 - 1/K}

  If each worker's move is a shared part ``d`` plus independent noise of mean
  squared size ``σ²``, then in expectation ``a = ‖d‖² / (‖d‖² + σ²)``, the
  fraction of a worker's move that is shared, whatever ``K``. It can be
  negative when the workers' moves cancel. With ``K = 1`` there is nothing to
  disagree with: ``a = 1``.

  Args:
    rho: ``ρ_t`` (see :func:`agreement_ratio`).
    num_workers: ``K`` (int or int array).

  Returns:
    ``a_t`` as a float32 scalar.
  """
  rho = jnp.asarray(rho, jnp.float32)
  k = jnp.asarray(num_workers, jnp.float32)
  many = k > 1
  inv_k = 1.0 / jnp.where(many, k, 2.0)
  return jnp.where(many, (rho - inv_k) / (1.0 - inv_k), 1.0)


def sync_stats(
    *,
    round: Any,
    step: Any,
    h: Any,
    lr_sum: Any,
    lr: Any,
    loss_mean: Any,
    loss_start: Any,
    loss_end: Any,
    delta_sq_norm: Any,
    worker_sq_norm: Any,
    num_workers: Any,
) -> SyncStats:
  """Builds :class:`SyncStats` with the right dtypes and the derived fields.

  ``delta_norm = sqrt(delta_sq_norm)`` and ``agreement = ρ_t`` are computed
  here from the two squared norms, so callers reduce only those. Jittable.

  Returns:
    A :class:`SyncStats` of scalars.
  """
  i32 = lambda x: jnp.asarray(x, jnp.int32)
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  return SyncStats(
      round=i32(round),
      step=i32(step),
      h=i32(h),
      lr_sum=f32(lr_sum),
      lr=f32(lr),
      loss_mean=f32(loss_mean),
      loss_start=f32(loss_start),
      loss_end=f32(loss_end),
      delta_norm=jnp.sqrt(f32(delta_sq_norm)),
      worker_sq_norm=f32(worker_sq_norm),
      agreement=agreement_ratio(delta_sq_norm, worker_sq_norm),
      num_workers=i32(num_workers),
  )
