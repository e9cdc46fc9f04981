"""Streaming, overlapped and eager syncs of the DiLoCo family (stream.py, streaming.py,
fragments.py, diloco.py): equivalences, schedules, state, resume, end to end."""

import os

import chex
import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.diloco import fragments, stream, streaming
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.run import checkpoint
from autoloco_jax.runtime import contract, replicas, rounds as rounds_lib
from autoloco_jax.runtime import state as state_lib
from tests.helpers import (
    assert_trees_close,
    config,
    everyone,
    get,
    run_rounds,
    tokens,
    toy_loss,
    toy_params,
)

K = 4


def stream_config(name="diloco", h=4, **stream):
  cfg = config(name, K=K, h=h)
  for key, value in stream.items():
    cfg.stream[key] = value
  return cfg


# ----------------------------------------------------------------------------
# Fragments.


def test_strided_and_contiguous_fragments_of_the_transformer():
  init, _ = model_lib.make(
      dict(
          vocab_size=32,
          d_model=8,
          num_layers=6,
          num_heads=2,
          mlp_dim=16,
          seq_len=8,
          tie_embeddings=False,
      )
  )
  shapes = jax.eval_shape(init, jax.random.key(0))
  paths = [
      "/".join(str(getattr(e, "key", e)) for e in path)
      for path, _ in jax.tree_util.tree_flatten_with_path(shapes)[0]
  ]

  def fragment_of(ids, name):
    return {ids[i] for i, p in enumerate(paths) if name in p.split("/")}

  strided = fragments.leaf_fragments(shapes, 4, "strided")
  for block in range(6):
    assert fragment_of(strided, f"block_{block}") == {block % 4}
  assert fragment_of(strided, "embed") == {0}
  assert fragment_of(strided, "final_norm") == {5 % 4}
  assert fragment_of(strided, "head") == {5 % 4}
  contiguous = fragments.leaf_fragments(shapes, 3, "contiguous")
  for block in range(6):
    assert fragment_of(contiguous, f"block_{block}") == {block // 2}
  assert fragments.leaf_fragments(shapes, 1, "strided") == [0] * len(paths)


def test_sublayer_units_split_each_block_into_attention_and_mlp():
  """The studies' 2-block model in 4 fragments: block 0's attention (with the
  embedding), its MLP, block 1's attention, its MLP (with the output end); the
  block units of the same tree are unchanged."""
  init, _ = model_lib.make(
      dict(vocab_size=32, d_model=8, num_layers=2, num_heads=2, mlp_dim=16, seq_len=8,
           tie_embeddings=False)
  )
  shapes = jax.eval_shape(init, jax.random.key(0))
  paths = [
      tuple(str(getattr(e, "key", e)) for e in path)
      for path, _ in jax.tree_util.tree_flatten_with_path(shapes)[0]
  ]
  want = {
      ("block_0", "attn"): 0, ("block_0", "attn_norm"): 0,
      ("block_0", "mlp"): 1, ("block_0", "mlp_norm"): 1,
      ("block_1", "attn"): 2, ("block_1", "attn_norm"): 2,
      ("block_1", "mlp"): 3, ("block_1", "mlp_norm"): 3,
      ("embed",): 0, ("final_norm",): 3, ("head",): 3,
  }

  def expected(path):
    return want[path[:2]] if path[0].startswith("block_") else want[path[:1]]

  ids = fragments.leaf_fragments(shapes, 4, "strided", "sublayer")
  assert ids == [expected(p) for p in paths]
  # Contiguous over 4 units in 2 fragments: each block whole, as with blocks.
  assert fragments.leaf_fragments(shapes, 2, "contiguous", "sublayer") == (
      fragments.leaf_fragments(shapes, 2, "contiguous")
  )
  with pytest.raises(ValueError, match="stream.unit"):
    fragments.leaf_fragments(shapes, 2, "strided", "layer")
  with pytest.raises(ValueError, match="stream.unit"):
    stream.Stream(fragments=2, mode="strided", tau=0, mix=0.5, eager=False, unit="x")


def test_a_tree_without_blocks_has_one_unit_per_leaf():
  assert fragments.leaf_fragments(toy_params(), 2, "strided") == [0, 1]  # embed, out
  assert fragments.leaf_fragments(toy_params(), 3, "contiguous") == [0, 1]
  with pytest.raises(ValueError, match="stream.mode"):
    fragments.leaf_fragments(toy_params(), 2, "random")


def test_schedule_and_validation():
  make = lambda **kw: stream.Stream(
      **dict(dict(fragments=1, mode="strided", tau=0, mix=0.5, eager=False), **kw)
  )
  s = make(fragments=4, tau=2)
  assert s.slot_length(20) == 5 and s.slot_length(3) == 1 and s.slot_length(22) == 5
  assert [s.event(r).fragment for r in range(10)] == [0, 0, 1, 1, 2, 2, 3, 3, 0, 0]
  assert [s.event(r).kind for r in range(3)] == ["send", "arrive", "send"]
  assert [s.sends_through(r) for r in range(5)] == [1, 1, 2, 2, 3]
  assert [make(fragments=3).event(r).fragment for r in range(4)] == [0, 1, 2, 0]
  s.check_intervals(12)  # h_f = 3 > 2
  with pytest.raises(ValueError, match=r"stream.tau \(2\) must be < H/P = 2"):
    s.check_intervals(8)
  with pytest.raises(ValueError, match="eager needs"):
    make(eager=True)
  with pytest.raises(ValueError, match="stream.mix"):
    make(mix=1.5)
  with pytest.raises(ValueError, match="stream.tau"):
    registry.make(
        stream_config(h=4, fragments=2, tau=2), toy_loss, replicas.make_mesh(K, 1)
    )


@pytest.mark.parametrize("name", ["ddp", "noloco", "gasloc"])
def test_other_algorithms_refuse_streams_and_ddp_codecs(name):
  cfg = config(name, K=K)
  cfg.compress.codec = "fp4"
  if name == "ddp":  # the gossip methods compress (tests/test_gossip_compress.py)
    with pytest.raises(ValueError, match="uncompressed"):
      registry.from_config(cfg)
  else:
    assert not registry.from_config(cfg).compression.plain
  cfg = config(name, K=K)
  cfg.stream.fragments = 2
  with pytest.raises(ValueError, match="does not stream"):
    registry.from_config(cfg)


# ----------------------------------------------------------------------------
# Equivalences.


def test_one_fragment_no_overlap_is_diloco_bit_for_bit():
  mesh, hs = replicas.make_mesh(K, 2), [3, 2, 3]
  _, ref, m_ref = run_rounds(config("diloco", K=K, h=3), mesh, hs)
  # The streaming path with P = 1 (error feedback with the identity codec
  # sends every pseudo-gradient exactly and keeps a zero residual).
  cfg = stream_config(h=3, mix=0.25, mode="contiguous")
  cfg.compress.ef_beta = 1.0
  _, got, m_got = run_rounds(cfg, mesh, hs)
  chex.assert_trees_all_equal(get(got.params_K), get(ref.params_K))
  chex.assert_trees_all_equal(get(got.algo.global_params), get(ref.algo.global_params))
  chex.assert_trees_all_equal(get(got.algo.outer_opt), get(ref.algo.outer_opt))
  assert not np.any(
      np.concatenate([np.ravel(x) for x in jax.tree.leaves(get(got.algo.residual_K))])
  )
  for a, b in zip(m_got, m_ref):
    for key in b:
      assert a[key] == b[key], key


@pytest.mark.parametrize("autoloco", [False, True])
def test_streaming_is_interleaved_diloco_on_the_fragments(autoloco):
  """P = 2 on the toy model (embed: fragment 0, out: fragment 1): fragment
  r mod 2 syncs at the end of driver round r with its own outer momentum,
  exactly as two DiLoCos offset by H/P, built here by hand."""
  P, H, alpha, beta = 2, 4, 1.0, 0.9
  mesh, hs = replicas.make_mesh(K, 1), [2] * 6
  name = "autoloco" if autoloco else "diloco"
  cfg = stream_config(name, h=H, fragments=P)
  if autoloco:
    cfg.autoloco.correction = "none"  # fixed H = H_ref: r = 1 after the first syncs
  after = []  # the workers' parameters after each driver round
  _, got, metrics = run_rounds(cfg, mesh, hs, each=lambda s: after.append(get(s.params_K)))
  assert [int(m["fragment"]) for m in metrics] == [0, 1, 0, 1, 0, 1]
  assert [int(m["h"]) for m in metrics] == [2, 4, 4, 4, 4, 4]  # steps per fragment
  assert all(int(m["next_h"]) == H // P for m in metrics)

  plain = registry.make(config("diloco", K=K, h=H), toy_loss, mesh)
  state = state_lib.place(plain.init_state(toy_params()), mesh)
  data, start = tokens(K, sum(hs)), 0
  g = jax.tree.map(np.asarray, get(toy_params()))
  m = jax.tree.map(np.zeros_like, g)
  names = ["embed", "out"]  # fragments 0 and 1
  for r, h in enumerate(hs):
    state = plain.inner(
        state, replicas.put_workers(data[:, start : start + h], mesh), np.int32(h)
    )
    start += h
    params_K = get(state.params_K)
    leaf = names[r % P]
    delta = np.mean(g[leaf][None] - params_K[leaf], axis=0)
    m[leaf] = beta * m[leaf] + delta
    g[leaf] = g[leaf] - alpha * (delta + beta * m[leaf])
    params_K[leaf] = np.broadcast_to(g[leaf], params_K[leaf].shape).copy()
    state = state._replace(params_K=replicas.put_workers(params_K, mesh))
    assert_trees_close(after[r], params_K)  # round by round, every fragment
  assert_trees_close(get(got.algo.global_params), g)
  assert_trees_close(get(got.algo.outer_opt.momentum), m)


def test_overlap_merges_with_the_mixing_factor_and_zero_tau_resets():
  """τ = 1, λ = 0.25: after the arrive sync the fragment is
  λ·local + (1 − λ)·global, the other fragment untouched."""
  mesh = replicas.make_mesh(K, 1)
  cfg = stream_config(h=4, fragments=2, tau=1, mix=0.25)
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  data = tokens(K, 3)
  state = algo.inner(state, replicas.put_workers(data[:, :2], mesh), np.int32(2))
  before = get(state.params_K)
  state, m = algo.sync(state, everyone(K, mesh))  # send fragment 0
  assert int(m["sent"]) == 1 and int(m["next_h"]) == 1
  chex.assert_trees_all_equal(get(state.params_K), before)  # nobody waits
  global_ = get(state.algo.global_params)
  state = algo.inner(state, replicas.put_workers(data[:, 2:3], mesh), np.int32(1))
  local = get(state.params_K)
  state, m = algo.sync(state, everyone(K, mesh))  # fragment 0 arrives
  assert int(m["sent"]) == 0 and int(m["next_h"]) == 1 and int(m["fragment"]) == 0
  after = get(state.params_K)
  np.testing.assert_allclose(
      after["embed"], 0.25 * local["embed"] + 0.75 * global_["embed"][None], rtol=1e-6
  )
  chex.assert_trees_all_equal(after["out"], local["out"])


def test_eager_swaps_the_provisional_step_for_the_true_one_on_arrival():
  mesh = replicas.make_mesh(K, 1)
  cfg = stream_config(h=2, tau=1, eager=True)  # P = 1: the whole model
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  data = tokens(K, 3)
  theta = get(toy_params())
  state = algo.inner(state, replicas.put_workers(data[:, :2], mesh), np.int32(2))
  local = get(state.params_K)
  state, _ = algo.sync(state, everyone(K, mesh))
  # Provisional: θ − α(Δ_k + β(β·0 + Δ_k)) with the worker's own Δ_k.
  alpha, beta = 1.0, 0.9
  for leaf in theta:
    d_K = theta[leaf][None] - local[leaf]
    provisional = theta[leaf][None] - alpha * (d_K + beta * d_K)
    np.testing.assert_allclose(get(state.params_K)[leaf], provisional, atol=1e-6)
  new_global = get(state.algo.global_params)
  state = algo.inner(state, replicas.put_workers(data[:, 2:3], mesh), np.int32(1))
  drifted = get(state.params_K)
  state, _ = algo.sync(state, everyone(K, mesh))
  for leaf in theta:
    d_K = theta[leaf][None] - local[leaf]
    provisional = theta[leaf][None] - alpha * (d_K + beta * d_K)
    expected = drifted[leaf] + (new_global[leaf][None] - provisional)
    np.testing.assert_allclose(get(state.params_K)[leaf], expected, atol=1e-5)
  assert not any(np.any(x) for x in jax.tree.leaves(get(state.algo.pending_K)))


# ----------------------------------------------------------------------------
# Resume.

RESUME_CASES = {
    "strided-fp4-ef-in-flight": dict(
        stream=dict(fragments=2, tau=1), compress=dict(codec="fp4", ef_beta=0.9)
    ),
    "eager-topk": dict(
        stream=dict(fragments=2, tau=1, eager=True),
        compress=dict(
            codec="topk", chunk_size=8, density=0.25, value_bits=2, ef_beta=1.0
        ),
    ),
    "no-overlap-int8": dict(stream=dict(fragments=2), compress=dict(codec="int8")),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_checkpoint_round_trip_resumes_exactly_with_fragments_in_flight(case, tmp_path):
  cfg = stream_config("autoloco", h=4)
  for group, values in RESUME_CASES[case].items():
    for key, value in values.items():
      cfg[group][key] = value
  mesh = replicas.make_mesh(K, 2)
  tau = cfg.stream.tau
  hs = [2, 1, 1, 1, 1, 1, 1, 1] if tau else [2, 2, 2, 2]
  _, uninterrupted, _ = run_rounds(cfg, mesh, hs)
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  data, start = tokens(K, sum(hs)), 0

  def read(n):
    nonlocal start
    start += n
    return data[:, start - n : start]

  split = 3  # after a send: fragment 1 is in flight when overlapping
  for h in hs[:split]:
    state, _ = rounds_lib.run_round(algo, state, read, h, max(hs), mesh)
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(start, state, {"step": start})
  ckpt.close()
  like = state_lib.place(algo.init_state(toy_params()), mesh)
  _, state, _ = checkpoint.load_state(str(tmp_path), like)
  for h in hs[split:]:
    state, _ = rounds_lib.run_round(algo, state, read, h, max(hs), mesh)
  chex.assert_trees_all_equal(get(state), get(uninterrupted))
  assert algo.sync._cache_size() == 1 and algo.inner._cache_size() == 1


def test_autoloco_fragments_keep_their_own_lr_sums():
  """Each fragment's S is the inner lr summed over its own period (the first
  sync of fragment p: (p + 1) H/P steps), not the last H/P steps."""
  mesh = replicas.make_mesh(K, 1)
  cfg = stream_config("autoloco", h=6, fragments=3)
  algo, state, metrics = run_rounds(cfg, mesh, [2] * 6)
  setup_lr = contract.Setup.from_config(cfg, toy_loss, mesh).lr_schedule
  lr = np.array([float(setup_lr(s)) for s in range(12)], np.float32)
  expected = [lr[0:2].sum(), lr[0:4].sum(), lr[0:6].sum(), lr[2:8].sum(), lr[4:10].sum()]
  np.testing.assert_allclose([m["lr_sum"] for m in metrics[:5]], expected, rtol=1e-6)
  assert [int(m["h"]) for m in metrics] == [2, 4, 6, 6, 6, 6]
  np.testing.assert_allclose(metrics[5]["ratio"], 1.0)  # a full period at H = H_ref


# ----------------------------------------------------------------------------
# The trainer end to end.


def test_autoloco_streaming_fp4_trains_end_to_end(tmp_path):
  """AutoLoCo's adaptive H with P = 2 strided fragments, τ = 1 and fp4 on the
  tiny config: finite losses, one sync per send, the fp4 all-gather bytes of
  each fragment sent, and the run state round-trips the checkpoint."""
  from autoloco_jax.compression import codecs
  from autoloco_jax.run import trainer
  from configs import autoloco as autoloco_config
  from tests.helpers import rounds, tiny

  cfg = tiny(
      autoloco_config,
      **{
          "stream.fragments": 2,
          "stream.tau": 1,
          "compress.codec": "fp4",
          "network.step_time": 0.01,
          "total_steps": 30,
      },
  )
  workdir = str(tmp_path / "run")
  summary = trainer.train_and_evaluate(cfg, workdir)
  records = rounds(workdir)
  assert all(np.isfinite(r["loss_mean"]) for r in records)
  assert np.isfinite(summary["final_eval_loss"])
  sends = [r for r in records if r["sent"] == 1]
  assert summary["syncs"] == len(sends) and len(sends) >= 3
  assert [r["sent"] for r in records] == [1 - i % 2 for i in range(len(records))]
  assert records[0]["h"] == cfg.interval.h // 2  # H_0 / P
  # After a send, τ steps until the arrival; after an arrival, the rest of the
  # slot of the interval in force (the one the last send chose: H_{t}/P − τ).
  # The last round also takes the steps a stub round would have had.
  P, tau = cfg.stream.fragments, cfg.stream.tau
  for i, (before, r) in enumerate(zip(records, records[1:]), start=1):
    rule = tau if r["sent"] == 0 else max(int(before["interval"]) // P, 1) - tau
    assert r["h"] == rule or (i == len(records) - 1 and r["h"] > rule), (before, r)
  assert len({r["h"] for r in sends[1:]}) > 1  # AutoLoCo's H moved the slots

  run = trainer.setup(cfg)
  params = jax.tree.map(lambda x: x, run.state.algo.global_params)
  ids = fragments.leaf_fragments(params, 2, "strided")
  codec = codecs.fp4(128)
  payload = [
      sum(
          codec.encoded_bytes(x.size)
          for f, x in zip(ids, jax.tree.leaves(params))
          if f == p
      )
      for p in range(2)
  ]
  K_ = cfg.num_workers
  expected = sum((K_ - 1) * payload[r["fragment"]] for r in sends)
  assert summary["bytes_per_worker"] == pytest.approx(expected)
  assert summary["peak_bandwidth"] == pytest.approx(
      max((K_ - 1) * payload[r["fragment"]] for r in sends) / (1 * 0.01)
  )
  assert sum(r["h"] for r in records) == 30


@pytest.mark.slow
def test_trainer_resumes_exactly_from_a_checkpoint_with_a_fragment_in_flight(
    tmp_path, capsys
):
  """A run cut right after a send (its fragment in flight, on device and on
  the simulated clock) and resumed equals the uninterrupted run: records,
  summary bytes and time, final state."""
  import shutil

  from autoloco_jax.run import trainer
  from tests.helpers import rounds, tiny

  overrides = {
      "stream.fragments": 2,
      "stream.tau": 1,
      "stream.eager": True,
      "compress.codec": "topk",
      "compress.density": 0.05,
      "compress.value_bits": 2,
      "compress.ef_beta": 0.9,
      "network.step_time": 0.01,
      "network.name": "hetero",
      "checkpoint.every_rounds": 1,
      "checkpoint.keep": 100,
      "total_steps": 20,
  }
  full, cut = tmp_path / "full", tmp_path / "cut"
  summary = trainer.train_and_evaluate(tiny(**overrides), str(full))
  records = rounds(str(full))
  sends = [r["step"] for r in records if r["sent"] == 1]
  at = sends[2]  # a checkpoint with fragment 0 in flight
  shutil.copytree(full, cut)
  for name in os.listdir(cut / "checkpoints"):
    if name.isdigit() and int(name) > at:
      shutil.rmtree(cut / "checkpoints" / name)
  capsys.readouterr()
  resumed = trainer.train_and_evaluate(tiny(**overrides), str(cut))
  assert f"Resumed from the checkpoint at inner step {at}" in capsys.readouterr().out
  timing = trainer.TIMING_FIELDS
  strip = lambda rs: [{k: v for k, v in r.items() if k not in timing} for r in rs]
  assert strip(rounds(str(cut))) == strip(records)
  for key in (
      "bytes_per_worker",
      "sim_time",
      "syncs",
      "peak_bandwidth",
      "final_eval_loss",
  ):
    assert resumed[key] == summary[key], key
  _, a, _ = trainer.load_run(tiny(**overrides), str(full))
  _, b, _ = trainer.load_run(tiny(**overrides), str(cut))
  chex.assert_trees_all_equal(get(a), get(b))
