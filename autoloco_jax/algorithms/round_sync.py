"""The shape every algorithm's sync has: one object per round's end.

A sync is a small frozen dataclass built from the algorithm's typed
hyperparameters (its config group, read once by ``from_config``) and the
``contract.Setup``. The algorithm's ``build`` makes one and hands its pieces to
``contract.Algorithm``: ``init`` to ``init_state``, the object itself (per
device, inside ``replicas.map_workers``) to ``jitting.jit_sync``,
``comm_pattern`` to the simulated clock, ``round_length`` to the host's plan of
the next round when it is known in advance (``Algorithm.next_round_steps``).

The DiLoCo family's syncs are ``diloco/sync.py:WholeModelSync`` and
``diloco/streaming.py:StreamingSync``; the gossip family's
``gossip/noloco.py:NoLoCoSync`` and ``gossip/gasloc.py:GASLoCSync``; DDP's
``ddp.py:DDPSync``.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import jax

from autoloco_jax.runtime import contract, state as state_lib


class RoundSync(Protocol):
  """What every algorithm's sync provides."""

  def init(self, params: Any, params_K: Any) -> Any:
    """What the algorithm carries between rounds (``TrainState.algo``),
    before the first round, from the initial parameters ``params`` and the
    workers' copies ``params_K`` (None for DDP, whose workers share one model)."""

  def __call__(
      self, state: state_lib.TrainState, present_K: jax.Array
  ) -> tuple[state_lib.TrainState, dict]:
    """The end of a driver round, per device: ``(state, metrics)``, the
    metrics worker-invariant scalars with ``next_h`` among them."""

  def round_length(self, round_index: Any, interval: Any) -> Any:
    """Inner steps of the driver round after driver round ``round_index`` when
    the controller's interval is ``interval``."""

  def comm_pattern(
      self, shapes: contract.ParamShapes, num_workers: int
  ) -> Callable[[int, int], contract.RoundComm]:
    """``(round_index, steps) -> RoundComm``: what a driver round of ``steps``
    inner steps computes and sends, for the simulated clock."""
