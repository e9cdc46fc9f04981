"""The report's paired statistics (experiments/report.py): Student-t intervals of
per-seed differences, their verdicts, the per-seed fixed-H frontier and the
comparisons built from them. Synthetic runs only: nothing is trained."""

import json
import math
import os

import numpy as np
import pytest
from scipy import stats as sstats

from experiments import report, runlog
from tests.helpers import ROOT

DIFFS = [0.01, 0.03, 0.02, 0.04, 0.00]


def run(seed, loss, syncs):
  """A finished run as ``report.load_run`` returns it (the fields compare reads)."""
  return dict(seed=seed, summary=dict(final_eval_bpb=loss, syncs=syncs))


def ci(low, high):
  return dict(n=3, mean=(low + high) / 2, half_width=(high - low) / 2, low=low, high=high)


# --- paired_interval and verdict -----------------------------------------------


def test_paired_interval_is_the_student_t_interval():
  out = report.paired_interval(DIFFS)
  sd = math.sqrt(sum((d - 0.02) ** 2 for d in DIFFS) / 4)  # sample sd, ddof=1
  half = sstats.t.ppf(0.975, 4) * sd / math.sqrt(5)
  assert out["n"] == 5
  assert out["mean"] == pytest.approx(0.02)
  assert out["half_width"] == pytest.approx(half)
  assert out["half_width"] == pytest.approx(2.7764451 * 0.0158113883 / math.sqrt(5))
  assert out["low"] == pytest.approx(0.02 - half)
  assert out["high"] == pytest.approx(0.02 + half)
  assert out["per_seed"] == DIFFS
  # A lower level gives the narrower interval of its own quantile.
  out90 = report.paired_interval(DIFFS, level=0.9)
  assert out90["half_width"] == pytest.approx(sstats.t.ppf(0.95, 4) * sd / math.sqrt(5))
  assert out90["half_width"] < out["half_width"]


def test_paired_interval_of_one_seed_is_unbounded():
  out = report.paired_interval([0.03])
  assert out["n"] == 1 and out["mean"] == pytest.approx(0.03)
  assert out["half_width"] == math.inf
  assert out["low"] == -math.inf and out["high"] == math.inf
  assert report.verdict(out, 0.01) == "inconclusive"


def test_paired_interval_of_identical_differences_has_zero_width():
  out = report.paired_interval([-0.02, -0.02, -0.02])
  assert out["half_width"] == 0.0
  assert out["low"] == out["high"] == pytest.approx(-0.02)
  assert report.verdict(out, 0.01) == "better"
  assert report.verdict(out, 0.03) == "equal"


@pytest.mark.parametrize(
    "low, high, want",
    [
        (-0.05, -0.01, "better"),  # below 0: lower loss
        (-0.004, -0.001, "equal"),  # better, but by less than the tolerance
        (0.01, 0.03, "worse"),
        (0.001, 0.005, "equal"),  # worse, but by less than the tolerance
        (-0.012, -0.001, "better"),  # excludes 0, leaves the tolerance below
        (0.001, 0.012, "worse"),  # excludes 0, leaves the tolerance above
        (-0.005, 0.004, "equal"),
        (-0.01, 0.01, "equal"),  # the tolerance's ends count as inside
        (-0.02, 0.005, "inconclusive"),
        (-0.005, 0.02, "inconclusive"),
        (-0.03, 0.03, "inconclusive"),
    ],
)
def test_verdict(low, high, want):
  assert report.verdict(ci(low, high), tolerance=0.01) == want


MIRROR = {"better": "worse", "worse": "better", "equal": "equal", "inconclusive": "inconclusive"}


@pytest.mark.parametrize(
    "low, high", [(-0.05, -0.01), (-0.004, -0.001), (0.001, 0.005), (-0.02, 0.005), (0.0, 0.02)]
)
def test_verdict_is_the_same_rule_for_both_signs(low, high):
  # The mirrored interval reads the mirrored word, and a quantity where higher is
  # better (a saving) reads the mirror of the same interval as a loss.
  word = report.verdict(ci(low, high), tolerance=0.01)
  assert report.verdict(ci(-high, -low), tolerance=0.01) == MIRROR[word]
  assert report.verdict(ci(low, high), 0.01, lower_is_better=False) == MIRROR[word]


