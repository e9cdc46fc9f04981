r"""The links after the correction: Nesterov momentum at ``β_t`` and the scale by
``−α_t``, and what ``on_change`` does to the momentum buffer.

Together they are optax's ``sgd(α_t, momentum=β_t, nesterov=True)``, the same
float operations in the same order, with the round's hyperparameters cast to
each leaf's dtype (as Python floats would be). Each ``on_change`` rule of
:data:`ON_CHANGE` is a small function of ``(r_{t−1}, r_t)``, chosen by name.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import optax

from autoloco_jax.outer import checks
from autoloco_jax.outer.correction import DEFAULT_SNAP_TOL

#: What happens to the momentum buffer when a round's ratio differs from the last
#: round's (see :func:`autoloco`).
ON_CHANGE = ('keep', 'restart', 'rescale')

#: The shapes of :func:`momentum_schedule`.
MOMENTUM_SHAPES = ('linear', 'cosine')


def momentum_schedule(
    beta_0: Any, beta_1: Any, rounds: int, shape: str = 'linear'
) -> optax.Schedule:
  r"""An outer-momentum schedule ``β(t)`` of the outer step count ``t``.

  .. math::

    u = \min(t, R) / R, \qquad
    β(t) = \begin{cases}
      β_0 + (β_1 − β_0)\, u & \text{linear} \\
      β_1 + (β_0 − β_1)\, \tfrac{1}{2}(1 + \cos π u) & \text{cosine}
    \end{cases}

  ``β_0`` at the first outer step, ``β_1`` from step ``R`` on: over the whole
  run (``R`` its number of rounds), or a warmup over the first ``R`` rounds. An
  optax schedule (``optax.linear_schedule``; ``optax.cosine_decay_schedule`` of
  ``β_0 − β_1``, shifted by ``β_1``), for the ``momentum`` argument of
  :func:`~autoloco_jax.outer.diloco` and :func:`~autoloco_jax.outer.autoloco`
  (which read it at their state's ``count``). ``β_0`` and ``β_1`` may be traced.

  Args:
    beta_0: ``β`` at ``t = 0``, in [0, 1).
    beta_1: ``β`` from ``t = R`` on, in [0, 1).
    rounds: ``R >= 1``, the outer steps the change takes.
    shape: ``'linear' | 'cosine'``.

  Returns:
    An ``optax.Schedule``.

  Raises:
    ValueError: for a shape not in :data:`MOMENTUM_SHAPES`, ``rounds < 1``, or a
      concrete ``β`` outside [0, 1).

  Examples:
    >>> from autoloco_jax import outer
    >>> beta = outer.momentum_schedule(0.5, 0.9, rounds=4)
    >>> print([f'{float(beta(t)):.2f}' for t in range(6)])
    ['0.50', '0.60', '0.70', '0.80', '0.90', '0.90']
  """
  checks.check_choice('shape', shape, MOMENTUM_SHAPES)
  checks.check_scalar('beta_0', beta_0, checks.BELOW_ONE)
  checks.check_scalar('beta_1', beta_1, checks.BELOW_ONE)
  if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
    raise ValueError(f'rounds must be an int >= 1, got {rounds!r}.')
  if shape == 'linear':
    return optax.linear_schedule(beta_0, beta_1, transition_steps=rounds)
  decay = optax.cosine_decay_schedule(beta_0 - beta_1, decay_steps=rounds)
  return lambda count: beta_1 + decay(count)


def buffer_scale(
    prev_ratio: Any,
    ratio: Any,
    on_change: str,
    snap_tol: Any = DEFAULT_SNAP_TOL,
) -> jax.Array:
  r"""The factor :func:`~autoloco_jax.outer.autoloco` applies to the momentum buffer ``m_{t−1}``.

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
  checks.check_choice('on_change', on_change, ON_CHANGE)
  rule = BUFFER_RULES[on_change]
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
BUFFER_RULES = {'keep': None, 'restart': _restart, 'rescale': _rescale}


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
  beta = jnp.asarray(beta)
  if buffer_scale is not None:
    buffer_scale = jnp.asarray(buffer_scale)

  def update_fn(updates, state, params=None):
    del params
    trace = state.trace
    if buffer_scale is not None:
      trace = jax.tree.map(lambda m: buffer_scale.astype(m.dtype) * m, trace)
    f = lambda g, m: g + beta.astype(m.dtype) * m
    new_trace = jax.tree.map(f, updates, trace)
    return jax.tree.map(f, updates, new_trace), optax.TraceState(trace=new_trace)

  return optax.GradientTransformation(optax.trace(0.0).init, update_fn)


def scale(step_size: jax.Array) -> optax.GradientTransformation:
  """``optax.scale(step_size)`` with ``step_size`` cast to each leaf's dtype."""
  step_size = jnp.asarray(step_size)

  def update_fn(updates, state, params=None):
    del params
    return jax.tree.map(lambda u: step_size.astype(u.dtype) * u, updates), state

  return optax.GradientTransformation(optax.scale(1.0).init, update_fn)
