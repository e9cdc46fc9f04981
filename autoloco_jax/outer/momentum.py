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
