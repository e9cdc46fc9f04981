"""Every study's quick mode end to end, all from one root of runs built once: the
evidence study's phases, each reading the one before it and ending in a report of
paired intervals on seeds no choice used; the compression study that starts from
its tuned pair and design; and the ablations, decentralized and heterogeneity
studies (tables, plots and summaries, run sharing and skipping, stale runs, the
command line). One file, so that ``pytest -n 2 --dist loadfile`` trains them in one
process, once."""

import itertools
import json
import os
import shlex
import types

import numpy as np
import pytest

from autoloco_jax.run import trainer
from configs.studies import ablations, attention, base, compression, decentralized
from configs.studies import gossip_g1, gossip_g2, gossip_phases, heterogeneity
from configs.studies import compression_many, noloco_n1, schedule
from configs.studies import evidence
from experiments import sweep, time_to_target
from tests import test_documented_commands as documented
from tests.helpers import ROOT, trains

STUDIES = (ablations, decentralized, heterogeneity, attention)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
@trains
def studies(tmp_path_factory):
  """Every quick study, trained into one root: ``root``, ``reports`` (the three
  studies' report folders), ``results`` (their summaries by study name) and
  ``phases`` (the evidence and compression phases' ``(study, summary)``)."""
  root = str(tmp_path_factory.mktemp("runs"))
  reports = str(tmp_path_factory.mktemp("reports"))
  patch = pytest.MonkeyPatch()
  patch.setattr(evidence, "QUICK_DIR", str(tmp_path_factory.mktemp("evidence")))
  patch.setattr(gossip_g1, "QUICK_DIR", str(tmp_path_factory.mktemp("gossip_g1")))
  patch.setattr(gossip_g2, "QUICK_DIR", str(tmp_path_factory.mktemp("gossip_g2")))
  patch.setattr(noloco_n1, "QUICK_DIR", str(tmp_path_factory.mktemp("noloco_n1")))
  patch.setattr(schedule, "QUICK_DIR", str(tmp_path_factory.mktemp("schedule")))
  patch.setattr(
      compression_many, "QUICK_DIR", str(tmp_path_factory.mktemp("compression_many"))
  )
  # The patch lasts the whole module: tests read the phases' reports through the
  # study's own paths, which must be this module's folder, never a checkout's
  # earlier runs.
  try:
    phases = {}

    def run_phases(prefix: str, get_config, names, args: str = "quick") -> None:
      for phase in names:
        study = get_config(f"{phase},{args}")
        phases[f"{prefix}{phase}"] = (
            study,
            sweep.run_study(study, root, study.report_dir, progress=False),
        )

    run_phases("", evidence.study, evidence.PHASES, "base,shakespeare,quick")
    # Issue 41: momentum schedules tuned around the evidence cell's tuned pairs.
    run_phases("schedule_", schedule.get_config, schedule.PHASES)
    # Issue 42: the compression rows in the evidence cell, against its frontier.
    run_phases(
        "compression_many_",
        compression_many.get_config,
        compression_many.PHASES + compression_many.ABLATIONS,
    )
    # The compression study starts from the evidence study's tuned pair and design.
    run_phases("compression_", compression.get_config, compression.PHASES)
    # GASLoC's claim G1: coarse grid, tune, report, each from the phase before;
    # G2: the evidence quick cell's tuned frontier and seeds, the methods tuned;
    # N1: NoLoCo against DiLoCo, each tuned.
    for cell in (gossip_g1, gossip_g2, noloco_n1):
      run_phases(f"{cell.NAME}_", cell.get_config, cell.PHASES)
    results = {}
    for module in STUDIES:
      study = module.get_config("quick")
      results[study.name] = sweep.run_study(
          study, root, os.path.join(reports, study.name), progress=False
      )
    yield dict(root=root, reports=reports, results=results, phases=phases)
  finally:
    patch.undo()


@pytest.fixture(scope="module")
def quick(studies):
  """The three studies: ``(root, reports, results)``."""
  return studies["root"], studies["reports"], studies["results"]


@pytest.fixture(scope="module")
def phases(studies):
  """The evidence and compression phases: ``phases[name] = (study, summary)``."""
  return studies["phases"]


# --- the evidence and compression studies -------------------------------------------


@pytest.mark.slow
def test_choices_use_tuning_seeds_and_the_report_fresh_ones(phases):
  report_study, _ = phases["report"]
  tuning = set()
  for phase in ("regime", "coarse", "tune", "design", "compression_tune"):
    tuning |= set(phases[phase][0].seeds)
  assert tuning and not tuning & set(report_study.seeds)
  assert len(report_study.seeds) >= 2


@pytest.mark.slow
def test_tune_keeps_the_best_coarse_pairs_and_report_uses_the_tuned_ones(phases):
  coarse = phases["coarse"][1]["stats"]
  tune_study = phases["tune"][0]
  for h in evidence.frontier_hs(quick=True):
    ranked = sorted(
        (s["final_eval_bpb"][0], label)
        for label, s in coarse.items()
        if label.startswith(f"diloco_h{h}_")
    )
    kept = {label for label in tune_study.labels if label.startswith(f"diloco_h{h}_")}
    assert kept == {label for _, label in ranked[: len(kept)]}
  tune = phases["tune"][1]["stats"]
  report_study = phases["report"][0]
  for h in evidence.frontier_hs(quick=True):
    best = min(
        (s["final_eval_bpb"][0], label)
        for label, s in tune.items()
        if label.startswith(f"diloco_h{h}_")
    )[1]
    _, alpha, beta = evidence.parse_label(best)
    run = report_study.runs[f"diloco_h{h}"]
    assert (run.diloco.alpha, run.diloco.beta) == (alpha, beta)
  # AutoLoCo's reference pair is the one tuned at H_ref.
  href = evidence.h_ref(quick=True)
  auto = report_study.runs["autoloco"]
  ref = report_study.runs[f"diloco_h{href}"]
  assert (auto.diloco.alpha, auto.diloco.beta) == (ref.diloco.alpha, ref.diloco.beta)
  assert auto.autoloco.h_ref == href


def _workdirs(study, root: str, label: str) -> list[str]:
  return [w for l, _, _, w in sweep.jobs(study, root) if l == label]


