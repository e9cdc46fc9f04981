"""The evidence study's configs (experiments/evidence.py, entry point
configs/studies/evidence.py): its argument, its labels, the runs of each phase and
how a phase reads the one before it. Configs only: nothing is trained
(tests/test_studies_quick.py runs the phases)."""

import json
import os

import pytest

from experiments import evidence, sweep


@pytest.fixture
def dirs(tmp_path, monkeypatch):
  """Reports go to (and are read from) a fresh folder, never docs/ or runs/."""
  docs, quick = tmp_path / "docs", tmp_path / "quick"
  monkeypatch.setattr(evidence, "DOCS_DIR", str(docs))
  monkeypatch.setattr(evidence, "QUICK_DIR", str(quick))
  return docs, quick


def write_coarse(quick, losses, regime="base", corpus="shakespeare"):
  """A coarse phase's summary.json with ``losses[label]`` as mean final losses."""
  path = evidence.report_dir("coarse", regime, corpus, quick)
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
  assert evidence.parse("tune,long,python,quick") == want
  assert evidence.parse("quick, python ,long,tune") == want
  assert evidence.parse("python,tune,quick,long,") == want
  assert evidence.parse("") == dict(
      phase="report", regime="base", corpus="shakespeare", quick=False
  )
  assert evidence.parse("coarse") == dict(
      phase="coarse", regime="base", corpus="shakespeare", quick=False
  )
  assert evidence.parse("quick,full")["quick"] is False  # the last one wins


@pytest.mark.parametrize("arg, token", [("coarse,bogus", "bogus"), ("tune,Base", "Base")])
def test_parse_names_an_unknown_token(arg, token):
  with pytest.raises(ValueError, match=f"unknown token '{token}'"):
    evidence.parse(arg)


@pytest.mark.parametrize(
    "h, alpha, beta, label",
    [(20, 0.7, 0.85, "diloco_h20_a0p7_b0p85"), (60, 1.0, 0.95, "diloco_h60_a1_b0p95")],
)
def test_diloco_label_round_trips(h, alpha, beta, label):
  assert evidence.diloco_label(h, alpha, beta) == label
  assert "." not in label  # labels are config keys
  assert evidence.parse_label(label) == (h, alpha, beta)


def test_every_grid_label_is_distinct_and_round_trips():
  for quick in (True, False):
    labels = {
        evidence.diloco_label(h, a, b): (h, a, b)
        for h in evidence.frontier_hs(quick)
        for a, b in evidence.grid(quick)
    }
    assert len(labels) == len(evidence.frontier_hs(quick)) * len(evidence.grid(quick))
    for label, key in labels.items():
      assert evidence.parse_label(label) == key


# --- the phases -----------------------------------------------------------------------


def test_the_config_file_is_an_entry_point_to_the_study(dirs):
  from configs.studies import evidence as entry

  for arg in ("coarse,long,python", "regime,base,shakespeare,quick"):
    assert entry.get_config(arg).to_dict() == evidence.study(arg).to_dict()


def test_coarse_is_the_whole_grid_at_each_frontier_interval_on_one_seed(dirs):
  s = evidence.study("coarse,base,shakespeare")
  assert len(s.labels) == 84 == len(evidence.ALPHAS) * len(evidence.BETAS) * 4
  assert tuple(s.seeds) == (0,)
  assert evidence.frontier_hs(False) == (20, 30, 40, 60)
  sweep.check_study(s)
  for label in s.labels:
    h, a, b = evidence.parse_label(label)
    run = s.runs[label]
    assert (run.algorithm, run.interval.h) == ("diloco", h)
    assert (run.diloco.alpha, run.diloco.beta) == (a, b)
    assert run.num_workers == 4 and run.data.source == "shakespeare"
  hab = {evidence.parse_label(label) for label in s.labels}
  assert {h for h, _, _ in hab} == {20, 30, 40, 60}
  assert {a for _, a, _ in hab} == set(evidence.ALPHAS)
  assert {b for _, _, b in hab} == set(evidence.BETAS)
  assert s.report_dir == os.path.join(dirs[0], "base_shakespeare", "coarse")


def test_long_python_regime_runs(dirs):
  s = evidence.study("regime,long,python")
  sweep.check_study(s)
  assert tuple(s.labels) == ("diloco_h20", "diloco_h60")
  assert tuple(s.seeds) == evidence.TUNING_SEEDS
  assert tuple(s.comparisons) == (("diloco_h60", "diloco_h20"),)
  for label, h in (("diloco_h20", 20), ("diloco_h60", 60)):
    run = s.runs[label]
    assert run.num_workers == 8
    assert run.data.partition == "non_iid"
    assert run.data.source == "files"
    assert run.data.path.endswith("*.py")
    assert run.total_steps == 1200
    assert run.interval.h == h
    assert (run.diloco.alpha, run.diloco.beta) == (0.7, 0.9)
  # The base regime on shakespeare keeps the study defaults.
  b = evidence.study("regime,base,shakespeare").runs["diloco_h20"]
  assert (b.num_workers, b.data.partition, b.data.source) == (4, "iid", "shakespeare")


