"""Topologies and their mixing on the replica axis.

Specifications: every random matching is a perfect matching, the same on every
worker, a function of (seed, round) only, and changes from round to round; the
static graphs have the degrees and Laplacians their definitions give; the
ppermute mixing on 4 (or 2) devices equals the same mixing on one device and a
numpy reference, without any all-gather.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from autoloco_jax.algorithms.gossip import topology
from autoloco_jax.runtime import replicas


def assert_perfect_matching(partner):
  k = len(partner)
  assert sorted(partner) == list(range(k))  # a permutation
  assert np.all(partner != np.arange(k))  # nobody alone
  np.testing.assert_array_equal(partner[partner], np.arange(k))  # symmetric pairs


@pytest.mark.parametrize("k", [2, 4, 8, 16])
def test_every_matching_is_perfect(k):
  topo = topology.groups(k, 2, seed=5, pool_size=16)
  assert topo.degree == 1
  for table in topo.pool_NxDxK:
    assert_perfect_matching(table[0])
  for r in range(30):
    assert_perfect_matching(topo.neighbors(r)[0])
    lap = topo.laplacian(r)
    np.testing.assert_array_equal(lap.sum(1), 0)
    np.testing.assert_array_equal(np.diag(lap), 1)


def test_matchings_are_deterministic_by_seed_and_round_and_vary():
  a, b = topology.groups(8, 2, seed=3, pool_size=16), topology.groups(
      8, 2, seed=3, pool_size=16
  )
  other = topology.groups(8, 2, seed=4, pool_size=16)
  for r in range(20):
    np.testing.assert_array_equal(a.neighbors(r), b.neighbors(r))
  seq = lambda t: [t.neighbors(r)[0].tobytes() for r in range(20)]
  assert len(set(seq(a))) >= 8  # varies across rounds
  assert seq(a) != seq(other)  # depends on the seed
  # 4 workers have exactly 3 perfect matchings: the pool holds all of them,
  # and 12 rounds visit more than one.
  four = topology.groups(4, 2, seed=0, pool_size=16)
  assert four.pool_size == 3
  assert len({four.neighbors(r).tobytes() for r in range(12)}) >= 2


def test_round_index_is_the_same_on_host_and_on_every_device():
  topo = topology.groups(8, 2, seed=11, pool_size=16)
  mesh = replicas.make_mesh(8, 4)

  def block(ids_K, r):
    # Each worker reports the table index it computed and its partner's id.
    idx = topology.pool_index(topo.seed, r, topo.pool_size)
    partner_K = topology.neighbor_sum(topo, ids_K, r)
    return jnp.broadcast_to(idx, ids_K.shape), partner_K

  f = jax.jit(
      replicas.map_workers(
          block,
          mesh,
          (replicas.WORKERS, replicas.REPLICATED),
          (replicas.WORKERS, replicas.WORKERS),
      )
  )
  ids = replicas.put_workers(jnp.arange(8, dtype=jnp.int32), mesh)
  for r in [0, 1, 2, 7, 123, 2**31 - 1]:
    idx_K, partner_K = f(ids, jnp.int32(r))
    assert set(np.asarray(idx_K).tolist()) == {topo.index(r)}  # identical everywhere
    np.testing.assert_array_equal(partner_K, topo.neighbors(r)[0])


@pytest.mark.parametrize(
    "name,k,degree",
    [
        ("ring", 8, 2),
        ("ring", 2, 1),
        ("torus", 8, 3),
        ("torus", 16, 4),
        ("torus", 5, 2),
        ("exponential", 8, 5),
        ("exponential", 4, 3),
        ("complete", 6, 5),
    ],
)
def test_static_graphs(name, k, degree):
  topo = topology.make(name, k, seed=0, group_size=2, pool_size=16)
  assert topo.pool_size == 1 and topo.degree == degree
  a = topo.adjacency(0)
  np.testing.assert_array_equal(a, a.T)  # undirected
  assert set(np.unique(a)) <= {0, 1} and np.all(np.diag(a) == 0)
  np.testing.assert_array_equal(a.sum(1), degree)  # regular
  lap = topo.laplacian(0)
  eig = np.linalg.eigvalsh(lap)
  assert abs(eig[0]) < 1e-9 and eig[1] > 1e-9  # connected
  # α = 1/(d+1) makes I − αΛ doubly stochastic with non-negative entries.
  w = np.eye(k) - lap / (degree + 1)
  np.testing.assert_allclose(w.sum(0), 1)  # columns
  np.testing.assert_allclose(w.sum(1), 1)  # rows
  assert np.all(w >= 0)


def test_torus_neighbours_and_shape():
  assert topology.torus_shape(16) == (4, 4) and topology.torus_shape(8) == (2, 4)
  nbrs = set(topology.torus(16).neighbors(0)[:, 5].tolist())
  assert nbrs == {1, 9, 4, 6}  # (1,1): up, down, left, right


def reference(topo, x, r, op):
  s = sum(x[row] for row in topo.neighbors(r))
  d = topo.degree
  return {"nsum": s, "laplacian": d * x - s, "mean": (x + s) / (d + 1)}[op]


OPS = {
    "nsum": topology.neighbor_sum,
    "laplacian": topology.laplacian,
    "mean": topology.neighborhood_mean,
}


def mixed(topo, tree, devices, rounds, op):
  mesh = replicas.make_mesh(topo.num_workers, devices)
  f = jax.jit(
      replicas.map_workers(
          lambda t, r: OPS[op](topo, t, r),
          mesh,
          (replicas.WORKERS, replicas.REPLICATED),
          replicas.WORKERS,
      )
  )
  return [
      jax.device_get(f(replicas.put_workers(tree, mesh), jnp.int32(r))) for r in rounds
  ]


@pytest.mark.parametrize(
    "topo,op",
    [
        (topology.groups(4, 2, seed=2, pool_size=16), "mean"),
        (topology.groups(8, 2, seed=2, pool_size=4), "laplacian"),
        (topology.groups(8, 4, seed=1, pool_size=3), "mean"),
        (topology.ring(8), "laplacian"),
        (topology.torus(8), "laplacian"),
        (topology.exponential(8), "nsum"),
        (topology.complete(4), "laplacian"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_sharded_mixing_equals_single_device_and_numpy(topo, op):
  k = topo.num_workers
  rng = np.random.default_rng(0)
  tree = {
      "w": rng.normal(size=(k, 3, 2)).astype(np.float32),
      "b": rng.normal(size=(k,)).astype(np.float32),
  }
  rounds = [0, 1, 5]
  one = mixed(topo, tree, 1, rounds, op)
  for devices in sorted({2, 4} & {d for d in (2, 4) if k % d == 0}):
    many = mixed(topo, tree, devices, rounds, op)
    for a, b in zip(one, many):
      chex.assert_trees_all_close(a, b, rtol=1e-6, atol=1e-6)
  for r, out in zip(rounds, one):
    for key in tree:
      np.testing.assert_allclose(
          out[key], reference(topo, tree[key], r, op), rtol=1e-5, atol=1e-5
      )


def test_matching_sends_one_row_per_device_and_never_all_gathers():
  # 8 workers on 4 devices (2 per device): each table needs at most 2 single-row
  # ppermutes; the program holds no all-gather or all-reduce of the parameters.
  topo = topology.groups(8, 2, seed=0, pool_size=16)
  for table in topo.pool_NxDxK:
    p = topology.plan(table[0], 4)
    assert len(p.colours) <= 2
    moved = sum(len(pairs) for pairs, *_ in p.colours)
    local = sum(int(table[0][k] // 2 == k // 2) for k in range(8))
    assert moved + local == 8  # every row exactly once
  mesh = replicas.make_mesh(8, 4)
  f = jax.jit(
      replicas.map_workers(
          lambda t, r: topology.neighborhood_mean(topo, t, r),
          mesh,
          (replicas.WORKERS, replicas.REPLICATED),
          replicas.WORKERS,
      )
  )
  hlo = f.lower(replicas.put_workers(jnp.ones((8, 4)), mesh), jnp.int32(0)).as_text()
  assert "collective_permute" in hlo or "collective-permute" in hlo
  for banned in ("all_gather", "all-gather", "all_reduce", "all-reduce", "all_to_all"):
    assert banned not in hlo


def test_edge_colouring_is_proper_on_random_permutations():
  rng = np.random.default_rng(0)
  for _ in range(50):
    k, d = 12, int(rng.choice([2, 3, 4, 6]))
    perm = rng.permutation(k).astype(np.int32)
    p = topology.plan(perm, d)
    b = k // d
    assert len(p.colours) <= b
    for pairs, *_ in p.colours:
      srcs, dsts = [s for s, _ in pairs], [t for _, t in pairs]
      assert len(set(srcs)) == len(srcs) and len(set(dsts)) == len(dsts)


def test_hash_is_identical_on_host_and_device():
  rounds = np.array([0, 1, 2, 3, 99, 4096, 2**31 - 1], np.int32)
  dev = jax.jit(lambda r: topology.pool_index(7, r, 13))(jnp.asarray(rounds))
  np.testing.assert_array_equal(dev, [topology.pool_index(7, int(r), 13) for r in rounds])


def test_errors():
  with pytest.raises(ValueError, match="even number of workers"):
    topology.groups(5, 2, 0, 16)
  with pytest.raises(ValueError, match="divide num_workers"):
    topology.groups(8, 3, 0, 16)
  with pytest.raises(ValueError, match="unknown topology 'star'"):
    topology.make("star", 4, seed=0, group_size=2, pool_size=16)
  with pytest.raises(ValueError, match="cannot be split"):
    topology.plan(np.arange(6), 4)