def test_verdict_of_the_hand_computed_interval():
  # 0.02 ± 0.0196: the interval excludes 0 from above.
  out = report.paired_interval(DIFFS)
  assert out["low"] > 0
  assert report.verdict(out, tolerance=0.01) == "worse"
  # Inside a wider tolerance it is a difference too small to matter.
  assert report.verdict(out, tolerance=0.05) == "equal"


# --- the frontier ------------------------------------------------------------------

# (syncs, loss), sorted by syncs; loss falls as syncs grow.
FRONTIER = [(15.0, 2.30), (30.0, 2.10), (60.0, 2.00)]


def test_frontier_loss_at_interpolates_and_is_flat_beyond_the_ends():
  assert report.frontier_loss_at(FRONTIER, 30) == pytest.approx(2.10)
  assert report.frontier_loss_at(FRONTIER, 20) == pytest.approx(2.30 - 0.2 * 5 / 15)
  assert report.frontier_loss_at(FRONTIER, 45) == pytest.approx(2.05)
  assert report.frontier_loss_at(FRONTIER, 5) == pytest.approx(2.30)
  assert report.frontier_loss_at(FRONTIER, 100) == pytest.approx(2.00)


def test_frontier_syncs_at_inverts_frontier_loss_at():
  for syncs in np.linspace(15, 60, 19):
    loss = report.frontier_loss_at(FRONTIER, syncs)
    assert report.frontier_syncs_at(FRONTIER, loss) == pytest.approx(syncs)
  assert report.frontier_syncs_at(FRONTIER, 2.05) == pytest.approx(45.0)
  assert report.frontier_syncs_at(FRONTIER, 2.30) == pytest.approx(15.0)
  assert report.frontier_syncs_at(FRONTIER, 2.00) == pytest.approx(60.0)
  # Outside the frontier's losses: no answer.
  assert report.frontier_syncs_at(FRONTIER, 2.31) is None
  assert report.frontier_syncs_at(FRONTIER, 1.99) is None


def test_frontier_syncs_at_uses_the_lower_envelope():
  # 30 syncs is worse than 20: the frontier reaches 2.2 first at 20 syncs, and
  # 2.1 between 30 (envelope 2.2) and 40.
  pts = [(10.0, 2.4), (20.0, 2.2), (30.0, 2.3), (40.0, 2.0)]
  assert report.frontier_syncs_at(pts, 2.2) == pytest.approx(20.0)
  assert report.frontier_syncs_at(pts, 2.25) == pytest.approx(17.5)
  assert report.frontier_syncs_at(pts, 2.1) == pytest.approx(35.0)


# --- compare on synthetic runs -------------------------------------------------------


def synthetic_runs():
  """Three fixed-H labels and a candidate on seeds 0-2.

  Seed 0: the candidate (30 syncs, 2.05) is 0.05 below the frontier at 30 syncs
  (2.10), which needs 45 syncs for 2.05. Seed 1: (20, 2.20) against the frontier
  (15, 2.32) - (30, 2.12): 2.2533 at 20 syncs, 24 syncs for 2.20. Seed 2: (40, 1.95)
  is below every fixed-H point, so the frontier never reaches its loss.
  """
  return {
      "h10": [run(0, 2.00, 60), run(1, 2.02, 60), run(2, 1.98, 60)],
      "h20": [run(0, 2.10, 30), run(1, 2.12, 30), run(2, 2.08, 30)],
      "h40": [run(0, 2.30, 15), run(1, 2.32, 15), run(2, 2.28, 15)],
      "cand": [run(0, 2.05, 30), run(1, 2.20, 20), run(2, 1.95, 40)],
  }


FRONTIER_LABELS = ("h10", "h20", "h40")


def test_seed_frontier_takes_each_labels_run_of_that_seed():
  runs = synthetic_runs()
  assert report.seed_frontier(runs, FRONTIER_LABELS, 1) == [
      (15, 2.32),
      (30, 2.12),
      (60, 2.02),
  ]
  assert report.seed_frontier(runs, ("h20", "h10"), 2) == [(30, 2.08), (60, 1.98)]


