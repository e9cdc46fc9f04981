"""The replica axis: K workers as a leading array axis mapped onto a device mesh.

Every per-worker quantity (fast weights, inner optimizer state, data) carries a
leading axis of size K, named with a ``_K`` suffix. The mesh has one axis,
``replica``, over D devices; each device holds a block of ``K / D`` workers and
runs them with ``vmap``. Code that runs per device (inside :func:`map_workers`)
therefore always sees a block ``x_K`` of local workers, and the only collective
the DiLoCo family needs, the mean over all K workers, is a local mean over the
block followed by ``lax.pmean`` over the mesh axis (:func:`worker_mean`).

The mesh may also have model axes, ``fsdp`` and ``tensor``, over which each
worker's arrays are split (a worker spans ``fsdp × tensor`` devices). Only
``replica`` is mapped by hand; the compiler shards the model axes
(``jax.shard_map(..., axis_names={'replica'})`` over a mesh of automatic axis
types). Where each array goes on them is ``layout.py``'s.

Why blocks rather than a ``vmap`` axis name: under JAX's varying-manual-axes
checks a collective cannot yet name a ``vmap`` axis and a ``shard_map`` mesh axis
together, and a block with an explicit local mean keeps the same code path for 1
and for K workers per device.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

REPLICA = "replica"
#: The model axes (``layout.py``): parameters and batch split over ``fsdp``,
#: heads, MLP width and vocabulary over ``tensor``.
FSDP = "fsdp"
TENSOR = "tensor"
AXES = (REPLICA, FSDP, TENSOR)

#: Partition spec of a per-worker array (leading K axis split over the mesh).
WORKERS = P(REPLICA)
#: Partition spec of a replicated value (the same on every device).
REPLICATED = P()


def make_mesh(
    num_workers: int,
    num_devices: int = 0,
    devices: list | None = None,
    fsdp: int = 1,
    tensor: int = 1,
) -> Mesh:
  """The ``replica × fsdp × tensor`` mesh over the devices that hold K workers.

  The replica axis takes what the model axes leave: ``R = D / (fsdp · tensor)``
  of the ``D`` devices, each row of ``fsdp · tensor`` consecutive devices one
  block of ``K / R`` workers (consecutive devices: a worker stays within a
  host when a host's devices are a multiple of ``fsdp · tensor``). Every axis
  is of automatic type: ``map_workers`` maps ``replica`` by hand, the
  compiler shards the model axes. With ``fsdp = tensor = 1`` the mesh is the
  one-axis ``replica`` mesh it always was: a mesh with model axes of size 1
  compiles to other code, whose float results differ in the last bits
  (``experiments.fingerprint``).

  Args:
    num_workers: K, the number of simulated workers.
    num_devices: how many devices to use; 0 means all that JAX sees
      (``jax.devices()``, every process's devices in a multi-process run).
    devices: explicit device list (overrides ``num_devices``).
    fsdp: devices each worker's parameters, optimizer state and batch are
      split over (``config.mesh.fsdp``).
    tensor: devices each worker's heads, MLP width and vocabulary are split
      over (``config.mesh.tensor``).

  Raises:
    ValueError: K < 1, more devices asked for than exist, a device count that
      ``fsdp · tensor`` does not divide, or K not divisible by the replica
      axis (each replica device row must hold the same number of workers).
  """
  if num_workers < 1:
    raise ValueError(f"num_workers must be >= 1, got {num_workers}")
  for name, size in (("fsdp", fsdp), ("tensor", tensor)):
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
      raise ValueError(f"mesh.{name} must be a positive int, got {size!r}")
  if devices is None:
    available = jax.devices()
    if num_devices < 0 or num_devices > len(available):
      raise ValueError(f"num_devices={num_devices} but JAX sees {len(available)} devices")
    devices = available[:num_devices] if num_devices else available
  model = fsdp * tensor
  if len(devices) % model:
    raise ValueError(
        f"{len(devices)} devices cannot be split into workers of mesh.fsdp={fsdp} "
        f"x mesh.tensor={tensor} = {model} devices each"
    )
  rows = len(devices) // model
  if num_workers % rows:
    raise ValueError(
        f"num_workers={num_workers} is not divisible by the device count {rows} of "
        f"the replica axis ({len(devices)} devices / {model} per worker): every "
        f"device row must hold the same number of workers (set num_devices to a "
        f"divisor of num_workers times {model})"
    )
  if model == 1:
    return Mesh(np.asarray(devices), (REPLICA,))
  grid = np.asarray(devices).reshape(rows, fsdp, tensor)
  return Mesh(grid, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def replica_rows(mesh: Mesh) -> int:
  """``R``, the devices of the replica axis (each holds a block of workers)."""
  return mesh.shape[REPLICA]


def model_size(mesh: Mesh) -> int:
  """Devices each worker spans, ``fsdp · tensor`` (1: a worker per device)."""
  return mesh.size // replica_rows(mesh)


def traced_model_axes() -> tuple[str, ...]:
  """The model axes of the mesh being traced that the compiler places (not
  mapped by hand) and that have more than one device: ``()`` outside a mesh,
  when a worker is one device, or inside a ``shard_map`` over them."""
  mesh = jax.sharding.get_abstract_mesh()
  if not mesh.axis_names:
    return ()
  sizes, auto = dict(mesh.shape), set(mesh.auto_axes)
  return tuple(a for a in (FSDP, TENSOR) if a in auto and sizes.get(a, 1) > 1)


def tokens_spec(mesh: Mesh) -> P:
  """Partition spec of staged batches ``tokens_KxCxBxL1``: workers over
  ``replica``, each worker's ``B`` sequences over ``fsdp``."""
  if mesh.shape.get(FSDP, 1) > 1:
    return P(REPLICA, None, FSDP)
  return WORKERS


def put(tree: Any, shardings: Any, may_alias: bool | None = None) -> Any:
  """Places host (or single-device) values with the given shardings.

  In a single process this is ``jax.device_put``. With several processes each
  one holds the same host values (same seed, same data reader) and transfers
  only the slices its own devices hold (``jax.make_array_from_callback``), so
  a process feeds only its own workers.
  """
  if jax.process_count() == 1:
    return jax.device_put(tree, shardings, may_alias=may_alias)

  def one(x, sharding):
    host = np.asarray(x)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

  # ``shardings`` may be a prefix of ``tree`` (one sharding for a whole subtree).
  return jax.tree.map(
      lambda sharding, subtree: jax.tree.map(lambda x: one(x, sharding), subtree),
      shardings,
      tree,
      is_leaf=lambda x: isinstance(x, jax.sharding.Sharding),
  )


def put_workers(tree_K: Any, mesh: Mesh) -> Any:
  """Places a per-worker pytree (leading K axis) on the mesh, K split over devices."""
  return put(tree_K, NamedSharding(mesh, WORKERS))


def local_workers(mesh: Mesh, num_workers: int) -> list[int]:
  """The workers held by this process's devices (all K in a single process):
  worker ``r·b + j`` is row ``j`` of the ``r``-th replica row's block of
  ``b = K/R``; a row is this process's when any of its devices is."""
  b = num_workers // replica_rows(mesh)
  me = jax.process_index()
  rows = mesh.devices.reshape(replica_rows(mesh), -1)
  return [
      r * b + j
      for r, row in enumerate(rows)
      if any(device.process_index == me for device in row)
      for j in range(b)
  ]


def put_local_workers(local_K: np.ndarray, mesh: Mesh, spec: P = WORKERS) -> jax.Array:
  """Places the rows of this process's workers (``local_workers`` order) as one
  global per-worker array with ``spec`` (default: workers over ``replica``);
  every process passes its own rows."""
  sharding = NamedSharding(mesh, spec)
  if jax.process_count() == 1:
    return jax.device_put(local_K, sharding)
  rows = replica_rows(mesh)
  mine = len(local_workers(mesh, rows)) or 1
  global_shape = (local_K.shape[0] * rows // mine,) + local_K.shape[1:]
  return jax.make_array_from_process_local_data(sharding, local_K, global_shape)


def put_replicated(tree: Any, mesh: Mesh) -> Any:
  """Places a pytree on every device of the mesh."""
  return put(tree, NamedSharding(mesh, REPLICATED))


def stack_workers(tree: Any, num_workers: int) -> Any:
  """K identical copies of ``tree`` along a new leading axis."""
  return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_workers,) + jnp.shape(x)), tree)


