r"""The correction link: the round's outer ``(α_t, β_t)`` from its accumulated
inner learning rate.

With ``r_t = S_t / S_ref,t`` (:func:`lr_sum_ratio`), a correction rule maps
``(α, β, r_t)`` to the round's ``(α_t, β_t)`` (:func:`corrected_hyperparams`);
each mode of :data:`CORRECTIONS` is one small rule, chosen by name.
:func:`lr_sum_correction` is the rule as a transform of the chain
(``autoloco_jax.outer.chain``): it passes the updates through and records
``(count, α_t, β_t, r_t)`` in its state, which the momentum and scale links read.
The derivation is ``docs/algorithms.md``, section 3a.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Union

import jax
import jax.numpy as jnp
import optax

from autoloco_jax.outer import checks

CORRECTIONS = ('none', 'momentum', 'lr', 'both', 'table', 'per_progress', 'momentum_per_progress')


# Ratios this close to 1 are applied as exactly 1. ``S_t`` (summed step by step in
# the inner loop) and ``S_ref`` (summed here, or ``H_ref·η_peak``) can differ in
# the last bits even when the round *is* the reference interval; snapping makes
# such a round the DiLoCo step bit for bit. The effect on β^r is ~1e-6 relative.
DEFAULT_SNAP_TOL = 1e-5


class CorrectionState(NamedTuple):
  """State of :func:`lr_sum_correction`: what the last update applied.

  Attributes:
    count: number of updates so far (scalar int32); indexes the outer
      learning-rate schedule when one is given.
    alpha: ``α_t`` (scalar float32; the uncorrected ``α`` before the first update).
    beta: ``β_t`` (scalar float32; ``β`` before the first update).
    ratio: ``r_t = S_t / S_ref,t`` (scalar float32; 1 before the first update,
      when the sums are omitted, or when they were invalid under tracing).
  """

  count: jax.Array
  alpha: jax.Array
  beta: jax.Array
  ratio: jax.Array


def lr_sum_ratio(
    inner_lr_sum: Any, reference_lr_sum: Any, snap_tol: Any = DEFAULT_SNAP_TOL
) -> jax.Array:
  """``r = S_t / S_ref`` as float32, snapped to 1 within ``snap_tol``.

  Invalid inputs (a sum that is not finite or not > 0) give ``r = 1``, i.e. the
  uncorrected DiLoCo step, never NaN. Both ``None`` gives ``r = 1``. (The
  transform raises on invalid *concrete* sums before calling this.)

  Args:
    inner_lr_sum: ``S_t``, the round's accumulated inner learning rate.
    reference_lr_sum: ``S_ref,t``.
    snap_tol: ratios with ``|r − 1| <= snap_tol`` are returned as exactly 1.

  Returns:
    ``r_t`` as a float32 scalar.
  """
  if inner_lr_sum is None and reference_lr_sum is None:
    return jnp.ones((), jnp.float32)
  s = jnp.asarray(inner_lr_sum, jnp.float32)
  s_ref = jnp.asarray(reference_lr_sum, jnp.float32)
  valid = jnp.isfinite(s) & jnp.isfinite(s_ref) & (s > 0) & (s_ref > 0)
  r = s / jnp.where(valid, s_ref, 1.0)
  r = jnp.where(jnp.abs(r - 1.0) <= snap_tol, 1.0, r)
  return jnp.where(valid, r, 1.0).astype(jnp.float32)


def corrected_hyperparams(
    alpha: Any,
    beta: Any,
    ratio: Any,
    correction: str,
    table: tuple = (),
) -> tuple[jax.Array, jax.Array]:
  r"""The ``(α_t, β_t)`` that mode ``correction`` applies for ratio ``r``.

  .. math::

    β^{(r)} = β^{r}, \qquad
    α^{(r)} = α \, \frac{1 - β^{r}}{1 - β}

  ``'none'`` → ``(α, β)``; ``'momentum'`` → ``(α, β^{(r)})``; ``'lr'`` →
  ``(α^{(r)}, β)``; ``'both'`` → ``(α^{(r)}, β^{(r)})``; ``'table'`` →
  ``(α · a(r), b(r))`` with ``a, b`` piecewise linear through the ``table``'s
  points ``(r_i, a_i, b_i)`` and constant beyond its ends (e.g. DiLoCo's pairs
  tuned at fixed intervals ``H_i``: ``r_i = H_i/H_ref``, ``a_i = α_i/α``,
  ``b_i = β_i``). At ``r == 1`` every mode returns ``(α, β)`` exactly (not merely
  up to rounding). With ``β = 0``,
  ``(1 − 0^r)/(1 − 0) = 1`` for ``r > 0``, so ``α^{(r)} = α``: without momentum
  there is nothing to correct.

  Args:
    alpha: outer learning rate ``α`` (scalar).
    beta: outer momentum ``β`` in ``[0, 1)`` (scalar).
    ratio: ``r = S_t / S_ref`` (scalar, > 0).
    correction: one of ``'none' | 'momentum' | 'lr' | 'both' | 'table'``.
    table: ``((r_i, a_i, b_i), ...)`` for ``'table'`` (increasing ``r_i``,
      holding ``(1, 1, β)``); empty otherwise.

  Returns:
    ``(alpha_t, beta_t)`` as float32 scalars.
  """
  checks.check_choice('correction', correction, CORRECTIONS)
  rule = _correction_rule(correction, checks.check_table(table, correction, beta))
  return rule(
      jnp.asarray(alpha, jnp.float32),
      jnp.asarray(beta, jnp.float32),
      jnp.asarray(ratio, jnp.float32),
  )


# A correction rule: ``(α, β, r) -> (α_t, β_t)``, float32 scalars in and out.
# Each returns ``(α, β)`` itself where ``r == 1``, so that round is DiLoCo's.
_Rule = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


def _power(alpha, beta, r):
  """``(α (1 − β^r)/(1 − β), β^r)``: the ``'both'`` rule."""
  exact = r == 1.0
  beta_r = jnp.where(exact, beta, jnp.power(beta, r))
  alpha_r = jnp.where(exact, alpha, alpha * ((1.0 - beta_r) / (1.0 - beta)))
  return alpha_r, beta_r


def _interpolated(alpha, beta, r, *, table):
  """``(α a(r), b(r))``, piecewise linear through ``table``'s points."""
  exact = r == 1.0
  rs, scales, betas = (jnp.asarray(col, jnp.float32) for col in zip(*table))
  alpha_t = jnp.where(exact, alpha, alpha * jnp.interp(r, rs, scales))
  return alpha_t, jnp.where(exact, beta, jnp.interp(r, rs, betas))


