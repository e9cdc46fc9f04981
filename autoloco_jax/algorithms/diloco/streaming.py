r"""Streaming and overlapped syncs: which fragment sends or arrives, and when.

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
branch, whose fragment is static, by ``lax.switch`` (:class:`StreamingSync`).
The plain sync of the whole model is ``sync.WholeModelSync``; :class:`StreamingSync`
is the general one of the DiLoCo family, built from the same pieces
(``sync.py``), with compressed messages and error feedback behind the one codec
interface (``exchange.encode_workers``).

References:
  Douillard et al., Streaming DiLoCo with overlapping communication: Towards a
  Distributed Free Lunch, 2025. https://arxiv.org/abs/2501.18512
  Kale, Douillard, Donchev, Eager Updates For Overlapped Communication and
  Computation in DiLoCo, 2025. https://arxiv.org/abs/2502.12996
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from autoloco_jax import ranges
from autoloco_jax.algorithms.diloco import fragment_sync, fragments, sync
from autoloco_jax.compression import codecs, exchange
from autoloco_jax.runtime import contract, state as state_lib

#: The two kinds of event, a fragment's exchange starting or arriving: the
#: names of ``fragment_sync.Fragment``'s two steps.
SEND, ARRIVE = fragment_sync.SEND, fragment_sync.ARRIVE


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

  def __post_init__(self):
    for name in ("fragments", "tau", "mix"):
      ranges.check(f"stream.{name}", getattr(self, name))
    if self.mode not in fragments.MODES:
      raise ValueError(f"stream.mode must be one of {fragments.MODES}, got {self.mode!r}")
    if self.eager and self.tau < 1:
      raise ValueError(
          "stream.eager needs an exchange in flight (stream.tau >= 1); with "
          "tau = 0 the average is there at once"
      )

  @classmethod
  def from_config(cls, config: Any) -> "Stream":
    """From ``config.stream``, the one place its fields are read."""
    cfg = config.stream
    return cls(
        fragments=cfg.fragments, mode=cfg.mode, tau=cfg.tau, mix=cfg.mix, eager=cfg.eager
    )

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


def _zeros_f32(tree: Any) -> Any:
  return jax.tree.map(lambda x: jnp.zeros(jnp.shape(x), jnp.float32), tree)


@dataclasses.dataclass(frozen=True)
class StreamingSync:
  """The DiLoCo family's sync with fragments, overlap, eager updates or
  compressed messages: ``(state, present_K) -> (state, metrics)``, one event of
  the schedule per call, the send or the arrival of one
  ``fragment_sync.Fragment``.

  Attributes:
    stream: fragments, overlap and eager updates, and their schedule.
    compression: the codec and error feedback of every message.
    rule: the outer transform, controller, schedule and ``S_ref``.
  """

  stream: Stream
  compression: exchange.Compression
  rule: sync.OuterRule

  def init(self, params: Any, params_K: Any) -> sync.DiLoCoState:
    """The state before the first round: the outer rule's, each fragment's
    (``P > 1``), eager's pending corrections and error feedback's residuals."""
    P = self.stream.fragments
    return self.rule.init(
        params,
        fragments=tuple(fragment_sync.FragmentState.zero() for _ in range(P))
        if P > 1
        else None,
        pending_K=_zeros_f32(params_K) if self.stream.eager else None,
        residual_K=self.compression.init_residual(params_K),
    )

  def fragment(self, index: int, params: Any) -> fragment_sync.Fragment:
    """Fragment ``index`` of the parameter tree ``params`` (arrays or shapes)."""
    ids = fragments.leaf_fragments(params, self.stream.fragments, self.stream.mode)
    leaves = tuple(i == index for i in ids)
    return fragment_sync.Fragment(index, leaves, self.stream, self.compression, self.rule)

  def __call__(self, state: state_lib.TrainState, present_K: jax.Array):
    params = state.algo.global_params
    branches = [
        getattr(self.fragment(e.fragment, params), e.kind) for e in self.stream.events
    ]
    if len(branches) == 1:
      return branches[0](state, present_K)
    return jax.lax.switch(state.round % len(branches), branches, state, present_K)

  def round_length(self, round_index: int, interval: int) -> int:
    """Inner steps of the driver round after the event that ends driver round
    ``round_index``, when the controller's interval is ``interval`` (host side;
    the device's event computes the same by ``Stream.steps_after``)."""
    kind = self.stream.event(round_index).kind
    return self.stream.steps_after(kind, self.stream.slot_length(interval))

  def controller_calls(self, round_index: int) -> int:
    """How many times the controller has chosen ``H`` by the end of driver
    round ``round_index``: once per send."""
    return self.stream.sends_through(round_index)

  def comm_pattern(self, shapes: Any, num_workers: int) -> Callable:
    """``(round_index, steps) -> contract.RoundComm`` for the simulated clock:
    the encoded payload of the event's fragment, from the parameters' shapes
    (``shapes``, a ``contract.ParamShapes``)."""
    stream, codec = self.stream, self.compression.codec
    sizes = {}  # fragment -> encoded bytes, computed once (the shapes are fixed)

    def payload(index: int) -> float:
      if index not in sizes:
        tree = shapes.get()
        fragment = self.fragment(index, tree)
        mine = [x for m, x in zip(fragment.leaves, jax.tree.leaves(tree)) if m]
        sizes[index] = codecs.tree_encoded_bytes(codec, mine)
      return sizes[index]

    def pattern(round_index: int, steps: int) -> contract.RoundComm:
      steps_K = np.full(num_workers, steps, np.int64)
      event = stream.event(round_index)
      if event.kind == ARRIVE:
        return contract.RoundComm("arrive", steps_K)
      message = dict(payload_bytes=payload(event.fragment), dense=codec.dense)
      if stream.tau == 0:
        return contract.RoundComm("allreduce", steps_K, **message)
      return contract.RoundComm("send", steps_K, window=stream.tau, **message)

    return pattern
