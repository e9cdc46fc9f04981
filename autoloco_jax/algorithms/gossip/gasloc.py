"""GASLoC: local steps, then one accelerated gossip step on any topology.

Round ``t``: worker ``k`` starts from its own ``θ_{t,k}^{start}``
(:class:`GASLoCState`), takes ``H_k`` inner steps and drifts by
``g_{t,k} = θ_{t,k} − θ_{t,k}^{start}``. Then, with ``Λ`` the Laplacian of the
round's active edges (``topology.py``: a random matching, ring, torus,
exponential or complete graph),

.. math::

  y_{t,k} = θ^{start}_{t,k} + η\\, g_{t,k}, \\qquad
  θ_{t+1} = y_t − α Λ y_t + γ (y_t − y_{t−1})

with ``y_{−1} = θ_0``; ``y_{t−1}`` is kept per worker. Each
worker sends its ``y_{t,k}`` to its neighbours once: ``Λ y`` needs nothing more.
The step ``α`` defaults to ``1/(d+1)`` for a ``d``-regular graph, which makes
``y − α Λ y`` the uniform average over each worker and its neighbours.

Mode ``mix_momentum=True`` gossips the momentum term as well,
``θ_{t+1} = (I − α Λ) z_t`` with ``z_t = y_t + γ (y_t − y_{t−1})`` (the same one
message per neighbour). The mean over workers is the same in both modes; on the
complete graph with ``α = 1/K`` this mode is DiLoCo exactly, with
``η = α_DiLoCo`` and ``γ = β_DiLoCo`` (derivation in ``docs/algorithms.md`` §5;
``tests/test_gasloc.py``). In the default mode the replicas keep their own
momentum and stay apart by ``γ (I − J/K)(y_t − y_{t−1})``.

Compression (``config.compress``): each worker encodes its message less the
common initial parameters, ``y_k − θ_0`` (or ``z_k − θ_0``), with optional
error feedback, and ``Λ`` acts on the decoded payloads, the worker's own
included; the workers' mean then takes the uncompressed step and the codec's
error only spreads the replicas (``compressed_exchange.py``, where the math is).

Heterogeneous speeds: with the per-worker speed factors ``f_k`` (compute time
per step relative to 1, ``config.network.speed_factors``, which
``contract.Setup`` carries), worker ``k`` takes
``H_k = max(1, floor(H · min_j f_j / f_k))`` steps, so every worker spends the
same compute time per round and fast workers do more steps; the trainer stages
``H`` batches per round and a worker past its ``H_k`` leaves them unused.

Reference:
  Cagnasso, Belilovsky, Oyallon, GASLoC, 2026. arXiv 2606.11081 (its update is
  known to us from a third-party rendering only; see ``docs/algorithms.md``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from autoloco_jax import ranges
from autoloco_jax.algorithms.gossip import compressed_exchange, eval_models
from autoloco_jax.algorithms.gossip import monitoring, round_comm, topology
from autoloco_jax.algorithms.interval import Interval
from autoloco_jax.compression import exchange
from autoloco_jax.runtime import inner, replicas, state as state_lib
from autoloco_jax.runtime.contract import Algorithm, ParamShapes, Setup
from autoloco_jax.runtime.jitting import jit_inner, jit_sync


def worker_steps(h: int, speed_K: np.ndarray) -> np.ndarray:
  """``H_k = max(1, floor(H · min_j f_j / f_k))``: the same compute time per
  worker, the fastest taking ``H`` steps."""
  speed_K = np.asarray(speed_K, np.float64)
  return np.maximum(1, np.floor(h * speed_K.min() / speed_K + 1e-9)).astype(np.int32)


class GASLoCState(NamedTuple):
  """GASLoC's per-worker state between rounds.

  Attributes:
    start_K: ``θ_{t,k}^{start}``, where each worker's round starts.
    y_prev_K: ``y_{t−1,k}`` (``θ_0`` before the first round).
    exchange: a compressed exchange's reference and residuals
      (``compressed_exchange.GossipExchangeState``); None for the uncompressed
      one.
  """

  start_K: Any
  y_prev_K: Any
  exchange: Any = None

  def specs(self) -> "GASLoCState":
    ex = None if self.exchange is None else self.exchange.specs()
    return GASLoCState(replicas.WORKERS, replicas.WORKERS, ex)


@dataclasses.dataclass(frozen=True)
class GASLoC:
  """GASLoC's hyperparameters: ``config.gasloc`` (the paper's symbols; their
  ranges are ``ranges.FIELDS``', checked here) and the groups it composes.

  Attributes:
    eta: ``η``, scale of each worker's drift.
    gamma: ``γ``, momentum on ``y_t − y_{t−1}``.
    alpha: ``α``, gossip step on the Laplacian.
    mix_momentum: gossip the momentum term too (DiLoCo on the complete graph).
    interval: ``config.interval``, typed; its ``h`` is the fastest worker's
      inner steps per round.
    topology: the gossip graph.
    compression: the codec of every message and error feedback
      (``exchange.Compression``; the identity codec sends float32 as it is).
  """

  eta: float
  gamma: float
  alpha: float
  mix_momentum: bool
  interval: Interval
  topology: topology.Topology
  compression: exchange.Compression

  name = "gasloc"
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
    for name in ("eta", "gamma", "alpha"):
      ranges.check(f"gasloc.{name}", getattr(self, name))
      object.__setattr__(self, name, float(getattr(self, name)))
    object.__setattr__(self, "mix_momentum", bool(self.mix_momentum))

  @classmethod
  def from_config(cls, config: Any) -> "GASLoC":
    """From ``config.gasloc`` (``eta``, ``gamma``, ``alpha``: 0 = ``1/(d+1)``,
    ``mix_momentum``), ``config.gossip``, ``config.interval`` (fixed ``h``) and
    ``config.compress``; each worker's ``H_k`` comes from the speed factors
    of ``contract.Setup`` when it is built."""
    g = config.gasloc
    topo = topology.from_config(config)
    return cls(
        eta=g.eta,
        gamma=g.gamma,
        alpha=g.alpha or 1.0 / (topo.degree + 1),
        mix_momentum=g.mix_momentum,
        interval=Interval.from_config(config),
        topology=topo,
        compression=exchange.Compression.from_config(config),
    )

  @property
  def h(self) -> int:
    """``H``, the fastest worker's inner steps per round."""
    return self.interval.h

  def build(self, setup: Setup) -> Algorithm:
    steps_K = tuple(int(s) for s in worker_steps(self.h, setup.speed_factors))
    sync, k = GASLoCSync(self, setup.lr_schedule, steps_K), setup.num_workers
    shapes = ParamShapes()  # for the clock's payload

    def init_state(params) -> state_lib.TrainState:
      params_K, inner_opt_K = setup.init_workers(params)
      shapes.record(params)
      return state_lib.init(params_K, inner_opt_K, sync.init(params, params_K), k)

    local_steps = sync.local_steps if sync.heterogeneous else None
    return Algorithm(
        name=self.name,
        init_state=init_state,
        inner=jit_inner(setup.inner_loop(), setup.layout, local_steps),
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
class GASLoCSync:
  """GASLoC's end of a round: one accelerated gossip step
  (``(state, present_K) -> (state, metrics)``; the math is the module's).

  Attributes:
    gasloc: the hyperparameters (``η``, ``γ``, ``α``, mode, ``H``, topology,
      codec).
    lr_schedule: the inner learning rate ``η(s)`` (for the round's statistics).
    steps_K: ``H_k`` per worker (:func:`worker_steps`).
  """

  gasloc: GASLoC
  lr_schedule: optax.Schedule
  steps_K: tuple

  @property
  def heterogeneous(self) -> bool:
    """Whether some worker takes fewer than ``H`` steps."""
    return any(s != self.gasloc.h for s in self.steps_K)

  def local_steps(self, b: int) -> jax.Array:
    """This device's block of ``b`` workers' ``H_k``."""
    steps_K = jnp.asarray(np.asarray(self.steps_K, np.int32))
    if b == len(self.steps_K):
      return steps_K
    start = lax.axis_index(replicas.REPLICA) * b
    return lax.dynamic_slice_in_dim(steps_K, start, b)

  def init(self, params: Any, params_K: Any) -> GASLoCState:
    """``θ^{start}_k = y_{−1,k} = θ_0`` and the compressed exchange's state."""
    return GASLoCState(
        start_K=params_K,
        y_prev_K=params_K,  # y_{-1} = θ_0
        exchange=compressed_exchange.init_exchange(
            self.gasloc.compression, params, params_K
        ),
    )

  def round_length(self, round_index: Any, interval: Any) -> Any:
    """Every round is ``interval`` steps of the fastest worker (a fixed ``H``)."""
    del round_index
    return interval

  def comm_pattern(self, shapes: ParamShapes, num_workers: int) -> Callable:
    """One message per neighbour of the round's table, each worker after its
    own ``H_k`` steps (``round_comm.py``)."""
    del num_workers  # one H_k per worker
    steps_K = np.asarray(self.steps_K, np.int32)
    return round_comm.comm_pattern(
        self.gasloc.topology,
        lambda steps: np.minimum(steps_K, steps),
        self.gasloc.compression,
        shapes,
    )

  def __call__(self, state: state_lib.TrainState, present_K):
    del present_K  # GASLoC does not support faults
    hp = self.gasloc
    eta, gamma, alpha, topo = hp.eta, hp.gamma, hp.alpha, hp.topology
    start_K, theta_K = state.algo.start_K, state.params_K
    y_prev_K, ex = state.algo.y_prev_K, state.algo.exchange
    y_K = jax.tree.map(lambda s, t: s + eta * (t - s), start_K, theta_K)
    if hp.mix_momentum:
      message_K = jax.tree.map(lambda y, yp: y + gamma * (y - yp), y_K, y_prev_K)
    else:
      message_K = y_K
    if ex is None:
      lm_K = topology.laplacian(topo, message_K, state.round)  # the exchange
    else:  # the exchange, of the encoded message less θ_0
      lm_K, ex = compressed_exchange.encoded_laplacian(
          topo, hp.compression, message_K, ex, state.round
      )
    if hp.mix_momentum:
      new_K = jax.tree.map(lambda z, lz: z - alpha * lz, message_K, lm_K)
    else:
      new_K = jax.tree.map(
          lambda y, ly, yp: y - alpha * ly + gamma * (y - yp), y_K, lm_K, y_prev_K
      )
    return self._round_end(state, start_K, new_K, y_K, ex)

  def _round_end(self, state, start_K, new_K, y_K, ex):
    """The new state and the round's metrics, with each worker's steps."""
    hp = self.gasloc
    done_K = None
    if self.heterogeneous:
      b = jax.tree.leaves(state.params_K)[0].shape[0]
      done_K = jnp.minimum(state.acc.steps, self.local_steps(b))
    metrics = monitoring.round_metrics(
        hp.topology, state, start_K, new_K, self.lr_schedule, hp.h, done_K, ex
    )
    metrics["worker_steps_mean"] = (
        metrics["h"].astype(jnp.float32)
        if done_K is None
        else replicas.worker_mean(done_K.astype(jnp.float32))
    )
    new_state = state._replace(
        params_K=new_K,
        algo=GASLoCState(start_K=new_K, y_prev_K=y_K, exchange=ex),
        acc=inner.reset(state.acc),
        round=state.round + 1,
    )
    return new_state, metrics