def test_compare_with_a_label_pairs_the_seeds():
  runs = synthetic_runs()
  c = report.compare(runs, "cand", "h20", FRONTIER_LABELS, tolerance=0.01)
  diffs = [2.05 - 2.10, 2.20 - 2.12, 1.95 - 2.08]
  assert c["candidate"] == "cand" and c["reference"] == "h20"
  assert c["seeds"] == [0, 1, 2]
  np.testing.assert_allclose(c["loss"]["per_seed"], diffs)
  want = report.paired_interval(diffs)
  for key in ("mean", "half_width", "low", "high"):
    assert c["loss"][key] == pytest.approx(want[key])
  assert c["verdict"] == report.verdict(want, 0.01) == "inconclusive"
  assert c["tolerance"] == 0.01
  assert c["syncs"] == pytest.approx(30.0)  # mean of 30, 20, 40
  assert c["reference_syncs"] == [30, 30, 30]
  np.testing.assert_allclose(c["syncs_saved"]["per_seed"], [0.0, 1 / 3, -1 / 3])
  assert c["frontier_reaches"] == 3


def test_compare_with_the_frontier_interpolates_seed_by_seed():
  runs = synthetic_runs()
  c = report.compare(runs, "cand", "frontier", FRONTIER_LABELS, tolerance=0.01)
  at_20 = 2.32 - 0.2 * 5 / 15
  at_40 = 2.08 - 0.1 * 10 / 30
  diffs = [2.05 - 2.10, 2.20 - at_20, 1.95 - at_40]
  np.testing.assert_allclose(c["loss"]["per_seed"], diffs)
  assert c["loss"]["mean"] == pytest.approx(np.mean(diffs))
  assert c["loss"]["high"] < 0 and c["verdict"] == "better"
  # Syncs the frontier needs for the candidate's loss: seed 2's is out of reach.
  assert c["reference_syncs"][:2] == [pytest.approx(45.0), pytest.approx(24.0)]
  assert c["reference_syncs"][2] is None
  assert c["frontier_reaches"] == 2
  np.testing.assert_allclose(c["syncs_saved"]["per_seed"], [1 - 30 / 45, 1 - 20 / 24])
  assert c["syncs_saved"]["n"] == 2


def test_compare_refuses_runs_on_other_seeds():
  runs = synthetic_runs()
  runs["h20"] = runs["h20"][::-1]  # seeds 2, 1, 0
  with pytest.raises(ValueError, match="same seeds"):
    report.compare(runs, "cand", "h20", FRONTIER_LABELS, tolerance=0.01)
  runs["other"] = [run(5, 2.0, 30), run(6, 2.0, 30), run(7, 2.0, 30)]
  with pytest.raises(ValueError, match="cand and other"):
    report.compare(runs, "cand", "other", FRONTIER_LABELS, tolerance=0.01)


# --- comparison_sentence -------------------------------------------------------------


def test_comparison_sentence_states_the_interval_and_its_verdict():
  runs = synthetic_runs()
  c = report.compare(runs, "cand", "frontier", FRONTIER_LABELS, tolerance=0.01)
  text = report.comparison_sentence(c)
  assert text.startswith("`cand` vs the tuned frontier at equal syncs:")
  assert "**better**" in text
  assert f"{c['loss']['mean']:+.4f}" in text
  assert f"[{c['loss']['low']:+.4f}, {c['loss']['high']:+.4f}]" in text
  assert "(n = 3)" in text
  assert "fewer syncs than the frontier needs" in text
  assert "on the 2 of 3 seeds where the frontier reaches it" in text

  c = report.compare(runs, "cand", "h20", FRONTIER_LABELS, tolerance=0.01)
  text = report.comparison_sentence(c)
  assert text.startswith("`cand` vs `h20`:")
  assert "**inconclusive**" in text and "±0.01" in text
  assert "fewer syncs (CI" in text and "seeds where" not in text


@pytest.mark.parametrize(
    "low, high, word",
    [
        (-0.05, -0.01, "**better**"),
        (0.01, 0.03, "**worse**"),
        (-0.005, 0.004, "**equal quality**"),
        (-0.02, 0.005, "**inconclusive**"),
    ],
)
def test_comparison_sentence_names_each_verdict(low, high, word):
  interval = ci(low, high)
  c = dict(
      candidate="a",
      reference="b",
      loss=interval,
      verdict=report.verdict(interval, 0.01),
      tolerance=0.01,
      syncs_saved=None,
      frontier_reaches=0,
  )
  text = report.comparison_sentence(c)
  assert word in text
  others = {"**better**", "**worse**", "**equal quality**", "**inconclusive**"} - {word}
  assert not any(w in text for w in others)


