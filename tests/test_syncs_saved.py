"""The syncs-saved metric against hand-computed cases: the pooled frontier fit,
the inversion, the bootstrap interval, the tolerance and the seed count."""

import math

import numpy as np
import pytest

from experiments import seed_stats, syncs_saved


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
  assert seed_stats.seeds_needed(0.02, 0.01) == 18
  assert seed_stats.seeds_needed(0.001, 0.01) == 10  # never fewer than 10
  assert seed_stats.half_width(0.02, 18) <= 0.01 < seed_stats.half_width(0.02, 17)


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


def _monotone_case():
  """Two seeds on S = (10, 20, 40), seed 1 = seed 0 + 0.2: losses (3.0, 2.6, 2.8)
  and (3.2, 2.8, 3.0). Seed-centred: (0.2, -0.2, 0.0) on both; the last two
  violate monotonicity, so the isotonic fit pools them: g = (0.2, -0.1, -0.1),
  a = (2.8, 3.0)."""
  fs = np.array([[10.0, 20.0, 40.0]] * 2)
  fl = np.array([[3.0, 2.6, 2.8], [3.2, 2.8, 3.0]])
  return fs, fl


def test_monotone_fit_by_hand():
  fs, fl = _monotone_case()
  a, x, g, resid = syncs_saved.fit_monotone_frontier(fs, fl)
  np.testing.assert_allclose(a, [2.8, 3.0])
  np.testing.assert_allclose(x, np.log([10.0, 20.0, 40.0]))
  np.testing.assert_allclose(g, [0.2, -0.1, -0.1])
  # Residuals (0, -0.1, 0.1) on both seeds; 6 points - 2 intercepts - 1 free level.
  assert resid == pytest.approx(math.sqrt(0.04 / 3))
  # Columns in any order give the same fit; unequal sync counts are refused.
  a2, x2, g2, _ = syncs_saved.fit_monotone_frontier(fs[:, ::-1], fl[:, ::-1])
  np.testing.assert_allclose(g2, g)
  with pytest.raises(ValueError, match="same sync counts"):
    syncs_saved.fit_monotone_frontier([[10.0, 20.0], [10.0, 30.0]], [[1.0, 0.9]] * 2)


def test_monotone_inversion_by_hand():
  fs, fl = _monotone_case()
  a, x, g, _ = syncs_saved.fit_monotone_frontier(fs, fl)
  # Seed 0, loss 2.85: v = 0.05, half of the way from g = 0.2 to -0.1
  # in log S from 10 to 20: S* = 10 sqrt(2); with 12 syncs, 1 - 12 / 14.14 saved.
  # Seed 1, loss 2.9: v = -0.1, where g is flat from 20 to 40: S* = 20, the start.
  saved, delta, needed = syncs_saved.per_seed_monotone(a, x, g, [12.0, 15.0], [2.85, 2.9])
  np.testing.assert_allclose(needed, [10 * math.sqrt(2), 20.0])
  np.testing.assert_allclose(saved, [1 - 12 / (10 * math.sqrt(2)), 0.25])
  # At equal syncs: seed 0's frontier at 12 syncs is 2.8 + 0.2 - 0.3 log2(1.2).
  assert delta[0] == pytest.approx(2.85 - (3.0 - 0.3 * math.log2(1.2)))
  assert delta[1] == pytest.approx(2.9 - (3.0 + 0.2 - 0.3 * math.log2(1.5)))
  # Outside the frontier's loss range (worse than 10 syncs, better than 40): no S*.
  saved, _, needed = syncs_saved.per_seed_monotone(a, x, g, [12.0, 15.0], [3.05, 2.85])
  assert np.isnan(needed).all() and np.isnan(saved).all()


def test_monotone_model_in_the_bootstrap():
  # On an exactly log-linear frontier the two models agree (piecewise linear
  # in log S through points on one line is that line).
  fs, fl, syncs, loss = _exact_case()
  out = syncs_saved.bootstrap(fs, fl, syncs, loss, samples=500, model="monotone")
  np.testing.assert_allclose(out["per_seed_saved"], [0.2, 0.4])
  assert out["model"] == "monotone" and out["slope"] == pytest.approx(-0.1)
  assert out["saved"]["low"] == pytest.approx(0.2)
  assert out["saved"]["high"] == pytest.approx(0.4)
  # A seed whose loss the frontier cannot reach drops out of the saving's mean.
  fs, fl = _monotone_case()
  out = syncs_saved.bootstrap(fs, fl, [12.0, 15.0], [2.85, 3.3], samples=200, model="monotone")
  assert out["needed_in_range"] == 1
  assert out["saved"]["mean"] == pytest.approx(1 - 12 / (10 * math.sqrt(2)))
  assert math.isnan(out["saved_t"]["mean"])  # one seed: no t-interval
  with pytest.raises(ValueError, match="unknown frontier model"):
    syncs_saved.bootstrap(fs, fl, [12.0, 15.0], [2.85, 2.9], model="spline")


def test_widest_ignores_a_nan_interval():
  boot = dict(mean=0.1, low=0.0, high=0.2, half_width=0.1)
  nan = dict(mean="nan", low="nan", high="nan", half_width="nan")
  out = syncs_saved.widest({"saved": boot, "saved_t": nan})
  assert (out["low"], out["high"]) == (0.0, 0.2)
  assert math.isnan(syncs_saved.widest({"saved": nan, "saved_t": nan})["low"])


