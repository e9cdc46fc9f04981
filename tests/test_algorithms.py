"""The contract every algorithm of ``registry.REGISTRY`` meets, one suite for all.

A new algorithm gets every test here by adding its registry entry (and, below,
its outer-step fields in ``helpers.OUTER_FIELDS`` and the bytes one of its
rounds sends in :data:`BYTES_PER_ROUND`).
"""

import dataclasses

import chex
import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.run import checkpoint
from autoloco_jax.runtime import contract, replicas, state as state_lib
from autoloco_jax.sim import clock as clock_lib, network
from tests.helpers import config, everyone, get, run_rounds, tiny, tokens, toy_loss, toy_params

NAMES = sorted(registry.REGISTRY)
K = 4

#: Bytes one worker sends in a round of ``h`` steps of a model of ``p`` float32
#: parameters, per the algorithm's paper (ring all-reduce: 2 (K-1)/K p b).
RING = lambda p: 2 * (K - 1) / K * p * 4
BYTES_PER_ROUND = {
    "ddp": lambda p, h: h * RING(p),  # a gradient all-reduce per step
    "diloco": lambda p, h: RING(p),  # one pseudo-gradient all-reduce
    "autoloco": lambda p, h: RING(p),
    "noloco": lambda p, h: p * 4,  # its weights to one random peer
    "gasloc": lambda p, h: p * 4,
    "gossip_adamw": lambda p, h: p * 4,  # GASLoC's message, on the same matching
}


SUPPORTS_FAULTS = {
    n: registry.make(config(n, K=K), toy_loss, replicas.make_mesh(K, 1)).supports_faults
    for n in NAMES
}


def test_every_algorithm_is_covered():
  assert set(BYTES_PER_ROUND) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_hyperparameters_are_typed_and_built_from_their_config_group(name):
  hp = registry.from_config(config(name, K=K))
  assert dataclasses.is_dataclass(hp) and hp.name == name
  with pytest.raises(dataclasses.FrozenInstanceError):
    setattr(hp, dataclasses.fields(hp)[0].name, None)
  algo = registry.make(config(name, K=K), toy_loss, replicas.make_mesh(K, 1))
  assert isinstance(algo, contract.Algorithm) and algo.name == name
  assert isinstance(algo.supports_faults, bool)


def test_comm_pattern_and_supports_faults_are_required():
  fields = {f.name: f for f in dataclasses.fields(contract.Algorithm)}
  for required in ("comm_pattern", "supports_faults"):
    assert fields[required].default is dataclasses.MISSING, required


@pytest.mark.parametrize("name", NAMES)
def test_changing_h_does_not_recompile(name):
  algo, state, metrics = run_rounds(
      config(name, K=K), replicas.make_mesh(K, 2), [3, 1, 2, 3]
  )
  assert algo.inner._cache_size() == 1
  assert algo.sync._cache_size() == 1
  assert [int(m["h"]) for m in metrics] == [3, 1, 2, 3]
  assert int(state.step) == 9 and int(state.round) == 4


@pytest.mark.parametrize("name", ["diloco", "autoloco"])
def test_outer_pair_is_an_argument_of_one_compiled_sync(name, monkeypatch):
  """Runs that differ only in the outer ``(α, β)`` lower to one program (so a
  tuning grid compiles its sync once, through the persistent cache), and its
  results are bit for bit those of the pair baked in as constants."""
  mesh = replicas.make_mesh(K, 2)
  texts = []
  for lr, momentum in [(1.0, 0.9), (0.7, 0.5)]:
    algo = registry.make(config(name, K=K, lr=lr, momentum=momentum), toy_loss, mesh)
    state = state_lib.place(algo.init_state(toy_params()), mesh)
    texts.append(algo.sync.lower(state, everyone(K, mesh)).as_text())
  assert texts[0] == texts[1]
  # Rounds of 3, 2 and 3 steps against H = 3: AutoLoCo corrects with r ≠ 1.
  cfg, hs = config(name, K=K, lr=0.7, momentum=0.5), [3, 2, 3]
  if name == "autoloco":
    cfg.autoloco.correction = "both"
  _, traced, m_traced = run_rounds(cfg, mesh, hs)
  hyper_class = type(registry.from_config(cfg))
  monkeypatch.setattr(hyper_class, "outer_hyper", lambda self: {})
  algo, baked, m_baked = run_rounds(cfg, mesh, hs)
  assert algo.sync.hyper == {}
  chex.assert_trees_all_equal(get(traced), get(baked))
  chex.assert_trees_all_equal(m_traced, m_baked)
  corrected = [abs(float(m["outer_lr"]) - 0.7) > 1e-3 for m in m_traced]
  assert any(corrected) == (name == "autoloco")


