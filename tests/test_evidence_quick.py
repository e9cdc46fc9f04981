"""The evidence study's quick mode end to end: every phase, each reading the one
before it, ending in a report of paired intervals on seeds no choice used."""

import json
import os

import pytest

from configs.studies import compression
from experiments import evidence, sweep


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("runs"))
  reports = str(tmp_path_factory.mktemp("evidence"))
  patch = pytest.MonkeyPatch()
  patch.setattr(evidence, "QUICK_DIR", reports)
  out = {}
  # The patch lasts the whole module: tests read the phases' reports through the
  # study's own paths, which must be this module's folder, never a checkout's
  # earlier runs.
  try:
    for phase in evidence.PHASES:
      study = evidence.study(f"{phase},base,shakespeare,quick")
      out[phase] = (study, sweep.run_study(study, root, study.report_dir, progress=False))
    # The compression study starts from the evidence study's tuned pair and design.
    for phase in compression.PHASES:
      study = compression.get_config(f"{phase},quick")
      out[f"compression_{phase}"] = (
          study,
          sweep.run_study(study, root, study.report_dir, progress=False),
      )
    yield out
  finally:
    patch.undo()


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


@pytest.mark.slow
def test_controls_isolate_one_component_each(phases):
  study, result = phases["report"]
  auto = study.runs["autoloco"]
  fixed = study.runs["ctrl_correction_only"]
  assert fixed.interval.controller == "fixed"
  assert fixed.autoloco.correction == auto.autoloco.correction != "none"
  no_corr = study.runs["ctrl_adaptation_only"]
  assert no_corr.autoloco.correction == "none"
  assert no_corr.interval.controller == auto.interval.controller
  replay = study.runs["ctrl_open_loop"]
  assert replay.interval.controller == "schedule"
  # The replayed sequence is the chosen design's own on tuning seed 0, and the
  # replay runs exactly that sequence of rounds on every report seed.
  design = phases["design"][1]["runs"][study.design][0]
  assert list(replay.interval.schedule) == design["rounds"]["h"]
  for run in result["runs"]["ctrl_open_loop"]:
    hs = run["rounds"]["h"]
    n = len(replay.interval.schedule)
    assert hs[:n] == list(replay.interval.schedule)[: len(hs)]


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


@pytest.mark.slow
def test_tables_summarise_every_phase(phases):
  from experiments import evidence_tables

  root = os.path.dirname(os.path.dirname(phases["report"][0].report_dir))
  text = evidence_tables.tables(root)
  section = text.split("## base regime, shakespeare")[1].split("## ")[0]
  assert "Regime check" in section and "Tuned DiLoCo" in section
  # The pairs per H the tune phase ran (the quick grid keeps 2, the full one 4).
  assert f"the best {evidence.top(True)} pairs per H" in section
  assert "Not run yet" not in section
  design = phases["report"][0].design
  assert f"**`{design}`**" in section
  for c in phases["report"][1]["comparisons"]:
    assert f"| `{c['candidate']}` |" in section
  assert "Frontier slope (tuned)" in section


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
