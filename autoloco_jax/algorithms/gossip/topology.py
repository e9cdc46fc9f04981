"""Who talks to whom: communication graphs on the replica axis, and their mixing.

A topology is a pool of *neighbour tables*. A table ``nbr_DxK`` (``d`` rows of
``K`` worker ids) says that in this round worker ``k`` exchanges with workers
``nbr_DxK[0, k], …, nbr_DxK[d-1, k]``; every row is a permutation of the ``K``
workers, so one row is one message per worker. Static graphs (ring, torus,
exponential, complete) have a pool of one table. Random perfect matchings (and,
more generally, random partitions into groups of ``g``) have a pool of ``N``
tables drawn once from the seed; round ``t`` uses table
``pool_index(seed, t, N)``, a 32-bit integer hash that the host and every device
compute identically, so all workers agree on the round's matching without
talking.

Mixing on the mesh (inside :func:`replicas.map_workers`). Each device holds a
block of ``b = K / D`` workers, worker ``k = d·b + j`` at row ``j`` of device
``d``. Gathering ``x[π(k)]`` for a static permutation ``π`` is planned on the
host: rows whose source lives on the same device come from a local gather; the
rows that cross devices form a bipartite multigraph between devices of degree at
most ``b``, which is edge-coloured with at most ``b`` colours (König). Each
colour is one ``lax.ppermute`` of a *single row* per device. So every worker's
parameters cross the network exactly once per neighbour, as on a real cluster,
and there is no all-gather. With ``D = 1`` every row is local and the same code
is a plain gather. A round's table is selected by ``lax.switch`` on the pool
index; the branches differ only in their static plans. The complete graph is an
all-reduce (:func:`replicas.worker_mean`).

Graph quantities, with ``N(k)`` the neighbours of ``k`` and ``d`` the degree:

.. math::

  \\mathrm{nsum}(y)_k = \\sum_{j \\in N(k)} y_j, \\qquad
  (Λ y)_k = d\\, y_k − \\mathrm{nsum}(y)_k, \\qquad
  \\mathrm{nmean}(y)_k = \\frac{y_k + \\mathrm{nsum}(y)_k}{d + 1}.

``Λ`` is the combinatorial Laplacian ``D − A`` of the round's active edges; for
a matching ``nmean`` is the pair average, for groups of ``g`` the group mean.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from autoloco_jax import ranges
from autoloco_jax.runtime import replicas

TOPOLOGIES = ("matching", "groups", "ring", "torus", "exponential", "complete")
_MASK32 = 0xFFFFFFFF


class Topology(NamedTuple):
  """A communication graph over ``K`` workers, possibly changing every round.

  Attributes:
    name: one of :data:`TOPOLOGIES`.
    num_workers: ``K``.
    pool_NxDxK: ``N`` neighbour tables of ``d`` permutations each (int32);
      round ``t`` uses table ``pool_index(seed, t, N)``.
    seed: the seed the pool and the per-round choice derive from.
    complete: the complete graph; mixing is then an all-reduce.
  """

  name: str
  num_workers: int
  pool_NxDxK: np.ndarray
  seed: int
  complete: bool = False

  @property
  def degree(self) -> int:
    """Neighbours per worker per round (the graphs here are regular)."""
    return self.pool_NxDxK.shape[1]

  @property
  def pool_size(self) -> int:
    return self.pool_NxDxK.shape[0]

  def index(self, round_index: int) -> int:
    """Which pool table round ``round_index`` uses (host side)."""
    return pool_index(self.seed, round_index, self.pool_size)

  def neighbors(self, round_index: int) -> np.ndarray:
    """The ``d × K`` neighbour table of a round (host side)."""
    return self.pool_NxDxK[self.index(round_index)]

  def adjacency(self, round_index: int) -> np.ndarray:
    """``K × K`` 0/1 adjacency of the round's active edges."""
    k = self.num_workers
    a = np.zeros((k, k), np.int64)
    for row in self.neighbors(round_index):
      a[np.arange(k), row] += 1
    return a

  def laplacian(self, round_index: int) -> np.ndarray:
    """``Λ = D − A`` of the round's active edges (host side, float64)."""
    a = self.adjacency(round_index).astype(np.float64)
    return np.diag(a.sum(1)) - a