def _per_progress(alpha, beta, r):
  """``(α / r, β)``: the outer step per unit of inner progress kept constant,
  the pseudo-gradient normalized by its round's accumulated inner lr (the
  opposite reading of the paper's lr correction to ``'lr'``'s)."""
  return jnp.where(r == 1.0, alpha, alpha / r), beta


_RULES = {
    'none': lambda alpha, beta, r: (alpha, beta),
    'momentum': lambda alpha, beta, r: (alpha, _power(alpha, beta, r)[1]),
    'lr': lambda alpha, beta, r: (_power(alpha, beta, r)[0], beta),
    'both': _power,
    'per_progress': _per_progress,
    'momentum_per_progress': lambda alpha, beta, r: (
        _per_progress(alpha, beta, r)[0],
        _power(alpha, beta, r)[1],
    ),
}


def _correction_rule(correction: str, table: tuple) -> _Rule:
  """The rule of mode ``correction`` (``table`` already checked)."""
  if correction == 'table':
    return functools.partial(_interpolated, table=table)
  return _RULES[correction]


def lr_sum_correction(
    learning_rate: Union[float, jax.Array, optax.Schedule],
    momentum: Union[float, jax.Array, optax.Schedule],
    correction: str = 'both',
    *,
    snap_tol: Union[float, jax.Array] = DEFAULT_SNAP_TOL,
    table: tuple = (),
) -> optax.GradientTransformationExtraArgs:
  r"""The correction as a link of the chain: the round's ``(α_t, β_t)`` from its sums.

  .. math::

    r_t = S_t / S_{\mathrm{ref},t}, \qquad
    (α_t, β_t) = \mathrm{correction}(α(t), β(t), r_t)

  (:func:`lr_sum_ratio`, :func:`corrected_hyperparams`). The updates pass
  through unchanged; the state (:class:`CorrectionState`) records
  ``count, α_t, β_t, r_t``, which :func:`autoloco` hands to the momentum and
  learning-rate links. The arguments are :func:`autoloco`'s (checked the same
  way, on ``update`` too).

  Returns:
    An ``optax.GradientTransformationExtraArgs`` with ``update(updates, state,
    params=None, *, inner_lr_sum=None, reference_lr_sum=None, **extra_args)``.

  Examples:
    >>> import jax.numpy as jnp
    >>> from autoloco_jax import outer
    >>> tx = outer.lr_sum_correction(0.7, 0.9, 'momentum')
    >>> _, state = tx.update(jnp.ones(2), tx.init(jnp.zeros(2)),
    ...                      inner_lr_sum=2.0, reference_lr_sum=1.0)
    >>> print(f'{state.ratio:.1f} {state.alpha:.2f} {state.beta:.2f}')  # 0.9 ** 2
    2.0 0.70 0.81
  """
  checks.check_choice('correction', correction, CORRECTIONS)
  checks.check_hyperparams(learning_rate, momentum, snap_tol)
  rule = _correction_rule(correction, checks.check_table(table, correction, momentum))
  schedule = learning_rate if callable(learning_rate) else lambda count: learning_rate
  beta_at = momentum if callable(momentum) else lambda count: momentum

  def init_fn(params):
    del params
    count = jnp.zeros((), jnp.int32)
    return CorrectionState(
        count=count,
        alpha=jnp.asarray(schedule(count), jnp.float32),
        beta=jnp.asarray(beta_at(count), jnp.float32),
        ratio=jnp.ones((), jnp.float32),
    )

  def update_fn(
      updates, state, params=None, *, inner_lr_sum=None, reference_lr_sum=None, **extra
  ):
    del params, extra
    checks.check_sums(inner_lr_sum, reference_lr_sum)
    ratio = lr_sum_ratio(inner_lr_sum, reference_lr_sum, snap_tol)
    alpha = jnp.asarray(schedule(state.count), jnp.float32)
    beta = jnp.asarray(beta_at(state.count), jnp.float32)
    alpha_t, beta_t = rule(alpha, beta, ratio)
    count = optax.safe_increment(state.count)
    return updates, CorrectionState(count, alpha_t, beta_t, ratio)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)
