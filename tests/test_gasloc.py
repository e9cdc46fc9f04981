"""GASLoC on the toy model: the gossip step against hand formulas, the mapping
under which the complete graph is DiLoCo, and per-worker step counts H_k.
"""

import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.gossip import gasloc, topology
from autoloco_jax.runtime import replicas, state as state_lib
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


def gasloc_config(
    K=4,
    h=2,
    eta=0.7,
    gamma=0.9,
    topo="matching",
    alpha=0.0,
    mix_momentum=False,
    speeds=(),
    total=40,
):
  c = config("gasloc", K=K, h=h, lr=eta, momentum=gamma, total=total)
  c.gossip.topology = topo
  c.gasloc.alpha, c.gasloc.mix_momentum = alpha, mix_momentum
  c.network.speed_factors = speeds
  return c


def test_gossip_step_equals_hand_formulas():
  eta, gamma, K, h = 0.8, 0.5, 4, 2
  cfg = gasloc_config(K=K, h=h, eta=eta, gamma=gamma)
  mesh = replicas.make_mesh(K, 2)
  algo = registry.make(cfg, toy_loss, mesh)
  topo = topology.from_config(cfg)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  start = get(state.algo.start_K)
  y_prev = start  # y_{-1} = θ_0
  data = tokens(K, 2 * h)
  for r in range(2):
    state = algo.inner(
        state, replicas.put_workers(data[:, r * h : (r + 1) * h], mesh), np.int32(h)
    )
    theta = get(state.params_K)
    state, metrics = algo.sync(state, everyone(K, mesh))
    # Spec §5 with Λ the matching's Laplacian, (Λy)_k = y_k − y_partner, α = 1/2.
    partner = topo.neighbors(r)[0]
    y = jax.tree.map(lambda s, t: s + eta * (t - s), start, theta)
    new = jax.tree.map(
        lambda y_, yp: y_ - 0.5 * (y_ - y_[partner]) + gamma * (y_ - yp), y, y_prev
    )
    assert_trees_close(get(state.params_K), new)
    assert_trees_close(get(state.algo.y_prev_K), y)
    start, y_prev = new, y
  assert algo.sync._cache_size() == 1
  assert algo.comm_pattern(0, h).kind == "gossip"


def diloco_config(K, h, lr, momentum):
  c = config("diloco", K=K, h=h, lr=lr, momentum=momentum, total=40)
  return c


@pytest.mark.parametrize(
    "gamma,mix_momentum",
    [(0.9, True), (0.0, False)],
    ids=["nesterov-mixed-momentum", "no-momentum-spec-form"],
)
def test_complete_graph_is_diloco(gamma, mix_momentum):
  # The mapping: η = α_DiLoCo, γ = β_DiLoCo, α Λ = I − 11ᵀ/K (α = 1/K, the default
  # 1/(d+1)), and the momentum term mixed too (or γ = β = 0).
  K, h, lr = 4, 2, 0.7
  hs = [h] * 3
  g_cfg = gasloc_config(
      K=K, h=h, eta=lr, gamma=gamma, topo="complete", mix_momentum=mix_momentum
  )
  d_cfg = diloco_config(K, h, lr, gamma)
  mesh = replicas.make_mesh(K, 2)
  _, g_state, g_metrics = run_rounds(g_cfg, mesh, hs)
  _, d_state, d_metrics = run_rounds(d_cfg, mesh, hs)
  assert_trees_close(get(g_state.params_K), get(d_state.params_K), atol=2e-6)
  for gm, dm in zip(g_metrics, d_metrics):
    np.testing.assert_allclose(gm["loss_mean"], dm["loss_mean"], rtol=1e-5)
    np.testing.assert_allclose(gm["delta_norm"], dm["delta_norm"], rtol=1e-4)
    assert float(gm["spread"]) < 1e-5  # one model, K copies


