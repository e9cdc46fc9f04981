r"""AutoLoCo: DiLoCo's round with an adaptive ``H`` and the outer step corrected
by the round's accumulated inner learning rate.

The round is DiLoCo's (``diloco.py``); what changes is the interval
controller (``intervals.py``: ``H_{t+1}`` from scalar statistics of round
``t``) and the outer transform (``outer.autoloco``): with
``r_t = S_t / S_ref,t``, the ratio of the round's accumulated inner learning
rate to that of the reference interval ``H_ref``, the outer step applies
``β_t = β^{r_t}`` and ``α_t = α (1 − β_t)/(1 − β)`` (``docs/algorithms.md`` §3a).

Reference:
  AutoLoCo: Communication Efficient Distributed LLM Training via Adaptive
  Synchronization, arXiv, Sept 2026.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

from autoloco_jax import outer, ranges
from autoloco_jax.algorithms.diloco.diloco import DiLoCo
from autoloco_jax.runtime.contract import Setup


@dataclasses.dataclass(frozen=True)
class AutoLoCo(DiLoCo):
  """AutoLoCo's hyperparameters: DiLoCo's, an adaptive ``controller``, and the
  outer-step correction by the accumulated inner learning rate.

  Attributes:
    correction: ``none | momentum | lr | both | table | per_progress |
      momentum_per_progress`` (``outer.autoloco``).
    reference: ``schedule`` (``S_ref,t`` = the schedule summed over ``H_ref``
      steps from the round's start) or ``peak`` (``H_ref · η_peak``).
    h_ref: ``H_ref``, the interval ``(α, β)`` were tuned for.
    tuned: for ``correction=table``: DiLoCo's outer pairs tuned at fixed
      intervals, ``((H_i, α_i, β_i), ...)``, one of them ``(H_ref, α, β)``; the
      round's ``(α_t, β_t)`` is interpolated between them at ``H = r_t H_ref``.
    on_change: ``keep | restart | rescale``: the outer momentum buffer when a
      round's ratio differs from the last round's (``outer.autoloco``).
    ratio_schedule: empty, or the ratios ``r_t`` the outer step applies round
      by round in place of ``S_t / S_ref,t`` (``outer.replayed_ratios``: a
      control that replays another run's corrected outer steps).
  """

  # No defaults: config.autoloco (configs/common.py) is the one place for them.
  _: dataclasses.KW_ONLY
  correction: str
  reference: str
  h_ref: int
  tuned: tuple
  on_change: str
  ratio_schedule: tuple

  name = "autoloco"

  def __post_init__(self):
    super().__post_init__()
    if self.reference not in outer.REFERENCES:
      raise ValueError(
          f"autoloco.reference must be one of {outer.REFERENCES}, "
          f"got {self.reference!r}"
      )
    if self.h_ref < 1:
      raise ValueError(f"autoloco.h_ref must be >= 1, got {self.h_ref}")
    tx = outer.autoloco(  # validates correction, table and on_change
        self.alpha,
        self.momentum({}),
        self.correction,
        table=self.table,
        on_change=self.on_change,
    )
    if self.ratio_schedule:
      outer.replayed_ratios(tx, self.ratio_schedule)  # validates the ratios

  @property
  def table(self) -> tuple:
    """``tuned`` as the outer transform's ``(r_i, α_i/α, β_i)`` points."""
    rows = sorted(tuple(row) for row in self.tuned)
    if any(len(row) != 3 for row in rows):
      raise ValueError(f"autoloco.tuned rows are (H, alpha, beta), got {self.tuned!r}")
    return tuple((h / self.h_ref, a / self.alpha, b) for h, a, b in rows)

  @classmethod
  def from_config(cls, config: Any) -> "AutoLoCo":
    """DiLoCo's fields, and ``config.autoloco`` (``correction``, ``reference``,
    ``h_ref``: 0 = ``interval.h``, ``tuned``, ``on_change``, ``ratio_schedule``),
    read here and nowhere else."""
    d = DiLoCo.from_config(config)
    a = config.autoloco
    ranges.check("autoloco.h_ref", a.h_ref)  # 0 stands for interval.h
    return cls(
        **{f.name: getattr(d, f.name) for f in dataclasses.fields(DiLoCo)},
        correction=a.correction,
        reference=a.reference,
        h_ref=int(a.h_ref or d.interval.h),
        tuned=tuple(tuple(row) for row in a.tuned),
        on_change=a.on_change,
        ratio_schedule=tuple(float(r) for r in a.ratio_schedule),
    )

  def outer_tx(self, setup: Setup, hyper: dict) -> optax.GradientTransformationExtraArgs:
    tx = outer.autoloco(
        hyper.get("alpha", self.alpha),
        self.momentum(hyper),
        correction=self.correction,
        table=self.table,
        on_change=self.on_change,
    )
    return outer.replayed_ratios(tx, self.ratio_schedule) if self.ratio_schedule else tx

  def reference_lr_sum(self, setup: Setup, start_step: jax.Array) -> jax.Array:
    if self.reference == "peak":
      return outer.peak_reference_lr_sum(setup.peak_lr, self.h_ref)
    return outer.reference_lr_sum(setup.lr_schedule, start_step, self.h_ref)
