r"""Streaming and overlapped syncs: which fragment a round syncs, and when.

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) syncs the ``P``
fragments of the model (``fragments.py``) one after another: fragment ``p``
syncs every ``H`` inner steps at offset ``p H / P``, so the network carries
``1/P`` of the model every ``H/P`` steps instead of all of it every ``H``
steps. On the round driver (``rounds.run_round``) one driver round is
``h_f = max(1, ⌊H / P⌋)`` inner steps and the sync that ends round ``r``
handles fragment ``r mod P`` only. ``H`` is the controller's interval (fixed,
or AutoLoCo's adaptive one), the period of each fragment; when ``P`` does not
divide ``H`` each fragment syncs every ``P ⌊H/P⌋ ≤ H`` steps (the remainder is
dropped, never carried), and ``P > H`` gives rounds of one step.

The first sync of fragment ``p`` covers the ``(p + 1) h_f`` steps since the
start, the later ones ``P h_f``: each fragment keeps its own accumulated inner
learning rate ``S`` and step count since its last sync (``diloco.ExchangeState``),
which AutoLoCo's corrected outer step and its controller read.

Overlap (``τ >= 1``, the paper's section 2.3): a fragment's exchange is in
flight for ``τ`` inner steps while training goes on. The driver runs two events
per fragment slot: a *send* sync after the slot's steps (pseudo-gradient,
exchange, outer step: the new global fragment is determined now, it is only
not yet known to the workers), then ``τ`` steps later an *arrive* sync that
merges it into the workers' copies,

.. math:: θ_{k,p} ← λ\, θ_{k,p} + (1 − λ)\, θ_{p}^{\text{global}},

with the mixing factor ``λ = stream.mix`` (the weight of the local copy). The
round lengths alternate ``τ`` (after a send) and ``h_f − τ`` (after an
arrival), so sends happen at the same steps as without overlap; ``τ < h_f``
is required. ``τ = 0`` is no overlap: the send also resets the fragment to the
new global parameters, as DiLoCo does, and ``λ`` is not used.

Eager (Kale et al. 2025, arXiv 2502.12996), ``stream.eager`` with ``τ >= 1``:
at the send each worker applies the outer step at once with its *own*
pseudo-gradient ``Δ_k`` in place of the average that has not arrived
(``θ'_k = θ + outer(Δ_k)``, with the outer state as it was before the sync:
the same ``m``, ``α_t``, ``β_t``; the shared state is advanced only by the
true average) and keeps training from ``θ'_k``. When the average arrives the
provisional step is replaced by the true one, ``θ_k ← θ_k + (θ' − θ'_k)``:
the worker keeps its ``τ`` steps of progress, now on top of the true global
fragment (``λ`` is not used). This is the paper's idea (a local proxy for the
outer gradient while the all-reduce is in flight) for an exchange that
arrives within the same fragment slot; the paper's own proxy,
``(1/K) Δ_k + ((K − 1)/K)`` times the previous round's average of the other
workers, is built for a delay of a whole outer step and is not implemented.

References:
  Douillard et al., Streaming DiLoCo with overlapping communication: Towards a
  Distributed Free Lunch, 2025. https://arxiv.org/abs/2501.18512
  Kale, Douillard, Donchev, Eager Updates For Overlapped Communication and
  Computation in DiLoCo, 2025. https://arxiv.org/abs/2502.12996
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autoloco_jax import fragments

#: ``stream.mix`` default: the paper's mixing factor as we read it (equal
#: weights for the local and the arriving global copy). It only acts with
#: ``τ >= 1``, so the default config is DiLoCo.
DEFAULT_MIX = 0.5


@dataclasses.dataclass(frozen=True)
class Stream:
  """How the DiLoCo family syncs its parameters (``config.stream``).

  Attributes:
    fragments: ``P``, fragments synced in turn (1: the whole model, DiLoCo).
    mode: ``strided`` or ``contiguous`` (``fragments.py``).
    tau: ``τ``, inner steps an exchange is in flight (0: no overlap).
    mix: ``λ``, weight of the worker's own copy when a fragment arrives.
    eager: apply the outer step with the worker's own pseudo-gradient until
      the average arrives (needs ``τ >= 1``; ``mix`` is then not used).
  """

  fragments: int = 1
  mode: str = "strided"
  tau: int = 0
  mix: float = DEFAULT_MIX
  eager: bool = False

  def __post_init__(self):
    if isinstance(self.fragments, bool) or int(self.fragments) != self.fragments:
      raise ValueError(f"stream.fragments must be an integer, got {self.fragments!r}")
    if self.fragments < 1:
      raise ValueError(f"stream.fragments must be >= 1, got {self.fragments}")
    if self.mode not in fragments.MODES:
      raise ValueError(f"stream.mode must be one of {fragments.MODES}, got {self.mode!r}")
    if isinstance(self.tau, bool) or int(self.tau) != self.tau or self.tau < 0:
      raise ValueError(f"stream.tau must be an integer >= 0, got {self.tau!r}")
    if not 0.0 <= self.mix <= 1.0:
      raise ValueError(f"stream.mix must be in [0, 1], got {self.mix}")
    if self.eager and self.tau < 1:
      raise ValueError(
          "stream.eager needs an exchange in flight (stream.tau >= 1); with "
          "tau = 0 the average is there at once"
      )

  @classmethod
  def from_config(cls, config: Any) -> "Stream":
    """From ``config.stream`` (absent: the default, DiLoCo)."""
    cfg = config.get("stream", None) if hasattr(config, "get") else None
    if cfg is None:
      return cls()
    return cls(
        fragments=int(cfg.get("fragments", 1)),
        mode=str(cfg.get("mode", "strided")),
        tau=int(cfg.get("tau", 0)),
        mix=float(cfg.get("mix", DEFAULT_MIX)),
        eager=bool(cfg.get("eager", False)),
    )

  @property
  def plain(self) -> bool:
    """True for DiLoCo's sync: one fragment, no overlap."""
    return self.fragments == 1 and self.tau == 0

  @property
  def events_per_slot(self) -> int:
    """Driver syncs per fragment slot: 1 (send) or 2 (send, arrive)."""
    return 2 if self.tau else 1

  def slot_length(self, h: int) -> int:
    """``h_f = max(1, ⌊H / P⌋)``, inner steps per fragment slot."""
    return max(1, int(h) // self.fragments)

  def fragment_of_round(self, round_index: Any) -> Any:
    """The fragment the sync ending driver round ``round_index`` handles
    (Python ints or traced)."""
    return (round_index // self.events_per_slot) % self.fragments

  def check_intervals(self, h_min: int) -> None:
    """Refuses an overlap the shortest interval cannot hold (``τ < h_f``)."""
    if self.tau and self.tau >= self.slot_length(h_min):
      raise ValueError(
          f"stream.tau ({self.tau}) must be < H/P = {self.slot_length(h_min)} for "
          f"the shortest interval H = {h_min} and P = {self.fragments}: an exchange "
          "must arrive before its fragment's slot ends"
      )
