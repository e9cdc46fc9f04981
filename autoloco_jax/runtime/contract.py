"""What every training algorithm provides: the contract between an algorithm,
the round driver and the simulated clock.

An algorithm is two jitted functions over a :class:`~autoloco_jax.runtime.state.TrainState`
laid out on the mesh,

* ``inner(state, tokens_KxCxBxL1, num_steps) -> state``: ``num_steps`` local
  steps (a traced count, so no recompilation when ``H`` changes);
* ``sync(state, present_K) -> (state, metrics)``: the end of a round (DiLoCo's
  outer step, a gossip exchange, ...), returning scalar metrics of the round,

plus ``init_state(params)``, the communication it pays per round
(``comm_pattern``, a :class:`RoundComm` per round) and whether it supports
workers missing rounds. :class:`Setup` is what every algorithm is built from;
``runtime/jitting.py`` wraps the per-device functions as the jitted ones, and
``algorithms/registry.py`` picks an algorithm by name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
import optax
from jax.sharding import Mesh

from autoloco_jax.runtime import inner, replicas
from autoloco_jax.runtime.layout import Layout, as_layout


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """A training algorithm on the replica axis.

  Attributes:
    name: registry name.
    init_state: ``params -> TrainState`` (host arrays; place with ``state.place``).
    inner: jitted, donating ``(state, tokens_KxCxBxL1, num_steps) -> state``.
    sync: jitted, donating ``(state, present_K) -> (state, metrics)``;
      ``present_K`` (float32, K) is 1 for each worker whose round counts (all
      ones without faults). ``metrics`` are worker-invariant scalars, with
      ``next_h``, the next driver round's number of inner steps, among them
      (a metrics.jsonl field: its name is kept).
    comm_pattern: ``(round_index, steps) -> RoundComm``, what a round of
      ``steps`` inner steps computes and sends per worker, for the simulated
      clock.
    max_round_steps: the longest driver round, in inner steps, the algorithm
      can ask for (sizes the data buffer).
    min_round_steps: the shortest round its controller asks for
      (``rounds.round_steps``: a run's remainder shorter than that joins the
      round before it).
    first_round_steps: the first driver round's inner steps (the controller's
      first interval ``H_0``; ``H_0/P`` for streaming syncs).
    supports_faults: whether ``sync`` honours ``present_K`` (averages over the
      workers present); the trainer refuses injected faults otherwise.
    eval_params: optional jitted ``state -> {name: params}`` of the models to
      evaluate (decentralized methods: the replicas' mean and one replica);
      ``None``: evaluate worker 0, the global model after a sync.
    next_round_steps: ``next_round_steps(r) -> n``, the inner steps of the
      driver round after round ``r`` (0-based; what the sync ending round ``r``
      returns as ``next_h``), when they do not depend on the round's statistics
      (fixed intervals, schedules, streaming's slots), computed on the host by
      the same functions the sync runs (``sync.open_loop_next_h``): the trainer
      then dispatches the next round before reading anything of this one.
      ``None``: only the sync knows them (adaptive controllers).

  ``H`` (``h`` in code) is the controller's interval, the inner steps between
  two syncs of the same parameters; a driver round is ``H`` steps for the whole
  model, ``H/P`` with ``P`` streaming fragments and ``τ`` or ``H/P − τ`` with
  overlap, so the fields above count driver-round steps, not ``H``.
  """

  name: str
  init_state: Callable[[Any], TrainState]
  inner: Callable
  sync: Callable
  comm_pattern: Callable[[int, int], RoundComm]
  max_round_steps: int
  min_round_steps: int
  first_round_steps: int
  supports_faults: bool
  eval_params: Callable[[TrainState], dict] | None = None
  next_round_steps: Callable[[int], int] | None = None


class ParamShapes:
  """The parameters' shapes and dtypes (``jax.eval_shape``), recorded when
  ``init_state`` sees them: what a clock's payload in bytes depends on."""

  def __init__(self):
    self._shapes = None

  def record(self, params: Any) -> None:
    self._shapes = jax.eval_shape(lambda: params)

  def get(self) -> Any:
    if self._shapes is None:
      raise ValueError(
          "the payload of a streaming or compressed sync is known once "
          "init_state has seen the parameters; call it before comm_pattern"
      )
    return self._shapes


@dataclasses.dataclass(frozen=True)
class Setup:
  """What every algorithm is built from, the same for all of them.

  Attributes:
    mesh: the device mesh with its ``replica`` axis (and model axes).
    num_workers: K.
    loss_fn: ``loss_fn(params, tokens_BxL1) -> scalar`` for one worker.
    lr_schedule: the inner learning rate ``η(s)``.
    inner_tx: the inner optimizer (clipping + AdamW under ``lr_schedule``).
    peak_lr: ``η_peak``, the schedule's peak (``config.inner.lr``).
    speed_factors: per worker, its compute time per inner step relative to 1
      (``config.network.speed_factors``; all 1 when unset): GASLoC gives slow
      workers fewer steps.
    microbatches: micro-batches each inner step's gradient is accumulated over
      (``config.inner.microbatches``; 1: none).
  """

  mesh: Mesh
  num_workers: int
  loss_fn: Callable
  lr_schedule: optax.Schedule
  inner_tx: optax.GradientTransformation
  peak_lr: float
  speed_factors: tuple[float, ...]
  microbatches: int = 1
  #: Where the state's arrays live on the mesh's model axes
  #: (``layout.Layout``; None: no model axes, ``Layout(mesh)``).
  layout: Layout | None = None

  def __post_init__(self):
    if self.layout is None:
      object.__setattr__(self, "layout", Layout(self.mesh))

  @classmethod
  def from_config(cls, config: Any, loss_fn: Callable, mesh: Mesh | Layout) -> "Setup":
    """From ``config.inner``, ``config.num_workers`` and
    ``config.network.speed_factors`` (``()``: all 1; else K finite values > 0).

    Raises:
      ValueError: speed factors that are not K finite values > 0.
    """
    lr_schedule = inner.schedule(config.inner, config.total_steps)
    k = config.num_workers
    speeds = speed_factors(config.network, k)
    layout = as_layout(mesh)
    return cls(
        mesh=layout.mesh,
        layout=layout,
        num_workers=k,
        loss_fn=loss_fn,
        lr_schedule=lr_schedule,
        inner_tx=inner.optimizer(config.inner, lr_schedule),
        peak_lr=float(config.inner.lr),
        speed_factors=tuple(float(f) for f in speeds),
        microbatches=int(config.inner.get("microbatches", 1)),
    )

  def inner_loop(self) -> Callable:
    """The per-device inner loop (:func:`inner.make_inner_loop`)."""
    return inner.make_inner_loop(
        self.loss_fn, self.inner_tx, self.lr_schedule, microbatches=self.microbatches
    )

  def synced_loop(self) -> Callable:
    """DDP's per-device inner loop on one model (:func:`inner.make_synced_loop`)."""
    return inner.make_synced_loop(
        self.loss_fn, self.inner_tx, self.lr_schedule, self.microbatches
    )

  def init_workers(self, params: Any) -> tuple[Any, Any]:
    """``(params_K, inner_opt_K)``: K copies of ``params`` and their fresh
    inner optimizer states."""
    params_K = replicas.stack_workers(params, self.num_workers)
    return params_K, jax.vmap(self.inner_tx.init)(params_K)


PATTERNS = ("allreduce", "allreduce_every_step", "gossip", "none", "send", "arrive")


class RoundComm(NamedTuple):
  """What one round computes and sends (host side, for :class:`SimClock`).

  Attributes:
    kind: ``allreduce`` (one collective after the local steps: the DiLoCo
      family), ``allreduce_every_step`` (DDP's gradient all-reduce after every
      step), ``gossip`` (each worker sends its message to each of its
      neighbours in ``neighbors_DxK`` and receives theirs), ``none``, or the two halves of an
      overlapped exchange (streaming DiLoCo with ``τ >= 1``): ``send`` (the
      local steps, then the collective starts and runs while the next round
      computes) and ``arrive`` (the local steps, then every worker waits, if
      it must, until the collective started by the last ``send`` has ended).
    steps_K: inner steps each worker takes this round (int, K).
    neighbors_DxK: for ``gossip``, the round's neighbour table (``d`` rows, each
      a permutation of the workers: row ``r`` names worker ``k``'s ``r``-th peer).
    payload_bytes: for ``allreduce``, ``send`` and ``gossip``, the bytes of
      one worker's message (an encoded fragment or model,
      ``codecs.tree_encoded_bytes``); None: the whole model at the clock's
      ``bytes_per_param``.
    dense: whether payloads are summed on the way (a ring all-reduce) or must
      be gathered and decoded (a ring all-gather): ``codecs.Codec.dense``.
    window: inner steps the exchange may hide behind (``τ`` for ``send``);
      :meth:`SimClock.advance` reads it for ``peak_bandwidth``.
  """

  kind: str
  steps_K: np.ndarray
  neighbors_DxK: np.ndarray | None = None
  payload_bytes: float | None = None
  dense: bool = True
  window: int = 0


def speed_factors(network_cfg: Any, num_workers: int) -> np.ndarray:
  """Per-worker compute time per inner step relative to 1 (2 = twice as slow),
  from ``network_cfg.speed_factors``; ``()`` means all 1. GASLoC gives slow
  workers fewer steps; the simulated clock times them.

  Raises:
    ValueError: not K values, or a value that is not finite and > 0.
  """
  f = network_cfg.speed_factors
  if f is None or np.size(f) == 0:
    return np.ones(num_workers)
  f = np.asarray(f, np.float64).reshape(-1)
  if f.shape != (num_workers,) or not np.all(np.isfinite(f) & (f > 0)):
    raise ValueError(
        f"network.speed_factors must be {num_workers} finite values "
        f"> 0, got {tuple(f)}"
    )
  return f
