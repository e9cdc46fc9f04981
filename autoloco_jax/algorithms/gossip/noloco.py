"""NoLoCo: local AdamW steps, then a Nesterov-like outer step with a random peer.

No all-reduce. Each worker ``k`` keeps its own outer weights ``φ_k`` and outer
momentum ``m_k`` (:class:`NoLoCoState`). After ``H`` inner steps from ``φ_k``
to the fast weights ``θ_k``, the workers are split into groups ``G`` (a random
perfect matching by default, the same on every worker: it derives from the seed
and the round index, ``topology.py``), and

.. math::

  \\bar Δ = \\operatorname{mean}_{j \\in G}(θ_j − φ_j), \\quad
  \\bar φ = \\operatorname{mean}_{j \\in G} φ_j, \\quad
  m_k ← β m_k + α \\bar Δ + γ (\\bar φ − φ_k), \\quad
  φ_k ← φ_k + m_k, \\quad θ_k ← φ_k.

One message per peer suffices: the group mean is linear, so
``α Δ̄ + γ φ̄ = mean_G z`` with ``z_j = α θ_j + (γ − α) φ_j``; each worker sends
its ``z_j`` and the step is ``m_k ← β m_k + mean_G z − γ φ_k``. (With the
default ``γ = α``, ``z_j = α θ_j``.) In place of groups any topology of
``topology.py`` works: ``mean_G`` is then the mean over a worker and its
neighbours; on the complete graph with ``γ = 0`` the step is DiLoCo with
heavy-ball momentum, ``m ← β m − α Δ_t``, ``φ ← φ + m``.

Compression (``config.compress``): each worker encodes
``z_k − γ θ_0 = α (θ_k − φ_k) + γ (φ_k − θ_0)`` (``θ_0`` the common initial
parameters), with optional error feedback, and the group mean is taken as
``z_k − (Λ \\hat x)_k / (d + 1)`` from the decoded payloads ``\\hat x``, the
worker's own included; the workers' mean then takes the uncompressed step and
the codec's error only spreads the replicas (``compressed_exchange.py``, where
the math is).

Replicas drift apart a little; the sync reports their spread
``mean_k ‖φ_k − mean_j φ_j‖`` (``monitoring.py``) and ``eval_params`` gives
both the replicas' mean and replica 0 for evaluation (``eval_models.py``).

Reference:
  Kolehmainen et al., NoLoCo: No-all-reduce Low Communication Training Method
  for Large Models, 2025. https://arxiv.org/abs/2506.10911 (public code:
  gensyn-ai/noloco; defaults α = 0.7, β = 0.5, γ = α, H = 50, pairs).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from autoloco_jax import ranges
from autoloco_jax.algorithms.gossip import compressed_exchange, eval_models
from autoloco_jax.algorithms.gossip import monitoring, round_comm, topology
from autoloco_jax.algorithms.interval import Interval
from autoloco_jax.compression import exchange
from autoloco_jax.runtime import inner, replicas, state as state_lib
from autoloco_jax.runtime.contract import Algorithm, ParamShapes, Setup
from autoloco_jax.runtime.jitting import jit_inner, jit_sync


class NoLoCoState(NamedTuple):
  """NoLoCo's per-worker state between rounds.

  Attributes:
    outer_params_K: each worker's outer weights ``φ_k``.
    outer_momentum_K: each worker's outer momentum ``m_k``.
    exchange: a compressed exchange's reference and residuals
      (``compressed_exchange.GossipExchangeState``); None for the uncompressed
      one.
  """

  outer_params_K: Any
  outer_momentum_K: Any
  exchange: Any = None

  def specs(self) -> "NoLoCoState":
    ex = None if self.exchange is None else self.exchange.specs()
    return NoLoCoState(replicas.WORKERS, replicas.WORKERS, ex)


@dataclasses.dataclass(frozen=True)
class NoLoCo:
  """NoLoCo's hyperparameters: ``config.noloco`` (the paper's symbols; their
  ranges are ``ranges.FIELDS``', checked here) and the groups it composes.

  Attributes:
    alpha: ``α``, weight of the group's mean pseudo-gradient.
    beta: ``β``, outer momentum.
    gamma: ``γ``, pull towards the group's mean outer weights.
    interval: ``config.interval``, typed; its ``h`` is the rounds' fixed ``H``.
    topology: who averages with whom each round.
    compression: the codec of every message and error feedback
      (``exchange.Compression``; the identity codec sends float32 as it is).
  """

  alpha: float
  beta: float
  gamma: float
  interval: Interval
  topology: topology.Topology
  compression: exchange.Compression

  name = "noloco"
  #: The shared settings it implements (``registry.refuse_unsupported``):
  #: compressed messages, a fixed interval, no streaming.
  streams = False
  compresses = True
  averages = False  # the gossip mixes by its topology, not a mean
  controllers = ("fixed",)
  #: ``build`` reads ``config.seed``: the topology's tables are drawn from it
  #: and compiled into the sync.
  seeded_build = True

  def __post_init__(self):
    for name in ("alpha", "beta", "gamma"):
      ranges.check(f"noloco.{name}", getattr(self, name))
      object.__setattr__(self, name, float(getattr(self, name)))

  @classmethod
  def from_config(cls, config: Any) -> "NoLoCo":
    """From ``config.noloco`` (``alpha``, ``beta``, ``gamma``: ``None`` = α),
    ``config.gossip``, ``config.interval`` (fixed ``h``) and ``config.compress``."""
    n = config.noloco
    return cls(
        alpha=n.alpha,
        beta=n.beta,
        gamma=n.alpha if n.gamma is None else n.gamma,
        interval=Interval.from_config(config),
        topology=topology.from_config(config),
        compression=exchange.Compression.from_config(config),
    )

  @property
  def h(self) -> int:
    """``H``, the inner steps of every round."""
    return self.interval.h

  def build(self, setup: Setup) -> Algorithm:
    sync, k = NoLoCoSync(self, setup.lr_schedule), setup.num_workers
    shapes = ParamShapes()  # for the clock's payload

    def init_state(params) -> state_lib.TrainState:
      params_K, inner_opt_K = setup.init_workers(params)
      shapes.record(params)
      return state_lib.init(params_K, inner_opt_K, sync.init(params, params_K), k)

    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner(setup.inner_loop(), setup.layout),
        sync=jit_sync(sync, setup.layout),
        comm_pattern=sync.comm_pattern(shapes, k),
        max_round_steps=self.h,
        min_round_steps=self.h,
        first_round_steps=self.h,
        next_round_steps=lambda round_index: sync.round_length(round_index, self.h),
        supports_faults=False,
        eval_params=eval_models.make_eval_params(setup.layout),
    )


@dataclasses.dataclass(frozen=True)
class NoLoCoSync:
  """NoLoCo's end of a round: each worker's outer step with its group
  (``(state, present_K) -> (state, metrics)``; the math is the module's).

  Attributes:
    noloco: the hyperparameters (``α``, ``β``, ``γ``, ``H``, topology, codec).
    lr_schedule: the inner learning rate ``η(s)`` (for the round's statistics).
  """

  noloco: NoLoCo
  lr_schedule: optax.Schedule

  def init(self, params: Any, params_K: Any) -> NoLoCoState:
    """``φ_k = θ_0``, ``m_k = 0`` and the compressed exchange's state."""
    return NoLoCoState(
        outer_params_K=params_K,
        outer_momentum_K=jax.tree.map(jnp.zeros_like, params_K),
        exchange=compressed_exchange.init_exchange(
            self.noloco.compression, params, params_K
        ),
    )

  def round_length(self, round_index: Any, interval: Any) -> Any:
    """Every round is ``interval`` steps (a fixed ``H``)."""
    del round_index
    return interval

  def comm_pattern(self, shapes: ParamShapes, num_workers: int) -> Callable:
    """One message per neighbour of the round's table (``round_comm.py``)."""
    return round_comm.comm_pattern(
        self.noloco.topology,
        lambda steps: np.full(num_workers, steps, np.int64),
        self.noloco.compression,
        shapes,
    )

  def __call__(self, state: state_lib.TrainState, present_K):
    del present_K  # NoLoCo does not support faults
    hp = self.noloco
    alpha, beta, gamma, topo = hp.alpha, hp.beta, hp.gamma, hp.topology
    theta_K, phi_K = state.params_K, state.algo.outer_params_K
    m_K, ex = state.algo.outer_momentum_K, state.algo.exchange
    z_K = jax.tree.map(lambda t, p: alpha * t + (gamma - alpha) * p, theta_K, phi_K)
    if ex is None:
      zbar_K = topology.neighborhood_mean(topo, z_K, state.round)  # the exchange
    else:  # the exchange, of the encoded z_k − γ θ_0
      lx_K, ex = compressed_exchange.encoded_laplacian(
          topo, hp.compression, z_K, ex, state.round, weight=gamma
      )
      zbar_K = jax.tree.map(lambda z, lx: z - lx / (topo.degree + 1), z_K, lx_K)
    m_K = jax.tree.map(lambda m, z, p: beta * m + z - gamma * p, m_K, zbar_K, phi_K)
    new_phi_K = jax.tree.map(jnp.add, phi_K, m_K)
    metrics = monitoring.round_metrics(
        topo, state, phi_K, new_phi_K, self.lr_schedule, hp.h, ex=ex
    )
    new_state = state._replace(
        params_K=new_phi_K,
        algo=NoLoCoState(new_phi_K, m_K, ex),
        acc=inner.reset(state.acc),
        round=state.round + 1,
    )
    return new_state, metrics