@pytest.mark.slow
def test_schedule_study_reuses_the_evidence_runs_and_reads_each_phase(phases, studies):
  """Issue 41's study on the evidence quick cell: ``β*`` at ``H`` is the
  evidence study's own coarse run; the tune phase keeps ``β*``, the coarse
  pass's ``TOP`` best candidates, its best finer constant and best schedule; the report's
  schedule-tuned point is the tune phase's best; AutoLoCo is the evidence
  report's committed run, and adaptive ``H`` on the schedule has no ratio
  correction; ``report`` reads against the schedule-tuned frontier, ``constant``
  against the constant one, from the same runs."""
  root = studies["root"]
  cell = dict(phase="report", regime="base", corpus="shakespeare", quick=True)
  pairs = evidence.tuned_pairs(cell)
  (h,) = schedule.schedule_hs(True)
  star = schedule.constant_label(h, pairs[h][1])
  coarse_study, coarse = phases["schedule_coarse"]
  assert _workdirs(coarse_study, root, star) == _workdirs(
      phases["coarse"][0], root, evidence.diloco_label(h, *pairs[h])
  )
  assert len(coarse_study.labels) == 1 + len(schedule.candidates(cell, h, pairs[h][1]))
  ranked = [l for _, l in sorted((v["final_eval_bpb"][0], l) for l, v in coarse["stats"].items())]
  tune_study, tune = phases["schedule_tune"]
  expected = {star, *[l for l in ranked if l != star][: schedule.TOP]}
  expected |= set([l for l in ranked if "_const_" in l and l != star][:1])
  expected |= set([l for l in ranked if "_const_" not in l and l != star][:1])
  assert set(tune_study.labels) == expected
  best = min(tune["stats"], key=lambda l: tune["stats"][l]["final_eval_bpb"][0])
  for phase in ("report", "constant"):
    study, summary = phases[f"schedule_{phase}"]
    assert study.seeds == phases["report"][0].seeds
    assert study.runs[f"sched_h{h}"].diloco.to_dict() == tune_study.runs[best].diloco.to_dict()
    assert _workdirs(study, root, "autoloco") == _workdirs(phases["report"][0], root, "autoloco")
    on = study.runs["adaptive_on_schedule"]
    assert on.autoloco.correction == "none"
    assert (on.diloco.beta, on.diloco.beta_end) == (
        study.runs[f"sched_h{h}"].diloco.beta, study.runs[f"sched_h{h}"].diloco.beta_end
    )
    assert on.interval.controller == study.runs["autoloco"].interval.controller
    assert set(study.labels) >= set(schedule.QUICK_VARIANTS)
    assert set(summary["syncs_saved"]) == set(study.syncs_saved)
  assert f"sched_h{h}" in phases["schedule_report"][0].frontier
  constant = phases["schedule_constant"][0]
  assert constant.frontier == tuple(f"diloco_h{x}" for x in evidence.frontier_hs(True))


@pytest.mark.slow
def test_compression_many_aggregate_ablation_trains_both_rules(phases, studies):
  """The ``aggregate`` ablation on the quick cell: the tuned point with the mean
  is the tune phase's own run; its twin with the senders' mean is a new run
  whose outer steps differ (another final loss on the same seed)."""
  study, summary = phases["compression_many_aggregate"]
  tune_study, _ = phases["compression_many_tune"]
  tune_dirs = {w for *_, w in sweep.jobs(tune_study, studies["root"])}
  by_rule = {}
  for label, config in study.runs.items():
    if label.startswith("sparseloco"):
      by_rule[config.compress.aggregate] = label
  assert set(by_rule) == {"mean", "senders"}
  jobs = {j[0]: j[-1] for j in sweep.jobs(study, studies["root"])}
  assert jobs[by_rule["mean"]] in tune_dirs
  assert jobs[by_rule["senders"]] not in tune_dirs
  loss = {rule: summary["stats"][label]["loss_by_seed"] for rule, label in by_rule.items()}
  assert loss["mean"] != loss["senders"]


@pytest.mark.slow
def test_compression_many_rows_take_their_tuned_points_against_the_frontier(phases, studies):
  """Issue 42's study on the evidence quick cell: DiLoCo at ``H_ref`` is the
  evidence study's own run in every phase; the tune phase keeps each grid's
  ``TOP`` best; each report row takes its grid's tuned point (streaming's
  mixing for every streaming row), syncs on the evidence report's seeds against
  its frontier, and the report draws final loss against bytes and peak
  bandwidth."""
  root = studies["root"]
  href = evidence.h_ref(quick=True)
  ref = f"diloco_h{href}"
  cell = dict(phase="report", regime="base", corpus="shakespeare", quick=True)
  tuned = evidence.diloco_label(href, *evidence.tuned_pairs(cell)[href])
  coarse_study = phases["compression_many_coarse"][0]
  assert _workdirs(coarse_study, root, ref) == _workdirs(phases["tune"][0], root, tuned)[:1]
  coarse = phases["compression_many_coarse"][1]["stats"]
  tune_study, tune = phases["compression_many_tune"]
  for family in compression_many.grids(True):
    ranked = sorted((v["final_eval_bpb"][0], l) for l, v in coarse.items()
                    if l.startswith(family + "_"))
    kept = {l for l in tune_study.labels if l.startswith(family + "_")}
    assert kept == {l for _, l in ranked[: compression_many.TOP]}
  study, summary = phases["compression_many_report"]
  assert study.seeds == phases["report"][0].seeds[: len(study.seeds)]
  assert study.frontier == phases["report"][0].frontier
  evidence_ref = _workdirs(phases["report"][0], root, ref)
  assert _workdirs(study, root, ref) == evidence_ref[: len(study.seeds)]
  points = compression_many.tuned_points(compression_many.parse("report,quick"))
  sparse = study.runs["sparseloco_d3"]
  assert (sparse.diloco.alpha, sparse.compress.ef_beta) == (
      points["sparseloco_d3"]["alpha"], points["sparseloco_d3"]["ef_beta"]
  )
  assert sparse.compress.density == 0.03 and sparse.compress.value_bits == 2
  assert study.runs["stream_tau1"].stream.mix == points["stream_tau1"]["mix"]
  assert study.runs["stream_tau1"].stream.fragments == compression_many.FRAGMENTS
  assert set(summary["syncs_saved"]) == set(compression_many.QUICK_ROWS)
  # The targets, read off the report: each trained row of a target's family.
  from experiments import evidence_tables

  targets = evidence_tables.targets_section(summary, ref, compression_many.TARGETS)
  cells = {l.split("|")[1].strip(): l.split("|")[3].strip() for l in targets if l.startswith("| `")}
  assert set(cells) == {f"`{r}`" for r in compression_many.QUICK_ROWS}
  s = summary["stats"]
  bytes_ratio = s[ref]["bytes_per_worker"][0] / s["sparseloco_d3"]["bytes_per_worker"][0]
  assert cells["`sparseloco_d3`"] == f"{bytes_ratio:.2f}×"
  for x_key in ("bytes_per_worker", "peak_bandwidth"):
    png = os.path.join(study.report_dir, f"final_loss_vs_{x_key}.png")
    assert open(png, "rb").read(8) == PNG_MAGIC


