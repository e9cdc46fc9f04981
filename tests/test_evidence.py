"""The evidence study's configs (configs/studies/evidence.py): its argument, its
labels, the runs of each phase and how a phase reads the one before it. Configs only: nothing is trained
(tests/test_study_modules.py runs the phases)."""

import json
import os

import pytest

from configs.studies import evidence
from experiments import engine, sweep
from tests import synthetic_runs


@pytest.fixture
def dirs(tmp_path, monkeypatch):
  """Reports go to (and are read from) a fresh folder, never docs/ or runs/."""
  docs, quick = tmp_path / "docs", tmp_path / "quick"
  monkeypatch.setattr(evidence, "DOCS_DIR", str(docs))
  monkeypatch.setattr(evidence, "QUICK_DIR", str(quick))
  return docs, quick


def _cell(regime: str, corpus: str, quick: bool):
  """The engine's evidence cell (its report phase) of ``regime`` and ``corpus``."""
  return engine.parse(evidence, f"{regime},{corpus}" + (",quick" if quick else ""))


def write_coarse(quick, losses, regime="base", corpus="shakespeare"):
  """A coarse phase's summary.json with ``losses[label]`` as mean final losses."""
  path = engine.report_dir(evidence, dict(regime=regime, corpus=corpus, quick=quick), "coarse")
  os.makedirs(path)
  stats = {
      label: {"final_eval_bpb": [loss, 0.01], "syncs": [10.0, 0.0]}
      for label, loss in losses.items()
  }
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump({"stats": stats}, f)
  return path


# --- the argument and the labels ---------------------------------------------------


def test_parse_takes_tokens_in_any_order():
  want = dict(phase="tune", regime="long", corpus="python", quick=True)
  assert engine.parse(evidence, "tune,long,python,quick") == want
  assert engine.parse(evidence, "quick, python ,long,tune") == want
  assert engine.parse(evidence, "python,tune,quick,long,") == want
  assert engine.parse(evidence, "") == dict(
      phase="report", regime="base", corpus="shakespeare", quick=False
  )
  assert engine.parse(evidence, "coarse") == dict(
      phase="coarse", regime="base", corpus="shakespeare", quick=False
  )
  assert engine.parse(evidence, "quick,full")["quick"] is False  # the last one wins


@pytest.mark.parametrize("arg, token", [("coarse,bogus", "bogus"), ("tune,Base", "Base")])
def test_parse_names_an_unknown_token(arg, token):
  with pytest.raises(ValueError, match=f"unknown token '{token}'"):
    engine.parse(evidence, arg)


@pytest.mark.parametrize(
    "h, alpha, beta, label",
    [(20, 0.7, 0.85, "diloco_h20_a0p7_b0p85"), (60, 1.0, 0.95, "diloco_h60_a1_b0p95")],
)
def test_diloco_label_round_trips(h, alpha, beta, label):
  assert evidence.diloco_label(h, alpha, beta) == label
  assert "." not in label  # labels are config keys
  assert synthetic_runs.diloco_hab(label) == (h, alpha, beta)


def test_every_grid_label_is_distinct_and_round_trips():
  for quick in (True, False):
    labels = {
        evidence.diloco_label(h, a, b): (h, a, b)
        for h in evidence.frontier_hs(quick)
        for a, b in evidence.grid(_cell("base", "shakespeare", quick))
    }
    assert len(labels) == len(evidence.frontier_hs(quick)) * len(evidence.grid(_cell("base", "shakespeare", quick)))
    for label, key in labels.items():
      assert synthetic_runs.diloco_hab(label) == key


# --- the phases -----------------------------------------------------------------------


def test_the_study_file_is_an_entry_point_to_the_study(dirs):
  path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs/studies/evidence.py")
  for arg in ("coarse,base,python", "regime,long,shakespeare,quick"):
    assert engine.load(f"{path}:{arg}").to_dict() == engine.build(evidence, arg).to_dict()


