"""Compressed exchanges of the DiLoCo family (exchange.py) and what the clock
makes of them (clock.py): error feedback inside the sync, bytes per codec,
all-reduce against all-gather, overlapped exchanges, peak bandwidth."""

import json

import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.diloco import fragments
from autoloco_jax.compression import codecs
from autoloco_jax.runtime import contract, replicas, state as state_lib
from autoloco_jax.sim import clock as clock_lib, network
from tests.helpers import config, everyone, get, tokens, toy_loss, toy_params

K = 4


def _cfg(codec="identity", fragments_=1, tau=0, ef_beta=None, **codec_args):
  cfg = config("diloco", K=K, h=4)
  cfg.compress.codec = codec
  cfg.compress.ef_beta = ef_beta
  for key, value in codec_args.items():
    cfg.compress[key] = value
  cfg.stream.fragments = fragments_
  cfg.stream.tau = tau
  return cfg


def _built(cfg, num_devices):
  """The algorithm of ``cfg`` on a mesh of ``num_devices``, its state placed."""
  mesh = replicas.make_mesh(K, num_devices)
  algo = registry.make(cfg, toy_loss, mesh)
  return algo, state_lib.place(algo.init_state(toy_params()), mesh), mesh


def _round(algo, state, mesh, data, present=None):
  """One round: the inner steps on ``data`` (one per step), then the sync with
  the ``present`` workers (everyone where None). Returns the synced state, the
  round's start ``θ`` and the pseudo-gradients ``Δ_k = θ − θ_k``."""
  theta = get(state.algo.global_params)
  state = algo.inner(state, replicas.put_workers(data, mesh), np.int32(data.shape[1]))
  delta_K = jax.tree.map(lambda g, p: g[None] - p, theta, get(state.params_K))
  present = everyone(K, mesh) if present is None else replicas.put_workers(present, mesh)
  state, _ = algo.sync(state, present)
  return state, theta, delta_K


# ----------------------------------------------------------------------------
# Error feedback inside the sync.


def test_error_feedback_sent_plus_residual_is_the_accumulated_pseudo_gradients():
  beta_e, beta = 0.5, 0.9
  cfg = _cfg("topk", ef_beta=beta_e, chunk_size=16, density=0.125, value_bits=2)
  algo, state, mesh = _built(cfg, 2)
  data = tokens(K, 6)
  codec = codecs.from_config(cfg.compress)

  state, theta, delta_K = _round(algo, state, mesh, data[:, :3])
  e1_K = get(state.algo.residual_K)
  m1 = get(state.algo.outer_opt.momentum)  # = mean_k sent_k (m_0 = 0)
  for leaf in theta:
    # Per worker: the residual is what the codec did not send.
    for k in range(K):
      sent = np.asarray(codecs.roundtrip(codec, delta_K[leaf][k]))
      np.testing.assert_allclose(e1_K[leaf][k], delta_K[leaf][k] - sent, atol=1e-6)
    assert np.any(e1_K[leaf])  # lossy: something is carried over
    # The average sent plus the mean residual is the mean pseudo-gradient.
    np.testing.assert_allclose(
        m1[leaf] + e1_K[leaf].mean(0), delta_K[leaf].mean(0), atol=1e-6
    )

  state, theta, delta_K = _round(algo, state, mesh, data[:, 3:])
  e2_K = get(state.algo.residual_K)
  sent_mean = jax.tree.map(
      lambda m2, m1_: m2 - beta * m1_, get(state.algo.outer_opt.momentum), m1
  )
  for leaf in theta:
    np.testing.assert_allclose(
        sent_mean[leaf] + e2_K[leaf].mean(0),
        beta_e * e1_K[leaf].mean(0) + delta_K[leaf].mean(0),
        atol=1e-5,
    )


