"""The range of every numeric config field, in one table.

Each field is checked once, where it is read: the algorithms' typed config
groups (``algorithms/registry.py:GROUPS``: ``interval.Interval``,
``stream.Stream``, ``exchange.Compression``, ``DiLoCo``, ``AutoLoCo``,
``NoLoCo``, ``GASLoC``, ``topology.from_config``) check their own fields through
:func:`check`, and the check at start (``config_check.validate``) walks
:data:`FIELDS` for the others; both name the field the same way. The interval
controllers check their arguments against the same ranges (the ``interval.*``
entries); ``outer`` restates the two it checks its arguments against
(:data:`POSITIVE`, :data:`BELOW_ONE`) so that it needs nothing but JAX and
optax. Only the standard library.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Optional


class Range(NamedTuple):
  """Numbers of type ``kind`` between ``low`` and ``high`` (None: unbounded).

  Attributes:
    kind: ``int`` or ``float`` (a float field accepts ints; no field takes bools).
    low: the lower bound, or None.
    high: the upper bound, or None.
    low_in: ``low`` itself is in the range.
    high_in: ``high`` itself is in the range.
    none_ok: None is allowed too (it stands for a derived value, e.g.
      ``noloco.gamma``: None = alpha).
  """

  kind: type
  low: Optional[float] = None
  high: Optional[float] = None
  low_in: bool = True
  high_in: bool = False
  none_ok: bool = False

  def contains(self, value: float) -> bool:
    """True if the number ``value`` (finite, for a float range) is in range."""
    if self.kind is float and not math.isfinite(value):
      return False
    if self.low is not None and (value < self.low if self.low_in else value <= self.low):
      return False
    if self.high is not None and (
        value > self.high if self.high_in else value >= self.high
    ):
      return False
    return True

  def describe(self) -> str:
    """``">= 1"``, ``"> 0.0"`` or ``"in [0.0, 1.0)"``."""
    if self.high is None:
      return f"{'>=' if self.low_in else '>'} {self.low}"
    high = "inf" if self.high is None else f"{self.high}"
    return (
        f"in {'[' if self.low_in else '('}{self.low}, {high}"
        f"{']' if self.high_in else ')'}"
    )

  def check(self, name: str, value: Any) -> None:
    """Raises ``ValueError`` naming ``name`` unless ``value`` is in range."""
    if value is None and self.none_ok:
      return
    if self.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
      raise ValueError(f"{name} must be an integer, got {value!r}")
    if self.kind is float and (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
    ):
      raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not self.contains(value):
      raise ValueError(f"{name} must be {self.describe()}, got {value!r}")


#: Integers >= 1, >= 0; numbers > 0, >= 0, in [0, 1), [0, 1] and (0, 1).
COUNT = Range(int, 1)
NATURAL = Range(int, 0)
POSITIVE = Range(float, 0.0, None, False)
NONNEGATIVE = Range(float, 0.0)
BELOW_ONE = Range(float, 0.0, 1.0)
UNIT = Range(float, 0.0, 1.0, True, True)
OPEN_UNIT = Range(float, 0.0, 1.0, False)

#: Every numeric field of ``configs/common.py`` (dotted), with its range.
FIELDS = {
    "seed": NATURAL,
    "num_workers": COUNT,
    # 0 = all devices JAX sees.
    "num_devices": NATURAL,
    # Devices a worker spans (runtime/layout.py).
    "mesh.fsdp": COUNT,
    "mesh.tensor": COUNT,
    "total_steps": COUNT,
    # 0 = min(64, H_max rounded up to a power of two).
    "chunk_steps": NATURAL,
    "peak_flops": Range(float, 0.0, None, False, none_ok=True),
    "model.d_model": COUNT,
    "model.num_layers": COUNT,
    "model.num_heads": COUNT,
    "model.mlp_dim": COUNT,
    "data.seq_len": COUNT,
    "data.batch_size": COUNT,
    "data.val_fraction": OPEN_UNIT,
    # 0 = all.
    "data.max_bytes": NATURAL,
    "inner.lr": POSITIVE,
    "inner.warmup_steps": NATURAL,
    "inner.min_lr_ratio": UNIT,
    "inner.weight_decay": NONNEGATIVE,
    "inner.b1": BELOW_ONE,
    "inner.b2": BELOW_ONE,
    "inner.eps": POSITIVE,
    "inner.clip_norm": POSITIVE,
    "inner.microbatches": COUNT,
    # The outer step's (alpha, beta): also what outer.autoloco accepts
    # (outer.checks.POSITIVE and BELOW_ONE).
    "diloco.alpha": POSITIVE,
    "diloco.beta": BELOW_ONE,
    # None = a constant beta.
    "diloco.beta_end": Range(float, 0.0, 1.0, high_in=False, none_ok=True),
    # 0 = the run's rounds at the first interval.
    "diloco.beta_rounds": NATURAL,
    # 0 = interval.h.
    "autoloco.h_ref": NATURAL,
    "noloco.alpha": POSITIVE,
    "noloco.beta": BELOW_ONE,
    # None = alpha.
    "noloco.gamma": Range(float, 0.0, none_ok=True),
    "gasloc.eta": POSITIVE,
    "gasloc.gamma": BELOW_ONE,
    # 0 = 1/(degree+1).
    "gasloc.alpha": NONNEGATIVE,
    # 0 = 1/(degree+1).
    "gossip_adamw.weight": NONNEGATIVE,
    "interval.h": COUNT,
    "interval.h_min": COUNT,
    # 0 = interval.h; else >= interval.h_min (interval.Interval).
    "interval.h_max": NATURAL,
    # 0 = sqrt(h) * peak lr.
    "interval.c": NONNEGATIVE,
    "interval.target": OPEN_UNIT,
    "interval.grow": Range(float, 1.0, None, False),
    "interval.shrink": OPEN_UNIT,
    "interval.ema": BELOW_ONE,
    "interval.hysteresis": NONNEGATIVE,
    "interval.syncs": NATURAL,
    "interval.ratio": POSITIVE,
    "interval.split": UNIT,
    "eval.every_steps": COUNT,
    "eval.batch_size": COUNT,
    # 0 = the whole validation split.
    "eval.num_batches": NATURAL,
    "eval.final_num_batches": NATURAL,
    # 0 = no cap.
    "eval.max_tokens": NATURAL,
    "comm.bytes_per_param": POSITIVE,
    "stream.fragments": COUNT,
    "stream.tau": NATURAL,
    "stream.mix": UNIT,
    "compress.block_size": COUNT,
    "compress.chunk_size": COUNT,
    "compress.density": Range(float, 0.0, 1.0, False, True),
    "checkpoint.every_rounds": COUNT,
    "checkpoint.keep": COUNT,
    "faults.drop_prob": BELOW_ONE,
    # -1 = never.
    "faults.nan_at_round": Range(int, -1),
    # 0 = measured at start.
    "network.step_time": NONNEGATIVE,
    "network.overlap_backward": UNIT,
    "gossip.pool_size": COUNT,
    "gossip.group_size": Range(int, 2),
}


def check(field: str, value: Any) -> None:
  """Raises ``ValueError`` (``config.<field> must be ...``) unless ``value`` is
  in the range :data:`FIELDS` gives ``field``."""
  FIELDS[field].check(f"config.{field}", value)
