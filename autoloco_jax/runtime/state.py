"""The training state every algorithm shares, and how it is laid out on the mesh."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from autoloco_jax.runtime import layout as layout_lib, replicas
from autoloco_jax.runtime.inner import RoundAcc


class TrainState(NamedTuple):
  """Everything a run carries from one round to the next (all on device).

  Per-worker fields (``_K``) have a leading axis of K workers, split over the
  mesh's ``replica`` axis; the rest is replicated.

  Attributes:
    params_K: the workers' parameters ``θ_{t,k}`` (the fast weights the inner
      steps move); ``None`` for DDP, whose workers always agree: its one model
      is in ``algo``.
    inner_opt_K: inner optimizer state (AdamW moments), local to each worker;
      ``None`` for DDP.
    algo: the algorithm's own state between rounds, a NamedTuple with a
      ``specs()`` method (``diloco.DiLoCoState``, ``noloco.NoLoCoState``,
      ``gasloc.GASLoCState``; ``ddp.DDPState``: the parameters and their AdamW
      state, one copy per device).
    acc: statistics of the current round (:class:`RoundAcc`).
    step: global inner step ``s`` (number of inner steps taken so far).
    round: number of completed syncs ``t``.
  """

  params_K: Any
  inner_opt_K: Any
  algo: Any
  acc: RoundAcc
  step: jax.Array
  round: jax.Array

  def specs(self) -> "TrainState":
    """Partition specs (a prefix tree) matching this state's layout."""
    w, r = replicas.WORKERS, replicas.REPLICATED
    on = lambda field, spec: None if field is None else spec
    return TrainState(
        params_K=on(self.params_K, w),
        inner_opt_K=on(self.inner_opt_K, w),
        algo=None if self.algo is None else self.algo.specs(),
        acc=RoundAcc.specs(),
        step=r,
        round=r,
    )


def init(params_K: Any, inner_opt_K: Any, algo: Any, num_workers: int) -> TrainState:
  """A state before the first round (host or device arrays; place with
  :func:`place`)."""
  return TrainState(
      params_K=params_K,
      inner_opt_K=inner_opt_K,
      algo=algo,
      acc=RoundAcc.zeros(num_workers),
      step=scalar(0),
      round=scalar(0),
  )


def shardings(state: TrainState, mesh) -> TrainState:
  """Each leaf's ``NamedSharding``: the replica spec its field names
  (:meth:`TrainState.specs`) and, where a ``layout.Layout`` is given for
  ``mesh``, its model axes (``Layout.shardings``: a parameter-shaped leaf split
  like the parameter)."""
  from jax.sharding import NamedSharding, PartitionSpec

  layout = layout_lib.as_layout(mesh)
  specs = layout.specs(state, state.specs())
  if layout.mesh.size == 1:
    # On a one-device mesh JAX returns P('replica') outputs as P(); lay inputs
    # out the same way so the first call and later ones hit the same program.
    specs = jax.tree.map(
        lambda spec: PartitionSpec(), specs, is_leaf=lambda x: isinstance(x, PartitionSpec)
    )
  return jax.tree.map(
      lambda spec: NamedSharding(layout.mesh, spec),
      specs,
      is_leaf=lambda x: isinstance(x, PartitionSpec),
  )


def place(state: TrainState, mesh) -> TrainState:
  """Puts every field of ``state`` on the mesh with its :func:`shardings`.

  Every leaf gets buffers of its own: the jitted rounds donate the state, and two
  fields sharing a buffer (or a field sharing the caller's ``params``) could not
  both be donated. ``may_alias=False`` alone is not enough: JAX 0.10 still reuses
  the source buffer on its own device when it replicates over several devices,
  so device arrays are copied first.
  """
  placed = shardings(state, mesh)
  state = jax.tree.map(lambda x: x.copy() if isinstance(x, jax.Array) else x, state)
  return replicas.put(state, placed, may_alias=False)


def scalar(value: int) -> jax.Array:
  return jnp.asarray(value, jnp.int32)
