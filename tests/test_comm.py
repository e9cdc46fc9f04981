"""The communication cost model and the simulated clock, against hand-computed
values: bytes and times of ring all-reduces and pairwise exchanges, barriers
that only all-reduces impose, and the named network settings.
"""

import jax
import ml_collections
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.runtime import contract
from autoloco_jax.sim import clock as clock_lib, network

P, B = 1_000_000, 4  # parameters, bytes per parameter
MB = P * B  # 4e6 bytes per model
GBPS = 125e6  # bytes/s in 1 Gbit/s


def test_traffic_hand_values():
  assert clock_lib.ring_allreduce(P, 4, B) == clock_lib.Traffic(2 * 3 / 4 * MB, 6)
  assert clock_lib.ring_allreduce(P, 1, B) == clock_lib.Traffic(0.0, 0)


def test_network_links_from_scalars_lists_and_matrices():
  net = network.make_network(4, [10, 10, 1, 1], [1, 1, 1, 50])
  assert net.bandwidth_KxK[0, 1] == 10 * GBPS
  assert net.bandwidth_KxK[0, 2] == 1 * GBPS  # the slower end
  assert net.latency_KxK[0, 3] == 0.050  # the slower end
  assert net.latency_KxK[0, 1] == 0.001
  assert np.isinf(net.bandwidth_KxK[2, 2]) and net.latency_KxK[3, 3] == 0
  matrix = np.full((3, 3), 2.0)
  matrix[0, 2] = matrix[2, 0] = 0.5
  net = network.make_network(3, matrix, 0.0)
  assert net.bandwidth_KxK[2, 0] == 0.5 * GBPS
  with pytest.raises(ValueError, match="symmetric"):
    network.make_network(2, [[1.0, 2.0], [3.0, 1.0]], 0.0)
  with pytest.raises(ValueError, match="per-worker values"):
    network.make_network(4, [1.0, 2.0], 0.0)
  with pytest.raises(ValueError, match="bandwidths must be > 0"):
    network.make_network(2, 0.0, 0.0)
  with pytest.raises(ValueError, match="latencies"):
    network.make_network(2, 1.0, -1.0)


def test_allreduce_and_exchange_times_by_hand():
  net = network.make_network(4, 1.0, 1.0)
  # 2(K−1) = 6 stages of (1 ms + (4e6/4 bytes) / 125e6 B/s = 8 ms).
  assert network.allreduce_time(net, MB) == pytest.approx(6 * (0.001 + 0.008))
  # One swap over a pair's link: 1 ms + 4e6 / 125e6 s.
  assert network.exchange_time(net, 0, [1], MB) == pytest.approx(0.001 + 0.032)
  # Two peers share the worker's link: latencies overlap, transfers add.
  assert network.exchange_time(net, 0, [1, 3], MB) == pytest.approx(0.001 + 2 * 0.032)
  # The ring runs at its slowest link.
  slow = network.make_network(4, [1, 1, 1, 0.5], 1.0)
  assert network.allreduce_time(slow, MB) == pytest.approx(6 * (0.001 + 0.016))
  assert network.allreduce_time(network.make_network(1, 1.0, 1.0), MB) == 0.0


def allreduce_round(h, k=4):
  """A DiLoCo round: ``h`` local steps, then one all-reduce."""
  return contract.RoundComm("allreduce", np.full(k, h))


def test_diloco_and_ddp_rounds_by_hand():
  net = network.make_network(4, 1.0, 1.0)
  ar = 6 * 0.009
  clock = clock_lib.SimClock(net, P, B, step_time=0.1)
  m = clock.advance(allreduce_round(10))
  assert m["sim_time"] == pytest.approx(1.0 + ar)
  assert m["bytes_per_worker"] == 6e6 and m["messages_per_worker"] == 6
  assert m["syncs"] == 1 and m["sim_wait_time"] == pytest.approx(0.0)
  # Nobody waits for a peer, but every worker is blocked in the all-reduce.
  assert m["sim_blocked_time"] == pytest.approx(ar) == m["sim_comm_time"]
  m = clock.advance(allreduce_round(5))
  assert m["sim_round_time"] == pytest.approx(0.5 + ar)
  assert m["round_bytes_per_worker"] == 6e6

  ddp = clock_lib.SimClock(net, P, B, step_time=0.1)
  m = ddp.advance(contract.RoundComm("allreduce_every_step", np.full(4, 10)))
  assert m["sim_time"] == pytest.approx(10 * (0.1 + ar))
  assert m["syncs"] == 10 and m["bytes_per_worker"] == 10 * 6e6