def map_workers(fn: Callable, mesh: Mesh, in_specs: Any, out_specs: Any) -> Callable:
  """Runs ``fn`` on each device's block of workers (``jax.shard_map``).

  ``fn`` receives per-worker arguments with a leading axis of ``K / R`` local
  workers; collectives inside it go through :func:`worker_mean`. Only
  ``replica`` is mapped by hand: arrays inside keep their model axes, which
  the compiler shards.
  """
  return jax.shard_map(
      fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs, axis_names={REPLICA},
      check_vma=not _one_row_of_many(mesh),
  )


def _one_row_of_many(mesh: Any) -> bool:
  """A replica axis of one row and model axes of several devices: there JAX
  (0.10.2) lowers ``shard_map``'s body without a manual region (all manual
  axes are of size 1) but still emits each ``psum`` as an all-reduce, which
  XLA's SPMD partitioner then rejects ("Cross-partition allreduce must be in
  (partial) manual partitioning mode"). So on such a mesh :func:`psum` and
  :func:`pmean` are the identity they are on one row, and ``shard_map`` does
  not check the replication that an identity cannot declare."""
  return dict(mesh.shape).get(REPLICA, 1) == 1 and mesh.size > 1


def psum(x: Any) -> Any:
  """``lax.psum`` over ``replica`` (the identity on one row of a mesh with
  model axes: :func:`_one_row_of_many`)."""
  if _one_row_of_many(jax.sharding.get_abstract_mesh()):
    return x
  return lax.psum(x, REPLICA)