@pytest.mark.slow
def test_a_streaming_row_counts_full_model_syncs(phases):
  """A streaming row's syncs in the report are full-model syncs, its trainer's
  fragment events over ``P`` (``experiments/runlog.py``); at the study size
  ``P`` divides ``H_ref``, so each fragment syncs every ``H_ref`` steps and the
  row sits on DiLoCo's frontier at ``H_ref`` (here, at the quick size, ``H = 10``
  and ``P = 4`` make a fragment event every 2 steps). The report's table shows
  each row's peak bandwidth."""
  study, summary = phases["compression_many_report"]
  P = study.runs["stream_tau1"].stream.fragments
  assert P == compression_many.FRAGMENTS > 1
  assert evidence.h_ref(quick=False) % P == 0
  href = evidence.h_ref(quick=True)
  steps = study.runs["stream_tau1"].total_steps
  for run in summary["runs"]["stream_tau1"]:
    assert run["summary"]["sync_events"] == steps // (href // P)
    assert run["summary"]["syncs"] == run["summary"]["sync_events"] / P
  for run in summary["runs"][f"diloco_h{href}"]:
    assert run["summary"]["syncs"] == run["summary"]["sync_events"] == steps // href
  table = open(os.path.join(study.report_dir, "results.md")).read()
  assert "| peak MB/s |" in table


def _report_choosing(design: str, monkeypatch) -> object:
  """The quick report phase's study as if the design phase had chosen ``design``
  (which one the phase chooses depends on the tiny runs' losses)."""
  monkeypatch.setattr(evidence, "choose", lambda entries: (design, True))
  return evidence.study("report,base,shakespeare,quick")


def _train_label(study, label: str, root: str) -> list[dict]:
  """Trains the runs of one label of ``study`` into ``root`` (a root of its own:
  the module's shared root holds the studies' runs and nothing else) and
  returns them as a report reads them."""
  from experiments import report

  runs = []
  for l, seed, config, workdir in sweep.jobs(study, root):
    if l == label:
      trainer.train_and_evaluate(config, workdir)
      runs.append(report.load_run(workdir, seed))
  return runs


@pytest.mark.slow
@pytest.mark.parametrize("design", evidence.QUICK_DESIGNS)
def test_controls_isolate_one_component_each(phases, design, monkeypatch, tmp_path):
  """Each quick design's report as if it were chosen, so that both a budget
  design (open loop already: no replay) and a closed-loop one (its ``H``
  sequence replayed open loop, trained and checked round by round) are checked
  on every run, whichever one the design phase picks."""
  chosen_study, chosen_result = phases["report"]
  assert chosen_study.design in evidence.QUICK_DESIGNS
  study = chosen_study if design == chosen_study.design else None
  study = study or _report_choosing(design, monkeypatch)
  assert study.design == design
  auto = study.runs["autoloco"]
  replayed = "ctrl_correction_replay" in study.runs
  fixed = study.runs["ctrl_correction_replay" if replayed else "ctrl_correction_only"]
  assert fixed.interval.controller == "fixed"
  assert fixed.autoloco.correction == auto.autoloco.correction != "none"
  # At H_ref the correction is the identity: the control replays the design's r_t.
  assert replayed == (fixed.interval.h == evidence.h_ref(quick=True))
  assert bool(fixed.autoloco.ratio_schedule) == replayed
  if replayed:  # and the replay's level alone: its median ratio, held constant
    level = study.runs["ctrl_ratio_median"].autoloco.ratio_schedule
    assert tuple(level) == (float(np.median(fixed.autoloco.ratio_schedule)),)
  else:
    assert "ctrl_ratio_median" not in study.runs
  no_corr = study.runs["ctrl_adaptation_only"]
  assert no_corr.autoloco.correction == "none"
  assert no_corr.interval.controller == auto.interval.controller
  budget = "budget" in evidence.DESIGNS[design]
  assert (auto.interval.controller == "budget") == budget
  # A budget design is open loop already: no replay. A closed loop one has it.
  assert ("ctrl_open_loop" in study.labels) == (not budget)
  if budget:
    assert "ctrl_open_loop" not in study.syncs_saved
    return
  replay = study.runs["ctrl_open_loop"]
  assert replay.interval.controller == "schedule"
  # The replayed sequence is the chosen design's own on tuning seed 0, and the
  # replay runs exactly that sequence of rounds on every report seed.
  design_runs = phases["design"][1]["runs"][design]
  assert list(replay.interval.schedule) == design_runs[0]["rounds"]["h"]
  if study is chosen_study:
    runs = chosen_result["runs"]["ctrl_open_loop"]
  else:
    runs = _train_label(study, "ctrl_open_loop", str(tmp_path))
  assert len(runs) == len(study.seeds) >= 2
  n = len(replay.interval.schedule)
  for run in runs:
    hs = run["rounds"]["h"]
    assert hs and hs[:n] == list(replay.interval.schedule)[: len(hs)]