def test_bytes_match_the_trainer_accounting_for_ddp_and_diloco():
  from autoloco_jax.runtime import replicas
  from tests.helpers import config, toy_loss

  mesh = replicas.make_mesh(4, 1)
  for name, per_round in (
      ("ddp", lambda h: h),
      ("diloco", lambda h: 1),
      ("autoloco", lambda h: 1),
  ):
    algo = registry.make(config(name, K=4), toy_loss, mesh)
    clock = clock_lib.SimClock(network.NETWORKS["hetero"](4), P, B, step_time=0.01)
    traffic = clock_lib.Traffic(0.0, 0)
    for r, h in enumerate([5, 7, 3]):
      m = clock.advance_round(algo, r, h)
      traffic = traffic + clock_lib.ring_allreduce(P, 4, B) * per_round(h)
    assert m["bytes_per_worker"] == traffic.bytes
    assert m["messages_per_worker"] == traffic.messages


def gossip_round(net, matching, speeds=None, h=10):
  clock = clock_lib.SimClock(net, P, B, step_time=0.1, speed_K=speeds)
  clock.advance(contract.RoundComm("gossip", np.full(4, h), np.asarray([matching])))
  return clock


def diloco_round(net, speeds=None, h=10):
  clock = clock_lib.SimClock(net, P, B, step_time=0.1, speed_K=speeds)
  clock.advance(allreduce_round(h))
  return clock


def test_one_slow_link_delays_diloco_but_not_the_unaffected_pairs():
  fast = network.make_network(4, 10.0, 1.0)
  bw = np.full((4, 4), 10.0)
  bw[3, 0] = bw[0, 3] = 0.1  # one slow link, on the ring 0-1-2-3-0
  slow = network.make_network(4, bw, 1.0)
  assert diloco_round(slow).time_K.max() > diloco_round(fast).time_K.max() + 0.1

  pairs_apart = [1, 0, 3, 2]  # {0,1}, {2,3}: the slow link unused
  np.testing.assert_allclose(
      gossip_round(slow, pairs_apart).time_K, gossip_round(fast, pairs_apart).time_K
  )
  pairs_on_it = [3, 2, 1, 0]  # {0,3} uses it; {1,2} must not wait
  t_fast = gossip_round(fast, pairs_on_it).time_K
  t_slow = gossip_round(slow, pairs_on_it).time_K
  np.testing.assert_allclose(t_slow[[1, 2]], t_fast[[1, 2]])
  assert np.all(t_slow[[0, 3]] > t_fast[[0, 3]] + 0.1)
  np.testing.assert_allclose(t_slow[[0, 3]], 1.0 + 0.001 + MB / (0.1 * GBPS))


def test_one_slow_worker_stalls_diloco_but_only_its_partner_in_a_gossip_round():
  net = network.make_network(4, 10.0, 1.0)
  speeds = np.array([1.0, 1.0, 1.0, 2.0])
  ex = 0.001 + MB / (10 * GBPS)
  d = diloco_round(net, speeds)
  np.testing.assert_allclose(d.time_K, 2.0 + network.allreduce_time(net, MB))
  g = gossip_round(net, [1, 0, 3, 2], speeds)
  np.testing.assert_allclose(g.time_K, [1.0 + ex, 1.0 + ex, 2.0 + ex, 2.0 + ex])
  m = g.metrics()
  # Worker 2 waited a second for worker 3; nobody else waited.
  assert m["sim_wait_time"] == pytest.approx(1.0 / 4)
  assert m["sim_blocked_time"] == pytest.approx(1.0 / 4 + ex)
  assert m["bytes_per_worker"] == MB and m["messages_per_worker"] == 1