def test_sparseloco_two_rounds_by_hand():
  """SparseLoCo's update (arXiv 2508.15706, as configs/sparseloco.py reads it),
  two rounds of two workers worked by hand on one chunk of 8 values, density
  1/4 (k = 2), 2-bit values, ``β_e = 0.5``; the outer step ``θ ← θ − mean_k Q(a_k)``
  (DiLoCo's with ``α = 1, β = 0``).

  Worker 0, round 1: ``a = Δ``; its two largest magnitudes are 3.0 (index 6) and
  −2.0 (index 1), sent as their signs times their mean magnitude, 2.5; the rest
  stays: ``e = a − Q(a)``. Round 2: ``a = 0.5 e + Δ₂``, whose largest are −1.15
  (index 2) and 0.9 (index 3), scale 1.025. Worker 1 likewise (4.0 and −0.7,
  scale 2.35)."""
  from autoloco_jax import outer
  from autoloco_jax.compression import exchange

  compression = exchange.Compression(codecs.topk(8, 0.25, 2), ef_beta=0.5)
  delta1_K = np.array(
      [[0.5, -2.0, 0.1, 1.0, -0.3, 0.0, 3.0, -0.2],
       [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, -0.7, 4.0]], np.float32)
  delta2_K = np.array(
      [[0.2, 0.0, -1.2, 0.4, 0.0, 0.1, 0.0, 0.6],
       [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]], np.float32)
  residual_K = compression.init_residual(delta1_K)
  sent1_K, residual_K = exchange.encode_workers(compression, delta1_K, residual_K)
  np.testing.assert_allclose(
      sent1_K,
      [[0, -2.5, 0, 0, 0, 0, 2.5, 0], [0, 0, 0, 0, 0, 0, -2.35, 2.35]], atol=1e-6)
  np.testing.assert_allclose(
      residual_K,
      [[0.5, 0.5, 0.1, 1.0, -0.3, 0.0, 0.5, -0.2],
       [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 1.65, 1.65]], atol=1e-6)
  sent2_K, residual_K = exchange.encode_workers(compression, delta2_K, residual_K)
  # Worker 0: a = [0.45, 0.25, -1.15, 0.9, -0.15, 0.1, 0.25, 0.5];
  # worker 1: a = 0.5 e = [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.825, 0.825], whose
  # top two tie at 0.825 (indices 6 and 7), scale 0.825.
  np.testing.assert_allclose(
      sent2_K,
      [[0, 0, -1.025, 1.025, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0, 0.825, 0.825]], atol=1e-6)
  np.testing.assert_allclose(
      residual_K,
      [[0.45, 0.25, -0.125, -0.125, -0.15, 0.1, 0.25, 0.5],
       [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.0, 0.0]], atol=1e-6)
  # The outer step, plain SGD with lr 1 on the mean of what was sent.
  tx = outer.diloco(1.0, 0.0)
  theta = np.zeros(8, np.float32)
  state = tx.init(theta)
  for sent_K in (sent1_K, sent2_K):
    updates, state = tx.update(np.mean(sent_K, axis=0), state)
    theta = theta + np.asarray(updates)
  np.testing.assert_allclose(
      theta,
      -np.array([0, -1.25, -0.5125, 0.5125, 0, 0, 0.4875, 1.5875]), atol=1e-6)
  # Bytes: 2 kept values of (3 index bits + 2 value bits) and one float32 scale.
  assert codecs.tree_encoded_bytes(compression.codec, delta1_K[0]) == 2 * 5 / 8 + 4


def test_senders_mean_by_hand():
  """``compress.aggregate = 'senders'`` (the SparseLoCo authors' scatter-mean):
  each coordinate averaged over the workers that sent it. Round 1 of
  :func:`test_sparseloco_two_rounds_by_hand`: worker 0 sent −2.5 at index 1 and
  2.5 at 6; worker 1 −2.35 at 6 and 2.35 at 7. The mean over both workers halves
  the lone senders' values; the senders' mean keeps them and averages index 6."""
  from autoloco_jax.compression import exchange

  sent_K = np.array(
      [[0, -2.5, 0, 0, 0, 0, 2.5, 0], [0, 0, 0, 0, 0, 0, -2.35, 2.35]], np.float32)
  mean = lambda tree_K: jax.tree.map(lambda x: x.mean(0), tree_K)
  by = lambda rule: np.asarray(
      exchange.average(exchange.Compression(codecs.identity(), None, rule), sent_K, mean))
  np.testing.assert_allclose(by("mean"), [0, -1.25, 0, 0, 0, 0, 0.075, 1.175], atol=1e-6)
  np.testing.assert_allclose(by("senders"), [0, -2.5, 0, 0, 0, 0, 0.075, 2.35], atol=1e-6)
  # Dense messages (no zeros): the two rules agree.
  dense_K = sent_K + 1.0
  dense = lambda rule: exchange.average(
      exchange.Compression(codecs.identity(), None, rule), dense_K, mean)
  np.testing.assert_allclose(dense("senders"), dense("mean"), rtol=1e-6)


def test_senders_mean_inside_the_sync_with_a_worker_absent():
  cfg = _cfg("topk", chunk_size=16, density=0.125, value_bits=2)
  cfg.compress.aggregate = "senders"
  algo, state, mesh = _built(cfg, 2)
  present = np.array([1, 1, 1, 0], np.float32)  # worker 3 left this round
  state, theta, delta_K = _round(algo, state, mesh, tokens(K, 2), present)
  codec = codecs.from_config(cfg.compress)
  momentum = get(state.algo.outer_opt.momentum)  # = the average (m_0 = 0)
  for leaf in theta:
    sent = np.stack([codecs.roundtrip(codec, d) for d in delta_K[leaf][:3]])
    senders = (sent != 0).sum(0)
    expected = np.where(senders > 0, sent.sum(0) / np.maximum(senders, 1), 0.0)
    np.testing.assert_allclose(momentum[leaf], expected, atol=1e-6)
    assert senders.max() >= 1 and np.any(senders == 1)