def pmean(x: Any) -> Any:
  """``lax.pmean`` over ``replica`` (the identity on one row of a mesh with
  model axes: :func:`_one_row_of_many`)."""
  if _one_row_of_many(jax.sharding.get_abstract_mesh()):
    return x
  return lax.pmean(x, REPLICA)


def worker_mean(tree_K: Any) -> Any:
  """Mean over all K workers of a per-worker pytree, inside :func:`map_workers`.

  .. math:: \\bar{x} = \\frac{1}{K} \\sum_{k=1}^{K} x_k

  computed as the mean over the device's block, then ``lax.pmean`` over the
  ``replica`` mesh axis (blocks are equal-sized, so a mean of means is exact up
  to float rounding). This is the one all-reduce of the DiLoCo family.
  """
  return jax.tree.map(lambda x: pmean(jnp.mean(x, axis=0)), tree_K)


def worker_mean_unrolled(tree_K: Any) -> Any:
  """:func:`worker_mean`'s value with the block's workers added one by one, for
  measurements that no update reads (monitoring).

  XLA on CPU reduces over a leading axis of a few rows much more slowly than it
  adds the rows as separate arrays: the ``study`` model's 8 workers, 12.8 ms
  against 0.8 ms, and GASLoC's sync 31 ms against 7.5 ms with its monitoring
  on each (``benchmarks/worker_mean.py``, ``docs/worker_mean.json``). The two round
  differently, the sum's order depending on the shape, so every mean a training
  step uses stays on :func:`worker_mean`, whose rounding the committed runs
  have; this one serves the gossip methods' move statistics and spread.
  """

  def mean(x):
    total = x[0]
    for i in range(1, x.shape[0]):
      total = total + x[i]
    return pmean(total / x.shape[0])

  return jax.tree.map(mean, tree_K)


def worker_weighted_mean(tree_K: Any, weights_K: jax.Array) -> Any:
  r"""Weighted mean over all K workers, inside :func:`map_workers`.

  .. math:: \bar{x} = \sum_k w_k x_k \Big/ \sum_k w_k

  With 0/1 weights this is the mean over the workers present in a round
  (DiLoCo's robustness to workers leaving). The caller keeps ``Σ w > 0``.
  """
  total = psum(jnp.sum(weights_K))

  def mean(x_K):
    w = weights_K.reshape((-1,) + (1,) * (x_K.ndim - 1)).astype(x_K.dtype)
    return psum(jnp.sum(w * x_K, axis=0)) / total.astype(x_K.dtype)

  return jax.tree.map(mean, tree_K)


def sq_norm(tree: Any) -> jax.Array:
  """Squared L2 norm of a pytree, ``Σ x²`` over every leaf."""
  return sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree))


def sq_norm_K(tree_K: Any) -> jax.Array:
  """Per-worker squared norms ``[K]`` of a per-worker pytree."""
  return sum(leaf_sq_norm_K(x) for x in jax.tree.leaves(tree_K))


def leaf_sq_norm_K(x_K: jax.Array) -> jax.Array:
  """``Σ x²`` of each worker's row of one leaf, ``[K]``: over the flattened row,
  or, on a mesh with model axes, over the row's own axes, so that a leaf split
  over a model axis is not gathered to be flattened (the same sum; the
  flattened form keeps the programs of a mesh without model axes as they
  were)."""
  if traced_model_axes():
    return jnp.sum(jnp.square(x_K), axis=tuple(range(1, x_K.ndim)))
  return jnp.sum(jnp.square(x_K).reshape(x_K.shape[0], -1), axis=1)


def broadcast_block(tree: Any, like_K: Any) -> Any:
  """Repeats a worker-invariant pytree across the local block of ``like_K``."""
  k = jax.tree.leaves(like_K)[0].shape[0]
  return stack_workers(tree, k)
