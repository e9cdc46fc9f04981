r"""The reference sum ``S_ref,t`` that a round's ``S_t`` is measured against.

``'schedule'``: the inner schedule summed over the ``H_ref`` steps from the
round's start (:func:`reference_lr_sum`); ``'peak'``: ``H_ref · η_peak``
(:func:`peak_reference_lr_sum`). The transforms read only the sum.
"""

from __future__ import annotations

from typing import Any, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from autoloco_jax.outer import checks

#: How a caller computes ``reference_lr_sum``: :func:`reference_lr_sum` over the
#: schedule, or :func:`peak_reference_lr_sum` (the transform reads only the sum).
REFERENCES = ('schedule', 'peak')


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
  h_ref = checks.check_h_ref(h_ref)
  if not callable(schedule):
    if checks.is_concrete_number(schedule) and not np.asarray(schedule) > 0:
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
  h_ref = checks.check_h_ref(h_ref)
  checks.check_scalar('peak_lr', peak_lr, checks.POSITIVE)
  return jnp.asarray(h_ref * peak_lr, jnp.float32)