def test_aggregate_is_checked_and_refused_where_a_gossip_mixes():
  cfg = _cfg()
  cfg.compress.aggregate = "median"
  with pytest.raises(ValueError, match="compress.aggregate"):
    registry.from_config(cfg)
  gossip = config("noloco", K=K, h=4)
  gossip.compress.aggregate = "senders"
  with pytest.raises(ValueError, match="compress.aggregate must be 'mean'"):
    registry.from_config(gossip)


def test_without_error_feedback_the_average_is_the_mean_of_decoded_payloads():
  cfg = _cfg("int4", block_size=8)
  algo, state, mesh = _built(cfg, 1)
  state, theta, delta_K = _round(algo, state, mesh, tokens(K, 2))
  assert state.algo.residual_K is None
  codec = codecs.int4(8)
  for leaf in theta:
    decoded = np.stack([codecs.roundtrip(codec, d) for d in delta_K[leaf]])
    np.testing.assert_allclose(
        get(state.algo.outer_opt.momentum)[leaf], decoded.mean(0), atol=1e-6
    )


# ----------------------------------------------------------------------------
# Bytes and times on the clock.


@pytest.mark.parametrize("name", sorted(codecs.CODECS))
@pytest.mark.parametrize("num_fragments", [1, 2])
def test_every_codec_is_counted_with_its_encoded_bytes_and_collective(
    name, num_fragments
):
  args = {"topk": dict(chunk_size=16, density=0.25, value_bits=4)}.get(name, {})
  if name in ("fp8", "fp4", "int8", "int4"):
    args = dict(block_size=32)
  cfg = _cfg(name, fragments_=num_fragments, **args)
  algo = registry.make(cfg, toy_loss, replicas.make_mesh(K, 1))
  params = toy_params()
  algo.init_state(params)
  codec = codecs.from_config(cfg.compress)
  ids = fragments.leaf_fragments(params, num_fragments, "strided")
  clock = clock_lib.SimClock(network.NETWORKS["homogeneous"](K), 1000, step_time=0.01)
  total = 0.0
  for r in range(4):
    p = r % num_fragments
    leaves = [x for f, x in zip(ids, jax.tree.leaves(params)) if f == p]
    payload = sum(codec.encoded_bytes(x.size) for x in leaves)
    per_leaf = [
        clock_lib.ring_allreduce(1, K, codec.encoded_bytes(x.size))
        if codec.dense
        else clock_lib.ring_allgather(codec.encoded_bytes(x.size), K)
        for x in leaves
    ]
    expected = sum(t.bytes for t in per_leaf)
    factor = 2 * (K - 1) / K if codec.dense else K - 1
    assert expected == pytest.approx(factor * payload)
    if name == "identity" and num_fragments == 1:
      # DiLoCo's own sync: the clock's model, at comm.bytes_per_param.
      expected = factor * 1000 * 4
    record = clock.advance_round(algo, r, 4)
    total += expected
    assert record["round_bytes_per_worker"] == pytest.approx(expected)
    assert record["bytes_per_worker"] == pytest.approx(total)
    assert algo.comm_pattern(r, 4).dense == codec.dense
    assert record["peak_bandwidth"] == pytest.approx(expected / 0.01)


def test_comm_pattern_needs_the_parameters_for_a_compressed_payload():
  algo = registry.make(_cfg("fp4"), toy_loss, replicas.make_mesh(K, 1))
  with pytest.raises(ValueError, match="init_state"):
    algo.comm_pattern(0, 4)


def test_allgather_and_allreduce_of_a_payload_by_hand():
  # K = 4, 1 Gbit/s, 1 ms, a payload of 1e6 bytes per worker.
  net = network.make_network(K, 1.0, 1.0)
  ms = 1e-3
  assert network.allreduce_time(net, 1e6) == pytest.approx(6 * (1 + 2) * ms)
  assert network.allgather_time(net, 1e6) == pytest.approx(3 * (1 + 8) * ms)
  assert clock_lib.ring_allgather(1e6, K) == clock_lib.Traffic(3e6, 3)
  assert clock_lib.ring_allreduce(1000, K, 0.5) == clock_lib.Traffic(750.0, 6)
  for dense, seconds, sent in [(True, 18 * ms, 1.5e6), (False, 27 * ms, 3e6)]:
    clock = clock_lib.SimClock(net, 10, step_time=0.0)
    record = clock.advance(
        contract.RoundComm("allreduce", np.zeros(K, int), payload_bytes=1e6, dense=dense)
    )
    assert record["sim_time"] == pytest.approx(seconds)
    assert record["bytes_per_worker"] == pytest.approx(sent)
    assert record["messages_per_worker"] == (6 if dense else 3)