def test_late_gain_is_the_fall_over_the_last_fifth_by_hand():
  from experiments import seed_stats

  run = {"eval": {"step": [0, 200, 400, 600], "eval_bpb": [4.0, 3.0, 2.6, 2.5]}}
  # At 0.8 * 600 = 480: 2.6 + (2.5 - 2.6) * 80 / 200 = 2.56; minus the last, 2.5.
  assert seed_stats.late_gain(run) == pytest.approx(0.06)
  assert seed_stats.late_gain({"eval": {"step": [600], "eval_bpb": [2.5]}}) is None


def test_table_row_marks_only_a_compared_to_label_as_ref():
  """A row's loss cell: its Δ against its reference, ``ref`` for a label another
  is compared to, and empty for one neither compared nor compared to."""
  from configs import diloco
  from experiments import report_text

  def stats(loss):
    return {"final_eval_bpb": (loss, 0.0), "syncs": (10.0, 0.0),
            "bytes_per_worker": (1e6, 0.0), "sim_time@homogeneous": (2.0, 0.0)}

  cfg = diloco.get_config("tiny")
  study = type("S", (), {"runs": {"a": cfg, "b": cfg, "c": cfg}})()
  result = {"stats": {"a": stats(2.0), "b": stats(2.1), "c": stats(2.2)},
            "networks": ["homogeneous"], "reference": {"b": "a"}}
  cells = {k: report_text._table_row(study, result, k)[3] for k in "abc"}
  assert cells == {"a": "ref", "b": "+0.100", "c": ""}


def test_a_replayed_ratio_schedule_is_named_in_the_table():
  from configs import autoloco
  from experiments import report_text

  cfg = autoloco.get_config("tiny")
  assert "replayed" not in report_text._describe(cfg)
  cfg.autoloco.ratio_schedule = (2.0, 1.0)
  assert "r_t replayed (2 rounds)" in report_text._describe(cfg)


def test_the_table_names_what_a_row_sends_and_its_outer_pair():
  """A compression or streaming row's ``what`` says how it differs from a full
  float32 sync (it read ``diloco, K=4, H=20`` for every row before)."""
  from configs import diloco
  from experiments import report_text

  cfg = diloco.get_config("tiny")
  plain = report_text._describe(cfg)
  assert "stream" not in plain and "top-k" not in plain
  assert f"outer α={cfg.diloco.alpha:g} β={cfg.diloco.beta:g}" in plain
  cfg.stream.fragments, cfg.stream.unit, cfg.stream.tau, cfg.stream.mix = 4, "sublayer", 1, 0.0
  cfg.compress.codec, cfg.compress.density, cfg.compress.value_bits = "topk", 0.01, 2
  cfg.compress.ef_beta = 0.95
  text = report_text._describe(cfg)
  for part in ("stream P=4 (sublayer) τ=1", "mix 0", "top-k 1.0% at 2 bits",
               "error feedback 0.95"):
    assert part in text
  cfg.compress.codec, cfg.compress.block_size = "fp4", 32
  assert "fp4 block 32" in report_text._describe(cfg)


