"""Gossip AdamW: local AdamW steps, then one average over each worker's neighbours.

The decentralized baseline of the gossip methods, in the D-PSGD form (Lian et
al. 2017, arXiv 1705.09056) with AdamW as the local optimizer. Round ``t``:
worker ``k`` takes ``H`` inner AdamW steps from ``θ_{t,k}`` to ``θ'_{t,k}``
(its AdamW moments stay its own); then, with ``Λ`` the Laplacian of the round's
active edges (``topology.py``: a random matching, ring, torus, exponential or
complete graph) and ``w`` the gossip weight,

.. math::

  θ_{t+1} = W θ'_t, \\qquad W = I − w Λ,

so each worker moves ``w`` of the way toward each neighbour:
``θ_{t+1,k} = θ'_{t,k} + w Σ_{j∈N(k)} (θ'_{t,j} − θ'_{t,k})``. The default
``w = 1/(d+1)`` on a ``d``-regular graph makes it the uniform average of the
worker and its neighbours. With ``H = 1`` this is decentralized SGD; on the
complete graph with ``w = 1/K`` every worker gets the all-reduce mean, i.e.
local SGD / DiLoCo with outer ``(α, β) = (1, 0)`` (``tests/test_gossip_adamw.py``).

It is GASLoC's step with ``η = 1`` (``y = θ'``) and ``γ = 0`` (no momentum):
this module is that composition under its own name and config group
(``config.gossip_adamw``), so it has GASLoC's topologies, compressed messages,
simulated clock and heterogeneous speeds (``gasloc.py``), and no code of its own
in the round.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from autoloco_jax import ranges
from autoloco_jax.algorithms.gossip import gasloc, topology
from autoloco_jax.algorithms.interval import Interval
from autoloco_jax.compression import exchange
from autoloco_jax.runtime.contract import Algorithm, Setup


@dataclasses.dataclass(frozen=True)
class GossipAdamW:
  """Gossip AdamW's hyperparameters: ``config.gossip_adamw`` and the groups it
  composes.

  Attributes:
    weight: ``w``, the weight of each neighbour's difference (``W = I − w Λ``).
    interval: ``config.interval``, typed; ``h`` local steps per gossip round.
    topology: the gossip graph (``config.gossip``).
    compression: the codec of every message (``config.compress``).
  """

  weight: float
  interval: Interval
  topology: topology.Topology
  compression: exchange.Compression

  name = "gossip_adamw"
  #: The shared settings it implements (``registry.refuse_unsupported``).
  streams = False
  compresses = True
  averages = False  # the gossip mixes by its topology, not a mean
  controllers = ("fixed",)
  #: ``build`` reads ``config.seed`` (the topology's tables).
  seeded_build = True

  def __post_init__(self):
    ranges.check("gossip_adamw.weight", self.weight)
    object.__setattr__(self, "weight", float(self.weight))

  @classmethod
  def from_config(cls, config: Any) -> "GossipAdamW":
    """From ``config.gossip_adamw.weight`` (0 = ``1/(d+1)``), ``config.gossip``,
    ``config.interval`` (fixed ``h``) and ``config.compress``."""
    topo = topology.from_config(config)
    return cls(
        weight=config.gossip_adamw.weight or 1.0 / (topo.degree + 1),
        interval=Interval.from_config(config),
        topology=topo,
        compression=exchange.Compression.from_config(config),
    )

  def as_gasloc(self) -> gasloc.GASLoC:
    """The same round as GASLoC's: ``η = 1``, ``γ = 0``, ``α = w``."""
    return gasloc.GASLoC(
        eta=1.0,
        gamma=0.0,
        alpha=self.weight,
        mix_momentum=False,
        interval=self.interval,
        topology=self.topology,
        compression=self.compression,
    )

  def build(self, setup: Setup) -> Algorithm:
    return dataclasses.replace(self.as_gasloc().build(setup), name=self.name)