@pytest.mark.slow
def test_report_states_each_comparison_with_its_interval(phases):
  study, result = phases["report"]
  text = open(os.path.join(study.report_dir, "results.md")).read()
  summary = json.load(open(os.path.join(study.report_dir, "summary.json")))
  assert len(result["comparisons"]) == len(study.comparisons)
  for c in summary["comparisons"]:
    assert c["verdict"] in ("better", "worse", "equal", "inconclusive")
    assert c["loss"]["n"] == len(study.seeds)
    assert c["loss"]["low"] <= c["loss"]["mean"] <= c["loss"]["high"]
    assert f"`{c['candidate']}` vs" in text
  assert "95% CI" in text
  # The headline: syncs saved at equal loss for the design and each control,
  # with its interval, the eval's size and the seed count.
  assert set(summary["syncs_saved"]) == set(study.syncs_saved)
  for entry in summary["syncs_saved"].values():
    assert entry["n"] == len(study.seeds)
    assert entry["delta"]["low"] <= entry["delta"]["mean"] <= entry["delta"]["high"]
  tokens = result["runs"]["autoloco"][0]["summary"]["final_eval_tokens"]
  assert "Syncs saved at equal loss" in text and f"final eval on {tokens} tokens" in text
  assert all(
      r["summary"]["final_eval_tokens"] > 0 for r in result["runs"]["autoloco"]
  )
  # Beside it, the same against the pooled monotone frontier (a check on the
  # log-linear shape), in the summary and the table.
  assert set(summary["syncs_saved_monotone"]) == set(study.syncs_saved)
  assert {e["model"] for e in summary["syncs_saved_monotone"].values()} == {"monotone"}
  assert "monotone: syncs saved (seeds)" in text
  assert "lack of fit is not testable here" in text  # quick: 2 sync counts
  # Beside the bootstrap, the paired t-interval, which contains the mean too.
  for entry in summary["syncs_saved"].values():
    t = entry["delta_t"]
    assert float(t["low"]) <= float(entry["delta"]["mean"]) <= float(t["high"])
  # Each comparison against a label, paired per document as well as per seed; the
  # token-weighted per-document difference is the whole-split difference.
  by_label = [c for c in summary["comparisons"] if c["reference"] != "frontier"]
  assert len(summary["per_document"]) == len(by_label)
  for d, c in zip(summary["per_document"], by_label):
    assert (d["candidate"], d["reference"]) == (c["candidate"], c["reference"])
    assert d["documents"] >= 1 and 0 <= d["lower"] <= d["documents"]
    assert d["weighted_delta"] == pytest.approx(c["loss"]["mean"], abs=1e-4)
  assert "Paired per document" in text
  # The power line states the plan, apart from each comparison's own n.
  assert f"Seeds planned: {summary['power']['seeds']} (" in text


@pytest.mark.slow
def test_tables_summarise_every_phase(phases):
  from experiments import evidence_tables

  root = os.path.dirname(os.path.dirname(phases["report"][0].report_dir))
  text = evidence_tables.tables(root)
  section = text.split("## base regime, shakespeare")[1].split("## ")[0]
  assert "Regime check" in section and "Tuned DiLoCo" in section
  assert f"the best {evidence.TOP} pairs per H" in section
  assert "Still to run" not in section
  design = phases["report"][0].design
  assert f"the design chosen for the report: `{design}`" in section
  assert "Syncs saved at equal loss" in section
  for c in phases["report"][1]["comparisons"]:
    assert f"| `{c['candidate']}` |" in section
  assert "Frontier slope (tuned)" in section
  # AutoLoCo against DiLoCo at H_ref, paired by seed, read from the report.
  plain = text.split("## AutoLoCo against DiLoCo at `H_ref`")[1].split("## ")[0]
  report = phases["report"][1]
  (c,) = [
      c for c in report["comparisons"]
      if (c["candidate"], c["reference"]) == ("autoloco", f"diloco_h{evidence.h_ref(True)}")
  ]
  lower = sum(d < 0 for d in c["loss"]["per_seed"])
  assert f"| base/shakespeare | {c['syncs']:.1f} / " in plain
  assert f"| {lower}/{len(c['loss']['per_seed'])} |" in plain


@pytest.mark.slow
def test_compression_rows_start_from_the_tuned_pair_and_report_bytes_and_peaks(phases):
  from experiments import evidence_tables

  study, result = phases["compression_report"]
  pair = compression.reference_pair(quick=True)
  tuned = phases["report"][0].runs["diloco_h10"]
  assert pair == (tuned.diloco.alpha, tuned.diloco.beta)
  for label in ("diloco", "stream_tau0", "stream_fp4"):
    run = study.runs[label]
    assert (run.diloco.alpha, run.diloco.beta) == pair
    assert run.model.num_layers == compression.NUM_LAYERS
  assert study.runs["stream_fp4"].compress.codec == "fp4"
  assert study.runs["autoloco_stream_fp4"].algorithm == "autoloco"
  stats = result["stats"]
  # fp4 sends fewer bytes than the same streaming run in float32; every row has a peak.
  assert (
      stats["stream_fp4"]["bytes_per_worker"][0]
      < stats["stream_tau4"]["bytes_per_worker"][0]
  )
  assert all("peak_bandwidth" in stats[label] for label in study.labels)
  text = "\n".join(evidence_tables.compression_section(result))
  for label in study.labels:
    assert f"| `{label}` |" in text


@pytest.mark.slow
def test_gossip_g1_tunes_on_tuning_seeds_and_reports_gasloc_against_each_baseline(
    phases,
):
  coarse_study, coarse = phases["gossip_g1_coarse"]
  tune_study, tune = phases["gossip_g1_tune"]
  report_study, report = phases["gossip_g1_report"]
  assert not (set(coarse_study.seeds) | set(tune_study.seeds)) & set(report_study.seeds)
  assert len(report_study.seeds) == report_study.power["seeds"] >= 2
  for topo in gossip_g1.QUICK_TOPOLOGIES:
    for method in gossip_g1.METHODS:
      # The tune phase keeps the coarse pass's best points; the report its best.
      grid = gossip_phases.points(gossip_g1, method, quick=True)
      labels = [gossip_phases.label(method, topo, p) for p in grid]
      best = min(labels, key=lambda l: coarse["stats"][l]["final_eval_bpb"][0])
      assert best in tune_study.labels
      tuned = min(
          (l for l in labels if l in tune["stats"]),
          key=lambda l: tune["stats"][l]["final_eval_bpb"][0],
      )
      assert tuned in report_study.labels
      assert (tuned, "ddp") in report_study.comparisons
  # GASLoC against each baseline on each graph, paired by seed, with a verdict.
  pairs = {(c["candidate"], c["reference"]) for c in report["comparisons"]}
  gasloc = [c for c, r in pairs if c.startswith("gasloc_ring") and r != "ddp"]
  assert len(gasloc) == len(gossip_g1.METHODS) - 1
  for c in report["comparisons"]:
    assert c["verdict"] and c["seeds"] == list(report_study.seeds)
  # The runs are the regime's: one step per round, GASLoC with gamma 0 (quick: K = 4).
  config = report_study.runs[next(l for l in report_study.labels if "_g0_" in l)]
  assert (config.num_workers, config.interval.h, config.gasloc.gamma) == (4, 1, 0.0)
  assert gossip_g1.run_config("gasloc", dict(quick=False)).num_workers == gossip_g1.K == 8


