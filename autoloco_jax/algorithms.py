"""What every training algorithm provides, and the registry that picks one by name.

An algorithm is two jitted functions over a :class:`~autoloco_jax.state.TrainState`
laid out on the mesh:

* ``inner(state, tokens_KxCxBxL1, num_steps) -> state``: ``num_steps`` local
  steps (a traced count, so no recompilation when ``H`` changes);
* ``sync(state) -> (state, metrics)``: the end of a round (DiLoCo's outer step,
  a gossip exchange, ...), returning scalar metrics of the round.

plus ``init_state(params)`` and the communication it pays per round.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, NamedTuple

import jax
from jax.sharding import Mesh

from autoloco_jax import replicas
from autoloco_jax.state import TrainState


class Algorithm(NamedTuple):
  """A training algorithm on the replica axis.

  Attributes:
    name: registry name.
    init_state: ``params -> TrainState`` (host arrays; place with ``state.place``).
    inner: jitted, donating ``(state, tokens_KxCxBxL1, num_steps) -> state``.
    sync: jitted, donating ``state -> (state, metrics)``.
    allreduces_per_round: ``H -> number of all-reduces of the parameters`` that
      a round of ``H`` inner steps pays (DiLoCo 1, DDP ``H``).
    h_max: the longest round the algorithm can ask for (sizes the data buffer).
    eval_params: optional jitted ``state -> {name: params}`` of the models to
      evaluate (decentralized methods: the replicas' mean and one replica);
      ``None``: evaluate worker 0, the global model after a sync.
    comm_pattern: optional ``(round_index, h) -> comm.RoundComm``, what a
      round computes and sends per worker, for the simulated clock; ``None``:
      ``comm.default_pattern`` by name (DDP: an all-reduce every step, the
      DiLoCo family: one at the end of the round).
  """
  name: str
  init_state: Callable[[Any], TrainState]
  inner: Callable
  sync: Callable
  allreduces_per_round: Callable[[int], int]
  h_max: int
  eval_params: Callable[[TrainState], dict] | None = None
  comm_pattern: Callable[[int, int], Any] | None = None


def jit_inner(inner_run: Callable, mesh: Mesh,
              local_steps: Callable[[int], jax.Array] | None = None) -> Callable:
  """Wraps a per-device inner loop (``inner.make_inner_loop``) as a jitted step
  over the whole mesh, advancing ``state.step``.

  ``local_steps(b)``, if given, returns this device's block of ``b`` per-worker
  step counts ``H_k`` (workers of different speeds, GASLoC).
  """

  def block(state: TrainState, tokens_KxCxBxL1, num_steps):
    extra = {} if local_steps is None else {
        "steps_K": local_steps(tokens_KxCxBxL1.shape[0])}
    params_K, opt_K, acc = inner_run(state.params_K, state.inner_opt_K, state.acc,
                                     tokens_KxCxBxL1, num_steps, state.step, **extra)
    return state._replace(params_K=params_K, inner_opt_K=opt_K, acc=acc,
                          step=state.step + num_steps)

  @functools.partial(jax.jit, donate_argnums=0)
  def inner(state: TrainState, tokens_KxCxBxL1, num_steps):
    specs = state.specs()
    return replicas.map_workers(
        block, mesh, in_specs=(specs, replicas.WORKERS, replicas.REPLICATED),
        out_specs=specs)(state, tokens_KxCxBxL1, num_steps)

  return inner


def jit_sync(sync_block: Callable, mesh: Mesh) -> Callable:
  """Wraps a per-device sync ``state -> (state, metrics)`` as a jitted function
  over the whole mesh; metrics must be worker-invariant scalars."""

  @functools.partial(jax.jit, donate_argnums=0)
  def sync(state: TrainState):
    specs = state.specs()
    return replicas.map_workers(
        sync_block, mesh, in_specs=(specs,),
        out_specs=(specs, replicas.REPLICATED))(state)

  return sync


#: Algorithm name -> module of autoloco_jax whose ``make(config, loss_fn, mesh)``
#: builds it (imported on demand).
REGISTRY = {"ddp": "ddp", "diloco": "diloco", "autoloco": "diloco",
            "noloco": "noloco", "gasloc": "gasloc"}


def make(config: Any, loss_fn: Callable, mesh: Mesh) -> Algorithm:
  """Builds the algorithm named by ``config.algorithm``."""
  if config.algorithm not in REGISTRY:
    raise ValueError(f"unknown algorithm {config.algorithm!r}; "
                     f"choose one of {sorted(REGISTRY)}")
  module = importlib.import_module(f"autoloco_jax.{REGISTRY[config.algorithm]}")
  return module.make(config, loss_fn, mesh)
