"""What a gossip round computes and sends, for the simulated clock.

Each worker sends its message once to each of the round's neighbours
(``topology.Topology.neighbors``); on the complete graph the exchange is the
DiLoCo family's collective, an all-reduce. A compressed message is its encoded
bytes (``codecs.tree_encoded_bytes``: values, indices, scales), from the
parameters' shapes; a dense codec's payloads are summed on the way, the others
gathered (``contract.RoundComm.dense``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from autoloco_jax.algorithms.gossip import topology
from autoloco_jax.compression import codecs, exchange
from autoloco_jax.runtime import contract


def comm_pattern(
    topo: topology.Topology,
    steps_K: Callable[[int], np.ndarray],
    compression: exchange.Compression,
    shapes: Any,
) -> Callable[[int, int], contract.RoundComm]:
  """``(round_index, steps) -> RoundComm`` of a gossip round on ``topo``, its
  workers taking ``steps_K(steps)`` inner steps: each worker exchanges its
  message with the round's neighbours (the complete graph is an all-reduce). A
  compressed message is its encoded bytes, from the parameters' shapes that
  ``init_state`` records (``shapes``, a ``contract.ParamShapes``)."""

  def pattern(round_index: int, steps: int) -> contract.RoundComm:
    steps_done_K = steps_K(steps)
    message = {}
    if not compression.plain:
      message = dict(
          payload_bytes=codecs.tree_encoded_bytes(compression.codec, shapes.get()),
          dense=compression.codec.dense,
      )
    if topo.complete:
      return contract.RoundComm("allreduce", steps_done_K, **message)
    neighbors_DxK = topo.neighbors(round_index)
    return contract.RoundComm("gossip", steps_done_K, neighbors_DxK, **message)

  return pattern