@pytest.mark.slow
def test_gossip_g2_reads_methods_against_the_evidence_frontier_on_its_seeds(phases):
  """G2's report pairs with the evidence report: its seeds, its tolerance, its
  frontier's runs (same workdirs: nothing trained again), each method's syncs
  saved and its Δ against the frontier and DiLoCo at H_ref."""
  _, evidence_report = phases["report"]
  g2_study, g2 = phases["gossip_g2_report"]
  assert g2["seeds"] == evidence_report["seeds"]
  assert g2_study.tolerance == evidence_report["power"]["tolerance"]
  assert g2["frontier"] == evidence_report["frontier"]
  for label in g2["frontier"]:
    assert [r["workdir"] for r in g2["runs"][label]] == [
        r["workdir"] for r in evidence_report["runs"][label]
    ]
  methods = [l for l in g2["labels"] if l not in g2["frontier"]]
  assert len(methods) == len(gossip_phases.METHODS)
  assert set(g2["syncs_saved"]) == set(methods)
  pairs = {(c["candidate"], c["reference"]) for c in g2["comparisons"]}
  for m in methods:
    assert (m, "frontier") in pairs and (m, f"diloco_h{base.h_ref(True)}") in pairs
  # Every method at H_ref on the random matching, in the evidence cell's regime.
  for m in methods:
    config = g2_study.runs[m]
    assert config.interval.h == base.h_ref(True)
    assert config.gossip.topology == "matching"
  full = gossip_g2.get_config("coarse,python")
  config = full.runs[next(l for l in full.labels if l.startswith("noloco"))]
  assert (config.num_workers, config.data.partition, config.total_steps) == (
      8, "non_iid", 1200
  )


@pytest.mark.slow
def test_gossip_g2_mixing_changes_one_thing_of_each_tuned_point(phases):
  """The diagnostic phase: on the tuning seeds only, each tuned point on iid
  shards (read against DiLoCo on iid shards) and GASLoC's on the exponential
  graph, beside the tune phase's own runs of the same points (same workdirs)."""
  study, mixing = phases["gossip_g2_mixing"]
  tune_study, tune = phases["gossip_g2_tune"]
  assert set(study.seeds) <= set(gossip_phases.TUNING_SEEDS)
  href = base.h_ref(True)
  iid = [l for l in study.labels if l.endswith("_iid")]
  assert sorted(l.split("_")[0] for l in iid) == ["diloco", "gasloc", "noloco"]
  for label in iid:
    assert study.runs[label].data.partition == "iid"
    if not label.startswith("diloco"):
      assert study.reference[label] == f"diloco_h{href}_iid"
      same = study.runs[label[: -len("_iid")]]
      assert study.runs[label].gasloc == same.gasloc and study.runs[label].noloco == same.noloco
  (exp,) = [l for l in study.labels if "_exponential_" in l]
  pairs = {(c["candidate"], c["reference"]) for c in mixing["comparisons"]}
  assert (exp, exp.replace("_exponential_", "_matching_")) in pairs
  assert {r for _, r in pairs} >= {f"diloco_h{href}_iid", f"diloco_h{href}"}
  matching = study.runs[exp.replace("_exponential_", "_matching_")]
  assert study.runs[exp].gossip.topology == "exponential"
  assert (study.runs[exp].gasloc.eta, study.runs[exp].gasloc.gamma) == (
      matching.gasloc.eta, matching.gasloc.gamma
  )
  for label in study.labels:
    if label in tune["runs"]:
      assert [r["workdir"] for r in mixing["runs"][label]] == [
          r["workdir"] for r in tune["runs"][label]
      ][: len(study.seeds)]


@pytest.mark.slow
def test_noloco_n1_reports_noloco_against_diloco_each_tuned(phases):
  """N1: each method's tuned pair, chosen on the tuning seeds, on fresh seeds;
  NoLoCo minus DiLoCo paired by seed; the global batch split over K."""
  tune_study, tune = phases["noloco_n1_tune"]
  report_study, report = phases["noloco_n1_report"]
  assert not set(tune_study.seeds) & set(report_study.seeds)
  assert len(report_study.labels) == 2
  noloco, diloco = report_study.labels
  assert noloco.startswith("noloco_matching_") and diloco.startswith("diloco_alpha")
  assert [(c["candidate"], c["reference"]) for c in report["comparisons"]] == [
      (noloco, diloco)
  ]
  assert report["comparisons"][0]["verdict"]
  for k in noloco_n1.WORKERS:
    study = noloco_n1.get_config(f"coarse,k{k}")
    for config in study.runs.values():
      assert config.num_workers * config.data.batch_size == noloco_n1.GLOBAL_BATCH
      assert config.interval.h == base.h_ref(False)
    assert study.report_dir.endswith(f"noloco_n1/k{k}/coarse")


@pytest.mark.slow
def test_noloco_n1_longer_gives_noloco_twice_the_steps_beside_the_same_diloco_runs(phases):
  """N1's ``longer`` phase: NoLoCo's tuned pair at ``LONGER`` times the steps on
  the report's seeds, read against DiLoCo's report runs (the same workdirs:
  nothing trained again)."""
  report_study, report = phases["noloco_n1_report"]
  longer_study, longer = phases["noloco_n1_longer"]
  noloco, diloco = report_study.labels
  assert longer_study.seeds == report_study.seeds
  assert longer["labels"] == [diloco, f"{noloco}_steps{2 * report_study.runs[noloco].total_steps}"]
  assert [r["workdir"] for r in longer["runs"][diloco]] == [
      r["workdir"] for r in report["runs"][diloco]
  ]
  long_run = longer_study.runs[longer["labels"][1]]
  assert long_run.total_steps == noloco_n1.LONGER * report_study.runs[noloco].total_steps
  short = report_study.runs[noloco].to_dict()
  short["total_steps"] = long_run.total_steps
  assert long_run.to_dict() == short  # nothing else changed
  assert dict(longer_study.reference) == {longer["labels"][1]: diloco}