def test_coarse_is_the_whole_grid_at_each_frontier_interval_on_one_seed(dirs):
  s = engine.build(evidence, "coarse,base,shakespeare")
  assert len(s.labels) == 36 == len(evidence.ALPHAS) * len(evidence.BETAS["shakespeare"]) * 6
  assert tuple(s.seeds) == (0,)
  assert evidence.frontier_hs(False) == (10, 14, 20, 30, 40, 60)
  sweep.check_study(s)
  for label in s.labels:
    h, a, b = synthetic_runs.diloco_hab(label)
    run = s.runs[label]
    assert (run.algorithm, run.interval.h) == ("diloco", h)
    assert (run.diloco.alpha, run.diloco.beta) == (a, b)
    assert run.num_workers == 4 and run.data.source == "shakespeare"
  hab = {synthetic_runs.diloco_hab(label) for label in s.labels}
  assert {h for h, _, _ in hab} == {10, 14, 20, 30, 40, 60}
  assert {a for _, a, _ in hab} == set(evidence.ALPHAS)
  assert {b for _, _, b in hab} == set(evidence.BETAS["shakespeare"])
  assert s.report_dir == os.path.join(dirs[0], "base_shakespeare", "coarse")


def test_long_python_regime_runs(dirs):
  s = engine.build(evidence, "regime,long,python")
  sweep.check_study(s)
  assert tuple(s.labels) == ("diloco_h10", "diloco_h60")
  assert tuple(s.seeds) == evidence.TUNING_SEEDS
  assert tuple(s.comparisons) == (("diloco_h60", "diloco_h10"),)
  for label, h in (("diloco_h10", 10), ("diloco_h60", 60)):
    run = s.runs[label]
    assert run.num_workers == 8
    assert run.data.partition == "non_iid"
    assert run.data.source == "files"
    assert run.data.path.endswith("*.py")
    assert run.total_steps == 1200
    assert run.interval.h == h
    assert (run.diloco.alpha, run.diloco.beta) == (0.7, 0.9)
  # The base regime on shakespeare keeps the study defaults.
  b = engine.build(evidence, "regime,base,shakespeare").runs["diloco_h10"]
  assert (b.num_workers, b.data.partition, b.data.source) == (4, "iid", "shakespeare")
  # The many-rounds regime: the base regime run 3,000 steps (150 syncs at H_ref).
  m = engine.build(evidence, "regime,many,python").runs["diloco_h60"]
  assert (m.num_workers, m.total_steps, m.data.source) == (4, 3000, "files")
  assert m.eval.final_num_batches == 0  # the whole validation split


@pytest.mark.parametrize("quick", [False, True])
def test_tune_without_coarse_names_the_command_to_run(dirs, quick):
  arg = "tune,base,shakespeare" + (",quick" if quick else "")
  want = "coarse,base,shakespeare" + (",quick" if quick else "")
  with pytest.raises(ValueError) as e:
    engine.build(evidence, arg)
  message = str(e.value)
  assert "'coarse' phase has no report" in message
  assert (
      f"python -m experiments.sweep --study configs/studies/evidence.py:{want}" in message
  )
  assert str(dirs[1 if quick else 0]) in message  # where it looked


def test_tune_keeps_the_best_pairs_of_each_interval(dirs):
  l = evidence.diloco_label
  assert evidence.frontier_hs(True) == (10, 30)
  losses = {}
  for h in (10, 30):
    losses.update(
        {l(h, 0.7, 0.8): 2.3, l(h, 0.7, 0.9): 2.1, l(h, 1.0, 0.8): 2.2, l(h, 1.0, 0.9): 2.4}
    )
  losses[l(30, 0.7, 0.8)] = 2.0  # at H = 30 the order changes
  losses[l(30, 0.7, 0.9)] = 2.5
  losses[l(30, 1.0, 0.8)] = 2.6
  losses[l(30, 1.0, 0.9)] = 2.05
  losses[l(30, 0.5, 0.8)] = 1.0  # not on the grid: never a candidate, however good
  write_coarse(True, losses)
  s = engine.build(evidence, "tune,base,shakespeare,quick")
  sweep.check_study(s)
  assert tuple(s.labels) == (
      l(10, 0.7, 0.9),
      l(10, 1.0, 0.8),
      l(30, 0.7, 0.8),
      l(30, 1.0, 0.9),
  )
  assert tuple(s.seeds) == (0,)
  for label in s.labels:
    h, a, b = synthetic_runs.diloco_hab(label)
    run = s.runs[label]
    assert (run.interval.h, run.diloco.alpha, run.diloco.beta) == (h, a, b)
  assert s.report_dir == os.path.join(dirs[1], "base_shakespeare", "tune")


