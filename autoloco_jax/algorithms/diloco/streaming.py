r"""The DiLoCo family's general sync: fragments synced in turn, overlapped
exchanges, eager updates and compressed messages.

Which fragment sends or arrives at which driver round, and how long the rounds
between are, is the schedule of ``stream.py`` (:class:`stream.Stream`); what a
fragment does at its send and its arrival is ``fragment_sync.Fragment``'s.
The host reads the schedule for the simulated clock's pattern and the next
round's length; the device selects the event's branch, whose fragment is
static, by ``lax.switch`` (:class:`StreamingSync`).
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
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from autoloco_jax.algorithms.diloco import fragment_sync, fragments, sync
from autoloco_jax.algorithms.diloco.stream import ARRIVE, Stream
from autoloco_jax.compression import codecs, exchange
from autoloco_jax.runtime import contract, state as state_lib


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
    ids = fragments.leaf_fragments(
        params, self.stream.fragments, self.stream.mode, self.stream.unit
    )
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