@pytest.mark.parametrize("name", NAMES)
def test_sharded_equals_vmapped(name):
  hs = [3, 2, 3]
  _, s4, m4 = run_rounds(config(name, K=K), replicas.make_mesh(K, 4), hs)
  _, s1, m1 = run_rounds(config(name, K=K), replicas.make_mesh(K, 1), hs)
  for a, b in zip(m4, m1):
    np.testing.assert_allclose(a["loss_mean"], b["loss_mean"], rtol=1e-6)
  chex.assert_trees_all_close(get(s4), get(s1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_rounds_donate_their_state(name):
  mesh = replicas.make_mesh(K, 2)
  algo = registry.make(config(name, K=K), toy_loss, mesh)
  params = toy_params()  # device arrays the caller keeps using
  state = state_lib.place(algo.init_state(params), mesh)
  before = state
  state = algo.inner(state, replicas.put_workers(tokens(K, 3), mesh), np.int32(3))
  assert all(x.is_deleted() for x in jax.tree.leaves(before.params_K))
  assert all(x.is_deleted() for x in jax.tree.leaves(before.inner_opt_K))
  before = state
  state, _ = algo.sync(state, everyone(K, mesh))
  # Every array buffer is reused; XLA keeps a few replicated scalars (the
  # outer step's alpha_t, beta_t, r_t, the controller's H) in fresh buffers.
  assert all(x.is_deleted() for x in jax.tree.leaves(before) if x.size > 1)
  # Donation consumes the run's own buffers, never the caller's parameters.
  assert not any(x.is_deleted() for x in jax.tree.leaves(params))


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_round_trip_resumes_exactly(name, tmp_path):
  cfg, mesh, hs = config(name, K=K), replicas.make_mesh(K, 2), [3, 2, 3, 1]
  _, uninterrupted, _ = run_rounds(cfg, mesh, hs)

  # Two rounds, a checkpoint, a fresh process's view of it, the last two rounds.
  algo = registry.make(cfg, toy_loss, mesh)
  fresh = state_lib.place(algo.init_state(toy_params()), mesh)
  data, start = tokens(K, sum(hs)), 0
  state = fresh
  for h in hs[:2]:
    state = algo.inner(
        state, replicas.put_workers(data[:, start : start + h], mesh), np.int32(h)
    )
    state, _ = algo.sync(state, everyone(K, mesh))
    start += h
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(start, state, {"step": start})
  ckpt.close()
  like = state_lib.place(algo.init_state(toy_params()), mesh)
  _, state, host = checkpoint.load_state(str(tmp_path), like)
  assert host == {"step": start}
  for h in hs[2:]:
    state = algo.inner(
        state, replicas.put_workers(data[:, start : start + h], mesh), np.int32(h)
    )
    state, _ = algo.sync(state, everyone(K, mesh))
    start += h
  chex.assert_trees_all_equal(get(state), get(uninterrupted))


@pytest.mark.parametrize("name", NAMES)
def test_comm_pattern_agrees_with_the_bytes_logged(name):
  algo = registry.make(config(name, K=K), toy_loss, replicas.make_mesh(K, 1))
  p = 1000
  clock = clock_lib.SimClock(network.NETWORKS["homogeneous"](K), p, step_time=0.01)
  expected = 0.0
  for r, h in enumerate([5, 7, 3]):
    record = clock.advance_round(algo, r, h)
    expected += BYTES_PER_ROUND[name](p, h)
    assert record["bytes_per_worker"] == pytest.approx(expected)
    assert record["round_bytes_per_worker"] == pytest.approx(BYTES_PER_ROUND[name](p, h))


@pytest.mark.parametrize("name", [n for n in NAMES if not SUPPORTS_FAULTS[n]])
def test_unsupported_faults_are_a_clear_error(name, tmp_path):
  from autoloco_jax.run import trainer

  cfg = tiny(**{"faults.drop_prob": 0.5})
  cfg.algorithm = name
  cfg.interval.h = 2
  with pytest.raises(ValueError, match=f"faults are not supported by {name}"):
    trainer.train_and_evaluate(cfg, str(tmp_path))


def test_faults_are_supported_by_the_all_reduce_family():
  assert {n for n in NAMES if SUPPORTS_FAULTS[n]} == {"diloco", "autoloco"}


def test_unknown_algorithm_lists_the_registry():
  cfg = config()
  cfg.algorithm = "fedavg"
  with pytest.raises(ValueError, match="unknown algorithm 'fedavg'.*autoloco"):
    registry.from_config(cfg)


def test_ratio_schedule_replays_its_ratios_on_fixed_rounds():
  """With ``autoloco.ratio_schedule`` the outer step applies the given r_t round
  by round on rounds of H_ref, where the correction alone applies r = 1."""
  mesh = replicas.make_mesh(K, 2)
  hs = [3, 3, 3]
  cfg = config("autoloco", K=K, h=3, lr=0.7, momentum=0.5)
  cfg.autoloco.correction = "momentum"
  _, _, plain = run_rounds(cfg, mesh, hs)
  cfg.autoloco.ratio_schedule = (2.0, 0.5)
  _, _, replayed = run_rounds(cfg, mesh, hs)
  assert [float(m["outer_momentum"]) for m in plain] == pytest.approx([0.5] * 3)
  want = [0.5**2.0, 0.5**0.5, 0.5**0.5]
  assert [float(m["outer_momentum"]) for m in replayed] == pytest.approx(want, rel=1e-6)