# ----------------------------------------------------------------------------
# Choosing a round's table: the same 32-bit hash on the host and on device.


def _fmix32_py(x: int) -> int:
  x ^= x >> 16
  x = (x * 0x85EBCA6B) & _MASK32
  x ^= x >> 13
  x = (x * 0xC2B2AE35) & _MASK32
  return x ^ (x >> 16)


def pool_index(seed: int, round_index: Any, pool_size: int) -> Any:
  """Index in ``[0, pool_size)`` of round ``round_index``'s table.

  MurmurHash3's 32-bit finaliser of ``round · φ32 + seed · c``: a Python int
  for host ints, a traced uint32 computation (same bits) for JAX values.
  """
  if pool_size == 1:
    return 0 if isinstance(round_index, (int, np.integer)) else jnp.zeros((), jnp.int32)
  if isinstance(round_index, (int, np.integer)):
    x = (int(round_index) * 0x9E3779B1 + int(seed) * 0x85EBCA77 + 0x165667B1) & _MASK32
    return _fmix32_py(x) % pool_size
  x = jnp.asarray(round_index).astype(jnp.uint32) * jnp.uint32(0x9E3779B1) + jnp.uint32(
      (int(seed) * 0x85EBCA77 + 0x165667B1) & _MASK32
  )
  x = x ^ (x >> 16)
  x = x * jnp.uint32(0x85EBCA6B)
  x = x ^ (x >> 13)
  x = x * jnp.uint32(0xC2B2AE35)
  x = x ^ (x >> 16)
  return (x % jnp.uint32(pool_size)).astype(jnp.int32)


# ----------------------------------------------------------------------------
# Graph builders (host side, numpy).


def _dedupe(perms: list[np.ndarray], k: int) -> np.ndarray:
  """Drops identity and repeated permutations (e.g. ``+1`` and ``−1`` on 2 workers)."""
  out, seen = [], set()
  for p in perms:
    p = np.asarray(p, np.int32)
    key = p.tobytes()
    if np.array_equal(p, np.arange(k)) or key in seen:
      continue
    seen.add(key)
    out.append(p)
  return np.stack(out) if out else np.zeros((0, k), np.int32)