def test_lack_of_fit_by_hand():
  # The monotone case: the line through x = log(10, 20, 40) fits the centred
  # (0.2, -0.2, 0) of both seeds with slope -0.2 / ln 4 per e-fold: fitted
  # centred values (0.1, 0, -0.1), RSS_line = 2 (0.01 + 0.04 + 0.01) = 0.12.
  # Free levels fit exactly: RSS_free = 0 -> no test (NaN). Add noise to seed 1
  # that the levels cannot follow: (+0.01, -0.01, 0) on seed 1's raw losses.
  fs, fl = _monotone_case()
  assert math.isnan(syncs_saved.lack_of_fit(fs, fl)["F"])
  fl = fl + np.array([[0.0, 0.0, 0.0], [0.01, -0.01, 0.0]])
  out = syncs_saved.lack_of_fit(fs, fl)
  a, b, _ = syncs_saved.fit_frontier(fs, fl)
  rss_line = ((fl - (a[:, None] + b * np.log(fs))) ** 2).sum()
  # Free levels: column means of the seed-centred losses; residuals +-(0.005,
  # -0.005, 0) on the two seeds: RSS_free = 4 * 0.005^2 = 1e-4.
  assert out["df1"] == 1 and out["df2"] == 2
  assert out["F"] == pytest.approx((rss_line - 1e-4) / (1e-4 / 2))
  assert 0 <= out["p"] < 0.05
  # On an exact line the test does not reject.
  fs, fl, _, _ = _exact_case()
  noisy = fl + np.array([[0.001, -0.001, 0.0], [-0.001, 0.001, 0.0]])
  assert syncs_saved.lack_of_fit(fs, noisy)["p"] > 0.05


# --- the one reading: line, monotone, flat stretch ----------------------------------


def _wrong_way_frontier():
  """Four sync counts 25, 50, 100, 200 on two seeds (offsets 0 and +0.1); the
  means at 100 and 200 run the wrong way (2.10 then 2.12), so the monotone fit
  pools them into one level 2.11 (seed-centred: 2.11 - 2.2 = -0.09)."""
  fs = np.array([[25.0, 50.0, 100.0, 200.0]] * 2)
  base = np.array([2.40, 2.25, 2.10, 2.12])
  return fs, np.stack([base, base + 0.1])


def test_flat_stretches_by_hand():
  fs, fl = _wrong_way_frontier()
  a, x, g, _ = syncs_saved.fit_monotone_frontier(fs, fl)
  np.testing.assert_allclose(a, [2.2175, 2.3175])
  # Centred column means: 0.1825, 0.0325, -0.1175, -0.0975 -> the last two pool.
  np.testing.assert_allclose(g, [0.1825, 0.0325, -0.1075, -0.1075])
  (level, low, high), = syncs_saved.flat_stretches(x, g)
  assert (level, low, high) == (pytest.approx(-0.1075), pytest.approx(100.0), pytest.approx(200.0))
  # A strictly falling frontier has none.
  assert syncs_saved.flat_stretches(x, np.array([0.3, 0.2, 0.1, 0.0])) == []


def test_on_flat_stretch_uses_the_tolerance_around_the_level():
  fs, fl = _wrong_way_frontier()
  a = np.array([2.2175, 2.3175])
  # A candidate 0.003 above the level on average, tolerance 0.005: on it.
  on = a + (-0.1075 + 0.003)
  assert syncs_saved.on_flat_stretch(fs, fl, on, 0.005) == [pytest.approx(100.0), pytest.approx(200.0)]
  # 0.01 above it: not.
  assert syncs_saved.on_flat_stretch(fs, fl, a + (-0.1075 + 0.01), 0.005) is None


def _entry(low, high, flat=None):
  """A bootstrap entry whose saved and delta intervals are [low, high]."""
  ci = dict(mean=(low + high) / 2, low=low, high=high, half_width=(high - low) / 2)
  return dict(saved=ci, delta=ci, saved_t=ci, delta_t=ci, flat_stretch=flat)


KEPT, REJECTED = dict(p=0.4, F=1.0, df1=4, df2=95), dict(p=0.001, F=9.0, df1=4, df2=95)


@pytest.mark.parametrize(
    "line, monotone, fit, model, verdict",
    [
        # The line is kept: its saving is read, whatever the monotone one says.
        (_entry(0.15, 0.35), _entry(-0.5, -0.2), KEPT, "loglinear", "better"),
        (_entry(-0.35, -0.15), _entry(0.2, 0.5), KEPT, "loglinear", "worse"),
        (_entry(-0.05, 0.08), _entry(0.2, 0.5), KEPT, "loglinear", "equal"),
        (_entry(-0.2, 0.3), _entry(0.2, 0.5), KEPT, "loglinear", "inconclusive"),
        # Rejected: the monotone saving, both signs.
        (_entry(-0.1, 0.1), _entry(0.1, 0.3), REJECTED, "monotone", "better"),
        (_entry(-0.1, 0.1), _entry(-0.5, -0.1), REJECTED, "monotone", "worse"),
        # Rejected and on a flat stretch: neither a saving nor a cost.
        (_entry(-0.1, 0.1), _entry(-0.5, -0.1, [100.0, 150.0]), REJECTED, "monotone", "inconclusive"),
        (_entry(-0.1, 0.1), _entry(0.1, 0.5, [100.0, 150.0]), REJECTED, "monotone", "inconclusive"),
    ],
)
def test_one_reading_for_every_study(line, monotone, fit, model, verdict):
  out = syncs_saved.reading(line, monotone, fit)
  assert out["model"] == model and out["verdict"] == verdict
  flat = model == "monotone" and monotone["flat_stretch"]
  assert (out["saved"] is None) == bool(flat)
  assert ("flat from 100 to 150 syncs" in out["why"]) == bool(flat)