def test_complete_graph_spec_form_mean_follows_diloco_but_replicas_differ():
  # With local momentum (the spec's form) the mean over workers takes DiLoCo's
  # first step, θ_0 − α(1 + β)Δ_0, but each replica keeps its own momentum term:
  # θ_{1,k} = θ_0 + η ḡ + γ η g_k, with g_k = θ_{0,k} − θ_0 the worker's drift.
  K, h, lr, beta = 4, 2, 0.7, 0.9
  mesh = replicas.make_mesh(K, 1)
  algo = registry.make(
      gasloc_config(K=K, h=h, eta=lr, gamma=beta, topo="complete"), toy_loss, mesh
  )
  s = state_lib.place(algo.init_state(toy_params()), mesh)
  theta0 = get(s.params_K)
  s = algo.inner(s, replicas.put_workers(tokens(K, h), mesh), np.int32(h))
  g = jax.tree.map(lambda t, t0: t - t0, get(s.params_K), theta0)
  s, metrics = algo.sync(s, everyone(K, mesh))
  new = get(s.params_K)
  diloco_step = jax.tree.map(
      lambda t0, gk: t0[0] + lr * (1 + beta) * gk.mean(0), theta0, g
  )
  assert_trees_close(jax.tree.map(lambda x: x.mean(0), new), diloco_step)
  expected = jax.tree.map(lambda t0, gk: t0 + lr * gk.mean(0) + beta * lr * gk, theta0, g)
  assert_trees_close(new, expected)
  assert float(metrics["spread"]) > 1e-4


def test_worker_steps_follow_speed_factors():
  np.testing.assert_array_equal(gasloc.worker_steps(10, [1, 1.5, 2, 3]), [10, 6, 5, 3])
  np.testing.assert_array_equal(gasloc.worker_steps(4, [2, 2, 2, 2]), [4, 4, 4, 4])
  np.testing.assert_array_equal(gasloc.worker_steps(2, [1, 100]), [2, 1])


def test_slow_workers_take_fewer_steps():
  # Speed factors (1, 1, 2, 2) and H = 4: workers 2 and 3 stop after 2 steps;
  # their parameters and Adam states are then those of a 2-step run.
  K, h = 4, 4
  mesh = replicas.make_mesh(K, 2)
  data = tokens(K, h)
  hetero = registry.make(
      gasloc_config(K=K, h=h, speeds=(1.0, 1.0, 2.0, 2.0)), toy_loss, mesh
  )
  s = state_lib.place(hetero.init_state(toy_params()), mesh)
  s = hetero.inner(s, replicas.put_workers(data, mesh), np.int32(h))
  hetero_params, hetero_opt = get(s.params_K), get(s.inner_opt_K)
  acc = get(s.acc)
  _, metrics = hetero.sync(s, everyone(K, mesh))

  homo = registry.make(gasloc_config(K=K, h=h), toy_loss, mesh)
  s = state_lib.place(homo.init_state(toy_params()), mesh)
  s = homo.inner(s, replicas.put_workers(data[:, :2], mesh), np.int32(2))
  two = get(s.params_K), get(s.inner_opt_K)
  s = homo.inner(s, replicas.put_workers(data[:, 2:], mesh), np.int32(2))
  four = get(s.params_K), get(s.inner_opt_K)
  pick = lambda tree, ks: jax.tree.map(lambda x: x[np.asarray(ks)], tree)
  assert_trees_close(pick(hetero_params, [2, 3]), pick(two[0], [2, 3]))
  assert_trees_close(pick(hetero_opt, [2, 3]), pick(two[1], [2, 3]))
  assert_trees_close(pick(hetero_params, [0, 1]), pick(four[0], [0, 1]))
  # Statistics count each worker's own steps.
  assert int(acc.steps) == 4
  np.testing.assert_allclose(metrics["worker_steps_mean"], 3.0)
  np.testing.assert_allclose(metrics["loss_mean"], acc.loss_sum_K.sum() / 12, rtol=1e-6)
  np.testing.assert_array_equal(hetero.comm_pattern(0, 4).steps_K, [4, 4, 2, 2])
  np.testing.assert_array_equal(hetero.comm_pattern(0, 3).steps_K, [3, 3, 2, 2])


@pytest.mark.parametrize("topo", ["ring", "matching"])
def test_learns(topo):
  cfg = gasloc_config(K=4, h=3, eta=0.7, gamma=0.5, topo=topo, total=60)
  algo, state, metrics = run_rounds(cfg, replicas.make_mesh(4, 1), [3] * 8)
  assert metrics[-1]["loss_mean"] < metrics[0]["loss_mean"] - 0.1
  evals = get(algo.eval_params(state))
  mean_loss = toy_loss(evals["mean"], tokens(1, 1, seed=9)[0, 0])
  first_loss = toy_loss(toy_params(), tokens(1, 1, seed=9)[0, 0])
  assert mean_loss < first_loss


def test_errors():
  mesh = replicas.make_mesh(4, 1)
  with pytest.raises(ValueError, match=r"config.gasloc.gamma must be in \[0.0, 1.0\)"):
    registry.make(gasloc_config(gamma=1.0), toy_loss, mesh)
  with pytest.raises(ValueError, match="speed_factors"):
    registry.make(gasloc_config(speeds=(1.0, 2.0)), toy_loss, mesh)
