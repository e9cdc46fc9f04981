"""The syncs-saved metric against hand-computed cases: the pooled frontier fit,
the inversion, the bootstrap interval, the tolerance and the seed count."""

import math

import numpy as np
import pytest

from experiments import syncs_saved


def test_pooled_fit_by_hand():
  # Seed 0: x = log S = (1, 2), L = (2.0, 1.8); seed 1: x = (1, 3), L = (2.2, 1.8).
  # Centred products: (-0.5)(0.1) + (0.5)(-0.1) + (-1)(0.2) + (1)(-0.2) = -0.5;
  # centred squares: 0.25 + 0.25 + 1 + 1 = 2.5; b = -0.2, a = (2.2, 2.4).
  syncs = np.exp([[1.0, 2.0], [1.0, 3.0]])
  a, b, resid = syncs_saved.fit_frontier(syncs, [[2.0, 1.8], [2.2, 1.8]])
  assert b == pytest.approx(-0.2)
  np.testing.assert_allclose(a, [2.2, 2.4])
  assert resid == pytest.approx(0.0, abs=1e-12)


def _exact_case():
  """Frontier L = a_s - 0.1 log S exactly; candidates that DiLoCo matches at
  200 syncs, reached with 160 (seed 0: 20% saved) and 120 (seed 1: 40%)."""
  a, b = np.array([1.0, 1.1]), -0.1
  fs = np.array([[100.0, 200.0, 400.0]] * 2)
  fl = a[:, None] + b * np.log(fs)
  loss = a + b * math.log(200.0)
  return fs, fl, np.array([160.0, 120.0]), loss


def test_bootstrap_interval_by_hand():
  # Resampling two seeds: the mean saving is 0.2 (both seed 0, p = 1/4), 0.3
  # (one of each, p = 1/2) or 0.4 (p = 1/4), so the 95% interval is [0.2, 0.4].
  fs, fl, syncs, loss = _exact_case()
  out = syncs_saved.bootstrap(fs, fl, syncs, loss, samples=2000)
  np.testing.assert_allclose(out["per_seed_saved"], [0.2, 0.4])
  assert out["saved"]["mean"] == pytest.approx(0.3)
  assert out["saved"]["low"] == pytest.approx(0.2)
  assert out["saved"]["high"] == pytest.approx(0.4)
  # At equal syncs the candidate is below the frontier by 0.1 log(200 / S).
  np.testing.assert_allclose(
      out["per_seed_delta"], [-0.1 * math.log(200 / 160), -0.1 * math.log(200 / 120)]
  )
  assert out["needed_in_range"] == 2 and out["slope"] == pytest.approx(-0.1)
  assert out["tolerance"] == pytest.approx(0.1 * math.log(1 / 0.9))


def test_flat_frontier_defines_no_saving():
  fs = np.array([[100.0, 200.0]] * 2)
  out = syncs_saved.bootstrap(fs, [[1.0, 1.0], [1.1, 1.1]], [150.0, 150.0], [1.0, 1.1], 50)
  assert all(math.isnan(v) for v in out["per_seed_saved"])
  assert out["delta"]["mean"] == pytest.approx(0.0)


def test_seed_count_and_resolution():
  # t_{0.975,17} 0.02 / sqrt(18) = 0.497 <= 0.01 / ... : 18 seeds; 17 give 0.514.
  assert syncs_saved.seeds_needed(0.02, 0.01) == 18
  assert syncs_saved.seeds_needed(0.001, 0.01) == 10  # never fewer than 10
  assert syncs_saved.resolvable(0.02, 18) <= 0.01 < syncs_saved.resolvable(0.02, 17)


def test_from_runs_pairs_by_seed():
  fs, fl, syncs, loss = _exact_case()

  def run(seed, s, l):
    return {"seed": seed, "summary": {"syncs": s, "final_eval_bpb": l}}

  runs = {
      f"H{i}": [run(k, fs[k, i], fl[k, i]) for k in range(2)] for i in range(3)
  }
  runs["cand"] = [run(k, syncs[k], loss[k]) for k in range(2)]
  out = syncs_saved.from_runs(runs, ["H0", "H1", "H2"], "cand")
  assert out["seeds"] == [0, 1] and out["saved"]["mean"] == pytest.approx(0.3)
  runs["cand"] = runs["cand"][::-1]
  with pytest.raises(ValueError, match="same seeds"):
    syncs_saved.from_runs(runs, ["H0", "H1", "H2"], "cand")


def test_t_interval_beside_the_bootstrap():
  # Two seeds saving 0.2 and 0.4: the paired t-interval is 0.3 ± t_{0.975,1}
  # sd / sqrt(2) = 0.3 ± 12.706 * 0.1414 / 1.414 = 0.3 ± 1.2706, far wider than
  # the bootstrap's [0.2, 0.4]; ``widest`` is their union.
  fs, fl, syncs, loss = _exact_case()
  out = syncs_saved.bootstrap(fs, fl, syncs, loss, samples=500)
  assert out["saved_t"]["mean"] == pytest.approx(0.3)
  assert out["saved_t"]["half_width"] == pytest.approx(1.27062, rel=1e-4)
  wide = syncs_saved.widest(out)
  assert wide["low"] == pytest.approx(0.3 - 1.27062, rel=1e-4)
  assert wide["high"] == pytest.approx(0.3 + 1.27062, rel=1e-4)
  # An entry without a t-interval (written before it existed) reads its bootstrap.
  old = {k: v for k, v in out.items() if not k.endswith("_t")}
  assert syncs_saved.widest(old)["high"] == pytest.approx(0.4)