@pytest.mark.slow
def test_gossip_g2_longer_gives_gasloc_twice_the_steps_beside_the_same_diloco_runs(phases):
  """G2's ``longer`` phase (claim G3): GASLoC's tuned point at ``LONGER`` times
  the steps on the report's seeds, read against DiLoCo at ``H_ref``'s report runs
  (the same workdirs: nothing trained again); nothing else changed."""
  report_study, report = phases["gossip_g2_report"]
  longer_study, longer = phases["gossip_g2_longer"]
  diloco = f"diloco_h{base.h_ref(True)}"
  (gasloc,) = [l for l in report_study.labels if l.startswith("gasloc_matching")]
  steps = gossip_g2.LONGER * report_study.runs[gasloc].total_steps
  assert longer_study.seeds == report_study.seeds
  assert longer["labels"] == [diloco, f"{gasloc}_steps{steps}"]
  assert [r["workdir"] for r in longer["runs"][diloco]] == [
      r["workdir"] for r in report["runs"][diloco]
  ]
  short = report_study.runs[gasloc].to_dict()
  short["total_steps"] = steps
  assert longer_study.runs[longer["labels"][1]].to_dict() == short
  assert dict(longer_study.reference) == {longer["labels"][1]: diloco}

def test_a_cells_words_name_its_reports_and_a_wrong_word_says_what_it_takes(
    monkeypatch, tmp_path
):
  """A cell's argument: the phase, its words (a corpus, a worker count) and
  ``quick``; each word keeps its own report folders, an unknown one is refused
  with the words the cell takes, and a phase whose earlier phase has no report
  names that phase's command."""
  assert gossip_g2.get_config("coarse,python").report_dir == (
      "docs/studies/gossip_g2/python/coarse"
  )
  assert noloco_n1.get_config("coarse,k16").report_dir == "docs/studies/noloco_n1/k16/coarse"
  assert gossip_g1.get_config("coarse").report_dir == "docs/studies/gossip_g1/coarse"
  with pytest.raises(ValueError, match="unknown token 'k5'.*'k4', 'k8', 'k16'"):
    noloco_n1.get_config("coarse,k5")
  monkeypatch.setattr(noloco_n1, "DOCS_DIR", str(tmp_path))  # no reports there
  with pytest.raises(ValueError, match=r"noloco_n1.py:tune,k8"):
    noloco_n1.get_config("report,k8")
  with pytest.raises(ValueError, match=r"noloco_n1.py:report,k8"):
    noloco_n1.get_config("longer,k8")


def test_gossip_g1_grid_is_the_union_of_its_products_each_point_once():
  """A widened grid adds its points after the first product's, each point once:
  the labels of finished runs stay."""
  grid = gossip_phases.points(gossip_g1, "gasloc", quick=False)
  first = [dict(eta=e, gamma=g, alpha=a) for e in (0.7, 1.0, 1.5) for g in (0.5, 0.9)
           for a in (1.0, 0.5)]
  assert grid[: len(first)] == first
  # Each point of every product, once.
  expanded = {
      tuple(sorted(zip(p, values)))
      for p in gossip_g1.GRIDS["gasloc"]
      for values in itertools.product(*p.values())
  }
  assert len(grid) == len({tuple(sorted(p.items())) for p in grid}) == len(expanded)
  assert {tuple(sorted(p.items())) for p in grid} == expanded
  # A widening that repeats a point adds it once.
  cell = types.SimpleNamespace(GRIDS=dict(gossip=(dict(weight=(1.0, 0.5)), dict(weight=(0.5, 0.25)))))
  assert gossip_phases.points(cell, "gossip", quick=False) == [
      dict(weight=1.0), dict(weight=0.5), dict(weight=0.25)
  ]
  assert dict(eta=2.0, gamma=0.2, alpha=0.5) in grid
  assert dict(eta=3.0, gamma=0.1, alpha=0.5) in grid  # the second widening
  assert gossip_phases.points(gossip_g1, "gossip", quick=False) == [
      dict(weight=1.0), dict(weight=0.5), dict(weight=0.25)
  ]


# --- the ablations, decentralized and heterogeneity studies -------------------------


@pytest.mark.slow
@pytest.mark.parametrize("module", STUDIES, ids=lambda m: m.__name__.split(".")[-1])
def test_quick_study_writes_table_plots_and_summary(quick, module):
  root, reports, results = quick
  study = module.get_config("quick")
  out = os.path.join(reports, study.name)
  text = open(os.path.join(out, "results.md")).read()
  for label in study.labels:
    assert f"`{label}`" in text
  for name in results[study.name]["plots"]:
    with open(os.path.join(out, name), "rb") as f:
      data = f.read()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000, name
    assert f"({name})" in text
  expected = {
      "loss_vs_tokens.png",
      "loss_vs_syncs.png",
      "loss_vs_bytes_per_worker.png",
      "loss_vs_sim_time_homogeneous.png",
      "loss_vs_sim_time_hetero.png",
      "final_loss_vs_syncs.png",
  }
  assert expected <= set(results[study.name]["plots"])
  adaptive = any(study.runs[l].algorithm == "autoloco" for l in study.labels)
  assert ({"interval.png", "outer.png"} <= set(results[study.name]["plots"])) == adaptive
  summary = json.load(open(os.path.join(out, "summary.json")))
  assert summary["labels"] == list(study.labels)
  for label in study.labels:
    assert len(summary["runs"][label]) == len(study.seeds)
    run = summary["runs"][label][0]
    assert np.isfinite(run["summary"]["final_eval_bpb"])
    # The curve (training-time evals on a spread sample) ends at the last step;
    # the final number is the separate final evaluation, whose size is logged.
    assert run["eval"]["step"][-1] == study.runs[label].total_steps
    assert run["summary"]["final_eval_tokens"] > 0
    assert run["summary"]["sim_time_hetero"] > 0
  # Each claim's verdict, recomputed from its runs: the mean syncs saved against
  # the reference and the loss within the reference's seed spread.
  assert set(summary["claims"]) == set(study.claims)
  for name, claim in summary["claims"].items():
    want = study.claims[name]
    assert (claim["candidate"], claim["reference"]) == (want.candidate, want.reference)
    assert claim["min_saving"] == want.min_saving
    mean = lambda label, key: np.mean([r["summary"][key] for r in summary["runs"][label]])
    cand, ref = claim["candidate"], claim["reference"]
    saving = 1 - mean(cand, "syncs") / mean(ref, "syncs")
    delta = mean(cand, "final_eval_bpb") - mean(ref, "final_eval_bpb")
    assert claim["sync_saving"] == pytest.approx(saving)
    assert claim["loss_delta"] == pytest.approx(delta)
    assert claim["tolerance"] == summary["stats"][ref]["final_eval_bpb"][1]
    holds = bool(saving >= want.min_saving and delta <= claim["tolerance"])
    assert claim["holds"] is holds
    verdict = "**holds**" if holds else "**does not hold**"
    assert f"Claim `{name}`" in text and verdict in text.split(f"Claim `{name}`")[1]


