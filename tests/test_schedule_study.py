"""Issue 41's study grid (``configs/studies/schedule.py``): the candidates
around a tuned constant ``β*``, and the cells it accepts. Its phases run end to
end in ``tests/test_study_modules.py``."""

import pytest

from experiments import engine
from configs.studies import schedule

MANY = engine.parse(schedule, "coarse,many,python")


def test_candidates_are_finer_constants_and_schedules_around_beta_star():
  got = schedule.candidates(MANY, 20, 0.5)
  consts = sorted(v["diloco__beta"] for k, v in got.items() if "_const_" in k)
  assert consts == [0.4, 0.45, 0.55, 0.6]
  warm = got["h20_warm_b0p3_0p5"]
  # 3,000 steps at H = 20: 150 rounds, the warmup their first quarter.
  assert warm["diloco__beta_rounds"] == round(0.25 * 150)
  assert got["h20_lin_b0p3_0p5"]["diloco__beta_rounds"] == 0  # the whole run
  assert got["h20_decay_b0p6_0p4"]["diloco__beta_end"] == 0.4
  assert got["h20_cos_b0p3_0p5"]["diloco__beta_shape"] == "cosine"


def test_candidates_clip_beta_and_drop_duplicates():
  got = schedule.candidates(MANY, 20, 0.9)
  consts = sorted(v["diloco__beta"] for k, v in got.items() if "_const_" in k)
  # 0.9 + 0.05 and 0.9 + 0.1 both clip to 0.95: one run, not two.
  assert consts == [0.8, 0.85, 0.95]
  assert all(0.0 <= v["diloco__beta"] <= schedule.BETA_MAX for v in got.values())
  # ``over`` and ``high`` both end at the clip from 0.7: the first one is kept.
  ends = [k for k, v in got.items() if v.get("diloco__beta_end") == 0.95]
  assert ends == ["h20_over_b0p7_0p95"]
  low = schedule.candidates(MANY, 20, 0.1)
  # ``lin`` and ``deep`` both start at the clip 0 there: one run, ``lin``.
  assert low["h20_lin_b0_0p1"]["diloco__beta"] == 0.0
  assert "h20_deep_b0_0p1" not in low


def test_parse_accepts_its_two_cells_only():
  assert engine.parse(schedule, "tune,base,shakespeare")["phase"] == "tune"
  assert engine.parse(schedule, "report,quick")["regime"] == "base"
  with pytest.raises(ValueError, match="not in"):
    engine.parse(schedule, "coarse,long,python")
  with pytest.raises(ValueError, match="unknown token"):
    engine.parse(schedule, "coarse,many,python,typo")


def test_variants_are_the_chosen_design_with_each_correction():
  """AutoLoCo's variants in many/Python, from the evidence study's committed
  design: the chosen design as committed, its adaptive ``H`` on a schedule with
  no ratio correction (the schedule over the rounds it takes at ``H_ref``), and
  each correction."""
  opts = engine.parse(schedule, "report,many,python")
  sched = dict(diloco__beta=0.3, diloco__beta_end=0.5, diloco__beta_shape="linear",
               diloco__beta_rounds=0)
  got = schedule.variants(opts, (0.7, 0.5), sched)
  auto = got["autoloco"]
  assert auto.algorithm == "autoloco" and auto.autoloco.correction != "none"
  on = got["adaptive_on_schedule"]
  assert on.autoloco.correction == "none"
  assert (on.diloco.beta, on.diloco.beta_end) == (0.3, 0.5)
  assert on.diloco.beta_rounds == 3000 // 20
  assert on.interval.to_dict() == auto.interval.to_dict()
  for label, correction in schedule.CORRECTIONS.items():
    assert got[label].autoloco.correction == correction
    assert got[label].interval.to_dict() == auto.interval.to_dict()


def test_tune_keeps_the_best_schedule_when_the_coarse_pass_ranks_constants_first():
  """many/Python's coarse pass at ``H = 14`` (seed 0): ``β*`` and three finer
  constants ahead of every schedule; the tuning seeds still get the best
  schedule beside the ``TOP`` best and the best finer constant."""
  ranked = ["h14_const_b0p5", "h14_const_b0p55", "h14_const_b0p6", "h14_const_b0p4",
            "h14_warm_b0p3_0p5", "h14_high_b0p3_0p7", "h14_decay_b0p6_0p4"]
  kept = schedule.tune_labels(ranked, "h14_const_b0p5")
  assert kept == {"h14_const_b0p5", "h14_const_b0p55", "h14_const_b0p6", "h14_warm_b0p3_0p5"}
  # Where schedules lead (base/Shakespeare), nothing is added beyond the TOP best.
  ranked = ["h20_top_b0p5_0p95", "h20_high_b0p5_0p9", "h20_over_b0p5_0p8",
            "h20_const_b0p6", "h20_const_b0p7"]
  kept = schedule.tune_labels(ranked, "h20_const_b0p7")
  assert kept == {"h20_const_b0p7", "h20_top_b0p5_0p95", "h20_high_b0p5_0p9", "h20_const_b0p6"}