def test_gossip_on_a_ring_waits_for_neighbours_only():
  net = network.make_network(4, 1.0, 1.0)
  clock = clock_lib.SimClock(net, P, B, step_time=0.1, speed_K=[1, 1, 1, 3])
  ring = np.array([[1, 2, 3, 0], [3, 0, 1, 2]])
  clock.advance(contract.RoundComm("gossip", np.full(4, 10), ring))
  ex = 0.001 + 2 * 0.032
  # Worker 1's neighbours are 0 and 2 (both at 1 s); 0 and 2 neighbour worker 3 (3 s).
  np.testing.assert_allclose(clock.time_K, [3 + ex, 1 + ex, 3 + ex, 3 + ex])
  assert clock.metrics()["bytes_per_worker"] == 2 * MB


def test_named_networks_and_config():
  het = network.NETWORKS["hetero"](4)
  assert het.bandwidth_KxK[0, 1] == 10 * GBPS and het.bandwidth_KxK[2, 3] == 1 * GBPS
  assert het.bandwidth_KxK[0, 2] == 1 * GBPS
  assert het.latency_KxK[0, 1] == 0.001 and het.latency_KxK[1, 2] == 0.050
  assert np.isinf(network.NETWORKS["ideal"](4).bandwidth_KxK).all()
  cfg = ml_collections.ConfigDict(
      dict(
          name="hetero",
          bandwidth_gbps=(),
          latency_ms=5.0,
          speed_factors=(1.0, 1.0, 1.0, 2.0),
          step_time=0.0,
      )
  )
  net = network.network_from_config(cfg, 4)
  assert net.latency_KxK[0, 3] == 0.005 and net.bandwidth_KxK[2, 3] == 1 * GBPS
  np.testing.assert_array_equal(contract.speed_factors(cfg, 4), [1, 1, 1, 2])
  with pytest.raises(ValueError, match="unknown network 'lan'"):
    network.network_from_config(ml_collections.ConfigDict(dict(name="lan")), 4)
  with pytest.raises(ValueError, match="speed_factors must be 4"):
    contract.speed_factors(
        ml_collections.ConfigDict(dict(speed_factors=(1.0, 0.0, 1.0, 1.0))), 4
    )
  with pytest.raises(ValueError, match="unknown round pattern"):
    clock_lib.SimClock(het, P).advance(contract.RoundComm("broadcast", np.ones(4)))