def test_default_rounds_keep_their_numbers():
  """The default DiLoCo pattern (no payload) is the old ring all-reduce of the
  model at bytes_per_param; fractional bytes per parameter are allowed."""
  net = network.make_network(K, 1.0, 1.0)
  clock = clock_lib.SimClock(net, 10**6, step_time=0.0)
  record = clock.advance(contract.RoundComm("allreduce", np.zeros(K, int)))
  assert record["sim_time"] == pytest.approx(0.054)  # 6 × (1 + 8) ms
  assert record["bytes_per_worker"] == 2 * 3 / 4 * 10**6 * 4
  half = clock_lib.SimClock(net, 10**6, bytes_per_param=0.5, step_time=0.0)
  assert half.advance(contract.RoundComm("allreduce", np.zeros(K, int)))[
      "bytes_per_worker"
  ] == pytest.approx(2 * 3 / 4 * 0.5e6)


def test_overlapped_exchange_stalls_only_when_it_has_not_arrived():
  net = network.make_network(K, 1.0, 1.0)  # payload 1e6 all-reduce: 18 ms
  steps = lambda n: np.full(K, n)
  for tau, step_time, stall in [(2, 0.01, 0.0), (1, 0.01, 0.008)]:
    clock = clock_lib.SimClock(net, 10, step_time=step_time)
    sent = clock.advance(
        contract.RoundComm("send", steps(3), payload_bytes=1e6, window=tau)
    )
    assert sent["sim_time"] == pytest.approx(0.03)  # the send does not block
    assert sent["syncs"] == 1 and sent["bytes_per_worker"] == pytest.approx(1.5e6)
    assert sent["peak_bandwidth"] == pytest.approx(1.5e6 / (tau * step_time))
    saved = json.loads(json.dumps(clock.state_dict()))
    resumed = clock_lib.SimClock(net, 10).load_state_dict(saved)
    arrived = resumed.advance(contract.RoundComm("arrive", steps(tau)))
    assert arrived["sim_time"] == pytest.approx(0.03 + tau * step_time + stall)
    assert arrived["sim_comm_time"] == pytest.approx(stall)
    assert arrived["syncs"] == 1 and arrived["round_bytes_per_worker"] == 0
    assert arrived["peak_bandwidth"] == 0
    assert arrived["peak_bandwidth_max"] == pytest.approx(1.5e6 / (tau * step_time))
  with pytest.raises(ValueError, match="without an exchange in flight"):
    clock_lib.SimClock(net, 10).advance(contract.RoundComm("arrive", steps(1)))


def test_streaming_rounds_on_the_clock():
  """P = 2, τ = 1: sends alternate fragments with their own payloads, arrivals
  send nothing, and syncs count the sends."""
  cfg = _cfg("fp4", fragments_=2, tau=1, block_size=32)
  algo = registry.make(cfg, toy_loss, replicas.make_mesh(K, 1))
  params = toy_params()
  algo.init_state(params)
  assert algo.first_round_steps == 2 and algo.max_round_steps == 2 and not algo.supports_faults
  kinds = [algo.comm_pattern(r, 1).kind for r in range(4)]
  assert kinds == ["send", "arrive", "send", "arrive"]
  clock = clock_lib.SimClock(network.NETWORKS["homogeneous"](K), 1000, step_time=0.01)
  codec = codecs.fp4(32)
  for r, h in enumerate([2, 1, 1, 1]):
    record = clock.advance_round(algo, r, h)
  per_fragment = [codec.encoded_bytes(x.size) * (K - 1) for x in jax.tree.leaves(params)]
  assert record["bytes_per_worker"] == pytest.approx(sum(per_fragment))
  assert record["syncs"] == 2
  assert record["peak_bandwidth_max"] == pytest.approx(max(per_fragment) / 0.01)


def test_diloco_peak_bandwidth_is_the_round_exchange_per_step_time():
  algo = registry.make(config("diloco", K=K), toy_loss, replicas.make_mesh(K, 1))
  clock = clock_lib.SimClock(network.NETWORKS["homogeneous"](K), 1000, step_time=0.02)
  record = clock.advance_round(algo, 0, 5)
  assert record["peak_bandwidth"] == pytest.approx(2 * 3 / 4 * 4000 / 0.02)
