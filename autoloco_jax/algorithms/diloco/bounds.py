"""What keeps a controller's interval an integer in ``[h_min, h_max]``: the
eager checks of its arguments and the rounding of a float rule to an interval.

The interval controllers (``intervals.py``) check their arguments here when they
are built (a bad one is a ``ValueError`` naming it) and round their float rules
with :func:`to_interval`; ``init``'s first interval goes through
:func:`initial_interval` (checked when concrete, clipped when traced).
"""

from __future__ import annotations

import numbers
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from autoloco_jax import ranges


def is_int(x: Any) -> bool:
  """An integer that is not a bool (Python or NumPy)."""
  return isinstance(x, (numbers.Integral, np.integer)) and not isinstance(x, bool)


def _is_concrete_number(x: Any) -> bool:
  return isinstance(x, (numbers.Number, np.ndarray, np.generic)) and not isinstance(
      x, bool
  )


def check_int(name: str, value: Any, low: int = 1) -> int:
  """``value`` as an int, if it is an integer ``>= low``."""
  if not is_int(value):
    raise ValueError(f'{name} must be an int >= {low}, got {value!r}.')
  if value < low:
    raise ValueError(f'{name} must be >= {low}, got {value!r}.')
  return int(value)


def check_bounds(h_min: Any, h_max: Any) -> tuple[int, int]:
  """``(h_min, h_max)``, ints with ``1 <= h_min <= h_max``."""
  h_min = check_int('h_min', h_min)
  h_max = check_int('h_max', h_max)
  if h_min > h_max:
    raise ValueError(f'h_min must be <= h_max, got h_min={h_min}, h_max={h_max}.')
  return h_min, h_max


def check_h0(h0: Any, h_min: int, h_max: int, name: str = 'h0') -> int:
  """``h0`` as an int in ``[h_min, h_max]``."""
  h0 = check_int(name, h0)
  if not h_min <= h0 <= h_max:
    raise ValueError(f'{name} must lie in [h_min, h_max] = [{h_min}, {h_max}], got {h0}.')
  return h0


def check_float(name: str, value: Any, valid: ranges.Range) -> float:
  """``value`` as a float, if it is a number in ``valid`` (``ranges.py``)."""
  if isinstance(value, (np.ndarray, np.generic)) and np.ndim(value) == 0:
    value = value.item()
  valid.check(name, value)
  return float(value)


def initial_interval(h0: Any, default: int, h_min: int, h_max: int) -> jax.Array:
  """``init``'s ``h0``: checked eagerly when concrete, clipped when traced."""
  if h0 is None:
    h0 = default
  if isinstance(h0, np.ndarray) and h0.ndim == 0:
    h0 = h0.item()
  if _is_concrete_number(h0):
    h0 = check_h0(h0, h_min, h_max)
  return jnp.clip(jnp.asarray(h0, jnp.int32), h_min, h_max)


# floor/ceil with a relative slack: float32 gives (0.01/0.001)² = 99.99999, and a
# rule whose value is an integer in exact arithmetic should return that integer.
_REL_TOL = 1e-6


def floor(h: jax.Array) -> jax.Array:
  """``⌊h⌋`` with a relative slack of :data:`_REL_TOL`."""
  return jnp.floor(h * (1.0 + _REL_TOL))


def ceil(h: jax.Array) -> jax.Array:
  """``⌈h⌉`` with a relative slack of :data:`_REL_TOL`."""
  return jnp.ceil(h * (1.0 - _REL_TOL))


def to_interval(h: jax.Array, h_min: int, h_max: int, rounding: Callable) -> jax.Array:
  """A float rule's value ``h`` as an int32 interval in ``[h_min, h_max]``,
  rounded by ``rounding`` (clipped in float first: ``(c/η)²`` and friends can
  be huge or inf before int32)."""
  h = jnp.clip(h, float(h_min), float(h_max))
  return jnp.clip(rounding(h).astype(jnp.int32), h_min, h_max)
