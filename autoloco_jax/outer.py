r"""Outer optimizers for local-update training: DiLoCo and AutoLoCo's corrected step.

After a round of ``H_t`` inner steps the workers' pseudo-gradients are averaged,
``Δ_t = mean_k (θ_t − θ_{t,k})``, and an *outer* optimizer turns ``Δ_t`` into the
next global parameters. DiLoCo uses SGD with Nesterov momentum, tuned ``(α, β)``
for one fixed interval ``H_ref``. AutoLoCo changes the interval from round to
round, so each pseudo-gradient covers a different amount of inner progress; it
measures that progress by the accumulated inner learning rate
``S_t = Σ_{s in round t} η(s)`` and rescales the outer momentum and learning
rate by ``r_t = S_t / S_ref,t``.

The corrected step is a chain of small transforms, as optax builds ``sgd``
(``chain(trace(β, nesterov=True), scale_by_learning_rate(α))``):

.. code-block:: text

  lr_sum_correction      (Δ_t, S_t, S_ref,t) -> Δ_t, and records r_t, α_t, β_t
  nesterov_momentum(β_t)  m_t = β_t s_t m_{t−1} + Δ_t;  u_t = Δ_t + β_t m_t
  scale(−α_t)             −α_t u_t

where ``s_t`` is the ``on_change`` rule's factor for the buffer (1 to keep it).
Each correction mode and each ``on_change`` rule is a small function chosen by
name from a table, not a branch inside the update.

This module needs only JAX and optax, so other projects can take it as it is:

* :func:`autoloco` — the corrected outer step, an
  ``optax.GradientTransformationExtraArgs`` whose ``update`` reads the keyword
  arguments ``inner_lr_sum`` and ``reference_lr_sum``.
* :func:`lr_sum_correction` — the correction alone, a transform that passes the
  updates through and records the round's ``(r_t, α_t, β_t)``.
* :func:`nesterov_momentum` — the momentum link, ``optax.trace(β,
  nesterov=True)`` in the updates' dtype, with the buffer's factor ``s_t``.
* :func:`diloco` — the same transform with the correction off; bit for bit
  ``optax.sgd(α, momentum=β, nesterov=True)``.
* :func:`reference_lr_sum`, :func:`peak_reference_lr_sum` — the two ways of
  computing ``S_ref,t``.
* :func:`buffer_scale` — what ``on_change`` does to the momentum buffer when the
  round's length changes (restart or rescale).
* :func:`replayed_ratios` — an :func:`autoloco` transform fed a recorded sequence
  of ratios ``r_t`` instead of the trainer's sums (a control).

References:
  Douillard et al., `DiLoCo: Distributed Low-Communication Training of Language
  Models <https://arxiv.org/abs/2311.08105>`_, 2023.

  AutoLoCo: Communication Efficient Distributed LLM Training via Adaptive
  Synchronization, arXiv preprint, September 2026. The full text was not
  available to us; the correction implemented here is our reading of its
  abstract, derived in ``docs/algorithms.md`` (section 3a).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

CORRECTIONS = ('none', 'momentum', 'lr', 'both', 'table')
#: How a caller computes ``reference_lr_sum``: :func:`reference_lr_sum` over the
#: schedule, or :func:`peak_reference_lr_sum` (the transform reads only the sum).
REFERENCES = ('schedule', 'peak')
#: What happens to the momentum buffer when a round's ratio differs from the last
#: round's (see :func:`autoloco`).
ON_CHANGE = ('keep', 'restart', 'rescale')

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


class AutoLoCoState(NamedTuple):
  """State of :func:`autoloco` (and :func:`diloco`): the momentum link's buffer
  and the correction link's :class:`CorrectionState`, side by side in one flat
  tuple (the layout checkpoints have always held).

  Attributes:
    momentum: the Nesterov momentum buffer ``m_t``; a pytree shaped like the
      pseudo-gradients (and params), in their dtype.
    count: number of updates applied so far (scalar int32); indexes the outer
      learning-rate schedule when one is given.
    alpha: outer learning rate ``α_t`` applied by the last update (scalar
      float32; the uncorrected ``α`` before the first update).
    beta: momentum ``β_t`` applied by the last update (scalar float32; ``β``
      before the first update).
    ratio: ``r_t = S_t / S_ref,t`` applied by the last update (scalar float32;
      1 before the first update, when the sums are omitted, or when they were
      invalid under tracing).
  """

  momentum: optax.Params
  count: jax.Array
  alpha: jax.Array
  beta: jax.Array
  ratio: jax.Array

  @property
  def correction(self) -> CorrectionState:
    """The correction link's state."""
    return CorrectionState(self.count, self.alpha, self.beta, self.ratio)


