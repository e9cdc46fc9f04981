"""What every training algorithm provides, and the registry that picks one by name.

An algorithm is two jitted functions over a :class:`~autoloco_jax.state.TrainState`
laid out on the mesh,

* ``inner(state, tokens_KxCxBxL1, num_steps) -> state``: ``num_steps`` local
  steps (a traced count, so no recompilation when ``H`` changes);
* ``sync(state, present_K) -> (state, metrics)``: the end of a round (DiLoCo's
  outer step, a gossip exchange, ...), returning scalar metrics of the round,

plus ``init_state(params)``, the communication it pays per round
(``comm_pattern``) and whether it supports workers missing rounds.

Each algorithm is one module with a frozen dataclass of its hyperparameters,
named with its paper's symbols, a ``from_config(config)`` classmethod that reads
its own config group, and ``build(setup) -> Algorithm``. Adding one is a module
and an entry in :data:`REGISTRY` (``docs/algorithms.md``, "Adding an algorithm").
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from typing import Any, Callable

import jax
import numpy as np
import optax
from jax.sharding import Mesh

from autoloco_jax import comm, inner, replicas
from autoloco_jax.state import TrainState


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
      ``next_h``, the next round's number of inner steps, among them.
    comm_pattern: ``(round_index, h) -> comm.RoundComm``, what a round computes
      and sends per worker, for the simulated clock.
    h_max: the longest round the algorithm can ask for (sizes the data buffer).
    h_min: the shortest round its controller asks for (``rounds.round_steps``:
      a run's remainder shorter than that joins the round before it).
    supports_faults: whether ``sync`` honours ``present_K`` (averages over the
      workers present); the trainer refuses injected faults otherwise.
    eval_params: optional jitted ``state -> {name: params}`` of the models to
      evaluate (decentralized methods: the replicas' mean and one replica);
      ``None``: evaluate worker 0, the global model after a sync.
    first_h: the first round's number of inner steps when it is not
      ``config.interval.h`` (streaming syncs: ``H/P``); ``None``: that value.
    planned_h: ``planned_h(r) -> H``, the ``next_h`` the sync ending round
      ``r`` (0-based) returns, when it does not depend on the round's
      statistics (fixed intervals, schedules), computed on the host by the same
      functions the sync runs (``sync_pieces.planned_h``): the trainer then dispatches
      the next round before reading anything of this one. ``None``: only the
      sync knows it (adaptive controllers).
  """

  name: str
  init_state: Callable[[Any], TrainState]
  inner: Callable
  sync: Callable
  comm_pattern: Callable[[int, int], comm.RoundComm]
  h_max: int
  supports_faults: bool
  h_min: int = 1
  eval_params: Callable[[TrainState], dict] | None = None
  first_h: int | None = None
  planned_h: Callable[[int], int] | None = None


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
    mesh: the device mesh with its ``replica`` axis.
    num_workers: K.
    loss_fn: ``loss_fn(params, tokens_BxL1) -> scalar`` for one worker.
    lr_schedule: the inner learning rate ``η(s)``.
    inner_tx: the inner optimizer (clipping + AdamW under ``lr_schedule``).
    peak_lr: ``η_peak``, the schedule's peak (``config.inner.lr``).
    h: ``config.interval.h``, the (first) round's number of inner steps.
  """

  mesh: Mesh
  num_workers: int
  loss_fn: Callable
  lr_schedule: optax.Schedule
  inner_tx: optax.GradientTransformation
  peak_lr: float
  h: int

  @classmethod
  def from_config(cls, config: Any, loss_fn: Callable, mesh: Mesh) -> "Setup":
    lr_schedule = inner.schedule(config.inner, config.total_steps)
    return cls(
        mesh=mesh,
        num_workers=config.num_workers,
        loss_fn=loss_fn,
        lr_schedule=lr_schedule,
        inner_tx=inner.optimizer(config.inner, lr_schedule),
        peak_lr=float(config.inner.lr),
        h=int(config.interval.h),
    )

  def inner_loop(self) -> Callable:
    """The per-device inner loop (:func:`inner.make_inner_loop`)."""
    return inner.make_inner_loop(self.loss_fn, self.inner_tx, self.lr_schedule)

  def synced_loop(self) -> Callable:
    """DDP's per-device inner loop on one model (:func:`inner.make_synced_loop`)."""
    return inner.make_synced_loop(self.loss_fn, self.inner_tx, self.lr_schedule)

  def init_workers(self, params: Any) -> tuple[Any, Any]:
    """``(params_K, inner_opt_K)``: K copies of ``params`` and their fresh
    inner optimizer states."""
    params_K = replicas.stack_workers(params, self.num_workers)
    return params_K, jax.vmap(self.inner_tx.init)(params_K)