def _group_table(order: np.ndarray, group_size: int) -> np.ndarray:
  """Neighbour table of a partition: consecutive entries of ``order`` form groups;
  row ``s`` sends each member to the one ``s`` places further round its group."""
  k = len(order)
  groups = order.reshape(k // group_size, group_size)
  table = np.empty((group_size - 1, k), np.int32)
  for s in range(1, group_size):
    table[s - 1, groups] = np.roll(groups, -s, axis=1)
  return table


def _canonical(table: np.ndarray) -> bytes:
  return np.sort(table, axis=0).tobytes()


def groups(num_workers: int, group_size: int, seed: int, pool_size: int) -> Topology:
  """Random partitions of the workers into groups of ``group_size``.

  ``group_size = 2`` is a random perfect matching (NoLoCo's pairs). The pool
  holds ``pool_size`` distinct partitions drawn from ``seed`` (all of them when
  there are fewer, e.g. the 3 matchings of 4 workers).
  """
  if group_size < 2 or num_workers % group_size:
    raise ValueError(
        f"groups of {group_size} cannot partition {num_workers} workers: the group "
        f"size must be >= 2 and divide num_workers"
        + (
            " (a perfect matching needs an even number of workers)"
            if group_size == 2
            else ""
        )
    )
  if pool_size < 1:
    raise ValueError(f"pool_size must be >= 1, got {pool_size}")
  rng = np.random.default_rng(seed)
  tables, seen = [], set()
  for _ in range(50 * pool_size):
    t = _group_table(rng.permutation(num_workers), group_size)
    key = _canonical(t)
    if key not in seen:
      seen.add(key)
      tables.append(t)
      if len(tables) == pool_size:
        break
  name = "matching" if group_size == 2 else "groups"
  return Topology(name, num_workers, np.stack(tables), seed)


def ring(num_workers: int) -> Topology:
  """Each worker talks to ``k ± 1 (mod K)``."""
  k = np.arange(num_workers)
  table = _dedupe([(k + 1) % num_workers, (k - 1) % num_workers], num_workers)
  return Topology("ring", num_workers, table[None], 0)


def torus_shape(num_workers: int) -> tuple[int, int]:
  """The most square ``rows × cols = K`` (rows <= cols)."""
  rows = max(r for r in range(1, math.isqrt(num_workers) + 1) if num_workers % r == 0)
  return rows, num_workers // rows


def torus(num_workers: int) -> Topology:
  """2-D torus on the most square grid: up, down, left, right with wrap-around
  (a 1 × K grid is a ring; duplicate neighbours on 2-wide sides count once)."""
  rows, cols = torus_shape(num_workers)
  r, c = np.divmod(np.arange(num_workers), cols)
  perms = [
      ((r + dr) % rows) * cols + (c + dc) % cols
      for dr, dc in ((1, 0), (-1, 0), (0, 1), (0, -1))
  ]
  return Topology("torus", num_workers, _dedupe(perms, num_workers)[None], 0)


def exponential(num_workers: int) -> Topology:
  """Static exponential graph: ``k ± 2^i (mod K)`` for ``2^i < K``, undirected.

  Degree ``O(log K)`` and a spectral gap that does not vanish with ``K`` (Ying et
  al. 2021, arXiv 2110.13363)."""
  k = np.arange(num_workers)
  perms = []
  i = 1
  while i < num_workers:
    perms += [(k + i) % num_workers, (k - i) % num_workers]
    i *= 2
  return Topology("exponential", num_workers, _dedupe(perms, num_workers)[None], 0)


def complete(num_workers: int) -> Topology:
  """Everyone with everyone; mixing is the all-reduce of the DiLoCo family."""
  k = np.arange(num_workers)
  perms = [(k + s) % num_workers for s in range(1, num_workers)]
  return Topology(
      "complete", num_workers, _dedupe(perms, num_workers)[None], 0, complete=True
  )


def make(
    name: str, num_workers: int, *, seed: int, group_size: int, pool_size: int
) -> Topology:
  """The topology named ``name`` (one of :data:`TOPOLOGIES`); ``seed``,
  ``group_size`` and ``pool_size`` act on the random ones (``matching``,
  ``groups``). Their defaults are ``config.gossip``'s (``configs/common.py``)."""
  builders: dict[str, Callable[[], Topology]] = {
      "matching": lambda: groups(num_workers, 2, seed, pool_size),
      "groups": lambda: groups(num_workers, group_size, seed, pool_size),
      "ring": lambda: ring(num_workers),
      "torus": lambda: torus(num_workers),
      "exponential": lambda: exponential(num_workers),
      "complete": lambda: complete(num_workers),
  }
  if name not in builders:
    raise ValueError(f"unknown topology {name!r}; choose one of {list(TOPOLOGIES)}")
  if num_workers < 1:
    raise ValueError(f"num_workers must be >= 1, got {num_workers}")
  return builders[name]()


def from_config(config: Any) -> Topology:
  """The topology of ``config.gossip`` (``topology``, ``group_size``,
  ``pool_size``; read here and nowhere else, their ranges checked here) over
  ``config.num_workers`` workers, seeded by ``config.seed``."""
  g = config.gossip
  for name in ("group_size", "pool_size"):
    ranges.check(f"gossip.{name}", g[name])
  return make(
      g.topology,
      config.num_workers,
      seed=int(config.seed),
      group_size=int(g.group_size),
      pool_size=int(g.pool_size),
  )


# ----------------------------------------------------------------------------
# Moving rows between devices: the static plan of one permutation.


class _Plan(NamedTuple):
  """How device ``d`` builds rows ``x[π(k)]`` of its block (all tables ``D × …``).

  local_src: row of the device's own block each output row starts from (its
    source when that is local, else itself as a placeholder).
  colours: one entry per ``ppermute``: ``(pairs, send_row_D, recv_row_D,
    recv_mask_D)``: device pairs ``(src, dst)``, the row each device sends, the
    row it fills, and whether it receives in this colour.
  """

  local_src: np.ndarray
  colours: tuple


def _edge_colour(edges: list[tuple[int, int]]) -> list[int]:
  """Colours the edges ``(src, dst)`` of a bipartite multigraph with max-degree
  colours so that no two edges sharing an endpoint on the same side share a
  colour (König's theorem, by alternating-path swaps)."""
  at_src: dict[int, dict[int, int]] = {}
  at_dst: dict[int, dict[int, int]] = {}
  colour = [-1] * len(edges)

  def free(table, node):
    used = table.get(node, {})
    c = 0
    while c in used:
      c += 1
    return c

  for e, (u, v) in enumerate(edges):
    a, b = free(at_src, u), free(at_dst, v)
    if a in at_dst.get(v, {}):
      # Swap colours a/b along the path from v that alternates a, b, a, …; it
      # cannot reach u (u lacks a), so afterwards a is free at both ends.
      path, side, node, c = [], "dst", v, a
      while True:
        table = at_dst if side == "dst" else at_src
        f = table.get(node, {}).get(c)
        if f is None:
          break
        path.append(f)
        su, sv = edges[f]
        side, node = ("src", su) if side == "dst" else ("dst", sv)
        c = b if c == a else a
      for f in path:
        su, sv = edges[f]
        del at_src[su][colour[f]], at_dst[sv][colour[f]]
      for f in path:
        su, sv = edges[f]
        colour[f] = b if colour[f] == a else a
        at_src[su][colour[f]] = f
        at_dst[sv][colour[f]] = f
    colour[e] = a
    at_src.setdefault(u, {})[a] = e
    at_dst.setdefault(v, {})[a] = e
  return colour


@functools.lru_cache(maxsize=None)
def _plan_cached(perm_bytes: bytes, num_workers: int, num_devices: int) -> _Plan:
  perm = np.frombuffer(perm_bytes, np.int32)
  b = num_workers // num_devices
  local_src = np.tile(np.arange(b, dtype=np.int32), (num_devices, 1))
  cross = []  # (src_dev, dst_dev, src_row, dst_row)
  for k in range(num_workers):
    dst_dev, dst_row = divmod(k, b)
    src_dev, src_row = divmod(int(perm[k]), b)
    if src_dev == dst_dev:
      local_src[dst_dev, dst_row] = src_row
    else:
      cross.append((src_dev, dst_dev, src_row, dst_row))
  colours = _edge_colour([(s, d) for s, d, _, _ in cross])
  plans = []
  for c in range(max(colours, default=-1) + 1):
    pairs, send = [], np.zeros(num_devices, np.int32)
    recv, mask = np.zeros(num_devices, np.int32), np.zeros(num_devices, bool)
    for (s, d, sr, dr), ce in zip(cross, colours):
      if ce == c:
        pairs.append((s, d))
        send[s], recv[d], mask[d] = sr, dr, True
    plans.append((tuple(pairs), send, recv, mask))
  return _Plan(local_src, tuple(plans))


def plan(perm_K: np.ndarray, num_devices: int) -> _Plan:
  """The static plan that gathers ``x[perm_K[k]]`` on ``num_devices`` devices."""
  perm_K = np.asarray(perm_K, np.int32)
  k = len(perm_K)
  if num_devices < 1 or k % num_devices:
    raise ValueError(f"{k} workers cannot be split over {num_devices} devices")
  return _plan_cached(perm_K.tobytes(), k, num_devices)


def gather_workers(tree_K: Any, perm_K: np.ndarray, num_workers: int) -> Any:
  """``out[k] = x[perm_K[k]]`` over all K workers, inside ``map_workers``.

  Local rows by a local gather, the others by one single-row ``ppermute`` per
  colour of the plan: each worker's row crosses the network once.
  """
  b = jax.tree.leaves(tree_K)[0].shape[0]
  if b == num_workers:  # one device: every row is local
    perm = np.asarray(perm_K, np.int32)
    return jax.tree.map(lambda x: x[perm], tree_K)
  p = plan(perm_K, num_workers // b)
  dev = lax.axis_index(replicas.REPLICA)
  local_src = jnp.asarray(p.local_src)[dev]
  out = jax.tree.map(lambda x: x[local_src], tree_K)
  for pairs, send, recv, mask in p.colours:
    s, r, m = jnp.asarray(send)[dev], jnp.asarray(recv)[dev], jnp.asarray(mask)[dev]
    rows = jax.tree.map(lambda x: x[s], tree_K)
    got = lax.ppermute(rows, replicas.REPLICA, perm=list(pairs))
    out = jax.tree.map(lambda o, g: o.at[r].set(jnp.where(m, g, o[r])), out, got)
  return out


# ----------------------------------------------------------------------------
# Mixing operations (inside map_workers; ``round_index`` is a replicated scalar).


def _switch(topo: Topology, round_index: Any, fn: Callable, tree_K: Any) -> Any:
  """``fn(table_DxK, tree_K)`` for the round's table, by ``lax.switch``."""
  if topo.pool_size == 1:
    return fn(topo.pool_NxDxK[0], tree_K)
  branches = [functools.partial(fn, t) for t in topo.pool_NxDxK]
  return lax.switch(pool_index(topo.seed, round_index, topo.pool_size), branches, tree_K)


def neighbor_sum(topo: Topology, tree_K: Any, round_index: Any) -> Any:
  """``Σ_{j ∈ N(k)} y_j`` for each local worker ``k``."""
  if topo.complete:
    total = jax.tree.map(lambda m: m * topo.num_workers, replicas.worker_mean(tree_K))
    return jax.tree.map(lambda t, y: t[None] - y, total, tree_K)

  def nsum(table, y_K):
    parts = [gather_workers(y_K, row, topo.num_workers) for row in table]
    return jax.tree.map(lambda *xs: sum(xs[1:], xs[0]), *parts)

  return _switch(topo, round_index, nsum, tree_K)


def laplacian(topo: Topology, tree_K: Any, round_index: Any) -> Any:
  """``(Λ y)_k = d y_k − Σ_{j ∈ N(k)} y_j``; on the complete graph ``K (y_k − ȳ)``."""
  if topo.complete:
    mean = replicas.worker_mean(tree_K)
    return jax.tree.map(lambda y, m: topo.num_workers * (y - m[None]), tree_K, mean)
  d = topo.degree
  return jax.tree.map(
      lambda y, s: d * y - s, tree_K, neighbor_sum(topo, tree_K, round_index)
  )


def neighborhood_mean(topo: Topology, tree_K: Any, round_index: Any) -> Any:
  """``(y_k + Σ_{j ∈ N(k)} y_j) / (d + 1)``: the pair (group) mean for matchings
  and groups, the all-reduce mean on the complete graph."""
  if topo.complete:
    return replicas.broadcast_block(replicas.worker_mean(tree_K), tree_K)
  d = topo.degree
  return jax.tree.map(
      lambda y, s: (y + s) / (d + 1), tree_K, neighbor_sum(topo, tree_K, round_index)
  )


def spread(tree_K: Any) -> jax.Array:
  """``mean_k ‖x_k − mean_j x_j‖`` (a scalar, inside ``map_workers``).

  Monitoring only: it all-reduces the parameters, which a real decentralized
  deployment would not do (the simulation has them at hand).
  """
  mean = replicas.worker_mean_unrolled(tree_K)
  sq_K = sum(
      replicas.leaf_sq_norm_K(x - m[None])
      for x, m in zip(jax.tree.leaves(tree_K), jax.tree.leaves(mean))
  )
  return replicas.worker_mean(jnp.sqrt(sq_K))
