"""Eager checks of the outer transforms' arguments.

Python and NumPy values are checked when a transform is built (or, for the
sums, when ``update`` is called); JAX arrays pass, since they may be traced.
Only JAX, NumPy and the standard library: the package's own range table
(``autoloco_jax.ranges``) gives ``diloco.alpha`` and ``diloco.beta`` the same
ranges as :data:`POSITIVE` and :data:`BELOW_ONE`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

import jax
import numpy as np


def is_concrete_number(x: Any) -> bool:
  """True for Python and NumPy numbers/arrays: values we may check eagerly.

  JAX arrays are left alone: under ``jit`` or ``inject_hyperparams`` they are
  traced, and reading a concrete one would force a device-to-host sync.
  """
  return isinstance(x, (numbers.Number, np.ndarray, np.generic)) and not isinstance(
      x, bool
  )


class Range(NamedTuple):
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


#: Numbers > 0 (a learning rate, a sum) and in [0, 1) (a momentum, a tolerance).
POSITIVE = Range(0.0, low_in=False)
BELOW_ONE = Range(0.0, 1.0)


def check_choice(name: str, value: str, choices: tuple) -> None:
  """``value`` must be one of ``choices``."""
  if value not in choices:
    raise ValueError(f'{name} must be one of {choices}, got {value!r}.')


def check_scalar(name: str, value: Any, valid: Range) -> None:
  """A concrete ``value`` must be a scalar in ``valid``; JAX arrays pass."""
  if is_concrete_number(value):
    v = np.asarray(value)
    if v.ndim != 0 or not valid.contains(float(v)):
      raise ValueError(f'{name} must be a scalar {valid.describe()}, got {value!r}.')


def check_hyperparams(learning_rate: Any, momentum: Any, snap_tol: Any) -> None:
  """``α`` a number > 0, an array or a schedule; ``β`` a number in [0, 1), an
  array or a schedule; ``snap_tol`` in [0, 1)."""
  if isinstance(learning_rate, bool) or not (
      callable(learning_rate)
      or is_concrete_number(learning_rate)
      or isinstance(learning_rate, jax.Array)
  ):
    raise ValueError(
        f'learning_rate must be a positive number, an array or a schedule, '
        f'got {learning_rate!r}.'
    )
  if isinstance(momentum, bool) or not (
      callable(momentum)
      or is_concrete_number(momentum)
      or isinstance(momentum, jax.Array)
  ):
    raise ValueError(
        f'momentum must be a number in [0, 1), an array or a schedule, got '
        f'{momentum!r} (use 0.0 for no momentum).'
    )
  check_scalar('learning_rate', learning_rate, POSITIVE)
  check_scalar('momentum', momentum, BELOW_ONE)
  check_scalar('snap_tol', snap_tol, BELOW_ONE)


def check_table(table: Any, correction: str, momentum: Any) -> tuple:
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
    if not (POSITIVE.contains(scale) and BELOW_ONE.contains(beta)):
      raise ValueError(
          f'table row {(r, scale, beta)}: alpha scale must be > 0 and beta in [0, 1).'
      )
  if callable(momentum):
    raise ValueError(
        "correction='table' interpolates fixed (alpha, beta) pairs; it takes a "
        f'constant momentum, not a schedule ({momentum!r}).'
    )
  ones = [row for row in table if row[0] == 1.0]
  ref = ones[0] if ones else (None, None, None)
  if ref[1] != 1.0 or (is_concrete_number(momentum) and ref[2] != float(momentum)):
    raise ValueError(
        f'the table must hold the reference point (1, 1, momentum={momentum!r}) '
        f'(r = 1 is the plain DiLoCo step), got {table!r}.'
    )
  return table


def check_sums(inner_lr_sum: Any, reference_lr_sum: Any) -> None:
  """Both sums or neither; concrete ones finite and > 0."""
  if (inner_lr_sum is None) != (reference_lr_sum is None):
    raise ValueError(
        'inner_lr_sum and reference_lr_sum must be passed together (or both '
        f'omitted for the plain DiLoCo step); got inner_lr_sum={inner_lr_sum!r}, '
        f'reference_lr_sum={reference_lr_sum!r}.'
    )
  check_scalar('inner_lr_sum', inner_lr_sum, POSITIVE)
  check_scalar('reference_lr_sum', reference_lr_sum, POSITIVE)


def check_h_ref(h_ref: Any) -> int:
  """``H_ref`` as a Python int >= 1 (static: it is a loop's length)."""
  if isinstance(h_ref, bool) or not isinstance(h_ref, (numbers.Integral, np.integer)):
    raise ValueError(f'h_ref must be a Python int >= 1 (static), got {h_ref!r}.')
  if h_ref < 1:
    raise ValueError(f'h_ref must be >= 1, got {h_ref!r}.')
  return int(h_ref)
