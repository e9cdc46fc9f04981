"""Compressed gossip exchanges (compressed_exchange.py, noloco.py, gasloc.py): the identity
codec is today's exchange bit for bit, a lossy codec stays close and counts
its encoded bytes, error feedback's bookkeeping, resume with residuals, and
the combinations still refused."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.gossip import topology
from autoloco_jax.compression import codecs
from autoloco_jax.run import checkpoint
from autoloco_jax.runtime import replicas, rounds as rounds_lib, state as state_lib
from autoloco_jax.runtime.jitting import jit_sync
from autoloco_jax.sim import clock as clock_lib, network
from tests.helpers import config, everyone, get, run_rounds, tokens, toy_loss, toy_params

K = 4
NUM_PARAMS = sum(x.size for x in jax.tree.leaves(toy_params()))


def gossip_config(name, topo="matching", codec="identity", ef_beta=None, **extra):
  cfg = config(name, K=K, h=2, lr=0.7, momentum=0.5, total=40)
  cfg.gossip.topology = topo
  cfg.compress.codec = codec
  cfg.compress.ef_beta = ef_beta
  for key, value in extra.items():
    group, field = key.split(".")
    cfg[group][field] = value
  return cfg


CASES = {
    "noloco-matching": ("noloco", "matching", {"noloco.gamma": 0.3}),
    "noloco-ring": ("noloco", "ring", {}),
    "gasloc-matching": ("gasloc", "matching", {}),
    "gasloc-torus-mixed": ("gasloc", "torus", {"gasloc.mix_momentum": True}),
}


# ----------------------------------------------------------------------------
# The identity codec is today's exchange.


def todays_sync(cfg, mesh):
  """The sync of NoLoCo and GASLoC (homogeneous speeds) as it was before
  compression existed (commit 9704d29), without its metrics: the reference
  that the identity codec without error feedback must match bit for bit."""
  topo = topology.from_config(cfg)
  if cfg.algorithm == "noloco":
    n = cfg.noloco
    alpha, beta = n.alpha, n.beta
    gamma = alpha if n.gamma is None else n.gamma

    def block(state, present_K):
      theta_K, phi_K = state.params_K, state.algo.outer_params_K
      m_K = state.algo.outer_momentum_K
      z_K = jax.tree.map(lambda t, p: alpha * t + (gamma - alpha) * p, theta_K, phi_K)
      zbar_K = topology.neighborhood_mean(topo, z_K, state.round)
      m_K = jax.tree.map(lambda m, z, p: beta * m + z - gamma * p, m_K, zbar_K, phi_K)
      new_K = jax.tree.map(jnp.add, phi_K, m_K)
      outer = state.algo._replace(outer_params_K=new_K, outer_momentum_K=m_K)
      return state._replace(params_K=new_K, algo=outer, round=state.round + 1), {}

  else:
    g = cfg.gasloc
    eta, gamma = g.eta, g.gamma
    alpha = g.alpha or 1.0 / (topo.degree + 1)

    def block(state, present_K):
      start_K, theta_K, y_prev_K = (
          state.algo.start_K,
          state.params_K,
          state.algo.y_prev_K,
      )
      y_K = jax.tree.map(lambda s, t: s + eta * (t - s), start_K, theta_K)
      if g.mix_momentum:
        z_K = jax.tree.map(lambda y, yp: y + gamma * (y - yp), y_K, y_prev_K)
        lz_K = topology.laplacian(topo, z_K, state.round)
        new_K = jax.tree.map(lambda z, lz: z - alpha * lz, z_K, lz_K)
      else:
        ly_K = topology.laplacian(topo, y_K, state.round)
        new_K = jax.tree.map(
            lambda y, ly, yp: y - alpha * ly + gamma * (y - yp), y_K, ly_K, y_prev_K
        )
      outer = state.algo._replace(start_K=new_K, y_prev_K=y_K)
      return state._replace(params_K=new_K, algo=outer, round=state.round + 1), {}

  return jit_sync(block, mesh)


@pytest.mark.parametrize("case", sorted(CASES))
def test_identity_without_error_feedback_is_todays_exchange_bit_for_bit(case):
  name, topo, extra = CASES[case]
  cfg = gossip_config(name, topo, **extra)
  mesh = replicas.make_mesh(K, 2)
  algo = registry.make(cfg, toy_loss, mesh)
  today = todays_sync(cfg, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  assert state.algo.exchange is None  # no reference, no residual: today's layout
  data = tokens(K, 6)
  for r in range(3):
    state = algo.inner(state, replicas.put_workers(data[:, 2 * r : 2 * r + 2], mesh), 2)
    expected, _ = today(jax.tree.map(jnp.copy, state), everyone(K, mesh))
    expected = get(expected)
    state, _ = algo.sync(state, everyone(K, mesh))
    got = get(state)
    for a, b in zip(jax.tree.leaves(got.params_K), jax.tree.leaves(expected.params_K)):
      np.testing.assert_array_equal(a, b)
    chex.assert_trees_all_equal(got.algo, expected.algo)


# ----------------------------------------------------------------------------
# Lossy codecs.


@pytest.mark.parametrize("codec", ["int8", "bf16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_lossy_codec_stays_close_and_sends_its_encoded_bytes(case, codec):
  name, topo, extra = CASES[case]
  mesh = replicas.make_mesh(K, 2)
  plain, ref, _ = run_rounds(gossip_config(name, topo, **extra), mesh, [2])
  algo, got, metrics = run_rounds(gossip_config(name, topo, codec, **extra), mesh, [2])
  ref_K, got_K = get(ref.params_K), get(got.params_K)
  for a, b in zip(jax.tree.leaves(got_K), jax.tree.leaves(ref_K)):
    assert np.abs(a - b).max() > 1e-5  # the codec did something
    # The workers' mean took the uncompressed step: the error only spreads them.
    np.testing.assert_allclose(a.mean(0), b.mean(0), atol=1e-6)
  assert "ef_residual_norm" not in metrics[0]
  # Over a few rounds the run stays close to the uncompressed one.
  _, ref, _ = run_rounds(gossip_config(name, topo, **extra), mesh, [2, 2, 2])
  _, got, metrics = run_rounds(gossip_config(name, topo, codec, **extra), mesh, [2, 2, 2])
  chex.assert_trees_all_close(get(got.params_K), get(ref.params_K), atol=2e-3)
  assert all(np.isfinite(m["spread"]) for m in metrics)

  # The clock: the same exchanges, each message the encoded payload.
  encoded = codecs.tree_encoded_bytes(codecs.make(codec), toy_params())
  clocks = [
      clock_lib.SimClock(network.NETWORKS["homogeneous"](K), NUM_PARAMS, step_time=0.01)
      for _ in range(2)
  ]
  for r in range(3):
    full = clocks[0].advance_round(plain, r, 2)
    sent = clocks[1].advance_round(algo, r, 2)
    degree = topology.from_config(gossip_config(name, topo)).degree
    assert full["round_bytes_per_worker"] == degree * NUM_PARAMS * 4
    assert sent["round_bytes_per_worker"] == pytest.approx(degree * encoded)
    assert sent["messages_per_worker"] == full["messages_per_worker"]
  ratio = encoded / (4 * NUM_PARAMS)
  assert ratio < 0.6
  assert sent["bytes_per_worker"] == pytest.approx(ratio * full["bytes_per_worker"])
  assert sent["sim_comm_time"] < full["sim_comm_time"]


def test_complete_graph_compressed_is_the_codecs_collective():
  """On the complete graph the exchange is the DiLoCo family's collective: an
  all-gather of int8 payloads, an all-reduce of bf16 ones."""
  for codec, dense, factor in [("int8", False, K - 1), ("bf16", True, 2 * (K - 1) / K)]:
    algo = registry.make(
        gossip_config("gasloc", "complete", codec), toy_loss, replicas.make_mesh(K, 1)
    )
    with pytest.raises(ValueError, match="init_state"):
      algo.comm_pattern(0, 2)
    algo.init_state(toy_params())
    pattern = algo.comm_pattern(0, 2)
    assert pattern.kind == "allreduce" and pattern.dense == dense
    clock = clock_lib.SimClock(network.NETWORKS["homogeneous"](K), NUM_PARAMS)
    record = clock.advance(pattern)
    encoded = codecs.tree_encoded_bytes(codecs.make(codec), toy_params())
    assert record["bytes_per_worker"] == pytest.approx(factor * encoded)


# ----------------------------------------------------------------------------
# Error feedback.


def hand_messages(name, cfg, state, theta0):
  """``x_k = s_k − c θ_0`` of the state before a sync (module docstring of
  compressed_exchange.py), from host copies."""
  if name == "noloco":
    a, g = cfg.noloco.alpha, cfg.noloco.gamma
    theta, phi = get(state.params_K), get(state.algo.outer_params_K)
    return jax.tree.map(
        lambda t, p, r: a * t + (g - a) * p - g * r[None], theta, phi, theta0
    )
  eta = cfg.gasloc.eta  # y_k less θ_0 (the default mode sends y_k)
  start, theta = get(state.algo.start_K), get(state.params_K)
  return jax.tree.map(lambda s, t, r: s + eta * (t - s) - r[None], start, theta, theta0)


@pytest.mark.parametrize("name", ["noloco", "gasloc"])
def test_error_feedback_sent_plus_residual_is_the_accumulated_message(name):
  beta_e = 0.5
  extra = {"noloco.gamma": 0.3} if name == "noloco" else {}
  cfg = gossip_config(name, "matching", "int4", ef_beta=beta_e, **extra)
  cfg.compress.block_size = 8
  codec = codecs.from_config(cfg.compress)
  mesh = replicas.make_mesh(K, 2)  # partners on other devices: ppermute
  algo = registry.make(cfg, toy_loss, mesh)
  topo = topology.from_config(cfg)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  theta0 = get(state.algo.exchange.reference)
  chex.assert_trees_all_equal(theta0, get(toy_params()))
  residual = jax.tree.map(np.zeros_like, get(state.algo.exchange.residual_K))
  data = tokens(K, 4)
  for r in range(2):
    state = algo.inner(state, replicas.put_workers(data[:, 2 * r : 2 * r + 2], mesh), 2)
    before = get(state)
    x = hand_messages(name, cfg, state, theta0)
    state, metrics = algo.sync(state, everyone(K, mesh))
    new_residual = get(state.algo.exchange.residual_K)
    partner = topo.neighbors(r)[0]
    for leaf in x:
      acc = beta_e * residual[leaf] + x[leaf]
      sent = np.stack([np.asarray(codecs.roundtrip(codec, a)) for a in acc])
      # Per worker: what was sent plus what is carried over is the accumulated message.
      np.testing.assert_allclose(sent + new_residual[leaf], acc, atol=1e-6)
      np.testing.assert_allclose(new_residual[leaf], acc - sent, atol=1e-6)
      assert np.any(new_residual[leaf])  # lossy: something is carried over
      # The step used the decoded payloads' Laplacian, (Λ x̂)_k = x̂_k − x̂_partner.
      lap = sent - sent[partner]
      if name == "noloco":
        a, b, g = cfg.noloco.alpha, cfg.noloco.beta, cfg.noloco.gamma
        theta, phi = before.params_K[leaf], before.algo.outer_params_K[leaf]
        z = a * theta + (g - a) * phi
        m = b * before.algo.outer_momentum_K[leaf] + (z - lap / 2) - g * phi
        np.testing.assert_allclose(get(state.algo.outer_momentum_K)[leaf], m, atol=1e-6)
        np.testing.assert_allclose(get(state.params_K)[leaf], phi + m, atol=1e-6)
      else:
        eta, gamma = cfg.gasloc.eta, cfg.gasloc.gamma
        start = before.algo.start_K[leaf]
        y = start + eta * (before.params_K[leaf] - start)
        new = y - 0.5 * lap + gamma * (y - before.algo.y_prev_K[leaf])
        np.testing.assert_allclose(get(state.params_K)[leaf], new, atol=1e-6)
    norm = np.sqrt(
        np.mean(sum(np.sum(v.reshape(K, -1) ** 2, 1) for v in new_residual.values()))
    )
    np.testing.assert_allclose(metrics["ef_residual_norm"], norm, rtol=1e-5)
    residual = new_residual


def test_identity_with_error_feedback_keeps_a_zero_residual_and_todays_steps():
  for name, topo, extra in CASES.values():
    mesh = replicas.make_mesh(K, 1)
    _, ref, _ = run_rounds(gossip_config(name, topo, **extra), mesh, [2, 2])
    _, got, _ = run_rounds(gossip_config(name, topo, ef_beta=1.0, **extra), mesh, [2, 2])
    for leaf in jax.tree.leaves(get(got.algo.exchange.residual_K)):
      assert not np.any(leaf)
    chex.assert_trees_all_close(get(got.params_K), get(ref.params_K), atol=1e-6)


# ----------------------------------------------------------------------------
# Resume.


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_round_trip_with_residuals_resumes_exactly(case, tmp_path):
  name, topo, extra = CASES[case]
  cfg = gossip_config(name, topo, "int8", ef_beta=0.9, **extra)
  cfg.compress.block_size = 16
  mesh = replicas.make_mesh(K, 2)
  hs = [2, 2, 2, 2]
  _, uninterrupted, _ = run_rounds(cfg, mesh, hs)
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  data, start = tokens(K, sum(hs)), 0

  def read(n):
    nonlocal start
    start += n
    return data[:, start - n : start]

  for h in hs[:2]:
    state, _ = rounds_lib.run_round(algo, state, read, h, max(hs), mesh)
  assert any(np.any(x) for x in jax.tree.leaves(get(state.algo.exchange.residual_K)))
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(start, state, {"step": start})
  ckpt.close()
  like = state_lib.place(algo.init_state(toy_params()), mesh)
  _, state, _ = checkpoint.load_state(str(tmp_path), like)
  for h in hs[2:]:
    state, _ = rounds_lib.run_round(algo, state, read, h, max(hs), mesh)
  chex.assert_trees_all_equal(get(state), get(uninterrupted))
  assert algo.sync._cache_size() == 1


# ----------------------------------------------------------------------------
# What is still refused.


@pytest.mark.parametrize("name", ["noloco", "gasloc"])
def test_gossip_refuses_streaming_by_name(name):
  cfg = gossip_config(name, codec="int8")
  cfg.stream.fragments = 2
  with pytest.raises(ValueError, match="does not stream: stream.fragments"):
    registry.from_config(cfg)
  cfg = gossip_config(name, codec="int8")
  cfg.stream.tau = 1
  with pytest.raises(ValueError, match="does not stream"):
    registry.from_config(cfg)


@pytest.mark.parametrize("case", ["noloco-matching", "gasloc-torus-mixed"])
def test_compressed_sharded_equals_vmapped(case):
  """Payloads decoded on another device (ppermute) equal those decoded locally.

  Each round's inner steps run once (one device); the same pre-sync state then
  goes through the sync on four devices and on one. Comparing whole runs
  instead would compare inner steps laid out differently, whose last-bit
  differences int8 rounding can turn into a whole quantum (CI saw two such
  elements in 512); the claim is about the exchange, so the exchange gets the
  same input."""
  name, topo, extra = CASES[case]
  cfg = gossip_config(name, topo, "int8", ef_beta=0.9, **extra)
  mesh1, mesh4 = replicas.make_mesh(K, 1), replicas.make_mesh(K, 4)
  algo1, algo4 = registry.make(cfg, toy_loss, mesh1), registry.make(cfg, toy_loss, mesh4)
  state = state_lib.place(algo1.init_state(toy_params()), mesh1)
  data, h = tokens(K, 6), 2
  for r in range(3):
    batches = replicas.put_workers(data[:, r * h : (r + 1) * h], mesh1)
    pre_sync = get(algo1.inner(state, batches, np.int32(h)))
    s1, m1 = algo1.sync(state_lib.place(pre_sync, mesh1), everyone(K, mesh1))
    s4, m4 = algo4.sync(state_lib.place(pre_sync, mesh4), everyone(K, mesh4))
    np.testing.assert_allclose(get(m4)["loss_mean"], get(m1)["loss_mean"], rtol=1e-6)
    chex.assert_trees_all_close(get(s4), get(s1), rtol=1e-6, atol=1e-7)
    state = s1


# ----------------------------------------------------------------------------
# The trainer end to end.


@pytest.mark.slow
@pytest.mark.parametrize("name", ["noloco", "gasloc"])
def test_trainer_resumes_a_compressed_gossip_run_exactly(name, tmp_path, capsys):
  """A tiny run with int8 messages and error feedback, cut at a checkpoint and
  resumed, equals the uninterrupted run (records, bytes, time, final state,
  residuals included), and the clock counts the encoded payloads."""
  import os
  import shutil

  from autoloco_jax.run import trainer
  from configs import gasloc as gasloc_config, noloco as noloco_config
  from tests.helpers import rounds, tiny

  module = {"noloco": noloco_config, "gasloc": gasloc_config}[name]
  overrides = {
      "compress.codec": "int8",
      "compress.ef_beta": 0.9,
      "network.step_time": 0.01,
      "network.name": "hetero",
      "checkpoint.every_rounds": 1,
      "checkpoint.keep": 100,
      "total_steps": 12,
      "interval.h": 2,
  }
  full, cut = tmp_path / "full", tmp_path / "cut"
  summary = trainer.train_and_evaluate(tiny(module, **overrides), str(full))
  records = rounds(str(full))
  assert all(np.isfinite(r["loss_mean"]) and r["ef_residual_norm"] > 0 for r in records)
  run = trainer.setup(tiny(module, **overrides))
  params = jax.tree.map(lambda x: x[0], run.state.params_K)
  encoded = codecs.tree_encoded_bytes(codecs.int8(), params)
  assert summary["bytes_per_worker"] == pytest.approx(len(records) * encoded)

  at = records[2]["step"]
  shutil.copytree(full, cut)
  for entry in os.listdir(cut / "checkpoints"):
    if entry.isdigit() and int(entry) > at:
      shutil.rmtree(cut / "checkpoints" / entry)
  capsys.readouterr()
  resumed = trainer.train_and_evaluate(tiny(module, **overrides), str(cut))
  assert f"Resumed from the checkpoint at inner step {at}" in capsys.readouterr().out
  timing = trainer.TIMING_FIELDS
  strip = lambda rs: [{k: v for k, v in r.items() if k not in timing} for r in rs]
  assert strip(rounds(str(cut))) == strip(records)
  for key in ("bytes_per_worker", "sim_time", "syncs", "final_eval_loss"):
    assert resumed[key] == summary[key], key
  _, a, _ = trainer.load_run(tiny(module, **overrides), str(full))
  _, b, _ = trainer.load_run(tiny(module, **overrides), str(cut))
  chex.assert_trees_all_equal(get(a), get(b))