@dataclasses.dataclass(frozen=True)
class AutoLoCoConfig:
  """The configuration an :func:`autoloco` transform was built with."""

  learning_rate: Any
  momentum: Any
  correction: str
  snap_tol: Any
  table: tuple
  on_change: str


class AutoLoCoTransformation(optax.GradientTransformationExtraArgs):
  """An ``optax.GradientTransformationExtraArgs`` that remembers its configuration.

  To optax it is the usual ``(init, update)`` pair; ``config`` (an
  :class:`AutoLoCoConfig`) is there for logging and introspection, e.g.
  ``tx.config.correction``.
  """

  @property
  def config(self) -> AutoLoCoConfig:
    # Absent only on copies made by NamedTuple methods such as ``_replace``.
    return self.__dict__.get('config')


def _is_concrete_number(x: Any) -> bool:
  """True for Python and NumPy numbers/arrays: values we may check eagerly.

  JAX arrays are left alone: under ``jit`` or ``inject_hyperparams`` they are
  traced, and reading a concrete one would force a device-to-host sync.
  """
  return isinstance(x, (numbers.Number, np.ndarray, np.generic)) and not isinstance(
      x, bool
  )


class _Range(NamedTuple):
  """Finite numbers ``low <= x`` (``low < x`` unless ``low_in``), ``< high``."""

  low: float
  high: float = math.inf
  low_in: bool = True

  def contains(self, x: float) -> bool:
    above = x >= self.low if self.low_in else x > self.low
    return math.isfinite(x) and above and x < self.high

  def describe(self) -> str:
    if self.high == math.inf:
      return f"{'>=' if self.low_in else '>'} {self.low}"
    return f"in {'[' if self.low_in else '('}{self.low}, {self.high})"


# The ranges ``autoloco_jax.ranges`` gives ``diloco.alpha`` and ``diloco.beta``,
# restated so that this module needs nothing but JAX and optax.
_POSITIVE = _Range(0.0, low_in=False)
_BELOW_ONE = _Range(0.0, 1.0)


def _check_scalar(name: str, value: Any, valid: _Range) -> None:
  """A concrete ``value`` must be a scalar in ``valid``; JAX arrays pass."""
  if _is_concrete_number(value):
    v = np.asarray(value)
    if v.ndim != 0 or not valid.contains(float(v)):
      raise ValueError(f'{name} must be a scalar {valid.describe()}, got {value!r}.')


def _check_hyperparams(
    learning_rate: Any, momentum: Any, correction: str, snap_tol: Any, on_change: str
) -> None:
  if correction not in CORRECTIONS:
    raise ValueError(f'correction must be one of {CORRECTIONS}, got {correction!r}.')
  if on_change not in ON_CHANGE:
    raise ValueError(f'on_change must be one of {ON_CHANGE}, got {on_change!r}.')
  if isinstance(learning_rate, bool) or not (
      callable(learning_rate)
      or _is_concrete_number(learning_rate)
      or isinstance(learning_rate, jax.Array)
  ):
    raise ValueError(
        f'learning_rate must be a positive number, an array or a schedule, '
        f'got {learning_rate!r}.'
    )
  if isinstance(momentum, bool) or not (
      _is_concrete_number(momentum) or isinstance(momentum, jax.Array)
  ):
    raise ValueError(
        f'momentum must be a number in [0, 1), got {momentum!r} (use 0.0 for '
        'no momentum; schedules go through optax.inject_hyperparams).'
    )
  _check_scalar('learning_rate', learning_rate, _POSITIVE)
  _check_scalar('momentum', momentum, _BELOW_ONE)
  _check_scalar('snap_tol', snap_tol, _BELOW_ONE)