def test_tune_keeps_the_top_pairs_per_interval_in_full_mode(dirs):
  # Loss rises along the grid's order at every H, except that the last pair is
  # the best: the kept ones are the last pair and the first TOP - 1.
  losses = {}
  for h in evidence.frontier_hs(False):
    pairs = evidence.grid(_cell("base", "shakespeare", False))
    for i, (a, b) in enumerate(pairs):
      losses[evidence.diloco_label(h, a, b)] = 2.0 + 0.01 * i + 0.001 * h
    losses[evidence.diloco_label(h, *pairs[-1])] = 1.5
  write_coarse(False, losses)
  s = engine.build(evidence, "tune,base,shakespeare")
  assert tuple(s.seeds) == evidence.TUNING_SEEDS
  assert len(s.labels) == evidence.TOP * len(evidence.frontier_hs(False))
  pairs = evidence.grid(_cell("base", "shakespeare", False))
  for h in evidence.frontier_hs(False):
    kept = {
        synthetic_runs.diloco_hab(x)[1:] for x in s.labels if x.startswith(f"diloco_h{h}_")
    }
    assert kept == set(pairs[: evidence.TOP - 1]) | {pairs[-1]}


def write_tune(regime="base", corpus="python", quick=False):
  """A tune summary whose best pair at every H is the grid's last."""
  path = engine.report_dir(evidence, dict(regime=regime, corpus=corpus, quick=quick), "tune")
  os.makedirs(path)
  stats = {}
  for h in evidence.frontier_hs(quick):
    for i, (a, b) in enumerate(evidence.grid(_cell(regime, corpus, quick))):
      stats[evidence.diloco_label(h, a, b)] = {"final_eval_bpb": [3.0 - 0.01 * i, 0.0]}
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump({"stats": stats}, f)


def test_design_runs_every_design_beside_the_tuned_frontier(dirs):
  write_tune()
  design = engine.build(evidence, "design,base,python")
  sweep.check_study(design)
  best = evidence.grid(_cell("base", "python", False))[-1]
  assert best == (1.0, 0.7) and evidence.grid(_cell("base", "python", False))[0] == (0.7, 0.3)
  assert design.frontier == tuple(f"diloco_h{h}" for h in (10, 14, 20, 30, 40, 60))
  assert design.labels == design.frontier + tuple(evidence.DESIGNS)
  assert design.syncs_saved == tuple(evidence.DESIGNS)
  assert design.seeds == evidence.TUNING_SEEDS
  for h in evidence.frontier_hs(False):
    run = design.runs[f"diloco_h{h}"]
    assert (run.interval.h, run.diloco.alpha, run.diloco.beta) == (h, *best)
  # A budget of 0.73 T / H_ref = 0.73 * 600 / 20 = 21.9 -> 22 syncs, by its shape.
  linear = design.runs["budget_linear_r4"]
  assert (linear.algorithm, linear.interval.controller) == ("autoloco", "budget")
  assert (linear.interval.syncs, linear.interval.shape, linear.interval.ratio) == (
      22, "linear", 4.0,
  )
  assert (linear.diloco.alpha, linear.diloco.beta, linear.autoloco.h_ref) == (*best, 20)
  # Closed loop, front-loaded: from 3 H_ref, never below H_ref.
  loss_ratio = design.runs["loss_ratio_hmin_ref"].interval
  assert (loss_ratio.controller, loss_ratio.h, loss_ratio.h_min, loss_ratio.h_max) == (
      "loss_ratio", 60, 20, 80,
  )
  agreement = design.runs["agreement_hmin_ref"].interval
  assert (agreement.controller, agreement.h_min, agreement.target) == ("agreement", 20, 0.7)