def test_the_syncs_saved_table_reads_the_monotone_delta_on_the_union_interval():
  """The monotone frontier's Δ at equal syncs is a column, read on the union of
  its bootstrap and t intervals (the schedule study's committed base/Shakespeare
  report: ``adaptive_on_schedule``'s bootstrap [−0.0039, +0.0039] and t
  [−0.0042, +0.0046])."""
  import json
  import os

  from experiments import report_text
  from tests.helpers import ROOT

  path = os.path.join(ROOT, "docs/studies/schedule/base_shakespeare/report/summary.json")
  result = runlog.read_summary(path)  # with the readings kept beside it
  lines = report_text.syncs_saved_table(result)
  assert lines[2].endswith("| monotone: Δ loss at equal syncs | reading (syncs saved) |")
  row = next(l for l in lines if l.startswith("| `adaptive_on_schedule` |"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  assert len(cells) == len(lines[2].strip("|").split("|"))
  assert cells[-2] == "+0.0002 [-0.0042, +0.0046]"
  assert cells[-3] == "-1.6% [-6.8%, +4.4%] (17)"
  # The line is rejected there (F test), so the monotone saving is read: inside
  # ±10% of syncs, "equal".
  assert cells[-1] == "**equal** (monotone)"


def test_a_saving_on_a_flat_stretch_of_the_frontier_is_not_read():
  """The schedule study's many/Python report: the schedule-tuned frontier's means
  at 100 and 150 syncs run the wrong way (2.155, 2.158), the monotone fit pools
  them, and AutoLoCo's loss lies on that level. Its monotone "saving" (−33.4%)
  is the flat stretch's artifact: the reading is inconclusive, not a cost."""
  import json
  import os

  from experiments import report_text
  from tests.helpers import ROOT

  path = os.path.join(ROOT, "docs/studies/schedule/many_python/report/summary.json")
  result = runlog.read_summary(path)  # with the readings kept beside it
  lines = report_text.syncs_saved_table(result)
  row = next(l for l in lines if l.startswith("| `autoloco` |"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  assert cells[-3].startswith("-33.4%")
  assert cells[-1] == "**inconclusive** (monotone: flat stretch, no saving read)"
  # The paper's `both` lies below the stretch: its cost is read.
  row = next(l for l in lines if l.startswith("| `autoloco_both` |"))
  assert row.rstrip().endswith("| **worse** (monotone) |")


def test_the_syncs_saved_table_names_the_tolerance_the_verdicts_read():
  """The tolerance printed first is the one fixed before the report (the
  verdicts' ±), the report seeds' own figure beside it (the schedule study's
  committed base/Shakespeare report: ±0.0053 fixed, its seeds' slope another)."""
  import json
  import os

  from experiments import report_text
  from tests.helpers import ROOT

  path = os.path.join(ROOT, "docs/studies/schedule/base_shakespeare/report/summary.json")
  result = runlog.read_summary(path)  # with the readings kept beside it
  fixed = result["power"]["tolerance"]
  own = result["syncs_saved"]["autoloco"]["tolerance"]
  assert round(fixed, 4) != round(own, 4)
  text = report_text.syncs_saved_table(result)[0]
  assert f"Tolerance: ±{fixed:.4f} bits/byte" in text
  assert f"fixed before the report; the verdicts read it" in text
  assert f"10% fewer syncs costs {own:.4f} bits/byte" in text
  del result["power"]
  assert f"10% fewer syncs): {own:.4f} bits/byte." in report_text.syncs_saved_table(result)[0]


def _curve_run(seed, curve, final):
  """A finished run with a training-time eval curve (at simulated times 1, 2,
  ...) and a final whole-split eval ``final``, as ``report.load_run`` reads it."""
  t = [float(i + 1) for i in range(len(curve))]
  summary = dict(final_eval_bpb=final, syncs=10.0, bytes_per_worker=1.0, wall_time=1.0,
                 tokens_per_sec=1.0, network="homogeneous", sim_time=t[-1])
  return dict(seed=seed, summary=summary,
              eval=dict(step=[10 * x for x in t], eval_bpb=list(curve), sim_time=t))


def test_time_to_the_reference_reads_its_last_training_time_eval_on_the_same_seed():
  # The curves are training-time evals (a spread sample); the final eval is the
  # whole split, here 0.02 lower. The candidate reaches the reference's last
  # curve point on each seed (at 2.5 and 2.0) but never its whole-split loss.
  import ml_collections

  runs = dict(
      ref=[_curve_run(1, [3.0, 2.5, 2.2], 2.18), _curve_run(2, [3.0, 2.6, 2.3], 2.28)],
      cand=[_curve_run(1, [2.8, 2.2, 2.19], 2.17), _curve_run(2, [2.9, 2.3, 2.29], 2.27)],
  )
  study = ml_collections.ConfigDict(dict(
      name="s", title="t", networks=("homogeneous",), labels=("ref", "cand"),
      reference=dict(cand="ref"), claims={}, frontier=(), seeds=(1, 2), quick=False))
  assert report.ref_targets(runs["ref"]) == {1: 2.2, 2: 2.3}
  result = report.collect(study, runs)
  assert result["stats"]["cand"]["time_to_ref_loss@homogeneous"] == pytest.approx(2.0)
  # Against the whole-split final loss (the rule before), seed 1 never gets there.
  assert report.time_to_loss(runs["cand"][0], "sim_time", 2.18) is None
  # A seed the reference did not run has no target, so no time.
  runs["cand"].append(_curve_run(3, [2.0], 2.0))
  study.seeds = (1, 2, 3)
  stats = report.collect(study, runs)["stats"]["cand"]
  assert stats["time_to_ref_loss@homogeneous"] is None
  assert stats["time_to_ref_loss_reached@homogeneous"] == 2


# --- the model a worker holds ---------------------------------------------------------


def test_worker_bpb_is_worker_0s_own_model_where_a_decentralized_run_logs_it():
  from experiments import runlog

  # 2.0 nats per token on 1.25 bytes per token: 2 / ln 2 / 1.25 bits per byte.
  gossip = dict(
      final_eval_bpb=2.0, final_eval_loss_replica=2.0, final_eval_bytes=125.0,
      final_eval_tokens=100,
  )
  assert runlog.worker_bpb(gossip) == pytest.approx(2.0 / math.log(2) / 1.25)
  # DiLoCo's workers hold the global model: the headline.
  assert runlog.worker_bpb(dict(final_eval_bpb=2.1)) == 2.1


def test_decentralized_comparisons_are_also_read_on_a_workers_model():
  """Two gossip methods whose worker averages tie but whose workers' own models
  differ by 0.03 on every seed: the headline comparison reads equal, the worker
  one reads worse; against DiLoCo (no model of its own) only the candidate's
  side moves."""
  import ml_collections

  def gossip(seed, mean_bpb, worker_bpb):
    r = run(seed, mean_bpb, 30)
    r["summary"]["final_eval_bpb_worker"] = worker_bpb
    return r

  def diloco(seed, bpb):
    r = run(seed, bpb, 30)
    r["summary"]["final_eval_bpb_worker"] = bpb
    return r

  noise = [0.0, 0.004, -0.003]
  runs = {
      "a": [gossip(s, 2.0 + n, 2.05 + n) for s, n in enumerate(noise)],
      "b": [gossip(s, 2.0 + n, 2.02 + n) for s, n in enumerate(noise)],
      "diloco": [diloco(s, 2.0 + n) for s, n in enumerate(noise)],
  }
  study = ml_collections.ConfigDict(
      dict(comparisons=(("a", "b"), ("a", "diloco")), frontier=(), tolerance=0.01)
  )
  by_pair = {}
  for c in report.collect_comparisons(study, runs):
    by_pair[(c["candidate"], c["reference"], c["model"])] = c
  assert by_pair["a", "b", "headline"]["verdict"] == "equal"
  assert by_pair["a", "b", "worker"]["loss"]["mean"] == pytest.approx(0.03)
  assert by_pair["a", "b", "worker"]["verdict"] == "worse"
  assert by_pair["a", "diloco", "worker"]["loss"]["mean"] == pytest.approx(0.05)
  text = "\n".join(
      report.comparison_sentence(c) for c in by_pair.values() if c["model"] == "worker"
  )
  assert "`a` vs `b`: +0.0300" in text


def test_a_reports_readings_beside_it_are_read_with_it(tmp_path):
  """``runlog.read_summary``: a ``readings.json`` beside a ``summary.json``
  gives the readings that summary was written without; none: the summary
  alone; no summary: None."""
  (tmp_path / "summary.json").write_text(json.dumps({"syncs_saved": {"a": 1}}))
  assert runlog.read_summary(str(tmp_path / "summary.json")) == {"syncs_saved": {"a": 1}}
  (tmp_path / runlog.READINGS).write_text(json.dumps({"syncs_saved_reading": {"a": 2}}))
  assert runlog.read_summary(str(tmp_path / "summary.json")) == {
      "syncs_saved": {"a": 1},
      "syncs_saved_reading": {"a": 2},
  }
  assert runlog.read_summary(str(tmp_path / "missing.json")) is None


def test_every_committed_report_has_its_frontier_readings():
  """Every committed summary with syncs saved is read with its monotone saving
  and its one reading for each label; for one written before them, the kept
  readings are what ``report.complete`` computes from its runs."""
  import glob

  paths = glob.glob(os.path.join(ROOT, "docs/studies/**/summary.json"), recursive=True)
  for path in paths:
    s = runlog.read_summary(path)
    if s.get("syncs_saved"):
      for key in ("syncs_saved_monotone", "syncs_saved_reading"):
        assert set(s[key]) == set(s["syncs_saved"]), (path, key)
  path = os.path.join(ROOT, "docs/studies/evidence_v2/long_python/design/summary.json")
  with open(path) as f:
    raw = json.load(f)
  assert "syncs_saved_reading" not in raw
  done = report._finite(report.complete(raw))
  kept = runlog.read_summary(path)
  for key in ("syncs_saved_monotone", "syncs_saved_reading"):
    assert json.dumps(done[key], sort_keys=True) == json.dumps(kept[key], sort_keys=True)