@pytest.mark.slow
def test_studies_share_identical_runs(studies):
  root = studies["root"]
  dirs = {
      sweep.run_dir(root, config)
      for module in STUDIES
      for *_, config, _ in sweep.jobs(module.get_config("quick"), root)
  }
  # The root holds every study's runs and nothing else: one directory per distinct
  # trajectory, whichever studies have it (the evidence study's DiLoCo at H_ref
  # with the paper's pair is the three studies' too).
  phase_dirs = {
      sweep.run_dir(root, config)
      for study, _ in studies["phases"].values()
      for *_, config, _ in sweep.jobs(study, root)
  }
  runs = [name for name in os.listdir(root) if not name.endswith(".lock")]
  assert sorted(runs) == sorted(os.path.basename(d) for d in dirs | phase_dirs)
  assert dirs & phase_dirs
  # DiLoCo at H_ref is in all three studies (decentralized's diloco_k4 too): 20
  # labelled runs, 18 trainings. (The ablations' loss_ratio run is no longer the
  # default AutoLoCo, which now starts from 1.5 H_ref with the tuned pair.) The
  # attention study's two runs name the attention path, so neither is shared.
  labelled = sum(len(m.get_config("quick").labels) for m in STUDIES)
  assert (labelled, len(dirs)) == (22, 20)


@pytest.mark.slow
def test_finished_runs_are_skipped(quick, monkeypatch, tmp_path):
  root, _, _ = quick

  def no_training(*args, **kwargs):
    raise AssertionError("a finished run was trained again")

  monkeypatch.setattr(trainer, "train_and_evaluate", no_training)
  study = heterogeneity.get_config("quick")
  result = sweep.run_study(study, root, str(tmp_path), progress=False)
  assert set(result["stats"]) == set(study.labels)


def _finish(workdir: str) -> None:
  """What a finished run leaves for the sweep and the archive (no training)."""
  os.makedirs(workdir, exist_ok=True)
  summary = dict(summary=True, step=40, final_eval_bpb=3.0, final_eval_tokens=64)
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.write(json.dumps(dict(step=20, loss=3.5)) + "\n" + json.dumps(summary) + "\n")
  for name in ("config.json", "final_eval.json"):
    with open(os.path.join(workdir, name), "w") as f:
      json.dump(dict(name=name), f)


def test_interim_study_keeps_the_complete_seeds_and_the_report_says_so(tmp_path):
  """The fast twin of the interim report test, nothing trained: a study on 3
  seeds with one run of seed 1 unfinished keeps seeds 0 and 2, says so, and
  its table states it."""
  from experiments import report_text

  study = heterogeneity.get_config("quick")
  study.seeds = (0, 1, 2)
  root = str(tmp_path)
  jobs = sweep.jobs(study, root)
  (late,) = [w for label, seed, _, w in jobs if (label, seed) == (study.labels[-1], 1)]
  for *_, workdir in jobs:
    if workdir != late:
      _finish(workdir)
  interim = sweep.with_complete_seeds(study, root)
  assert interim.seeds == (0, 2) and interim.labels == study.labels
  assert interim.interim == "2 of the planned 3 seeds"
  result = dict(seeds=[0, 2], networks=[], interim=interim.interim, labels=[], claims={})
  text = report_text.markdown(interim, result)
  assert "**Interim report**: 2 of the planned 3 seeds, each with every label." in text
  _finish(late)
  assert sweep.with_complete_seeds(study, root).interim == "3 of the planned 3 seeds"
  for _, seed, _, workdir in jobs:
    if seed != 0:
      os.remove(os.path.join(workdir, "metrics.jsonl"))
  with pytest.raises(ValueError, match="1 seeds have every label finished"):
    sweep.with_complete_seeds(study, root)


@pytest.mark.slow
def test_interim_report_says_how_many_seeds_it_holds(quick, tmp_path):
  root, _, _ = quick
  study = heterogeneity.get_config("quick")
  study.interim = "1 of the planned 20 seeds"
  result = sweep.run_study(study, root, str(tmp_path), progress=False, report_only=True)
  assert result["interim"] == study.interim
  text = open(tmp_path / "results.md").read()
  assert "**Interim report**: 1 of the planned 20 seeds, each with every label." in text


@pytest.mark.slow
def test_report_only_names_missing_runs(quick, tmp_path):
  root, _, _ = quick
  study = heterogeneity.get_config("quick")
  base.add_run(study, "extra", base.run_config("diloco", True, interval__h=7))
  with pytest.raises(
      ValueError, match="report_only: 1 runs are not finished: extra seed 0"
  ):
    sweep.run_study(study, root, str(tmp_path), progress=False, report_only=True)


