r"""The schedule of a streaming or overlapped sync: which fragment sends or
arrives, and when.

Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512) syncs the ``P``
fragments of the model one after another: fragment ``p`` syncs every ``H``
inner steps at offset ``p H / P``, so the network carries ``1/P`` of the model
every ``H/P`` steps instead of all of it every ``H`` steps. ``H`` is the
controller's interval (fixed, or AutoLoCo's adaptive one), the period of each
fragment. On the round driver (``rounds.run_round``) each fragment has a *slot*
of ``h_f = max(1, ⌊H / P⌋)`` inner steps (:meth:`Stream.slot_length`); when
``P`` does not divide ``H`` each fragment syncs every ``P ⌊H/P⌋ ≤ H`` steps (the
remainder is dropped, never carried), and ``P > H`` gives slots of one step.
The first send of fragment ``p`` covers the ``(p + 1) h_f`` steps since the
start, the later ones ``P h_f``: each fragment keeps its own accumulated inner
learning rate ``S`` and step count since its last send
(``fragment_sync.FragmentState``), which AutoLoCo's corrected outer step and
its controller read.

Overlap (``τ >= 1``, the paper's section 2.3): a fragment's exchange is in
flight for ``τ`` inner steps while training goes on. A fragment's slot is then
two driver rounds, ``τ`` steps after its *send* and ``h_f − τ`` after its
*arrive* (so sends happen at the same steps as without overlap; ``τ < h_f`` is
required), where the workers merge the new global fragment with the mixing
factor ``λ = stream.mix`` (the weight of the local copy), or, with
``stream.eager``, swap their provisional outer step for the true one. ``τ = 0``
is no overlap: the send also resets the fragment to the new global parameters,
as DiLoCo does, and ``λ`` is not used. What a fragment does at its send and its
arrival is ``fragment_sync.Fragment``'s.

The schedule is one table (:meth:`Stream.events`): one cycle of ``(fragment,
send | arrive)`` events, the event ending driver round ``r`` being entry
``r mod len(events)``. The host reads it for the simulated clock's pattern and
the next round's length (:meth:`Stream.event`); the device selects the event's
branch, whose fragment is static, by ``lax.switch``
(``streaming.StreamingSync``).

References:
  Douillard et al., Streaming DiLoCo with overlapping communication: Towards a
  Distributed Free Lunch, 2025. https://arxiv.org/abs/2501.18512
  Kale, Douillard, Donchev, Eager Updates For Overlapped Communication and
  Computation in DiLoCo, 2025. https://arxiv.org/abs/2502.12996
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from autoloco_jax import ranges
from autoloco_jax.algorithms.diloco import fragments


#: The two kinds of event, a fragment's exchange starting or arriving: the
#: names of ``fragment_sync.Fragment``'s two steps.
SEND, ARRIVE = "send", "arrive"


class Event(NamedTuple):
  """One driver sync of the schedule: ``fragment`` sends or arrives (``kind``)."""

  fragment: int
  kind: str


@dataclasses.dataclass(frozen=True)
class Stream:
  """How the DiLoCo family syncs its parameters (``config.stream``; its
  defaults are ``configs/common.py``'s, its ranges ``ranges.FIELDS``').

  Attributes:
    fragments: ``P``, fragments synced in turn (1: the whole model, DiLoCo).
    mode: ``strided`` or ``contiguous`` (``fragments.py``).
    unit: ``block`` or ``sublayer``, what a fragment is made of (``fragments.py``).
    tau: ``τ``, inner steps an exchange is in flight (0: no overlap).
    mix: ``λ``, weight of the worker's own copy when a fragment arrives.
    eager: apply the outer step with the worker's own pseudo-gradient until
      the average arrives (needs ``τ >= 1``; ``mix`` is then not used).
  """

  fragments: int
  mode: str
  tau: int
  mix: float
  eager: bool
  unit: str = "block"

  def __post_init__(self):
    for name in ("fragments", "tau", "mix"):
      ranges.check(f"stream.{name}", getattr(self, name))
    if self.mode not in fragments.MODES:
      raise ValueError(f"stream.mode must be one of {fragments.MODES}, got {self.mode!r}")
    if self.unit not in fragments.UNITS:
      raise ValueError(f"stream.unit must be one of {fragments.UNITS}, got {self.unit!r}")
    if self.eager and self.tau < 1:
      raise ValueError(
          "stream.eager needs an exchange in flight (stream.tau >= 1); with "
          "tau = 0 the average is there at once"
      )

  @classmethod
  def from_config(cls, config: Any) -> "Stream":
    """From ``config.stream``, the one place its fields are read."""
    cfg = config.stream
    return cls(**{f.name: cfg[f.name] for f in dataclasses.fields(cls)})

  @property
  def plain(self) -> bool:
    """True for DiLoCo's sync: one fragment, no overlap."""
    return self.fragments == 1 and self.tau == 0

  @functools.cached_property
  def events(self) -> tuple[Event, ...]:
    """One cycle of the schedule: each fragment in turn sends and, with
    overlap, arrives (kept: the host reads it every round)."""
    kinds = (SEND, ARRIVE) if self.tau else (SEND,)
    return tuple(Event(p, kind) for p in range(self.fragments) for kind in kinds)

  def event(self, round_index: int) -> Event:
    """The event that ends driver round ``round_index`` (host side)."""
    events = self.events
    return events[round_index % len(events)]

  def sends_through(self, round_index: int) -> int:
    """How many sends (controller calls) the driver rounds ``0 .. round_index``
    end with."""
    events = self.events
    cycles, rest = divmod(round_index, len(events))
    in_cycle = sum(e.kind == SEND for e in events[: rest + 1])
    return cycles * self.fragments + in_cycle

  def slot_length(self, interval: Any) -> Any:
    """``h_f = max(1, ⌊H / P⌋)``, inner steps per fragment slot (a Python int,
    or traced on the device)."""
    if self.fragments == 1:
      return interval
    if isinstance(interval, jax.Array):
      return jnp.maximum(interval // self.fragments, 1)
    return max(1, int(interval) // self.fragments)

  def steps_after(self, kind: str, slot: Any) -> Any:
    """Inner steps of the driver round after an event of ``kind``, in a slot of
    ``slot`` steps: ``τ`` after a send and ``h_f − τ`` after an arrival
    (``h_f`` after a send without overlap). The host and the device call it."""
    if kind == ARRIVE:
      return slot - self.tau
    return self.tau if self.tau else slot

  def check_intervals(self, h_min: int) -> None:
    """Refuses an overlap the shortest interval cannot hold (``τ < h_f``)."""
    if self.tau and self.tau >= self.slot_length(h_min):
      raise ValueError(
          f"stream.tau ({self.tau}) must be < H/P = {self.slot_length(h_min)} for "
          f"the shortest interval H = {h_min} and P = {self.fragments}: an exchange "
          "must arrive before its fragment's slot ends"
      )