def _design_summary(saved, per_seed_delta, tolerance):
  return {
      "syncs_saved": {
          label: {"saved": {"mean": v}, "delta": {"mean": -v},
                  "per_seed_delta": per_seed_delta, "tolerance": tolerance}
          for label, v in saved.items()
      },
      "stats": {label: {"syncs": [20.0, 0.0]} for label in saved},
      "runs": {
          label: [{"rounds": {"h": [40, 30, 20], "ratio": [2.5, 1.5, 1.0]}}]
          for label in saved
      },
  }


def test_report_takes_the_design_that_saves_most_on_as_many_seeds_as_needed(dirs):
  write_tune()
  path = engine.report_dir(evidence, dict(regime="base", corpus="python", quick=False), "design")
  os.makedirs(path)
  # Deltas with sd 0.02 against a tolerance of 0.01: 18 seeds (the t-interval's
  # half-width t_{0.975,17} 0.02 / sqrt(18) = 0.00995).
  deltas = [0.0, 0.02, 0.04]
  summary = _design_summary(
      {"budget_linear_r4": 0.05, "loss_ratio_hmin_ref": 0.10, "budget_exp_r4": float("nan")},
      deltas, 0.01,
  )
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump(summary, f)
  opts = engine.parse(evidence, "report,base,python")
  assert evidence.chosen_design(opts)[0] == "loss_ratio_hmin_ref"
  # A flat frontier defines no saving: the design lowest at equal syncs instead.
  flat = _design_summary({"budget_linear_r4": float("nan"), "loss_ratio_hmin_ref": float("nan")}, deltas, 0.0)
  flat["syncs_saved"]["budget_linear_r4"]["delta"]["mean"] = -0.2
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump(flat, f)
  assert evidence.chosen_design(opts)[0] == "budget_linear_r4"
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump(summary, f)
  power = evidence.report_seed_count(opts, "loss_ratio_hmin_ref")
  assert (power["seeds"], power["needed"]) == (18, 18)
  assert power["half_width"] <= 0.01
  report = engine.build(evidence, "report,base,python")
  sweep.check_study(report)
  assert report.seeds == tuple(range(100, 118))
  assert report.design == "loss_ratio_hmin_ref"
  assert report.tolerance == 0.01  # the design phase's, fixed before the report
  assert report.syncs_saved == (
      "autoloco", "ctrl_adaptation_only", "ctrl_correction_only", "ctrl_open_loop",
  )
  assert report.runs["ctrl_adaptation_only"].autoloco.correction == "none"
  # 600 steps over the design's 20 syncs: the correction-only control's fixed H.
  assert report.runs["ctrl_correction_only"].interval.h == 30
  assert tuple(report.runs["ctrl_open_loop"].interval.schedule) == (40, 30, 20)
  # The design against each control: what that component adds.
  controls = report.syncs_saved[1:]
  assert tuple(report.comparisons[-1 - len(controls):-1]) == tuple(
      ("autoloco", c) for c in controls
  )
  # A design whose mean H is H_ref (30 syncs over 600 steps): a fixed H_ref with
  # the correction is DiLoCo at H_ref (r_t = 1), so the control replays the
  # design's ratios on those rounds instead.
  summary["stats"]["loss_ratio_hmin_ref"]["syncs"] = [30.0, 0.0]
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump(summary, f)
  report = engine.build(evidence, "report,base,python")
  sweep.check_study(report)
  assert report.syncs_saved == (
      "autoloco", "ctrl_adaptation_only", "ctrl_correction_replay", "ctrl_ratio_median",
      "ctrl_open_loop",
  )
  replay = report.runs["ctrl_correction_replay"]
  assert (replay.interval.controller, replay.interval.h) == ("fixed", 20)
  assert tuple(replay.autoloco.ratio_schedule) == (2.5, 1.5, 1.0)
  assert replay.autoloco.correction == report.runs["autoloco"].autoloco.correction
  # Beside it the replay's level without its shape: the median ratio, constant.
  level = report.runs["ctrl_ratio_median"]
  assert (level.interval.controller, level.interval.h) == ("fixed", 20)
  assert tuple(level.autoloco.ratio_schedule) == (1.5,)
  assert ("ctrl_correction_replay", "ctrl_ratio_median") in report.comparisons
  # Too much spread for MAX_REPORT_SEEDS: the count stops there and says what it reaches.
  wide = _design_summary({"loss_ratio_hmin_ref": 0.1}, [0.0, 0.1, 0.2], 0.01)
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump(wide, f)
  power = evidence.report_seed_count(opts, "loss_ratio_hmin_ref")
  assert power["seeds"] == evidence.MAX_REPORT_SEEDS < power["needed"]
  assert power["half_width"] > 0.01


