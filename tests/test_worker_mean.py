"""The two means over workers (runtime/replicas.py): the unrolled one, which the
gossip monitoring uses, is the mean over every worker on any mesh, within float
rounding of the reduction that training uses; and the monitoring's switch to it
leaves every trained weight as it was."""

import jax
import numpy as np
import pytest

from autoloco_jax.runtime import replicas
from tests.helpers import config, get, run_rounds


def _mean_over_mesh(mean, tree_K, mesh):
  specs = jax.tree.map(lambda _: replicas.WORKERS, tree_K)
  fn = replicas.map_workers(mean, mesh, in_specs=(specs,), out_specs=replicas.REPLICATED)
  return jax.device_get(jax.jit(fn)(replicas.put_workers(tree_K, mesh)))


@pytest.mark.parametrize("K, D", [(8, 1), (8, 2), (8, 4), (4, 4), (3, 1)])
def test_unrolled_mean_is_the_mean_over_every_worker(K, D):
  rng = np.random.default_rng(K + D)
  tree_K = dict(
      w=rng.normal(size=(K, 33, 17)).astype(np.float32),
      b=rng.normal(size=(K, 5)).astype(np.float32),
  )
  mesh = replicas.make_mesh(K, D)
  got = _mean_over_mesh(replicas.worker_mean_unrolled, tree_K, mesh)
  ref = _mean_over_mesh(replicas.worker_mean, tree_K, mesh)
  for name, x in tree_K.items():
    np.testing.assert_allclose(got[name], x.astype(np.float64).mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[name], ref[name], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("algorithm", ["gasloc", "noloco", "gossip_adamw"])
def test_monitoring_on_the_reduction_trains_the_same_weights(algorithm, monkeypatch):
  """The monitoring reads the weights and never writes them: with its means on
  :func:`replicas.worker_mean` instead, the weights after three rounds are equal
  bit for bit, and the spread and move norms agree within rounding."""
  K, hs = 4, [1, 1, 1]
  cfg = config(algorithm, K=K, h=1, lr=1.5, momentum=0.2, total=40)
  cfg.gossip.topology = "ring"
  mesh = replicas.make_mesh(K, 2)
  _, state, metrics = run_rounds(cfg, mesh, hs)
  monkeypatch.setattr(replicas, "worker_mean_unrolled", replicas.worker_mean)
  _, ref_state, ref_metrics = run_rounds(cfg, mesh, hs)
  for a, b in zip(jax.tree.leaves(get(state.params_K)), jax.tree.leaves(get(ref_state.params_K))):
    np.testing.assert_array_equal(a, b)
  for m, r in zip(metrics, ref_metrics):
    for key in ("spread", "delta_norm", "worker_sq_norm"):
      np.testing.assert_allclose(m[key], r[key], rtol=1e-5)
