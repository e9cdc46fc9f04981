"""Gossip AdamW (gossip/gossip_adamw.py): its gossip step is the mixing matrix
``W = I − wΛ`` on every topology, the complete graph with ``w = 1/K`` is the
all-reduce form (DiLoCo with outer ``(α, β) = (1, 0)``), and it is GASLoC's step
with ``η = 1``, ``γ = 0``."""

import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.gossip import topology
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


def gossip_config(K=4, h=2, topo="ring", weight=0.0, total=40):
  c = config("gossip_adamw", K=K, h=h, total=total)
  c.gossip.topology = topo
  c.gossip_adamw.weight = weight
  return c


@pytest.mark.parametrize(
    "topo,weight",
    [("ring", 0.0), ("ring", 0.2), ("exponential", 0.0), ("matching", 0.0),
     ("torus", 0.1), ("complete", 0.0)],
)
def test_gossip_step_is_the_mixing_matrix(topo, weight):
  """After the local steps θ', every worker's new weights are ``(W θ')_k`` with
  ``W = I − wΛ``, ``Λ`` the round's Laplacian (``w = 1/(d+1)`` by default)."""
  K, h = 4, 2
  cfg = gossip_config(K=K, h=h, topo=topo, weight=weight)
  mesh = replicas.make_mesh(K, 2)
  algo = registry.make(cfg, toy_loss, mesh)
  topo_ = topology.from_config(cfg)
  w = weight or 1.0 / (topo_.degree + 1)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  data = tokens(K, 2 * h)
  for r in range(2):
    state = algo.inner(
        state, replicas.put_workers(data[:, r * h : (r + 1) * h], mesh), np.int32(h)
    )
    theta = get(state.params_K)
    state, _ = algo.sync(state, everyone(K, mesh))
    W = np.eye(K) - w * topo_.laplacian(r)
    np.testing.assert_allclose(W.sum(1), 1.0)  # a mixing matrix keeps the mean
    want = jax.tree.map(lambda t: np.tensordot(W, t, axes=1), theta)
    assert_trees_close(get(state.params_K), want, atol=1e-6)
  assert algo.name == "gossip_adamw" and algo.sync._cache_size() == 1


def test_complete_graph_is_the_all_reduce_form():
  """``w = 1/K`` on the complete graph: every worker gets the mean of the
  locally trained models, as DiLoCo with ``α = 1``, ``β = 0`` (local SGD)."""
  K, h, hs = 4, 2, [2, 2, 2]
  g_cfg = gossip_config(K=K, h=h, topo="complete")
  d_cfg = config("diloco", K=K, h=h, lr=1.0, momentum=0.0, total=40)
  mesh = replicas.make_mesh(K, 2)
  _, g_state, g_metrics = run_rounds(g_cfg, mesh, hs)
  _, d_state, d_metrics = run_rounds(d_cfg, mesh, hs)
  assert_trees_close(get(g_state.params_K), get(d_state.params_K), atol=2e-6)
  for gm, dm in zip(g_metrics, d_metrics):
    np.testing.assert_allclose(gm["loss_mean"], dm["loss_mean"], rtol=1e-5)
    assert float(gm["spread"]) < 1e-5  # one model, K copies


def test_it_is_gasloc_with_eta_one_and_no_momentum():
  """Bit for bit GASLoC's round with ``η = 1``, ``γ = 0``, ``α = w``."""
  K, h, hs = 4, 2, [2, 2]
  g_cfg = gossip_config(K=K, h=h, topo="ring", weight=0.25)
  a_cfg = config("gasloc", K=K, h=h, lr=1.0, momentum=0.0, total=40)
  a_cfg.gossip.topology, a_cfg.gasloc.alpha = "ring", 0.25
  mesh = replicas.make_mesh(K, 1)
  _, g_state, _ = run_rounds(g_cfg, mesh, hs)
  _, a_state, _ = run_rounds(a_cfg, mesh, hs)
  for a, b in zip(jax.tree.leaves(get(g_state.params_K)), jax.tree.leaves(get(a_state.params_K))):
    np.testing.assert_array_equal(a, b)



@pytest.mark.parametrize("eta", [2.0, 3.0])
def test_at_one_step_a_round_gasloc_without_momentum_is_gossip_adamw_at_eta_times_the_lr(eta):
  """With ``H = 1`` and ``γ = 0``, GASLoC's ``y = θ + η(θ' − θ)`` scales the one
  AdamW step by ``η``; AdamW's step is linear in its learning rate (the moments
  read only gradients), so this is gossip AdamW with the inner learning rate
  (and its schedule) times ``η``, ``w = α``: GASLoC's ``η`` is a step size, and
  the G1 study's ``gasloc_g0`` is gossip AdamW with its learning rate tuned.

  Equal up to rounding, which AdamW can amplify: the two compute ``η·d`` in
  different orders, and an early AdamW step is close to ``sign(g)``, so a
  last-bit change in a gradient that nearly cancels moves that element by up to
  a step. Measured: 2.4e-7 apart after six rounds at ``η = 2`` on both CPUs;
  at ``η = 3`` 2.4e-7 on Intel but 5.3e-4 in a few elements from round 2 on AMD
  (``‖a − g‖ / ‖a − base‖`` = 7.5e-5, ``base`` the run at the shared learning
  rate; one of them, on worker 3, had AdamW's ``ν`` = 1.8e-16 after round 2: a
  gradient of about 1e-8, whose rounding AdamW's step normalises). So the first round is compared to rounding, and six rounds in
  relative norm against the distance to ``base``."""
  K, hs = 4, [1] * 6
  a_cfg = config("gasloc", K=K, h=1, lr=eta, momentum=0.0, total=40)
  a_cfg.gossip.topology, a_cfg.gasloc.alpha = "ring", 0.25
  g_cfg = gossip_config(K=K, h=1, topo="ring", weight=0.25)
  g_cfg.inner.lr = a_cfg.inner.lr * eta
  mesh = replicas.make_mesh(K, 1)
  a_rounds, g_rounds = [], []
  _, _, a_metrics = run_rounds(a_cfg, mesh, hs, each=lambda s: a_rounds.append(get(s.params_K)))
  _, _, g_metrics = run_rounds(g_cfg, mesh, hs, each=lambda s: g_rounds.append(get(s.params_K)))
  assert_trees_close(a_rounds[0], g_rounds[0], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(a_metrics[0]["loss_mean"], g_metrics[0]["loss_mean"], rtol=1e-6)
  for am, gm in zip(a_metrics, g_metrics):
    np.testing.assert_allclose(am["loss_mean"], gm["loss_mean"], rtol=1e-4)
  # Not the same run at the shared learning rate: the step size is the difference.
  _, base_state, _ = run_rounds(gossip_config(K=K, h=1, topo="ring", weight=0.25), mesh, hs)
  flat = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree.leaves(tree)])
  a, g, base = flat(a_rounds[-1]), flat(g_rounds[-1]), flat(get(base_state.params_K))
  assert np.linalg.norm(a - base) > 1.0
  assert np.linalg.norm(a - g) < 1e-3 * np.linalg.norm(a - base)


def test_a_bad_weight_is_refused_by_name():
  with pytest.raises(ValueError, match=r"gossip_adamw\.weight"):
    registry.make(gossip_config(weight=-0.1), toy_loss, replicas.make_mesh(4, 1))