def test_many_is_pruned_by_the_base_cell(dirs):
  # The base coarse pass ranks (1.0, 0.7) and (0.7, 0.3) first and second at the
  # shortest H, (0.7, 0.5) second at every other: the many grid is those three.
  losses = {}
  for h in evidence.frontier_hs(False):
    for a, b in evidence.grid(_cell("base", "python", False)):
      losses[evidence.diloco_label(h, a, b)] = 3.0
    losses[evidence.diloco_label(h, 1.0, 0.7)] = 2.0
    second = (0.7, 0.3) if h == 10 else (0.7, 0.5)
    losses[evidence.diloco_label(h, *second)] = 2.5
  write_coarse(False, losses, "base", "python")
  assert evidence.grid(_cell("many", "python", False)) == ((0.7, 0.3), (0.7, 0.5), (1.0, 0.7))
  coarse = engine.build(evidence, "coarse,many,python")
  assert len(coarse.labels) == 3 * len(evidence.frontier_hs(False))
  assert {r.total_steps for r in coarse.runs.values()} == {3000}
  # Its design phase tries PRUNED_DESIGNS only.
  write_tune("many", "python")
  design = engine.build(evidence, "design,many,python")
  assert design.syncs_saved == evidence.PRUNED_DESIGNS
  assert set(evidence.PRUNED_DESIGNS) < set(evidence.DESIGNS)
  # The long regime is pruned the same way, on its own 1,200 steps and 8 workers.
  assert evidence.grid(_cell("long", "python", False)) == evidence.grid(_cell("many", "python", False))
  long_coarse = engine.build(evidence, "coarse,long,python")
  assert set(long_coarse.labels) == set(coarse.labels)
  assert {(r.total_steps, r.num_workers) for r in long_coarse.runs.values()} == {(1200, 8)}
  write_tune("long", "python")
  assert engine.build(evidence, "design,long,python").syncs_saved == evidence.PRUNED_DESIGNS
  assert evidence.regime_phases("long") == evidence.regime_phases("many") == evidence.PHASES[1:]


@pytest.mark.parametrize("corpus", evidence.CORPORA)
def test_the_first_protocols_long_cells_back_their_pruning(corpus):
  """The claim in configs/studies/evidence.py: in the first protocol's long coarse
  passes (committed), the best pair at every H is one that the base cell's coarse
  pass of this protocol keeps (base_top_pairs)."""
  path = f"docs/studies/evidence/long_{corpus}/coarse/summary.json"
  with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), path)) as f:
    stats = json.load(f)["stats"]
  best = {}
  for label, s in stats.items():
    h, a, b = synthetic_runs.diloco_hab(label)
    best[h] = min(best.get(h, (float("inf"), None)), (s["final_eval_bpb"][0], (a, b)))
  assert len(best) == 4  # the first protocol's H in {20, 30, 40, 60}
  keep = set(evidence.base_top_pairs(_cell("base", corpus, False).read("coarse"), corpus))
  assert {pair for _, pair in best.values()} <= keep


def test_many_without_the_base_coarse_pass_names_its_command(dirs):
  with pytest.raises(ValueError, match="coarse,base,python"):
    engine.build(evidence, "coarse,many,python")
