"""NoLoCo on the toy model: the outer step against hand-computed formulas, its
reduction to a DiLoCo-like step, evaluation of the mean model, and its
communication pattern.
"""

import jax
import numpy as np
import optax
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.gossip import topology
from autoloco_jax.runtime import replicas, state as state_lib
from autoloco_jax.sim import clock as clock_lib, network
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


def noloco_config(K=4, h=2, alpha=0.7, beta=0.5, gamma=None, topo="matching", total=40):
  c = config("noloco", K=K, h=h, lr=alpha, momentum=beta, total=total)
  c.gossip.topology = topo
  c.noloco.gamma = gamma
  return c


def test_outer_step_equals_hand_formulas_on_four_devices():
  alpha, beta, gamma, K, h = 0.7, 0.5, 0.3, 4, 2
  cfg = noloco_config(K=K, h=h, alpha=alpha, beta=beta, gamma=gamma)
  mesh = replicas.make_mesh(K, 4)
  algo = registry.make(cfg, toy_loss, mesh)
  topo = topology.from_config(cfg)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  phi, m = get(state.algo.outer_params_K), jax.tree.map(
      np.zeros_like, get(state.algo.outer_params_K)
  )
  data = tokens(K, 3 * h)
  for r in range(3):
    state = algo.inner(
        state, replicas.put_workers(data[:, r * h : (r + 1) * h], mesh), np.int32(h)
    )
    theta = get(state.params_K)
    state, metrics = algo.sync(state, everyone(K, mesh))

    # Spec §4 for the pair G = {k, partner(k)}.
    partner = topo.neighbors(r)[0]
    pair_mean = lambda x: (x + x[partner]) / 2
    delta_bar = jax.tree.map(lambda t, p: pair_mean(t - p), theta, phi)
    phi_bar = jax.tree.map(pair_mean, phi)
    m = jax.tree.map(
        lambda m_, d, pb, p: beta * m_ + alpha * d + gamma * (pb - p),
        m,
        delta_bar,
        phi_bar,
        phi,
    )
    phi = jax.tree.map(np.add, phi, m)
    assert_trees_close(get(state.algo.outer_params_K), phi)
    assert_trees_close(get(state.algo.outer_momentum_K), m)
    assert_trees_close(get(state.params_K), phi)  # θ_k ← φ_k

    mean = jax.tree.map(lambda x: x.mean(0), phi)
    dist = np.sqrt(
        sum(
            ((x - mu) ** 2).reshape(K, -1).sum(1)
            for x, mu in zip(jax.tree.leaves(phi), jax.tree.leaves(mean))
        )
    )
    np.testing.assert_allclose(metrics["spread"], dist.mean(), rtol=1e-4)
    assert int(metrics["pool_index"]) == topo.index(r)
  assert float(metrics["spread"]) > 0  # replicas differ a little
  assert algo.sync._cache_size() == 1  # a new matching never recompiles

  evals = get(algo.eval_params(state))
  assert_trees_close(evals["mean"], mean)
  assert_trees_close(evals["replica"], jax.tree.map(lambda x: x[0], phi))


def test_gamma_zero_on_the_complete_graph_is_diloco_with_heavy_ball_momentum():
  # mean_G over all workers and γ = 0: m ← β m − α Δ_t, φ ← φ + m, i.e.
  # optax.sgd(α, momentum=β) (heavy ball, not Nesterov) on the averaged
  # pseudo-gradient Δ_t; every replica holds the same model.
  alpha, beta, K, h = 0.7, 0.5, 4, 2
  cfg = noloco_config(K=K, h=h, alpha=alpha, beta=beta, gamma=0.0, topo="complete")
  mesh = replicas.make_mesh(K, 2)
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  outer = optax.sgd(alpha, momentum=beta)
  phi = jax.tree.map(lambda x: x[0], get(state.algo.outer_params_K))
  opt = outer.init(phi)
  data = tokens(K, 3 * h)
  for r in range(3):
    state = algo.inner(
        state, replicas.put_workers(data[:, r * h : (r + 1) * h], mesh), np.int32(h)
    )
    theta = get(state.params_K)
    state, _ = algo.sync(state, everyone(K, mesh))
    delta = jax.tree.map(lambda p, t: (p[None] - t).mean(0), phi, theta)
    updates, opt = outer.update(delta, opt, phi)
    phi = optax.apply_updates(phi, updates)
    got = get(state.algo.outer_params_K)
    for k in range(K):
      assert_trees_close(jax.tree.map(lambda x: x[k], got), phi)
  assert algo.comm_pattern(0, h).kind == "allreduce"


def test_learns_and_reports_its_communication():
  cfg = noloco_config(K=4, h=3, total=60)
  mesh = replicas.make_mesh(4, 1)
  algo, state, metrics = run_rounds(cfg, mesh, [3] * 8)
  assert metrics[-1]["loss_mean"] < metrics[0]["loss_mean"] - 0.1
  assert all(np.isfinite(m["spread"]) for m in metrics)
  topo = topology.from_config(cfg)
  for r in range(4):
    pattern = algo.comm_pattern(r, 3)
    assert pattern.kind == "gossip"
    np.testing.assert_array_equal(pattern.neighbors_DxK, topo.neighbors(r))
    np.testing.assert_array_equal(pattern.steps_K, [3] * 4)
  clock = clock_lib.SimClock(
      network.NETWORKS["homogeneous"](4), num_params=256, step_time=0.01
  )
  record = clock.advance_round(algo, 0, 3)
  assert record["bytes_per_worker"] == 256 * 4 and record["messages_per_worker"] == 1


def test_errors():
  mesh = replicas.make_mesh(4, 1)
  cfg = noloco_config(beta=1.0)
  with pytest.raises(ValueError, match=r"config.noloco.beta must be in \[0.0, 1.0\)"):
    registry.make(cfg, toy_loss, mesh)
  cfg = noloco_config()
  cfg.interval.controller = "lr_quadratic"
  with pytest.raises(ValueError, match="fixed interval"):
    registry.make(cfg, toy_loss, mesh)
  cfg = noloco_config(K=3)
  with pytest.raises(ValueError, match="even number of workers"):
    registry.make(cfg, toy_loss, replicas.make_mesh(3, 1))