def test_measure_step_time_leaves_the_state_alone():
  import chex
  import jax
  from autoloco_jax.runtime import replicas, rounds, state as state_lib
  from tests.helpers import config, tokens, toy_loss, toy_params

  mesh = replicas.make_mesh(2, 1)
  algo = registry.make(config("diloco", K=2), toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  before = jax.device_get(state.params_K)
  t = rounds.measure_step_time(
      algo.inner,
      state,
      replicas.put_workers(tokens(2, 3), mesh),
      num_workers=2,
      num_steps=2,
  )
  assert 0 < t < 10
  assert int(state.step) == 0
  chex.assert_trees_all_equal(jax.device_get(state.params_K), before)
  # The probe compiled the same function the run then uses: no extra compilation.
  algo.inner(state, replicas.put_workers(tokens(2, 3), mesh), np.int32(3))
  assert algo.inner._cache_size() == 1


def test_absent_workers_leave_the_ring_and_rejoin_at_its_end():
  # Worker faults: only present workers compute and all-reduce; the ring of
  # the 3 present workers runs 2·2 stages of P b / 3 bytes.
  net = network.make_network(4, 1.0, 1.0)
  clock = clock_lib.SimClock(net, P, B, step_time=0.1)
  m = clock.advance(allreduce_round(10), present_K=[1, 1, 0, 1])
  ar3 = 4 * (0.001 + MB / 3 / GBPS)
  assert network.allreduce_time(net, MB, ring=[0, 1, 3]) == pytest.approx(ar3)
  np.testing.assert_allclose(clock.time_K, 1.0 + ar3)
  np.testing.assert_allclose(clock.bytes_K, [4 / 3 * MB, 4 / 3 * MB, 0, 4 / 3 * MB])
  assert m["syncs"] == 1
  with pytest.raises(ValueError, match="not supported in gossip"):
    clock.advance(
        contract.RoundComm("gossip", np.ones(4), np.array([[1, 0, 3, 2]])),
        present_K=[1, 1, 0, 1],
    )


def test_clock_state_round_trips_for_checkpoints():
  import json

  net = network.NETWORKS["hetero"](4)
  clock = clock_lib.SimClock(net, P, B, step_time=0.05, speed_K=[1, 1, 1, 2])
  clock.advance(contract.RoundComm("gossip", np.full(4, 5), np.array([[2, 3, 0, 1]])))
  saved = json.loads(json.dumps(clock.state_dict()))
  fresh = clock_lib.SimClock(net, P, B, step_time=0.0, speed_K=[1, 1, 1, 2])
  fresh.load_state_dict(saved)
  assert fresh.step_time == 0.05
  pattern = allreduce_round(5)
  assert fresh.advance(pattern) == clock.advance(pattern)


@pytest.mark.parametrize("codec", ["identity", "int8"])
def test_a_diloco_round_built_by_the_registry_is_priced_by_hand(codec):
  """The algorithm's own round (``comm_pattern`` of ``registry.make``) on the
  clock, against the ring written out by hand: float32 sums on the way, a ring
  all-reduce of ``2(K−1)`` stages, each moving ``P·4/K`` bytes per link (in all
  ``2(K−1)/K · P·4`` bytes per worker); int8 with a float32 scale per block of
  128 cannot be summed, a ring all-gather of ``K−1`` stages, each moving one
  whole payload ``n + 4⌈n/128⌉`` per leaf. Every stage also pays the latency."""
  from autoloco_jax.runtime import replicas
  from tests.helpers import config, toy_loss, toy_params

  K, h, step, gbps, ms = 4, 3, 0.1, 1.0, 2.0
  c = config("diloco", K=K, h=h)
  c.compress.codec, c.compress.block_size = codec, 128
  algo = registry.make(c, toy_loss, replicas.make_mesh(K, 1))
  params = toy_params()
  algo.init_state(params)  # records the shapes the payload is priced from
  sizes = [x.size for x in jax.tree.leaves(params)]
  P = sum(sizes)
  link = gbps * 1e9 / 8  # bytes/s
  clock = clock_lib.SimClock(network.make_network(K, gbps, ms), P, 4, step_time=step)
  m = clock.advance(algo.comm_pattern(0, h))
  if codec == "identity":
    stages, per_link = 2 * (K - 1), P * 4 / K
    sent = 2 * (K - 1) / K * P * 4
  else:
    payload = sum(n + 4 * -(-n // 128) for n in sizes)
    stages, per_link, sent = K - 1, payload, (K - 1) * payload
  assert m["sim_round_time"] == pytest.approx(h * step + stages * (ms / 1e3 + per_link / link))
  assert m["round_bytes_per_worker"] == pytest.approx(sent)
  # Not overlapped: the exchange must fit in one step's time.
  assert m["peak_bandwidth"] == pytest.approx(sent / step)


def test_streaming_peak_bandwidth_by_hand():
  """Streaming DiLoCo with P = 2 fragments (one leaf each of the toy model) and
  τ = 1: each ``send`` all-reduces one fragment, ``2(K−1)/K`` of its ``4n``
  bytes per worker, within τ steps; the peak is half of DiLoCo's whole-model
  round's, and the clock charges the send's bytes, not the arrive's."""
  from autoloco_jax.runtime import replicas
  from tests.helpers import config, toy_loss, toy_params

  K, step = 4, 0.1
  c = config("diloco", K=K, h=4)
  c.stream.fragments, c.stream.tau = 2, 1
  algo = registry.make(c, toy_loss, replicas.make_mesh(K, 1))
  params = toy_params()
  algo.init_state(params)
  P = sum(x.size for x in jax.tree.leaves(params))
  fragment = jax.tree.leaves(params)[0].size * 4  # bytes of one leaf
  clock = clock_lib.SimClock(network.make_network(K, 1.0, 1.0), P, 4, step_time=step)
  send = clock.advance(algo.comm_pattern(0, 2))
  sent = 2 * (K - 1) / K * fragment
  assert send["round_bytes_per_worker"] == pytest.approx(sent)
  assert send["peak_bandwidth"] == pytest.approx(sent / (1 * step))
  arrive = clock.advance(algo.comm_pattern(1, 2))
  assert arrive["round_bytes_per_worker"] == 0 and arrive["peak_bandwidth"] == 0
  whole = 2 * (K - 1) / K * P * 4 / step  # DiLoCo's round, one step's window
  assert send["peak_bandwidth"] == pytest.approx(whole / 2)