@pytest.mark.parametrize("quick", [False, True])
def test_tune_without_coarse_names_the_command_to_run(dirs, quick):
  arg = "tune,base,shakespeare" + (",quick" if quick else "")
  want = "coarse,base,shakespeare" + (",quick" if quick else "")
  with pytest.raises(ValueError) as e:
    evidence.study(arg)
  message = str(e.value)
  assert "'coarse' phase has no report" in message
  assert (
      f"python -m experiments.sweep --study configs/studies/evidence.py:{want}" in message
  )
  assert str(dirs[1 if quick else 0]) in message  # where it looked


def test_tune_keeps_the_best_pairs_of_each_interval(dirs):
  l = evidence.diloco_label
  assert evidence.frontier_hs(True) == (10, 30)
  write_coarse(
      True,
      {
          l(10, 0.7, 0.8): 2.3,
          l(10, 0.7, 0.9): 2.1,
          l(10, 1.0, 0.8): 2.2,
          l(10, 1.0, 0.9): 2.4,
          l(30, 0.7, 0.8): 2.0,
          l(30, 0.7, 0.9): 2.5,
          l(30, 1.0, 0.8): 2.6,
          l(30, 1.0, 0.9): 2.05,
          # Not on the grid: never a candidate, however good.
          l(30, 0.5, 0.8): 1.0,
      },
  )
  s = evidence.study("tune,base,shakespeare,quick")
  sweep.check_study(s)
  assert tuple(s.labels) == (
      l(10, 0.7, 0.9),
      l(10, 1.0, 0.8),
      l(30, 0.7, 0.8),
      l(30, 1.0, 0.9),
  )
  assert tuple(s.seeds) == (0,)
  for label in s.labels:
    h, a, b = evidence.parse_label(label)
    run = s.runs[label]
    assert (run.interval.h, run.diloco.alpha, run.diloco.beta) == (h, a, b)
  assert s.report_dir == os.path.join(dirs[1], "base_shakespeare", "tune")


def test_tune_keeps_the_top_pairs_per_interval_in_full_mode(dirs):
  # Loss rises along the grid's order at every H, except that the last pair is
  # the best: the kept ones are the last pair and the first TOP - 1.
  losses = {}
  for h in evidence.frontier_hs(False):
    pairs = evidence.grid(False)
    for i, (a, b) in enumerate(pairs):
      losses[evidence.diloco_label(h, a, b)] = 2.0 + 0.01 * i + 0.001 * h
    losses[evidence.diloco_label(h, *pairs[-1])] = 1.5
  write_coarse(False, losses)
  s = evidence.study("tune,base,shakespeare")
  assert tuple(s.seeds) == evidence.TUNING_SEEDS
  assert len(s.labels) == evidence.TOP * len(evidence.frontier_hs(False))
  pairs = evidence.grid(False)
  for h in evidence.frontier_hs(False):
    kept = {
        evidence.parse_label(x)[1:] for x in s.labels if x.startswith(f"diloco_h{h}_")
    }
    assert kept == set(pairs[: evidence.TOP - 1]) | {pairs[-1]}


@pytest.mark.parametrize("regime, corpus", [("long", "shakespeare"), ("base", "python")])
def test_other_cells_search_the_pruned_grid_and_designs(dirs, regime, corpus):
  coarse = evidence.study(f"coarse,{regime},{corpus}")
  pairs = {evidence.parse_label(label)[1:] for label in coarse.labels}
  betas = evidence.PRUNED_BETAS + evidence.EXTRA_BETAS.get(corpus, ())
  assert pairs == {(a, b) for a in evidence.PRUNED_ALPHAS for b in betas}
  assert len(coarse.labels) == len(pairs) * len(evidence.frontier_hs(False))
  if corpus == "shakespeare":
    assert pairs < set(evidence.grid(False))  # a subset of the full cell's grid
  # Tune: the best TOP_PRUNED of each H (loss falls along the grid's order).
  losses = {}
  for h in evidence.frontier_hs(False):
    for i, (a, b) in enumerate(evidence.grid(False, regime, corpus)):
      losses[evidence.diloco_label(h, a, b)] = 3.0 - 0.01 * i
  write_coarse(False, losses, regime, corpus)
  tune = evidence.study(f"tune,{regime},{corpus}")
  last = evidence.grid(False, regime, corpus)[-evidence.TOP_PRUNED :]
  for h in evidence.frontier_hs(False):
    kept = {
        evidence.parse_label(x)[1:] for x in tune.labels if x.startswith(f"diloco_h{h}_")
    }
    assert kept == set(last)
  # Design: the pruned variants only, each as in the full cell's DESIGNS.
  path = evidence.report_dir("tune", regime, corpus, False)
  os.makedirs(path)
  stats = {label: {"final_eval_bpb": [losses[label], 0.0]} for label in tune.labels}
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump({"stats": stats}, f)
  design = evidence.study(f"design,{regime},{corpus}")
  sweep.check_study(design)
  autos = [label for label in design.labels if label.startswith("autoloco")]
  assert tuple(autos) == evidence.PRUNED_DESIGNS
  full = evidence.designs(False)
  assert set(evidence.designs(False, regime, corpus)) < set(full)
  assert evidence.top(False) == evidence.TOP
  # The table design carries the cell's tuned pair at every frontier H.
  table = design.runs["autoloco_h0x1p5_table"].autoloco
  assert table.correction == "table"
  tuned = evidence.tuned_pairs(dict(regime=regime, corpus=corpus, quick=False))
  assert tuple(tuple(row) for row in table.tuned) == tuple(
      (h, a, b) for h, (a, b) in tuned.items()
  )
  assert tuned[evidence.h_ref(False)] == (
      design.runs["autoloco_h0x1p5_table"].diloco.alpha,
      design.runs["autoloco_h0x1p5_table"].diloco.beta,
  )
  # design_added: the frontier beside the added designs only, on the tuning seeds.
  added = evidence.study(f"design_added,{regime},{corpus}")
  sweep.check_study(added)
  assert added.seeds == evidence.TUNING_SEEDS
  assert added.labels == added.frontier + evidence.ADDED_DESIGNS
  assert added.report_dir.endswith(os.path.join(f"{regime}_{corpus}", "design_added"))
  for label in evidence.ADDED_DESIGNS:
    assert added.runs[label] == design.runs[label]