def jit_inner(
    inner_run: Callable, mesh: Mesh, local_steps: Callable[[int], jax.Array] | None = None
) -> Callable:
  """Wraps a per-device inner loop (``inner.make_inner_loop``) as a jitted step
  over the whole mesh, advancing ``state.step``.

  ``local_steps(b)``, if given, returns this device's block of ``b`` per-worker
  step counts ``H_k`` (workers of different speeds, GASLoC).
  """

  def block(state: TrainState, tokens_KxCxBxL1, num_steps):
    extra = (
        {} if local_steps is None else {"steps_K": local_steps(tokens_KxCxBxL1.shape[0])}
    )
    params_K, opt_K, acc = inner_run(
        state.params_K,
        state.inner_opt_K,
        state.acc,
        tokens_KxCxBxL1,
        num_steps,
        state.step,
        **extra,
    )
    return state._replace(
        params_K=params_K, inner_opt_K=opt_K, acc=acc, step=state.step + num_steps
    )

  return jit_inner_block(block, mesh)


def jit_inner_block(block: Callable, mesh: Mesh) -> Callable:
  """Wraps a per-device ``block(state, tokens_KxCxBxL1, num_steps) -> state``
  (which advances ``state.step`` itself) as the jitted, donating inner step over
  the whole mesh; :func:`jit_inner` for algorithms whose state is not
  ``params_K`` and ``inner_opt_K`` (DDP)."""

  @functools.partial(jax.jit, donate_argnums=0)
  def inner_fn(state: TrainState, tokens_KxCxBxL1, num_steps):
    specs = state.specs()
    return replicas.map_workers(
        block,
        mesh,
        in_specs=(specs, replicas.WORKERS, replicas.REPLICATED),
        out_specs=specs,
    )(state, tokens_KxCxBxL1, num_steps)

  return inner_fn


def jit_sync(sync_block: Callable, mesh: Mesh) -> Callable:
  """Wraps a per-device sync ``(state, present_K) -> (state, metrics)`` as a
  jitted function over the whole mesh; metrics must be worker-invariant
  scalars."""
  return jit_sync_of(lambda hyper: sync_block, (), mesh)


@dataclasses.dataclass(frozen=True)
class BoundSync:
  """A jitted sync ``fn(state, present_K, hyper)`` with its ``hyper`` bound:
  called, lowered (``benchmarks/aot.py``) and asked for its cache size like the
  jitted function itself, as ``(state, present_K)``."""

  fn: Callable
  hyper: Any

  def __call__(self, state: TrainState, present_K):
    return self.fn(state, present_K, self.hyper)

  def lower(self, state: TrainState, present_K):
    return self.fn.lower(state, present_K, self.hyper)

  def _cache_size(self) -> int:
    return self.fn._cache_size()


def jit_sync_of(make_block: Callable[[Any], Callable], hyper: Any, mesh: Mesh) -> BoundSync:
  """:func:`jit_sync` for a sync built from hyperparameters, ``make_block(hyper)
  -> (state, present_K) -> (state, metrics)``, with ``hyper`` (a pytree of
  scalars, e.g. the outer ``{'alpha': α, 'beta': β}``) passed to the compiled
  program as float32 arguments rather than baked into it as constants: runs
  that differ only in them (a tuning grid of outer pairs) share one compiled
  sync, from the persistent compilation cache across processes. The same float
  operations run either way, so the results are bit for bit those of the
  constants (``tests/test_algorithms.py``)."""

  @functools.partial(jax.jit, donate_argnums=0)
  def sync(state: TrainState, present_K, hyper_traced):
    specs = state.specs()
    return replicas.map_workers(
        lambda s, p, h: make_block(h)(s, p),
        mesh,
        in_specs=(specs, replicas.WORKERS, replicas.REPLICATED),
        out_specs=(specs, replicas.REPLICATED),
    )(state, present_K, hyper_traced)

  return BoundSync(sync, jax.tree.map(np.float32, hyper))


#: Algorithm name -> ``module:class`` of its hyperparameters (imported on demand).
REGISTRY = {
    "ddp": "autoloco_jax.ddp:DDP",
    "diloco": "autoloco_jax.diloco:DiLoCo",
    "autoloco": "autoloco_jax.diloco:AutoLoCo",
    "noloco": "autoloco_jax.noloco:NoLoCo",
    "gasloc": "autoloco_jax.gasloc:GASLoC",
}


def hyperparams_class(name: str) -> type:
  """The hyperparameter dataclass registered as ``name``."""
  if name not in REGISTRY:
    raise ValueError(f"unknown algorithm {name!r}; choose one of {sorted(REGISTRY)}")
  module, cls = REGISTRY[name].split(":")
  return getattr(importlib.import_module(module), cls)


def from_config(config: Any) -> Any:
  """The typed hyperparameters of ``config.algorithm``, read from its config
  group (validates them: a bad combination is a ``ValueError``)."""
  return hyperparams_class(config.algorithm).from_config(config)


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  """Builds the algorithm named by ``config.algorithm``."""
  return from_config(config).build(Setup.from_config(config, loss_fn, mesh))