def _check_table(table: Any, correction: str, momentum: Any) -> tuple:
  """The table as a tuple of float triples, or a ``ValueError``."""
  table = tuple(tuple(float(v) for v in row) for row in (table or ()))
  if (correction == 'table') != bool(table):
    raise ValueError(
        "a table is given exactly when correction='table' (the (r, alpha scale, "
        f'beta) points); got correction={correction!r} and table={table!r}.'
    )
  if not table:
    return table
  if any(len(row) != 3 for row in table):
    raise ValueError(f'table rows are (r, alpha_scale, beta) triples, got {table!r}.')
  rs = [r for r, _, _ in table]
  if not all(np.isfinite(rs)) or rs[0] <= 0 or any(b <= a for a, b in zip(rs, rs[1:])):
    raise ValueError(f'table ratios must be finite, > 0 and increasing, got {rs}.')
  for r, scale, beta in table:
    if not (_POSITIVE.contains(scale) and _BELOW_ONE.contains(beta)):
      raise ValueError(
          f'table row {(r, scale, beta)}: alpha scale must be > 0 and beta in [0, 1).'
      )
  ones = [row for row in table if row[0] == 1.0]
  ref = ones[0] if ones else (None, None, None)
  if ref[1] != 1.0 or (_is_concrete_number(momentum) and ref[2] != float(momentum)):
    raise ValueError(
        f'the table must hold the reference point (1, 1, momentum={momentum!r}) '
        f'(r = 1 is the plain DiLoCo step), got {table!r}.'
    )
  return table


def _check_sums(inner_lr_sum: Any, reference_lr_sum: Any) -> None:
  if (inner_lr_sum is None) != (reference_lr_sum is None):
    raise ValueError(
        'inner_lr_sum and reference_lr_sum must be passed together (or both '
        f'omitted for the plain DiLoCo step); got inner_lr_sum={inner_lr_sum!r}, '
        f'reference_lr_sum={reference_lr_sum!r}.'
    )
  _check_scalar('inner_lr_sum', inner_lr_sum, _POSITIVE)
  _check_scalar('reference_lr_sum', reference_lr_sum, _POSITIVE)


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
  if correction not in CORRECTIONS:
    raise ValueError(f'correction must be one of {CORRECTIONS}, got {correction!r}.')
  rule = _correction_rule(correction, _check_table(table, correction, beta))
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


_RULES = {
    'none': lambda alpha, beta, r: (alpha, beta),
    'momentum': lambda alpha, beta, r: (alpha, _power(alpha, beta, r)[1]),
    'lr': lambda alpha, beta, r: (_power(alpha, beta, r)[0], beta),
    'both': _power,
}


def _correction_rule(correction: str, table: tuple) -> _Rule:
  """The rule of mode ``correction`` (``table`` already checked)."""
  if correction == 'table':
    return functools.partial(_interpolated, table=table)
  return _RULES[correction]


