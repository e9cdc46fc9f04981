"""The replica axis, the inner loop and the DiLoCo / DDP rounds, on a toy model.

These are specifications: equivalences between algorithms (DiLoCo with K=1,
H=1, outer lr 1, momentum 0 is AdamW), invariances (sharded equals vmapped; H
changes never recompile) and hand-checked arithmetic (the averaged
pseudo-gradient).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.runtime import inner, replicas, rounds, state as state_lib
from tests.helpers import (
    B,
    L,
    assert_trees_close,
    config,
    everyone,
    get,
    run_rounds,
    tokens,
    toy_loss,
    toy_params,
)


def test_diloco_k1_h1_no_momentum_is_adamw():
  cfg = config(K=1, h=1, lr=1.0, momentum=0.0, total=10)
  mesh = replicas.make_mesh(1, 1)
  _, state, metrics = run_rounds(cfg, mesh, [1] * 10)

  sched = inner.schedule(cfg.inner, cfg.total_steps)
  tx = inner.optimizer(cfg.inner, sched)
  params = toy_params()
  opt = tx.init(params)
  data = tokens(1, 10)
  for i in range(10):
    loss, grads = jax.value_and_grad(toy_loss)(params, jnp.asarray(data[0, i]))
    np.testing.assert_allclose(metrics[i]["loss_mean"], loss, rtol=1e-5)
    updates, opt = tx.update(grads, opt, params)
    params = optax.apply_updates(params, updates)
  # θ − (θ − θ') is θ' up to one float rounding per round, hence the tolerance.
  chex.assert_trees_all_close(get(state.algo.global_params), params, rtol=1e-7, atol=1e-6)


def test_sharded_equals_vmapped():
  cfg = config(K=4)
  hs = [3, 2, 4]
  _, s4, m4 = run_rounds(cfg, replicas.make_mesh(4, 4), hs)
  _, s1, m1 = run_rounds(cfg, replicas.make_mesh(4, 1), hs)
  for a, b in zip(m4, m1):
    np.testing.assert_allclose(a["loss_mean"], b["loss_mean"], rtol=1e-6)
    np.testing.assert_allclose(a["delta_norm"], b["delta_norm"], rtol=1e-5)
  assert_trees_close(jax.device_get(s4.params_K), jax.device_get(s1.params_K))


def test_changing_h_does_not_recompile():
  cfg = config(K=4)
  algo, state, metrics = run_rounds(cfg, replicas.make_mesh(4, 2), [3, 1, 2, 3, 1])
  assert algo.inner._cache_size() == 1
  assert algo.sync._cache_size() == 1
  assert [m["h"] for m in metrics] == [3, 1, 2, 3, 1]
  assert int(state.step) == 10


def test_a_padded_chunk_takes_the_same_steps():
  """The staged chunk is the longest round rounded up to a power of two (runs
  with nearby ``H`` share one compiled inner loop); the padding changes no step."""
  sizes = [rounds.chunk_size(0, h) for h in (1, 3, 10, 16, 30, 40, 64, 200)]
  assert sizes == [1, 4, 16, 16, 32, 64, 64, 64]
  assert rounds.chunk_size(20, 60) == 20 and rounds.chunk_size(8, 5) == 8
  cfg, mesh, hs = config(K=4), replicas.make_mesh(4, 2), [3, 2, 3]
  data = tokens(cfg.num_workers, sum(hs))
  results = []
  for chunk in (3, 8):
    algo = registry.make(cfg, toy_loss, mesh)
    state, start = state_lib.place(algo.init_state(toy_params()), mesh), 0
    for h in hs:
      read = lambda n, s=start: data[:, s : s + n]
      state, _ = rounds.run_round(algo, state, read, h, chunk, mesh)
      start += h
    results.append(get(state))
  chex.assert_trees_all_equal(*results)


def test_averaged_pseudo_gradient_is_the_mean_of_worker_moves():
  # Outer lr 1 and momentum 0: θ_{t+1} = θ_t − mean_k (θ_t − θ_{t,k}).
  cfg = config(K=4, lr=1.0, momentum=0.0)
  mesh = replicas.make_mesh(4, 2)
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  theta = get(state.algo.global_params)
  state = algo.inner(state, replicas.put_workers(tokens(4, 3), mesh), np.int32(3))
  fast_K = jax.device_get(state.params_K)
  state, m = algo.sync(state, everyone(4, mesh))

  delta_K = jax.tree.map(lambda t, f: t[None] - f, theta, fast_K)
  delta = jax.tree.map(lambda d: d.mean(0), delta_K)
  expected = jax.tree.map(lambda t, d: t - d, theta, delta)
  chex.assert_trees_all_close(get(state.algo.global_params), expected, rtol=1e-7, atol=1e-6)
  sq = lambda t: sum(float(np.sum(x.astype(np.float64) ** 2)) for x in jax.tree.leaves(t))
  np.testing.assert_allclose(m["delta_norm"], np.sqrt(sq(delta)), rtol=1e-5)
  worker_sq = np.mean([sq(jax.tree.map(lambda d: d[k], delta_K)) for k in range(4)])
  np.testing.assert_allclose(m["worker_sq_norm"], worker_sq, rtol=1e-5)
  np.testing.assert_allclose(m["agreement"], sq(delta) / worker_sq, rtol=1e-5)
  # After the sync every worker starts the next round from θ_{t+1}.
  for k in range(4):
    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(a[k], b),
        jax.device_get(state.params_K),
        jax.device_get(state.algo.global_params),
    )


def test_lr_sum_is_the_sum_of_applied_learning_rates():
  cfg = config(K=2)
  _, _, metrics = run_rounds(cfg, replicas.make_mesh(2, 1), [3, 4])
  sched = inner.schedule(cfg.inner, cfg.total_steps)
  np.testing.assert_allclose(
      metrics[0]["lr_sum"], sum(sched(s) for s in range(3)), rtol=1e-6
  )
  np.testing.assert_allclose(
      metrics[1]["lr_sum"], sum(sched(s) for s in range(3, 7)), rtol=1e-6
  )


def test_ddp_equals_adamw_on_the_global_batch():
  K = 2
  cfg = config("ddp", K=K, h=3)
  _, state, metrics = run_rounds(cfg, replicas.make_mesh(K, 2), [3, 3])
  sched = inner.schedule(cfg.inner, cfg.total_steps)
  tx = inner.optimizer(cfg.inner, sched)
  params = toy_params()
  opt = tx.init(params)
  data = tokens(K, 6)
  for i in range(6):
    # Mean of the workers' mean losses = mean loss over the global K×B batch.
    global_batch = jnp.asarray(data[:, i].reshape(K * B, L + 1))
    grads = jax.grad(toy_loss)(params, global_batch)
    updates, opt = tx.update(grads, opt, params)
    params = optax.apply_updates(params, updates)
  assert_trees_close(jax.device_get(state.algo.params), params)
  # All workers hold the same model: there is one copy of it.
  assert state.params_K is None and state.inner_opt_K is None


def test_mesh_errors():
  with pytest.raises(ValueError, match="not divisible by the device count"):
    replicas.make_mesh(num_workers=3, num_devices=2)
  with pytest.raises(ValueError, match="num_workers must be >= 1"):
    replicas.make_mesh(num_workers=0)
  with pytest.raises(ValueError, match="JAX sees"):
    replicas.make_mesh(num_workers=8, num_devices=64)


def test_unknown_algorithm():
  cfg = config()
  cfg.algorithm = "fedavg"
  with pytest.raises(ValueError, match="unknown algorithm 'fedavg'"):
    registry.make(cfg, toy_loss, replicas.make_mesh(4, 1))


def test_ddp_model_is_one_copy_per_device():
  # DDP's parameters and AdamW moments exist once per device, not K times.
  K, D = 8, 2
  mesh = replicas.make_mesh(K, D)
  algo = registry.make(config("ddp", K=K), toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  state, _ = algo.sync(
      algo.inner(state, replicas.put_workers(tokens(K, 3), mesh), np.int32(3)),
      everyone(K, mesh),
  )
  params = toy_params()
  param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
  device = mesh.devices.flat[0]
  on_device = lambda tree: sum(
      s.data.nbytes
      for x in jax.tree.leaves(tree)
      for s in x.addressable_shards
      if s.device == device
  )
  chex.assert_trees_all_equal_shapes(state.algo.params, params)
  assert on_device(state.algo.params) == param_bytes
  cfg = config("ddp", K=K)
  opt = inner.optimizer(cfg.inner, inner.schedule(cfg.inner, cfg.total_steps))
  assert on_device(state.algo.inner_opt) == sum(  # μ, ν and the step count
      x.nbytes for x in jax.tree.leaves(opt.init(params))
  )
  assert state.params_K is None and state.inner_opt_K is None


@pytest.mark.parametrize("name", ["diloco", "autoloco"])
def test_global_state_is_one_copy_per_device(name):
  # θ_t, the outer momentum and the controller exist once per device, not K times.
  K, D = 8, 2
  mesh = replicas.make_mesh(K, D)
  algo = registry.make(config(name, K=K), toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  state, _ = algo.sync(
      algo.inner(state, replicas.put_workers(tokens(K, 3), mesh), np.int32(3)),
      everyone(K, mesh),
  )
  params = toy_params()
  chex.assert_trees_all_equal_shapes(state.algo.global_params, params)
  chex.assert_trees_all_equal_shapes(state.algo.outer_opt.momentum, params)
  device = mesh.devices.flat[0]
  on_device = lambda tree: sum(
      s.data.nbytes
      for x in jax.tree.leaves(tree)
      for s in x.addressable_shards
      if s.device == device
  )
  param_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
  assert on_device(state.algo.global_params) == param_bytes
  assert on_device(state.algo.outer_opt.momentum) == param_bytes
  assert on_device(state.params_K) == K // D * param_bytes
