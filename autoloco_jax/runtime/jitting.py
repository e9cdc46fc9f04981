"""The jitted, mesh-wide forms of an algorithm's per-device inner loop and sync.

Every algorithm writes its inner block and its sync as functions of one
device's block of workers (``replicas.map_workers``); these wrap them as the
jitted, donating functions of :class:`~autoloco_jax.runtime.contract.Algorithm`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh

from autoloco_jax.runtime import replicas
from autoloco_jax.runtime.layout import Layout, as_layout
from autoloco_jax.runtime.state import TrainState


def jit_inner(
    inner_run: Callable, mesh: Mesh | Layout, local_steps: Callable[[int], jax.Array] | None = None
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


def jit_inner_block(block: Callable, mesh: Mesh | Layout) -> Callable:
  """Wraps a per-device ``block(state, tokens_KxCxBxL1, num_steps) -> state``
  (which advances ``state.step`` itself) as the jitted, donating inner step over
  the whole mesh; :func:`jit_inner` for algorithms whose state is not
  ``params_K`` and ``inner_opt_K`` (DDP).

  ``mesh``: the mesh, or its ``layout.Layout``, to which the new state is held
  (model axes: the state keeps the layout it came in with)."""
  layout = as_layout(mesh)

  @functools.partial(jax.jit, donate_argnums=0)
  def inner_fn(state: TrainState, tokens_KxCxBxL1, num_steps):
    specs = state.specs()
    with layout.rules():
      new = replicas.map_workers(
          block,
          layout.mesh,
          in_specs=(specs, replicas.WORKERS, replicas.REPLICATED),
          out_specs=specs,
      )(state, tokens_KxCxBxL1, num_steps)
    return layout.constrain(new, specs)

  return inner_fn


def jit_sync(sync_block: Callable, mesh: Mesh | Layout) -> Callable:
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


def jit_sync_of(
    make_block: Callable[[Any], Callable], hyper: Any, mesh: Mesh | Layout
) -> BoundSync:
  """:func:`jit_sync` for a sync built from hyperparameters, ``make_block(hyper)
  -> (state, present_K) -> (state, metrics)``, with ``hyper`` (a pytree of
  scalars, e.g. the outer ``{'alpha': α, 'beta': β}``) passed to the compiled
  program as float32 arguments rather than baked into it as constants: runs
  that differ only in them (a tuning grid of outer pairs) share one compiled
  sync, from the persistent compilation cache across processes. The same float
  operations run either way, so the results are bit for bit those of the
  constants (``tests/test_algorithms.py``)."""

  layout = as_layout(mesh)

  @functools.partial(jax.jit, donate_argnums=0)
  def sync(state: TrainState, present_K, hyper_traced):
    specs = state.specs()
    new, metrics = replicas.map_workers(
        lambda s, p, h: make_block(h)(s, p),
        layout.mesh,
        in_specs=(specs, replicas.WORKERS, replicas.REPLICATED),
        out_specs=(specs, replicas.REPLICATED),
    )(state, present_K, hyper_traced)
    return layout.constrain(new, specs), metrics

  return BoundSync(sync, jax.tree.map(np.float32, hyper))