def lr_sum_correction(
    learning_rate: Union[float, jax.Array, optax.Schedule],
    momentum: Union[float, jax.Array],
    correction: str = 'both',
    *,
    snap_tol: Union[float, jax.Array] = DEFAULT_SNAP_TOL,
    table: tuple = (),
) -> optax.GradientTransformationExtraArgs:
  r"""The correction as a link of the chain: the round's ``(α_t, β_t)`` from its sums.

  .. math::

    r_t = S_t / S_{\mathrm{ref},t}, \qquad
    (α_t, β_t) = \mathrm{correction}(α(t), β, r_t)

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
  _check_hyperparams(learning_rate, momentum, correction, snap_tol, 'keep')
  rule = _correction_rule(correction, _check_table(table, correction, momentum))
  schedule = learning_rate if callable(learning_rate) else lambda count: learning_rate

  def init_fn(params):
    del params
    count = jnp.zeros((), jnp.int32)
    return CorrectionState(
        count=count,
        alpha=jnp.asarray(schedule(count), jnp.float32),
        beta=jnp.asarray(momentum, jnp.float32),
        ratio=jnp.ones((), jnp.float32),
    )

  def update_fn(
      updates, state, params=None, *, inner_lr_sum=None, reference_lr_sum=None, **extra
  ):
    del params, extra
    _check_sums(inner_lr_sum, reference_lr_sum)
    ratio = lr_sum_ratio(inner_lr_sum, reference_lr_sum, snap_tol)
    alpha = jnp.asarray(schedule(state.count), jnp.float32)
    alpha_t, beta_t = rule(alpha, jnp.asarray(momentum, jnp.float32), ratio)
    count = optax.safe_increment(state.count)
    return updates, CorrectionState(count, alpha_t, beta_t, ratio)

  return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def buffer_scale(
    prev_ratio: Any,
    ratio: Any,
    on_change: str,
    snap_tol: Any = DEFAULT_SNAP_TOL,
) -> jax.Array:
  r"""The factor :func:`autoloco` applies to the momentum buffer ``m_{t−1}``.

  .. math::

    \text{keep: } 1, \qquad
    \text{restart: } \begin{cases} 0 & |r_t − r_{t−1}| > \text{tol} \, r_{t−1} \\
      1 & \text{otherwise} \end{cases}, \qquad
    \text{rescale: } r_t / r_{t−1}.

  Args:
    prev_ratio: ``r_{t−1}``, the previous round's ratio (1 before the first round).
    ratio: ``r_t``, this round's.
    on_change: ``'keep' | 'restart' | 'rescale'``.
    snap_tol: relative change below which ``'restart'`` keeps the buffer.

  Returns:
    The factor as a float32 scalar; exactly 1 when ``r_t == r_{t−1}``.
  """
  if on_change not in ON_CHANGE:
    raise ValueError(f'on_change must be one of {ON_CHANGE}, got {on_change!r}.')
  rule = _BUFFER_RULES[on_change]
  if rule is None:
    return jnp.ones((), jnp.float32)
  prev = jnp.asarray(prev_ratio, jnp.float32)
  return rule(prev, jnp.asarray(ratio, jnp.float32), snap_tol)


def _restart(prev, r, snap_tol):
  return jnp.where(jnp.abs(r - prev) > snap_tol * prev, 0.0, 1.0).astype(jnp.float32)


def _rescale(prev, r, snap_tol):
  del snap_tol
  return jnp.where(r == prev, 1.0, r / prev).astype(jnp.float32)


# An ``on_change`` rule: ``(r_{t−1}, r_t, snap_tol) -> s_t``, the buffer's factor;
# None leaves the buffer untouched (no multiply at all).
_BUFFER_RULES = {'keep': None, 'restart': _restart, 'rescale': _rescale}


def nesterov_momentum(
    beta: jax.Array, buffer_scale: Optional[jax.Array] = None
) -> optax.GradientTransformation:
  r"""The momentum link: ``optax.trace(β, nesterov=True)`` in the updates' dtype.

  .. math::

    m_t = Δ_t + β \, (s \, m_{t-1}), \qquad u_t = Δ_t + β \, m_t

  Its state is ``optax.TraceState(trace=m)``. The same float operations, in the
  same order, as ``optax.trace``; ``β`` (and ``s``) are cast to each leaf's
  dtype first, as a Python float would be, so a traced float32 ``β_t`` keeps
  bfloat16 leaves bfloat16.

  Args:
    beta: the momentum ``β`` (a scalar; may be traced).
    buffer_scale: ``s``, a factor applied to the buffer before the update (the
      ``on_change`` rule's), or None for none.

  Returns:
    An ``optax.GradientTransformation``.
  """

  def update_fn(updates, state, params=None):
    del params
    trace = state.trace
    if buffer_scale is not None:
      trace = jax.tree.map(lambda m: buffer_scale.astype(m.dtype) * m, trace)
    f = lambda g, m: g + beta.astype(m.dtype) * m
    new_trace = jax.tree.map(f, updates, trace)
    return jax.tree.map(f, updates, new_trace), optax.TraceState(trace=new_trace)

  return optax.GradientTransformation(optax.trace(0.0).init, update_fn)


def _scale(step_size: jax.Array) -> optax.GradientTransformation:
  """``optax.scale(step_size)`` with ``step_size`` cast to each leaf's dtype."""

  def update_fn(updates, state, params=None):
    del params
    return jax.tree.map(lambda u: step_size.astype(u.dtype) * u, updates), state

  return optax.GradientTransformation(optax.scale(1.0).init, update_fn)


def _corrected_nesterov(
    correct: optax.GradientTransformationExtraArgs, on_change: str, snap_tol: Any
) -> AutoLoCoTransformation:
  """The chain: ``correct``, then Nesterov momentum at its ``β_t`` (the buffer
  first treated by the ``on_change`` rule), then the scale by ``−α_t``.

  Like ``optax.inject_hyperparams``, except that the hyperparameters of the
  momentum and scale links come from the correction link's update (which reads
  the sums) rather than from schedules of the step count.
  """
  rule = _BUFFER_RULES[on_change]

  def init_fn(params):
    return AutoLoCoState(optax.tree.zeros_like(params), *correct.init(params))

  def update_fn(updates, state, params=None, **extra_args):
    updates, hyper = correct.update(updates, state.correction, params, **extra_args)
    scale = None if rule is None else rule(state.ratio, hyper.ratio, snap_tol)
    step = optax.chain(nesterov_momentum(hyper.beta, scale), _scale(-hyper.alpha))
    step_state = (optax.TraceState(trace=state.momentum), optax.EmptyState())
    updates, (trace, _) = step.update(updates, step_state, params)
    return updates, AutoLoCoState(trace.trace, *hyper)

  return AutoLoCoTransformation(init_fn, update_fn)


def autoloco(
    learning_rate: Union[float, jax.Array, optax.Schedule],
    momentum: Union[float, jax.Array],
    correction: str = 'both',
    *,
    snap_tol: Union[float, jax.Array] = DEFAULT_SNAP_TOL,
    table: tuple = (),
    on_change: str = 'keep',
) -> AutoLoCoTransformation:
  r"""AutoLoCo's outer optimizer: Nesterov SGD corrected by accumulated inner lr.

  Each update receives the averaged pseudo-gradient ``Δ_t`` and, as keyword
  arguments, the accumulated inner learning rate of the round,
  ``S_t = Σ_{s in round t} η(s)``, and that of the reference interval the
  outer hyperparameters were tuned for, ``S_ref,t``. With ``r_t = S_t/S_ref,t``:

  .. math::

    \begin{align*}
      β_t &= β^{r_t}, \qquad α_t = α \, \frac{1 - β_t}{1 - β}, \\
      m_t &= β_t \, m_{t-1} + Δ_t, \\
      θ_{t+1} &= θ_t - α_t \, (Δ_t + β_t \, m_t).
    \end{align*}

  The returned updates are ``−α_t (Δ_t + β_t m_t)``, so
  ``optax.apply_updates(θ_t, updates)`` is ``θ_{t+1}``. Why these two
  corrections: ``β^{r}`` makes the momentum's memory a fixed amount of
  accumulated inner learning rate instead of a fixed number of rounds, and
  ``α_t/(1 − β_t) = α/(1 − β)`` keeps the total weight with which every
  pseudo-gradient is eventually applied (and so the steady-state step per unit
  of inner learning rate) at its DiLoCo value (``docs/algorithms.md``, 3a).

  The transform is a chain: :func:`lr_sum_correction` computes ``(α_t, β_t)``,
  :func:`nesterov_momentum` at ``β_t`` and a scale by ``−α_t`` follow (optax's
  ``sgd``, whose hyperparameters the correction sets each round).

  ``correction`` selects what is corrected, for ablations: ``'none'`` applies
  ``(α, β)`` (DiLoCo), ``'momentum'`` ``(α, β_t)``, ``'lr'``
  ``(α (1 − β^{r_t})/(1 − β), β)``, ``'both'`` ``(α_t, β_t)``. ``'table'``
  replaces the formulas by measured pairs: ``(α a(r_t), b(r_t))``, piecewise
  linear through ``table``'s ``(r_i, a_i, b_i)`` (:func:`corrected_hyperparams`),
  e.g. DiLoCo's outer pairs tuned at several fixed intervals.

  ``on_change`` treats the buffer ``m_{t−1}`` when the round's length changed,
  ``r_t ≠ r_{t−1}`` (``r_0 = 1``), before the update: ``'keep'`` leaves it (the
  formulas above); ``'restart'`` zeroes it when ``|r_t − r_{t−1}| > snap_tol ·
  r_{t−1}`` (a momentum restart; a schedule-summed ``S_ref,t`` makes ``r_t``
  drift a little every round, so with such sums it fires on nearly every round);
  ``'rescale'`` multiplies it by ``r_t / r_{t−1}``. A pseudo-gradient grows with
  its round's inner progress, ``Δ_t ≈ S_t g``, so the rescaled buffer holds the
  past rounds' directions at the scale of the current round,
  ``m_{t−1} ≈ S_t Σ_k β^k g_{t−1−k}``: old momentum decays when rounds get
  shorter and weighs more when they get longer.

  Whatever the mode, ``r_t = 1`` on every round (or omitted sums) gives the
  DiLoCo step bit for bit: the same float operations, in the same order, as
  ``optax.sgd(learning_rate, momentum, nesterov=True)``. Ratios within
  ``snap_tol`` of 1 count as 1, so a round of exactly ``H_ref`` steps is the
  DiLoCo step even if ``S_t`` and ``S_ref,t`` were summed in different orders.

  Sums must be finite and > 0. Python or NumPy values are checked eagerly
  (``ValueError``). JAX arrays are not checked (they may be traced): an invalid
  traced pair is applied as ``r_t = 1`` (the uncorrected step), so the update
  is never NaN because of the sums; the state's ``ratio`` then reads 1.

  Args:
    learning_rate: outer learning rate ``α`` (> 0), or an optax schedule of the
      outer step count.
    momentum: outer momentum ``β`` in ``[0, 1)``. With ``β = 0`` the corrected
      ``α_t`` is ``α`` for every ``r_t > 0`` (the limit of the formula).
    correction: ``'none' | 'momentum' | 'lr' | 'both' | 'table'``; the default
      is the formulas above (the trainer passes ``config.autoloco.correction``).
    snap_tol: ratios with ``|r_t − 1| ≤ snap_tol`` are applied as exactly 1.
    table: for ``correction='table'`` only: ``((r_i, a_i, b_i), ...)`` with
      increasing ``r_i > 0``, ``a_i > 0``, ``b_i`` in ``[0, 1)``, holding the
      reference point ``(1, 1, momentum)``.
    on_change: ``'keep' | 'restart' | 'rescale'``: the momentum buffer when
      ``r_t`` differs from the previous round's ratio.

  Returns:
    An :class:`AutoLoCoTransformation` (an ``optax.GradientTransformationExtraArgs``)
    with ``update(pseudo_grad, state, params=None, *, inner_lr_sum=None,
    reference_lr_sum=None, **extra_args)``; other extra args are ignored, so it
    composes with ``optax.chain`` and ``optax.inject_hyperparams`` (where
    ``learning_rate`` and ``momentum`` are injectable).

  Raises:
    ValueError: for a bad ``learning_rate``, ``momentum``, ``correction``,
      ``snap_tol``, ``table`` or ``on_change``; at ``update``, for concrete
      sums that are not > 0 or for only one of the two sums.

  Examples:
    >>> import jax.numpy as jnp
    >>> import optax
    >>> from autoloco_jax import outer
    >>> tx = outer.autoloco(learning_rate=0.7, momentum=0.9)
    >>> params = {'w': jnp.zeros(3)}
    >>> state = tx.init(params)
    >>> delta = {'w': jnp.ones(3)}  # θ_t − mean_k θ_{t,k}
    >>> # A round half as long (in inner lr) as the reference interval:
    >>> updates, state = tx.update(delta, state, params,
    ...                            inner_lr_sum=0.5, reference_lr_sum=1.0)
    >>> params = optax.apply_updates(params, updates)
    >>> print(f'{state.ratio:.2f} {state.beta:.4f} {state.alpha:.4f}')
    0.50 0.9487 0.3592

  References:
    Douillard et al., `DiLoCo: Distributed Low-Communication Training of
    Language Models <https://arxiv.org/abs/2311.08105>`_, 2023.

    AutoLoCo: Communication Efficient Distributed LLM Training via Adaptive
    Synchronization, arXiv preprint, September 2026 (our reading of its
    abstract).

    Sutskever et al., `On the importance of initialization and momentum in deep
    learning <http://proceedings.mlr.press/v28/sutskever13.pdf>`_, 2013.
  """
  _check_hyperparams(learning_rate, momentum, correction, snap_tol, on_change)
  table = _check_table(table, correction, momentum)
  correct = lr_sum_correction(
      learning_rate, momentum, correction, snap_tol=snap_tol, table=table
  )
  tx = _corrected_nesterov(correct, on_change, snap_tol)
  tx.__dict__['config'] = AutoLoCoConfig(
      learning_rate=learning_rate,
      momentum=momentum,
      correction=correction,
      snap_tol=snap_tol,
      table=table,
      on_change=on_change,
  )
  return tx


def replayed_ratios(
    tx: AutoLoCoTransformation, ratios: Any
) -> AutoLoCoTransformation:
  r"""``tx`` with the ratio of its ``t``-th update replayed from ``ratios``.

  .. math::

    r_t = \mathrm{ratios}[\min(t, n - 1)], \qquad
    (α_t, β_t) = \mathrm{correction}(α, β, r_t),

  whatever ``inner_lr_sum`` and ``reference_lr_sum`` the caller passes: the
  wrapped update sees ``S_t = r_t`` and ``S_ref,t = 1``. ``t`` is the state's
  ``count`` (updates applied so far); past the end the last ratio holds. A
  control: one run's corrected outer steps, as it logged them, on another run's
  rounds (DiLoCo's fixed ``H_ref``, say, where the correction itself is the
  identity), which separates what the sequence of outer hyperparameters does
  from what the adaptive ``H`` does.

  Args:
    tx: an :func:`autoloco` transform.
    ratios: the ratios ``r_0, r_1, ...`` (finite, > 0; at least one).

  Returns:
    An :class:`AutoLoCoTransformation` with ``tx``'s state and ``config``.

  Raises:
    ValueError: for an empty sequence or a ratio that is not finite and > 0.

  Examples:
    >>> import jax.numpy as jnp
    >>> from autoloco_jax import outer
    >>> tx = outer.replayed_ratios(outer.autoloco(0.7, 0.9, 'momentum'), [2.0])
    >>> state = tx.init(jnp.zeros(1))
    >>> _, state = tx.update(jnp.ones(1), state, inner_lr_sum=5.0,
    ...                      reference_lr_sum=5.0)
    >>> print(f'{float(state.beta):.4f}')  # 0.9 ** 2, not 0.9 ** 1
    0.8100
  """
  r = np.asarray(ratios, np.float32).reshape(-1)
  if r.size == 0 or not np.all(np.isfinite(r) & (r > 0)):
    raise ValueError(f'ratios must be one or more finite numbers > 0, got {ratios!r}.')
  table = jnp.asarray(r)

  def update_fn(updates, state, params=None, **extra_args):
    extra_args.pop('inner_lr_sum', None)
    extra_args.pop('reference_lr_sum', None)
    r_t = table[jnp.minimum(state.count, r.size - 1)]
    return tx.update(
        updates,
        state,
        params,
        inner_lr_sum=r_t,
        reference_lr_sum=jnp.ones((), jnp.float32),
        **extra_args,
    )

  out = AutoLoCoTransformation(tx.init, update_fn)
  out.__dict__['config'] = tx.config
  return out


def diloco(
    learning_rate: Union[float, jax.Array, optax.Schedule],
    momentum: Union[float, jax.Array],
) -> AutoLoCoTransformation:
  r"""DiLoCo's outer optimizer: SGD with Nesterov momentum on the pseudo-gradient.

  .. math::

    m_t = β \, m_{t-1} + Δ_t, \qquad θ_{t+1} = θ_t - α \, (Δ_t + β \, m_t).

  This is :func:`autoloco` with ``correction='none'``: bit for bit
  ``optax.sgd(learning_rate, momentum=momentum, nesterov=True)``, with the same
  :class:`AutoLoCoState` (so ``alpha``, ``beta`` can be logged alike). It
  accepts and ignores ``inner_lr_sum``/``reference_lr_sum``, so a training loop
  can switch between the two without changing its call.

  Args:
    learning_rate: outer learning rate ``α`` (paper: 0.7), or a schedule.
    momentum: outer Nesterov momentum ``β`` in ``[0, 1)`` (paper: 0.9).

  Returns:
    An :class:`AutoLoCoTransformation`.

  Examples:
    >>> import jax.numpy as jnp
    >>> from autoloco_jax import outer
    >>> tx = outer.diloco(0.7, 0.9)
    >>> state = tx.init(jnp.zeros(2))
    >>> updates, state = tx.update(jnp.ones(2), state)
    >>> print([f'{u:.4f}' for u in updates])  # −0.7 · (1 + 0.9 · 1)
    ['-1.3300', '-1.3300']

  References:
    Douillard et al., `DiLoCo: Distributed Low-Communication Training of
    Language Models <https://arxiv.org/abs/2311.08105>`_, 2023.
  """
  return autoloco(learning_rate, momentum, correction='none')


def _check_h_ref(h_ref: Any) -> int:
  if isinstance(h_ref, bool) or not isinstance(h_ref, (numbers.Integral, np.integer)):
    raise ValueError(f'h_ref must be a Python int >= 1 (static), got {h_ref!r}.')
  if h_ref < 1:
    raise ValueError(f'h_ref must be >= 1, got {h_ref!r}.')
  return int(h_ref)


def reference_lr_sum(
    schedule: Union[optax.Schedule, float], start_step: Any, h_ref: int
) -> jax.Array:
  r"""Accumulated inner lr of the reference interval starting at ``start_step``.

  .. math::

    S_{\mathrm{ref},t} = \sum_{s = s_0}^{s_0 + H_\mathrm{ref} - 1} η(s)

  Summed in float32, one step at a time in increasing ``s`` starting from 0,
  exactly as an inner loop that does ``S += η(s)`` each step, so a round of
  ``H_ref`` steps gets ``S_t == S_ref,t`` bit for bit (``r_t = 1``).

  Args:
    schedule: the inner learning-rate schedule ``η`` (an optax schedule), or a
      constant learning rate.
    start_step: ``s_0``, the round's first inner step (int, may be traced).
    h_ref: ``H_ref``, the reference interval (static Python int >= 1).

  Returns:
    ``S_ref,t`` as a float32 scalar.

  Examples:
    >>> import optax
    >>> from autoloco_jax import outer
    >>> sched = optax.linear_schedule(1.0, 0.0, transition_steps=10)
    >>> print(f'{outer.reference_lr_sum(sched, 5, 3):.2f}')  # 0.5 + 0.4 + 0.3
    1.20
  """
  h_ref = _check_h_ref(h_ref)
  if not callable(schedule):
    if _is_concrete_number(schedule) and not np.asarray(schedule) > 0:
      raise ValueError(f'schedule must be a schedule or a number > 0, got {schedule!r}.')
    value = schedule
    schedule = lambda _: value
  s0 = jnp.asarray(start_step, jnp.int32)

  def body(i, acc):
    return acc + schedule(s0 + i)

  return lax.fori_loop(0, h_ref, body, jnp.zeros((), jnp.float32)).astype(jnp.float32)


def peak_reference_lr_sum(peak_lr: Any, h_ref: int) -> jax.Array:
  r"""The ``'peak'`` reference: ``S_ref = H_ref · η_peak`` (a constant).

  Measured against it, ``r_t`` also falls as the schedule decays, so the
  correction also shortens the momentum memory and the step late in training.

  Args:
    peak_lr: the inner schedule's peak learning rate ``η_peak`` (> 0).
    h_ref: ``H_ref`` (Python int >= 1).

  Returns:
    ``H_ref · η_peak`` as a float32 scalar.
  """
  h_ref = _check_h_ref(h_ref)
  _check_scalar('peak_lr', peak_lr, _POSITIVE)
  return jnp.asarray(h_ref * peak_lr, jnp.float32)