@pytest.mark.slow
def test_command_line_quick_mode_reports_finished_runs(quick, tmp_path):
  """``--quick`` loads the study's quick mode; ``--report_only`` trains nothing."""
  import subprocess
  import sys

  root, _, results = quick
  out = tmp_path / "report"
  proc = subprocess.run(
      [
          sys.executable,
          "-m",
          "experiments.sweep",
          "--study",
          "configs/studies/heterogeneity.py",
          "--quick",
          "--report_only",
          "--root",
          root,
          "--report_dir",
          str(out),
      ],
      cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "0 runs trained, 4 already finished" in proc.stdout
  summary = json.load(open(out / "summary.json"))
  assert summary["quick"] and summary["stats"] == json.loads(
      json.dumps(results["heterogeneity"]["stats"])
  )


@pytest.mark.slow
def test_time_to_target_command_line(quick, tmp_path):
  """``experiments.time_to_target`` from the command line on finished runs
  (the study's own reference, a grid of its flags): the tables and plots; no
  ``--out`` is bad input (exit 2, one line)."""
  import subprocess
  import sys

  root, _, _ = quick
  base_cmd = [sys.executable, "-m", "experiments.time_to_target", "--study",
              "configs/studies/heterogeneity.py:quick", "--root", root]
  run = lambda args: subprocess.run(  # noqa: E731
      base_cmd + args, cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  out = tmp_path / "time"
  proc = run(["--out", str(out), "--bandwidths", "0.3,3", "--latencies", "20"])
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "## Inter-site latency 20 ms" in proc.stdout and "| run | 0.3 | 3 |" in proc.stdout
  result = json.load(open(out / "time_to_target.json"))
  assert set(result["speedups"]) == {"0.3gbps_20ms", "3gbps_20ms"}
  assert (out / "speedup_vs_bandwidth.png").read_bytes().startswith(PNG_MAGIC)
  bad = run([])
  assert bad.returncode == 2 and bad.stderr.strip().startswith("error: give --out"), bad.stderr


@pytest.mark.slow
def test_stale_finished_run_is_refused(quick, tmp_path):
  """A finished run whose stored config differs from the study's is an error,
  not silently reused."""
  root, _, _ = quick
  study = ablations.get_config("quick")
  ((label, _, config, workdir),) = [
      j for j in sweep.jobs(study, root) if j[0] == "loss_ratio_momentum"
  ]
  one = base.new_study("one", "one", quick=True)
  base.add_run(one, label, study.runs[label])
  stale = sweep.run_dir(str(tmp_path), config)
  os.makedirs(stale)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    open(os.path.join(stale, "metrics.jsonl"), "w").write(f.read())
  stored = json.load(open(os.path.join(workdir, "config.json")))
  stored["inner"]["lr"] = 1.0
  json.dump(stored, open(os.path.join(stale, "config.json"), "w"))
  with pytest.raises(ValueError, match="inner.lr"):
    sweep.run_study(one, str(tmp_path), str(tmp_path / "report"), progress=False)


@pytest.mark.slow
def test_also_network_times_match_a_run_on_that_network(quick, tmp_path):
  """network.also adds clocks without changing training: the hetero time a
  homogeneous run logs equals that of the same run on the hetero network."""
  root, _, results = quick
  logged = results["decentralized"]["runs"]["noloco_k4"][0]["summary"]
  config = decentralized.get_config("quick").runs["noloco_k4"]
  config.seed = 0
  config.network.name = "hetero"
  config.network.also = ()
  alone = trainer.train_and_evaluate(config, str(tmp_path))
  assert alone["final_eval_bpb"] == logged["final_eval_bpb"]
  np.testing.assert_allclose(alone["sim_time"], logged["sim_time_hetero"], rtol=1e-12)
  assert logged["sim_time_hetero"] > logged["sim_time"]


@pytest.mark.slow
def test_documented_time_to_target_commands_replay_each_runs_clock(studies, tmp_path):
  """Every ``experiments.time_to_target`` command the config docstrings show,
  at its smallest size (the quick study, on the runs this file trained): each
  run's replayed time at each eval on the two-site 1 Gbit/s, 50 ms network is
  the time it logged on ``hetero``, the same network, exactly (DiLoCo, GASLoC,
  GASLoC γ = 0, gossip AdamW, NoLoCo); slower or later links never make a run
  sooner; the reference's speed-up over itself is 1 on every seed; the tables
  and plots are written."""
  commands = sorted(
      {c for _, c in documented.documented_commands() if "time_to_target" in c}
  )
  assert len(commands) >= 2, commands
  algorithms = set()
  for i, command in enumerate(commands):
    study = _quick_study(command)
    result = time_to_target.collect(study, studies["root"], "", (0.1, 1.0), (50.0, 200.0))
    for label, runs in result["runs"].items():
      for run in runs:
        algorithms.add(run["summary"]["algorithm"])
        ev = run["eval"]
        assert ev["sim_time_1gbps_50ms"] == ev["sim_time_hetero"], (command, label)
        # A slower link never makes a run sooner.
        assert all(a >= b for a, b in zip(ev["sim_time_0.1gbps_50ms"], ev["sim_time_1gbps_50ms"]))
        assert all(a >= b for a, b in zip(ev["sim_time_1gbps_200ms"], ev["sim_time_1gbps_50ms"]))
    ref = result["reference"]
    for net, rows in {**result["speedups"], "steps": result["steps"]}.items():
      row = rows[ref]
      assert row["reached"] == row["seeds"] == len(study.seeds)
      assert row["speedup"] == pytest.approx(1.0)
    out = tmp_path / f"time{i}"
    names = time_to_target.write(result, str(out), dpi=20)
    assert all(os.path.getsize(out / n) > 0 for n in names)
    assert f"`{ref}`" in (out / "time_to_target.md").read_text()
  assert {"diloco", "gasloc", "gossip_adamw", "noloco"} <= algorithms, algorithms


def _quick_study(command: str):
  """The study a documented sweep command loads, at its smallest size, loaded
  as the command line loads it: the file's ``get_config(<args>,quick)`` for a
  study with arguments, else its ``get_config("quick")`` (``--quick``)."""
  study = next(a for a in shlex.split(command) if a.startswith("configs/studies/"))
  path, _, arg = study.partition(":")
  module = base.load_module(os.path.join(ROOT, path))
  return module.get_config(f"{arg},quick" if arg else "quick")


@pytest.mark.slow
def test_documented_sweep_commands_run_in_quick_mode(studies):
  """Every ``experiments.sweep`` command the config docstrings show, at its
  smallest size (its quick mode), is a study this file's fixture trained and
  reported with ``sweep.run_study``, the function the command calls: loaded as
  the command line loads it, it is that study exactly (labels, seeds, configs,
  references), and every one of its runs is settled, so the command trains
  nothing again (tests/test_documented_commands.py; the command line itself:
  test_command_line_quick_mode_reports_finished_runs)."""
  commands = sorted(
      {c for _, c in documented.documented_commands() if "experiments.sweep" in c}
  )
  assert len(commands) >= 8, commands
  ran = {study.name: study for study, _ in studies["phases"].values()}
  ran.update({m.get_config("quick").name: m.get_config("quick") for m in STUDIES})
  for command in commands:
    study = _quick_study(command)
    assert study.quick, command
    assert study.name in ran, command
    assert study.to_dict() == ran[study.name].to_dict(), command
    assert all(sweep.is_settled(w) for *_, w in sweep.jobs(study, studies["root"])), command