# --- designs added after a cell's report -------------------------------------------


def test_report_added_runs_the_added_design_beside_the_reports_reference(dirs):
  losses = {}
  for h in evidence.frontier_hs(False):
    for i, (a, b) in enumerate(evidence.grid(False)):
      losses[evidence.diloco_label(h, a, b)] = 3.0 - 0.01 * i
  path = evidence.report_dir("tune", "base", "shakespeare", False)
  os.makedirs(path)
  stats = {label: {"final_eval_bpb": [loss, 0.0]} for label, loss in losses.items()}
  with open(os.path.join(path, "summary.json"), "w") as f:
    json.dump({"stats": stats}, f)
  added = evidence.study("report_added,base,shakespeare")
  sweep.check_study(added)
  href = evidence.h_ref(False)
  want = evidence.REPORT_ADDED[("base", "shakespeare")]
  assert added.labels == (f"diloco_h{href}",) + want
  assert added.seeds == evidence.REPORT_SEEDS
  assert added.runs["autoloco_h0x1p5_rescale"].autoloco.on_change == "rescale"
  # The DiLoCo run is the report's own (the same run directory: the same trajectory).
  design = evidence.study("design,base,shakespeare")
  ref = added.runs[f"diloco_h{href}"]
  assert sweep.run_dir("r", ref) == sweep.run_dir("r", design.runs[f"diloco_h{href}"])
  assert not evidence.REPORT_ADDED.get(("long", "python"))


def fake_run(seed, loss, syncs):
  return {"seed": seed, "summary": {"final_eval_bpb": loss, "syncs": syncs}}


def fake_summary(losses, syncs, labels, frontier=()):
  """``losses[label]``: per-seed final losses on seeds 100, 101, 102."""
  runs = {
      l: [fake_run(100 + i, x, syncs[l]) for i, x in enumerate(losses[l])] for l in labels
  }
  stats = {l: {"loss_by_seed": list(losses[l])} for l in labels}
  return dict(labels=list(labels), runs=runs, stats=stats, frontier=list(frontier))


@pytest.mark.parametrize(
    "drift, said", [(0.0, "the same trajectories"), (0.01, "not reproduced")]
)
def test_report_added_tables_pair_with_the_committed_report(drift, said):
  from experiments import evidence_tables

  syncs = {"diloco_h20": 30, "diloco_h30": 20, "autoloco": 26, "autoloco_x": 26}
  committed = fake_summary(
      {
          "diloco_h20": [2.90, 2.92, 2.94],
          "diloco_h30": [3.00, 3.02, 3.04],
          "autoloco": [2.95, 2.96, 2.97],
      },
      syncs,
      ("diloco_h20", "diloco_h30", "autoloco"),
      frontier=("diloco_h20", "diloco_h30"),
  )
  added = fake_summary(
      {"diloco_h20": [2.90 + drift, 2.92, 2.94], "autoloco_x": [2.93, 2.95, 2.95]},
      syncs,
      ("diloco_h20", "autoloco_x"),
  )
  text = "\n".join(evidence_tables.report_added_section(added, committed, "base", "x"))
  assert said in text
  # autoloco_x − autoloco = (−0.02, −0.01, −0.02): mean −0.0167, paired by seed.
  assert "| `autoloco_x` | `autoloco` | -0.0167 [" in text
  # Against diloco_h20: +0.03, +0.03, +0.01 → +0.0233.
  assert "| `autoloco_x` | `diloco_h20` | +0.0233 [" in text
  # The frontier at 26 syncs, seed by seed: H30's loss + 0.6 (H20's − H30's) =
  # 2.94, 2.96, 2.98; Δ = −0.01, −0.01, −0.03 → −0.0167. (The committed DiLoCo
  # runs, not the re-run: the drift changes nothing here.)
  assert "| `autoloco_x` | tuned frontier | -0.0167 [" in text
