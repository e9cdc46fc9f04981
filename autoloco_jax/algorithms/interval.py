"""``config.interval``, typed: the interval ``H`` of every algorithm's rounds.

Every algorithm reads ``config.interval`` here and nowhere else. ``h`` is the
controller's interval ``H``: the fixed ``H`` of DiLoCo, NoLoCo and GASLoC, the
first ``H_0`` of an adaptive controller, and for DDP the inner steps between two
metric reads. The other fields set the DiLoCo family's controllers
(``diloco/intervals.py``: :func:`~autoloco_jax.algorithms.diloco.intervals.from_interval`
builds one from this group). The defaults are ``configs/common.py``'s, the
ranges ``ranges.FIELDS``', checked here once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autoloco_jax import ranges

#: The numeric fields, range-checked against ``ranges.FIELDS['interval.<name>']``.
_NUMERIC = (
    "h",
    "h_min",
    "h_max",
    "c",
    "target",
    "grow",
    "shrink",
    "ema",
    "hysteresis",
    "syncs",
    "ratio",
    "split",
)


@dataclasses.dataclass(frozen=True)
class Interval:
  """The fields of ``config.interval`` (``configs/common.py`` documents each).

  Attributes:
    controller: ``fixed | lr_quadratic | loss_ratio | agreement | schedule |
      budget``.
    h: ``H`` (``fixed``) or ``H_0`` (adaptive controllers).
    h_min: the adaptive controllers' lower bound.
    h_max: their upper bound; 0 = ``h``.
    c: ``lr_quadratic``'s coefficient; 0 = ``sqrt(h) · η_peak``.
    target, grow, shrink, ema, hysteresis: ``agreement``'s settings.
    schedule: ``schedule``'s intervals, replayed open loop.
    syncs, shape, ratio, split: ``budget``'s syncs and their placement.
  """

  controller: str
  h: int
  h_min: int
  h_max: int
  c: float
  target: float
  grow: float
  shrink: float
  ema: float
  hysteresis: float
  schedule: tuple
  syncs: int
  shape: str
  ratio: float
  split: float

  def __post_init__(self):
    for name in _NUMERIC:
      ranges.check(f"interval.{name}", getattr(self, name))
    if self.h_max and self.h_max < self.h_min:
      raise ValueError(
          f"config.interval.h_max ({self.h_max}) must be >= config.interval.h_min "
          f"({self.h_min}) or 0"
      )

  @classmethod
  def from_config(cls, config: Any) -> "Interval":
    """From ``config.interval``, the one place its fields are read."""
    cfg = config.interval
    fields = {f.name: cfg[f.name] for f in dataclasses.fields(cls)}
    fields["schedule"] = tuple(fields["schedule"] or ())
    return cls(**fields)

  @property
  def upper(self) -> int:
    """The adaptive controllers' upper bound: ``h_max``, or ``h`` when 0."""
    return self.h_max or self.h
