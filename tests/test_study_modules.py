"""Every study module of ``configs/studies`` driven phase by phase on synthetic
runs (``tests/synthetic_runs.py``: no training, nothing compiled): each phase
built from the report the phase before it wrote, through ``sweep.run_study``,
the function the command line calls; the quick mode of every study, and the
full-size phases that ran (:data:`FULL_CHAINS`). What is checked is the study
layer: which runs each phase chooses and on which seeds, that every label a
study names exists, that studies share runs by config hash, and that the
reports are written. What real training produces (losses, clocks, round
traces) is tests/test_studies_quick.py's.

Two things are cut for time, neither of which a choice reads: most reports'
plots (:data:`DRAWN`) and the bootstrap's resamples (:data:`BOOTSTRAP_SAMPLES`).
"""

import functools
import json
import os
import shlex

import numpy as np
import pytest

from configs.studies import ablations, attention, base, compression, compression_many
from configs.studies import decentralized, evidence, gossip_g1, gossip_g2, gossip_phases
from configs.studies import heterogeneity, noloco_n1, recipe, schedule
from experiments import engine, report, seed_stats, sweep, syncs_saved
from tests import synthetic_runs
from tests import test_documented_commands as documented
from tests.helpers import ROOT

#: The studies of one phase, each run as ``get_config("quick")``.
STUDIES = (ablations, decentralized, heterogeneity, attention)
#: The phased cells of ``gossip_phases``.
CELLS = (gossip_g1, gossip_g2, noloco_n1)
#: Modules whose quick reports go to their ``QUICK_DIR`` (moved to a tmp folder).
PHASED = (evidence, schedule, compression, compression_many, recipe) + CELLS
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: The quick reports whose plots are drawn (about 0.4 s of CPU a figure, 190 in
#: all the quick reports): a study with AutoLoCo (H and outer-step plots) and one
#: without it but with cost plots.
DRAWN = ("heterogeneity", "compression_many_report")
#: Bootstrap resamples of the syncs-saved intervals (``syncs_saved.bootstrap``,
#: 10,000 in the reports): what is checked here is which runs a study chooses,
#: which reads point estimates (``evidence.choose``, the seed counts), never
#: an interval's exact ends. 10,000 took half the quick studies' time.
BOOTSTRAP_SAMPLES = 200


def _run_phases(
    phases: dict, root: str, prefix: str, get_config, names, args: str
) -> None:
  """Each phase of ``names`` in order, built by ``get_config("<phase>,<args>")``
  (so from the report the one before it wrote) and run: ``phases[prefix +
  phase] = (study, summary)``."""
  for phase in names:
    study = get_config(f"{phase},{args}")
    phases[f"{prefix}{phase}"] = (
        study,
        sweep.run_study(study, root, study.report_dir, progress=False),
    )


def _run_everything(root: str, reports: str) -> tuple[dict, dict]:
  """Every quick study, in the order their phases read each other: the evidence
  cell first (the schedule, compression and G2 studies read its reports)."""
  phases = {}
  _run_phases(phases, root, "", functools.partial(engine.build, evidence), evidence.PHASES, "base,shakespeare,quick")
  _run_phases(phases, root, "schedule_", functools.partial(engine.build, schedule), schedule.PHASES, "quick")
  _run_phases(
      phases,
      root,
      "compression_many_",
      functools.partial(engine.build, compression_many),
      compression_many.PHASES,
      "quick",
  )
  _run_phases(
      phases, root, "compression_", functools.partial(engine.build, compression), compression.PHASES, "quick"
  )
  _run_phases(phases, root, "recipe_", functools.partial(engine.build, recipe), recipe.PHASES, "quick")
  for cell in CELLS:
    _run_phases(phases, root, cell.NAME.format(phase=""), functools.partial(engine.build, cell), cell.PHASES, "quick")
  results = {}
  for module in STUDIES:
    study = module.get_config("quick")
    results[study.name] = sweep.run_study(
        study, root, os.path.join(reports, study.name), progress=False
    )
  return phases, results


def _plots_only_for(names: tuple[str, ...]):
  """``report.write_plots`` drawing only the reports of the studies ``names``;
  the others' reports are written whole but for their PNGs."""
  draw = report.write_plots
  return (
      lambda result, report_dir: draw(result, report_dir)
      if result["name"] in names
      else []
  )


def _fewer_resamples():
  """``syncs_saved.bootstrap`` with :data:`BOOTSTRAP_SAMPLES` resamples."""
  return functools.partial(syncs_saved.bootstrap, samples=BOOTSTRAP_SAMPLES)


def _stand_in(trained: list):
  """The synthetic trainer, noting each workdir it writes in ``trained``."""

  def train_and_evaluate(config, workdir, allow_config_change=False):
    trained.append(workdir)
    return synthetic_runs.train_and_evaluate(config, workdir, allow_config_change)

  return train_and_evaluate


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
  """Every quick study on synthetic runs in one root: ``root``, ``reports`` (the
  one-phase studies' report folders), ``results`` (their summaries by name),
  ``phases`` (each phase's ``(study, summary)``) and ``trained`` (the workdirs
  the stand-in wrote, in order). Plots are drawn for :data:`DRAWN` only."""
  root = str(tmp_path_factory.mktemp("runs"))
  reports = str(tmp_path_factory.mktemp("reports"))
  trained = []
  patch = pytest.MonkeyPatch()
  patch.setattr(sweep.trainer, "train_and_evaluate", _stand_in(trained))
  patch.setattr(report, "write_plots", _plots_only_for(DRAWN))
  patch.setattr(syncs_saved, "bootstrap", _fewer_resamples())
  # Each QUICK_DIR in a folder of its own (compression's reports go beside
  # evidence's, into that folder).
  for module in PHASED:
    name = module.__name__.split(".")[-1]
    patch.setattr(module, "QUICK_DIR", str(tmp_path_factory.mktemp(name) / name))
  # The patch lasts the whole module: tests read the phases' reports through
  # the studies' own paths.
  try:
    phases, results = _run_everything(root, reports)
    yield dict(
        root=root, reports=reports, results=results, phases=phases, trained=trained
    )
  finally:
    patch.undo()


@pytest.fixture(scope="module")
def phases(synthetic):
  """The quick phases: ``phases[name] = (study, summary)``."""
  return synthetic["phases"]


def _all_studies(synthetic) -> list:
  """Every study the fixture ran."""
  studies = [study for study, _ in synthetic["phases"].values()]
  return studies + [m.get_config("quick") for m in STUDIES]


def _workdirs(study, root: str, label: str) -> list[str]:
  """The workdirs of ``label``'s runs in ``study``, seed by seed."""
  return [w for l, _, _, w in sweep.jobs(study, root) if l == label]


# --- every quick study -----------------------------------------------------------


def test_every_label_a_study_names_is_one_of_its_runs(synthetic):
  """References (both ends), the frontier, comparisons, claims, the syncs-saved
  rows: each names a label of the study (``sweep.check_study`` checks all but
  the references' keys and the syncs-saved rows)."""
  for study in _all_studies(synthetic):
    _check_names(study)


def _check_names(study) -> None:
  """Every label ``study`` names is one of its runs, and a study read against a
  frontier has one."""
  labels = set(study.labels)
  named = (
      set(study.reference.keys()) | set(study.reference.values()) | set(study.frontier)
  )
  named |= {x for pair in study.get("comparisons", ()) for x in pair} - {"frontier"}
  named |= set(study.get("syncs_saved", ()))
  for claim in study.claims.values():
    named |= {claim.reference, claim.candidate}
  assert named <= labels, (study.name, sorted(named - labels))
  against_frontier = any(ref == "frontier" for _, ref in study.get("comparisons", ()))
  assert study.frontier or not (against_frontier or study.get("syncs_saved")), study.name


def test_every_report_is_written(synthetic):
  """results.md and summary.json in each study's report folder, naming every
  label; where plots are drawn (:data:`DRAWN`), every PNG the report lists,
  the final-loss plots of its cost axes among them, and the H and outer-step
  plots exactly where it has AutoLoCo runs."""
  reports = [(s.report_dir, s, r) for s, r in synthetic["phases"].values()]
  for module in STUDIES:
    study = module.get_config("quick")
    folder = os.path.join(synthetic["reports"], study.name)
    reports.append((folder, study, synthetic["results"][study.name]))
  drawn = set()
  for folder, study, result in reports:
    text = open(os.path.join(folder, "results.md")).read()
    summary = json.load(open(os.path.join(folder, "summary.json")))
    assert summary["labels"] == result["labels"] == list(study.labels)
    assert all(f"`{label}`" in text for label in study.labels), folder
    if study.name in DRAWN:
      drawn.add(study.name)
      plots = set(result["plots"])
      assert {
          f"final_loss_vs_{k}.png" for k in ["syncs", *study.get("cost_plots", ())]
      } <= plots
      adaptive = any(study.runs[l].algorithm == "autoloco" for l in study.labels)
      assert ({"interval.png", "outer.png"} <= plots) == adaptive
    for name in result["plots"]:
      assert open(os.path.join(folder, name), "rb").read(8) == PNG_MAGIC, (folder, name)
      assert f"({name})" in text
  assert drawn == set(DRAWN)


def test_phased_studies_choose_on_tuning_seeds_and_report_on_fresh_ones(phases):
  """Every phase that chooses (regime, coarse, tune, design, mixing, the
  compression tunes and ablation) runs on tuning seeds only; no report phase
  shares a seed with them, and each has at least two (the old compression
  study's quick report: one). The recipe's ``ablate`` and ``transfer`` choose
  nothing: they measure the best row's parts, and the best row on a second
  corpus, on fresh seeds."""
  reports = ("report", "constant", "longer", "ablate", "transfer")
  tuning, fresh = set(), set()
  for name, (study, _) in phases.items():
    (fresh if name.split("_")[-1] in reports else tuning).update(study.seeds)
  assert tuning <= set(evidence.TUNING_SEEDS) | set(gossip_phases.TUNING_SEEDS)
  assert fresh and not tuning & fresh
  for name, (study, _) in phases.items():
    if name.split("_")[-1] in reports:
      assert len(study.seeds) >= 2 or name == "compression_report", name


def test_runs_identical_across_studies_share_one_workdir(synthetic):
  """One workdir per distinct trajectory, whichever studies have it: the root
  holds exactly the jobs' workdirs, fewer than the jobs, and each was written
  once (a finished run is never trained again, by a later phase or study)."""
  root, phases = synthetic["root"], synthetic["phases"]
  jobs = [j for study in _all_studies(synthetic) for j in sweep.jobs(study, root)]
  dirs = {w for *_, w in jobs}
  runs = [n for n in os.listdir(root) if not n.endswith(".lock")]
  assert sorted(runs) == sorted(os.path.basename(d) for d in dirs)
  assert len(dirs) < len(jobs)
  assert sorted(synthetic["trained"]) == sorted(dirs)
  # The evidence report's frontier is the schedule, compression_many and G2
  # reports' too (on their seeds).
  ev = phases["report"][0]
  for name in (
      "schedule_report",
      "schedule_constant",
      "compression_many_report",
      "gossip_g2_report",
  ):
    study = phases[name][0]
    for h in evidence.frontier_hs(True):
      n = len(study.seeds)
      assert (
          _workdirs(study, root, f"diloco_h{h}")
          == _workdirs(ev, root, f"diloco_h{h}")[:n]
      )
  # The one-phase studies: DiLoCo at H_ref is in three of them (decentralized's
  # diloco_k4 too): 22 labelled runs, 20 distinct; the paper's pair at H_ref is
  # the evidence regime phase's run too.
  one = {w for m in STUDIES for *_, w in sweep.jobs(m.get_config("quick"), root)}
  labelled = sum(len(m.get_config("quick").labels) for m in STUDIES)
  assert (labelled, len(one)) == (22, 20)
  assert one & {w for s, _ in phases.values() for *_, w in sweep.jobs(s, root)}


@pytest.mark.parametrize("module", STUDIES, ids=lambda m: m.__name__.split(".")[-1])
def test_quick_study_writes_table_plots_and_summary(synthetic, module):
  """A one-phase study's report: every label in the summary with a run per seed,
  the loss curves on each axis and network (where drawn), and each claim's
  verdict recomputed from its runs."""
  study = module.get_config("quick")
  out = os.path.join(synthetic["reports"], study.name)
  result = synthetic["results"][study.name]
  text = open(os.path.join(out, "results.md")).read()
  if study.name in DRAWN:  # the PNGs themselves: test_every_report_is_written
    curves = {f"loss_vs_{x}.png" for x in ("tokens", "syncs", "bytes_per_worker")}
    curves |= {f"loss_vs_sim_time_{net}.png" for net in study.networks}
    assert curves <= set(result["plots"])
  summary = json.load(open(os.path.join(out, "summary.json")))
  assert summary["labels"] == list(study.labels)
  for label in study.labels:
    assert len(summary["runs"][label]) == len(study.seeds)
    assert np.isfinite(summary["runs"][label][0]["summary"]["final_eval_bpb"])
  assert set(summary["claims"]) == set(study.claims)
  for name, claim in summary["claims"].items():
    _check_claim(summary, study.claims[name], claim, name, text)


def _check_claim(summary: dict, want, claim: dict, name: str, text: str) -> None:
  """A claim's verdict recomputed from its runs: the mean syncs saved against
  the reference and the loss within the reference's seed spread."""
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


# --- the evidence cell and the studies built on it ---------------------------------


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
    assert len(kept) == evidence.TOP
    assert kept == {label for _, label in ranked[: len(kept)]}
  tune = phases["tune"][1]["stats"]
  report_study = phases["report"][0]
  for h in evidence.frontier_hs(quick=True):
    best = min(
        (s["final_eval_bpb"][0], label)
        for label, s in tune.items()
        if label.startswith(f"diloco_h{h}_")
    )[1]
    _, alpha, beta = synthetic_runs.diloco_hab(best)
    run = report_study.runs[f"diloco_h{h}"]
    assert (run.diloco.alpha, run.diloco.beta) == (alpha, beta)
  # AutoLoCo's reference pair is the one tuned at H_ref.
  href = evidence.h_ref(quick=True)
  auto = report_study.runs["autoloco"]
  ref = report_study.runs[f"diloco_h{href}"]
  assert (auto.diloco.alpha, auto.diloco.beta) == (ref.diloco.alpha, ref.diloco.beta)
  assert auto.autoloco.h_ref == href
  # The design chosen is the one that saves the most on the tuning seeds.
  saved = {l: e["saved"]["mean"] for l, e in phases["design"][1]["syncs_saved"].items()}
  finite = {l: v for l, v in saved.items() if np.isfinite(v)}
  assert report_study.design == max(finite, key=finite.get)


def _report_choosing(design: str, monkeypatch, cell: str = "base,shakespeare,quick"):
  """The report phase's study as if the design phase had chosen ``design``."""
  monkeypatch.setattr(evidence, "choose", lambda entries: (design, True))
  return engine.build(evidence, f"report,{cell}")


@pytest.mark.parametrize("design", evidence.QUICK_DESIGNS)
def test_controls_isolate_one_component_each(phases, design, monkeypatch):
  """Each quick design's report as if it were chosen: a budget design (open
  loop already: no replay) and a closed-loop one (its ``H`` sequence on tuning
  seed 0 replayed open loop), whichever one the design phase picks."""
  chosen_study, _ = phases["report"]
  study = chosen_study if design == chosen_study.design else None
  study = study or _report_choosing(design, monkeypatch)
  _check_controls(study, design, phases["design"][1], quick=True)


def _check_controls(study, design: str, design_summary: dict, quick: bool) -> None:
  """The chosen design's controls each take one component away: the correction
  without the adaptation (at ``H_ref``, where it is the identity, the design's
  ratios replayed and their median), the adaptation without the correction,
  and for a closed-loop design its ``H`` sequence on tuning seed 0 replayed
  open loop."""
  assert study.design == design
  auto = study.runs["autoloco"]
  replayed = "ctrl_correction_replay" in study.runs
  fixed = study.runs["ctrl_correction_replay" if replayed else "ctrl_correction_only"]
  assert fixed.interval.controller == "fixed"
  assert fixed.autoloco.correction == auto.autoloco.correction != "none"
  assert replayed == (fixed.interval.h == evidence.h_ref(quick))
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
  assert ("ctrl_open_loop" in study.labels) == (not budget)
  _check_names(study)
  for config in study.runs.values():
    sweep.config_check.validate(config)
  if budget:
    assert "ctrl_open_loop" not in study.syncs_saved
    return
  replay = study.runs["ctrl_open_loop"]
  assert replay.interval.controller == "schedule"
  # The replayed sequence is the chosen design's own on tuning seed 0.
  assert (
      list(replay.interval.schedule) == design_summary["runs"][design][0]["rounds"]["h"]
  )


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
  # Beside it, the same against the pooled monotone frontier.
  assert set(summary["syncs_saved_monotone"]) == set(study.syncs_saved)
  assert {e["model"] for e in summary["syncs_saved_monotone"].values()} == {"monotone"}
  assert "monotone: syncs saved (seeds)" in text
  assert "lack of fit is not testable here" in text  # quick: 2 sync counts
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
  assert f"Seeds planned: {summary['power']['seeds']} (" in text


def test_the_study_page_tables_every_phase_and_rereads_each_comparison(full, monkeypatch):
  """``experiments.study_page`` on the full-size synthetic evidence cells: each
  phase's row with its seeds, every comparison of the regime, design and
  report phases with its verdict read again by ``seed_stats.verdict``, and the
  syncs saved of the design and report phases."""
  from experiments import study_page

  monkeypatch.setattr(study_page, "claims_section", lambda module: [])
  text = study_page.page("evidence")
  section = text.split("## base/shakespeare")[1].split("\n## ")[0]
  for phase in evidence.PHASES:
    summary = full["phases"][f"base_shakespeare_{phase}"][1]
    seeds = summary["seeds"]
    assert f"| {phase} | {len(seeds)} " in section or f"| {phase} | {seeds[0]} |" in section
  for phase in ("regime", "design", "report"):
    summary = full["phases"][f"base_shakespeare_{phase}"][1]
    for c in summary["comparisons"]:
      word = seed_stats.verdict(c["loss"], c["tolerance"])
      assert f"| `{c['candidate']}` | `{c['reference']}` | headline | " in section
      assert word in section
  assert section.count("Syncs saved at equal loss") == 2  # design and report
  assert "## many/python" in text and "| regime | not run |" not in text.split("## many/python")[1]

def _schedule_tune_rule(stats: dict, h: int, star: str) -> set[str]:
  """The schedule study's tune phase at ``H``, restated from its docstring:
  ``β*``, the ``TOP`` best others of the coarse pass, its best finer constant
  and its best schedule."""
  ranked = sorted(
      (s["final_eval_bpb"][0], l) for l, s in stats.items() if l.startswith(f"h{h}_")
  )
  others = [l for _, l in ranked if l != star]
  constants = [l for l in others if "_const_" in l]
  schedules = [l for l in others if "_const_" not in l]
  return {star, *others[: schedule.TOP], *constants[:1], *schedules[:1]}


def test_schedule_study_reuses_the_evidence_runs_and_reads_each_phase(phases, synthetic):
  """Issue 41's study on the evidence quick cell: ``β*`` at ``H`` is the
  evidence study's own coarse run; the tune phase keeps ``tune_labels``; the
  report's schedule-tuned point is the tune phase's best; AutoLoCo is the
  evidence report's run; ``report`` reads against the schedule-tuned frontier,
  ``constant`` against the constant one, from the same runs."""
  root = synthetic["root"]
  cell = engine.parse(evidence, "report,base,shakespeare,quick")
  pairs = evidence.tuned_pairs(cell)
  (h,) = schedule.schedule_hs(True)
  star = schedule.constant_label(h, pairs[h][1])
  coarse_study, coarse = phases["schedule_coarse"]
  assert _workdirs(coarse_study, root, star) == _workdirs(
      phases["coarse"][0], root, evidence.diloco_label(h, *pairs[h])
  )
  assert len(coarse_study.labels) == 1 + len(schedule.candidates(cell, h, pairs[h][1]))
  tune_study, tune = phases["schedule_tune"]
  expected = _schedule_tune_rule(coarse["stats"], h, star)
  assert set(tune_study.labels) == expected
  best = min(tune["stats"], key=lambda l: tune["stats"][l]["final_eval_bpb"][0])
  for phase in ("report", "constant"):
    study, summary = phases[f"schedule_{phase}"]
    assert study.seeds == phases["report"][0].seeds
    assert (
        study.runs[f"sched_h{h}"].diloco.to_dict()
        == tune_study.runs[best].diloco.to_dict()
    )
    assert _workdirs(study, root, "autoloco") == _workdirs(
        phases["report"][0], root, "autoloco"
    )
    on = study.runs["adaptive_on_schedule"]
    assert on.autoloco.correction == "none"
    assert (on.diloco.beta, on.diloco.beta_end) == (
        study.runs[f"sched_h{h}"].diloco.beta,
        study.runs[f"sched_h{h}"].diloco.beta_end,
    )
    assert on.interval.controller == study.runs["autoloco"].interval.controller
    assert set(study.labels) >= set(schedule.QUICK_VARIANTS)
    assert set(summary["syncs_saved"]) == set(study.syncs_saved)
  assert f"sched_h{h}" in phases["schedule_report"][0].frontier
  constant = phases["schedule_constant"][0]
  assert constant.frontier == tuple(f"diloco_h{x}" for x in evidence.frontier_hs(True))


def test_compression_many_aggregate_ablation_trains_both_rules(phases, synthetic):
  """The ``aggregate`` ablation: the tuned point with the mean is the tune
  phase's own run; its twin with the senders' mean is a new run, another in
  nothing but the rule and the outer lr."""
  study, _ = phases["compression_many_aggregate"]
  tune_study, _ = phases["compression_many_tune"]
  tune_dirs = {w for *_, w in sweep.jobs(tune_study, synthetic["root"])}
  by_rule = {
      c.compress.aggregate: l for l, c in study.runs.items() if l.startswith("sparseloco")
  }
  assert set(by_rule) == {"mean", "senders"}
  jobs = {j[0]: j[-1] for j in sweep.jobs(study, synthetic["root"])}
  assert jobs[by_rule["mean"]] in tune_dirs
  assert jobs[by_rule["senders"]] not in tune_dirs
  # The twins differ in the rule and the outer lr (the senders' at the paper's).
  fields = {
      r: sweep.config_check.trajectory_fields(study.runs[l]) for r, l in by_rule.items()
  }
  differ = {k for k in fields["mean"] if fields["mean"][k] != fields["senders"].get(k)}
  assert "compress.aggregate" in differ <= {"compress.aggregate", "diloco.alpha"}, differ


def test_compression_many_rows_take_their_tuned_points_against_the_frontier(
    phases, synthetic
):
  """Issue 42's study on the evidence quick cell: DiLoCo at ``H_ref`` is the
  evidence study's own run in every phase; the tune phase keeps each grid's
  ``TOP`` best; each report row takes its grid's tuned point, syncs on the
  evidence report's seeds against its frontier, and the targets table reads
  every row."""
  root = synthetic["root"]
  href = evidence.h_ref(quick=True)
  ref = f"diloco_h{href}"
  cell = engine.parse(evidence, "report,base,shakespeare,quick")
  tuned = evidence.diloco_label(href, *evidence.tuned_pairs(cell)[href])
  coarse_study = phases["compression_many_coarse"][0]
  assert (
      _workdirs(coarse_study, root, ref) == _workdirs(phases["tune"][0], root, tuned)[:1]
  )
  coarse = phases["compression_many_coarse"][1]["stats"]
  tune_study, _ = phases["compression_many_tune"]
  for family in compression_many.grids(True):
    ranked = sorted(
        (v["final_eval_bpb"][0], l)
        for l, v in coarse.items()
        if l.startswith(family + "_")
    )
    kept = {l for l in tune_study.labels if l.startswith(family + "_")}
    assert kept == {l for _, l in ranked[: compression_many.TOP]}
  study, summary = phases["compression_many_report"]
  assert study.seeds == phases["report"][0].seeds[: len(study.seeds)]
  assert study.frontier == phases["report"][0].frontier
  points = compression_many.tuned_points(engine.parse(compression_many, "report,quick"))
  sparse = study.runs["sparseloco_d3"]
  assert (sparse.diloco.alpha, sparse.compress.ef_beta) == (
      points["sparseloco_d3"]["alpha"],
      points["sparseloco_d3"]["ef_beta"],
  )
  assert sparse.compress.density == 0.03 and sparse.compress.value_bits == 2
  assert study.runs["stream_tau1"].stream.mix == points["stream_tau1"]["mix"]
  assert study.runs["stream_tau1"].stream.fragments == compression_many.FRAGMENTS
  assert set(summary["syncs_saved"]) == set(compression_many.QUICK_ROWS)


def test_a_streaming_row_counts_full_model_syncs(phases):
  """A streaming row's syncs in the report are its fragment events over ``P``
  (``experiments/runlog.py``); at the study size ``P`` divides ``H_ref``; the
  table shows each row's peak bandwidth."""
  study, summary = phases["compression_many_report"]
  P = study.runs["stream_tau1"].stream.fragments
  assert P == compression_many.FRAGMENTS > 1
  assert evidence.h_ref(quick=False) % P == 0
  for run in summary["runs"]["stream_tau1"]:
    assert run["summary"]["syncs"] == run["summary"]["sync_events"] / P
  for run in summary["runs"][f"diloco_h{evidence.h_ref(True)}"]:
    assert run["summary"]["syncs"] == run["summary"]["sync_events"]
  table = open(os.path.join(study.report_dir, "results.md")).read()
  assert "| peak MB/s |" in table


def test_compression_rows_start_from_the_tuned_pair_and_report_bytes_and_peaks(phases):
  study, result = phases["compression_report"]
  pair = compression.reference_pair(engine.parse(compression, "report,quick"))
  tuned = phases["report"][0].runs[f"diloco_h{evidence.h_ref(True)}"]
  assert pair == (tuned.diloco.alpha, tuned.diloco.beta)
  for label in ("diloco", "stream_tau0", "stream_fp4"):
    run = study.runs[label]
    assert (run.diloco.alpha, run.diloco.beta) == pair
    assert run.model.num_layers == compression.NUM_LAYERS
  assert study.runs["stream_fp4"].compress.codec == "fp4"
  assert study.runs["autoloco_stream_fp4"].algorithm == "autoloco"
  tune = phases["compression_tune"][1]["stats"]
  best_mix = min((s["final_eval_bpb"][0], l) for l, s in tune.items() if "mix" in l)[1]
  assert f"mix{study.runs['stream_tau1'].stream.mix:g}".replace(".", "p") in best_mix
  stats = result["stats"]
  # fp4 sends fewer bytes than the same streaming run in float32; every row has a peak.
  assert (
      stats["stream_fp4"]["bytes_per_worker"][0]
      < stats["stream_tau4"]["bytes_per_worker"][0]
  )
  assert all("peak_bandwidth" in stats[label] for label in study.labels)
  from experiments import study_page

  text = "\n".join(study_page.comparisons(result))
  for candidate, reference in study.comparisons:
    assert f"| `{candidate}` | `{reference}` |" in text


# --- the best recipe (issue 65) ----------------------------------------------------


def test_recipe_tunes_each_rows_schedule_and_reads_it_against_the_schedule_frontier(phases):
  """Coarse: each row's constant and its schedules on seed 0; tune: the
  constant and the ``TOP`` best of the coarse pass, recomputed here; report: the
  schedule study's own frontier runs, each row constant and tuned (the constant
  the compression_many report's run), and the tuning seeds' best with adaptive
  ``H`` on top, every label against the frontier."""
  root = None
  coarse_study, coarse = phases["recipe_coarse"]
  tune_study, tune = phases["recipe_tune"]
  report_study, report_ = phases["recipe_report"]
  assert coarse_study.seeds == (0,)
  for row in recipe.QUICK_ROWS:
    mine = [l for l in coarse_study.labels if l == row or l.startswith(row + "_")]
    assert len(mine) > 1 and coarse_study.runs[row].diloco.get("beta_end") is None
    ranked = sorted((coarse["stats"][l]["final_eval_bpb"][0], l) for l in mine if l != row)
    kept = {row} | {l for _, l in ranked[: recipe.TOP]}
    assert {l for l in tune_study.labels if l in mine} == kept
  sched_study, _ = phases["schedule_report"]
  assert report_study.frontier == sched_study.frontier
  for label in report_study.frontier:
    ours, theirs = report_study.runs[label], sched_study.runs[label]
    assert sweep.run_dir("", ours) == sweep.run_dir("", theirs)
  assert set(report_study.seeds) <= set(sched_study.seeds)
  cm_study, _ = phases["compression_many_report"]
  for row in recipe.QUICK_ROWS:
    assert sweep.run_dir("", report_study.runs[row]) == sweep.run_dir("", cm_study.runs[row])
  auto = report_study.runs["best_adaptive"]
  assert auto.algorithm == "autoloco" and auto.autoloco.correction == "none"
  winner = report_study.comparisons[-1][1]
  assert report_study.comparisons[-1][0] == "best_adaptive"
  for group in ("stream", "compress", "diloco"):
    want = report_study.runs[winner][group].to_dict()
    if group == "diloco" and want.get("beta_end") is not None and not want["beta_rounds"]:
      want["beta_rounds"] = auto.total_steps // base.h_ref(True)
    assert auto[group].to_dict() == want
  assert {(l, "frontier") for l in report_study.syncs_saved} <= set(report_study.comparisons)
  assert set(report_["syncs_saved"]) == set(report_study.syncs_saved)
  # Ablate: the same fresh seeds; the best label with one part removed at a
  # time, each against it (stream_tau1 has no codec: no compression to remove).
  ablate_study, ablate_ = phases["recipe_ablate"]
  assert ablate_study.seeds == report_study.seeds
  assert ablate_study.tolerance == report_study.tolerance
  best = ablate_study.comparisons[0][1]
  assert best == winner and all(ref == best for _, ref in ablate_study.comparisons)
  parts = {label for label, _ in ablate_study.comparisons}
  config = ablate_study.runs[best]
  assert ("best_unstaggered" in parts) == (config.stream.fragments > 1)
  assert ("best_uncompressed" in parts) == (config.compress.codec != "identity")
  if "best_constant" in parts:
    assert ablate_study.runs["best_constant"].diloco.get("beta_end") is None
  for label in parts:
    ablated = ablate_study.runs[label]
    assert ablated.to_dict() != config.to_dict()
  assert {c["candidate"] for c in ablate_["comparisons"]} == parts
  # Transfer: the best label and its row on the second corpus's cell (the quick
  # cell is base/Shakespeare already, so here the very runs of the report),
  # against that cell's schedule frontier, on as many of its fresh seeds.
  transfer_study, transfer_ = phases["recipe_transfer"]
  assert transfer_study.frontier == sched_study.frontier
  assert set(transfer_study.seeds) <= set(sched_study.seeds)
  assert len(transfer_study.seeds) == len(report_study.seeds)
  moved = transfer_study.syncs_saved
  assert moved[-1] == winner and len(moved) == (1 if winner in recipe.QUICK_ROWS else 2)
  for label in moved:
    assert sweep.run_dir("", transfer_study.runs[label]) == sweep.run_dir("", report_study.runs[label])
  assert {(l, "frontier") for l in moved} <= set(transfer_study.comparisons)
  assert set(transfer_["syncs_saved"]) == set(moved)


# --- the decentralized claims' cells ---------------------------------------------


def test_gossip_g1_tunes_on_tuning_seeds_and_reports_gasloc_against_each_baseline(phases):
  coarse_study, coarse = phases["gossip_g1_coarse"]
  tune_study, tune = phases["gossip_g1_tune"]
  report_study, report_ = phases["gossip_g1_report"]
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
  pairs = {(c["candidate"], c["reference"]) for c in report_["comparisons"]}
  gasloc = [c for c, r in pairs if c.startswith("gasloc_ring") and r != "ddp"]
  assert len(gasloc) == len(gossip_g1.METHODS) - 1
  for c in report_["comparisons"]:
    assert c["verdict"] and c["seeds"] == list(report_study.seeds)
  # The runs are the regime's: one step per round, GASLoC with gamma 0 (quick: K = 4).
  config = report_study.runs[next(l for l in report_study.labels if "_g0_" in l)]
  assert (config.num_workers, config.interval.h, config.gasloc.gamma) == (4, 1, 0.0)
  assert gossip_g1.run_config("gasloc", dict(quick=False)).num_workers == gossip_g1.K == 8


def test_gossip_g2_reads_methods_against_the_evidence_frontier_on_its_seeds(phases, monkeypatch):
  """G2's report pairs with the evidence report: its seeds, its tolerance, its
  frontier's runs (same workdirs), each method's syncs saved and its Δ against
  the frontier and DiLoCo at H_ref. Its full-size coarse pass reads the
  committed evidence reports (whatever folder the ``full`` fixture moved them to)."""
  monkeypatch.setattr(evidence, "DOCS_DIR", os.path.join(ROOT, "docs/studies/evidence_v2"))
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
    config = g2_study.runs[m]
    assert config.interval.h == base.h_ref(True)
    assert config.gossip.topology == "matching"
  full = engine.build(gossip_g2, "coarse,python")
  config = full.runs[next(l for l in full.labels if l.startswith("noloco"))]
  assert (config.num_workers, config.data.partition, config.total_steps) == (
      8,
      "non_iid",
      1200,
  )


def test_gossip_g2_mixing_changes_one_thing_of_each_tuned_point(phases):
  """The diagnostic phase: on the tuning seeds only, each tuned point on iid
  shards (read against DiLoCo on iid shards) and GASLoC's on the exponential
  graph, beside the tune phase's own runs of the same points (same workdirs)."""
  study, mixing = phases["gossip_g2_mixing"]
  _, tune = phases["gossip_g2_tune"]
  assert set(study.seeds) <= set(gossip_phases.TUNING_SEEDS)
  href = base.h_ref(True)
  iid = [l for l in study.labels if l.endswith("_iid")]
  assert sorted(l.split("_")[0] for l in iid) == ["diloco", "gasloc", "noloco"]
  for label in iid:
    assert study.runs[label].data.partition == "iid"
    if not label.startswith("diloco"):
      assert study.reference[label] == f"diloco_h{href}_iid"
      same = study.runs[label[: -len("_iid")]]
      assert (
          study.runs[label].gasloc == same.gasloc
          and study.runs[label].noloco == same.noloco
      )
  (exp,) = [l for l in study.labels if "_exponential_" in l]
  pairs = {(c["candidate"], c["reference"]) for c in mixing["comparisons"]}
  assert (exp, exp.replace("_exponential_", "_matching_")) in pairs
  assert {r for _, r in pairs} >= {f"diloco_h{href}_iid", f"diloco_h{href}"}
  matching = study.runs[exp.replace("_exponential_", "_matching_")]
  assert study.runs[exp].gossip.topology == "exponential"
  assert (study.runs[exp].gasloc.eta, study.runs[exp].gasloc.gamma) == (
      matching.gasloc.eta,
      matching.gasloc.gamma,
  )
  for label in study.labels:
    if label in tune["runs"]:
      assert [r["workdir"] for r in mixing["runs"][label]] == [
          r["workdir"] for r in tune["runs"][label]
      ][: len(study.seeds)]


def test_noloco_n1_reports_noloco_against_diloco_each_tuned(phases):
  """N1: each method's tuned pair, chosen on the tuning seeds, on fresh seeds;
  NoLoCo minus DiLoCo paired by seed; the global batch split over K."""
  tune_study, tune = phases["noloco_n1_tune"]
  report_study, report_ = phases["noloco_n1_report"]
  assert not set(tune_study.seeds) & set(report_study.seeds)
  assert len(report_study.labels) == 2
  noloco, diloco = report_study.labels
  assert noloco.startswith("noloco_matching_") and diloco.startswith("diloco_alpha")
  for label in (noloco, diloco):
    prefix = label.split("_")[0]
    assert label == base.ranked({l: s for l, s in tune["stats"].items()}, prefix)[0]
  assert [(c["candidate"], c["reference"]) for c in report_["comparisons"]] == [
      (noloco, diloco)
  ]
  assert report_["comparisons"][0]["verdict"]
  for k in noloco_n1.WORKERS:
    study = engine.build(noloco_n1, f"coarse,k{k}")
    for config in study.runs.values():
      assert config.num_workers * config.data.batch_size == noloco_n1.GLOBAL_BATCH
      assert config.interval.h == base.h_ref(False)
    assert study.report_dir.endswith(f"noloco_n1/k{k}/coarse")


@pytest.mark.parametrize("cell", (noloco_n1, gossip_g2), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_longer_gives_the_candidate_twice_the_steps_beside_the_same_diloco_runs(
    phases, cell
):
  """The ``longer`` phase (N1: NoLoCo; G2: GASLoC): the tuned point at
  ``LONGER`` times the steps on the report's seeds, read against DiLoCo's
  report runs (the same workdirs); nothing else changed."""
  report_study, report_ = phases[cell.NAME.format(phase="report")]
  longer_study, longer = phases[cell.NAME.format(phase="longer")]
  candidate = "noloco" if cell is noloco_n1 else "gasloc"
  (short,) = [l for l in report_study.labels if l.startswith(f"{candidate}_matching")]
  diloco = next(l for l in report_study.labels if l.startswith("diloco"))
  if cell is gossip_g2:
    diloco = f"diloco_h{base.h_ref(True)}"
  steps = cell.LONGER * report_study.runs[short].total_steps
  assert longer_study.seeds == report_study.seeds
  assert longer["labels"] == [diloco, f"{short}_steps{steps}"]
  assert [r["workdir"] for r in longer["runs"][diloco]] == [
      r["workdir"] for r in report_["runs"][diloco]
  ]
  expected = report_study.runs[short].to_dict()
  expected["total_steps"] = steps
  assert longer_study.runs[longer["labels"][1]].to_dict() == expected
  assert dict(longer_study.reference) == {longer["labels"][1]: diloco}


# --- the sweep on finished runs ----------------------------------------------------


def test_finished_runs_are_skipped(synthetic, monkeypatch, tmp_path):
  def no_training(*args, **kwargs):
    raise AssertionError("a finished run was trained again")

  monkeypatch.setattr(sweep.trainer, "train_and_evaluate", no_training)
  study = decentralized.get_config("quick")
  result = sweep.run_study(study, synthetic["root"], str(tmp_path), progress=False)
  assert set(result["stats"]) == set(study.labels)


def test_interim_report_says_how_many_seeds_it_holds(synthetic, tmp_path):
  study = decentralized.get_config("quick")
  study.interim = "1 of the planned 20 seeds"
  result = sweep.run_study(
      study, synthetic["root"], str(tmp_path), progress=False, report_only=True
  )
  assert result["interim"] == study.interim
  text = open(tmp_path / "results.md").read()
  assert "**Interim report**: 1 of the planned 20 seeds, each with every label." in text


def test_report_only_names_missing_runs(synthetic, tmp_path):
  study = heterogeneity.get_config("quick")
  base.add_run(study, "extra", base.run_config("diloco", True, interval__h=7))
  with pytest.raises(
      ValueError, match="report_only: 1 runs are not finished: extra seed 0"
  ):
    sweep.run_study(
        study, synthetic["root"], str(tmp_path), progress=False, report_only=True
    )


def test_stale_finished_run_is_refused(synthetic, tmp_path):
  """A finished run whose stored config differs from the study's is an error,
  not silently reused."""
  study = ablations.get_config("quick")
  ((label, _, config, workdir),) = [
      j for j in sweep.jobs(study, synthetic["root"]) if j[0] == "loss_ratio_momentum"
  ]
  one = base.new_study("one", "one", quick=True)
  base.add_run(one, label, study.runs[label])
  stale = sweep.run_dir(str(tmp_path), config)
  os.makedirs(stale)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    open(os.path.join(stale, "metrics.jsonl"), "w").write(f.read())
  stored = json.load(open(os.path.join(workdir, "config.json")))
  assert not sweep.config_check.changed_fields(config, workdir)
  stored["inner"]["lr"] = 1.0
  json.dump(stored, open(os.path.join(stale, "config.json"), "w"))
  with pytest.raises(ValueError, match="inner.lr"):
    sweep.run_study(one, str(tmp_path), str(tmp_path / "report"), progress=False)


def test_documented_sweep_commands_run_in_quick_mode(synthetic):
  """Every ``experiments.sweep`` command the config docstrings show, at its
  smallest size (its quick mode), is a study the fixture ran with
  ``sweep.run_study``: loaded as the command line loads it, it is that study
  exactly, and every one of its runs is settled."""

  commands = sorted(
      {c for _, c in documented.documented_commands() if "experiments.sweep" in c}
  )
  assert len(commands) >= 8, commands
  ran = {study.name: study for study in _all_studies(synthetic)}
  for command in commands:
    study = _quick_study(command)
    assert study.quick, command
    assert study.name in ran, command
    assert study.to_dict() == ran[study.name].to_dict(), command
    assert all(
        sweep.is_settled(w) for *_, w in sweep.jobs(study, synthetic["root"])
    ), command


# --- which runs the archive keeps ------------------------------------------------


def test_archive_keeps_every_phases_runs_and_a_studys_ablations(synthetic):
  """The runs the archive keeps (``archive.cell_workdirs``,
  ``archive.study_workdirs``) are every run of the evidence cell's phases, of
  the G1 study's three phases, and of compression_many's phases and its
  ``aggregate`` ablation (which trains runs no phase has)."""
  from experiments import archive

  root, phases = synthetic["root"], synthetic["phases"]
  jobs = lambda names: {
      w for name in names for *_, w in sweep.jobs(phases[name][0], root)
  }
  cell = archive.cell_workdirs("base", "shakespeare", root, quick=True)
  assert set(cell) == jobs(evidence.PHASES) and len(cell) == len(set(cell))
  g1 = archive.study_workdirs(gossip_g1, root, quick=True)
  assert set(g1) == jobs(f"gossip_g1_{p}" for p in gossip_g1.PHASES)
  many = set(archive.study_workdirs(compression_many, root, quick=True))
  ablation = jobs(["compression_many_aggregate"])
  assert ablation <= many
  assert ablation - jobs(f"compression_many_{p}" for p in ("coarse", "tune", "report"))


# --- the full-size phases: the configs that ran ------------------------------------

#: ``(prefix, get_config, phases, args)`` of each full-size chain, in the order
#: they read each other: the evidence cells the other studies read (the pruned
#: ``many`` and ``long`` regimes after their corpus's base coarse pass), then
#: the studies on them, then the cells that stand alone.
FULL_CHAINS = (
    ("base_shakespeare_", functools.partial(engine.build, evidence), evidence.PHASES, "base,shakespeare"),
    ("schedule_", functools.partial(engine.build, schedule), schedule.PHASES, "base,shakespeare"),
    ("compression_", functools.partial(engine.build, compression), compression.PHASES, ""),
    ("base_python_", functools.partial(engine.build, evidence), ("coarse",), "base,python"),
    ("many_python_", functools.partial(engine.build, evidence), evidence.regime_phases("many"), "many,python"),
    (
        "compression_many_",
        functools.partial(engine.build, compression_many),
        compression_many.PHASES,
        "",
    ),
    (
        "long_shakespeare_",
        functools.partial(engine.build, evidence),
        evidence.regime_phases("long"),
        "long,shakespeare",
    ),
    ("gossip_g2_", functools.partial(engine.build, gossip_g2), gossip_g2.PHASES, "shakespeare"),
    ("noloco_n1_", functools.partial(engine.build, noloco_n1), noloco_n1.PHASES, "k4"),
    ("gossip_g1_", functools.partial(engine.build, gossip_g1), gossip_g1.PHASES, ""),
)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
  """The full-size phases of :data:`FULL_CHAINS` on synthetic runs, each built
  from the synthetic report of the phase before it (no plots): ``root`` and
  ``phases[prefix + phase] = (study, summary)``."""
  root = str(tmp_path_factory.mktemp("full_runs"))
  patch = pytest.MonkeyPatch()
  patch.setattr(sweep.trainer, "train_and_evaluate", synthetic_runs.train_and_evaluate)
  patch.setattr(report, "write_plots", _plots_only_for(()))
  patch.setattr(syncs_saved, "bootstrap", _fewer_resamples())
  docs = tmp_path_factory.mktemp("docs")
  for module in PHASED:
    name = module.__name__.split(".")[-1]
    patch.setattr(module, "DOCS_DIR", str(docs / name))
  try:
    phases = {}
    for prefix, get_config, names, args in FULL_CHAINS:
      _run_phases(phases, root, prefix, get_config, names, args)
    yield dict(root=root, phases=phases)
  finally:
    patch.undo()


def test_full_size_studies_name_their_runs_and_report_on_fresh_seeds(full):
  """Every full-size phase names only its own labels; every choosing phase is
  on the tuning seeds and every report phase on fresh ones (enough of them for
  an interval)."""
  reports = ("report", "constant", "longer")
  for name, (study, _) in full["phases"].items():
    _check_names(study)
    if name.split("_")[-1] in reports:
      assert not set(study.seeds) & set(evidence.TUNING_SEEDS), name
      assert len(study.seeds) >= 5, name
    else:
      assert set(study.seeds) <= set(evidence.TUNING_SEEDS), name


@pytest.mark.parametrize("cell", ("base_shakespeare", "many_python", "long_shakespeare"))
def test_full_evidence_cell_chooses_by_its_rules(full, cell):
  """Each phase recomputed from the one before: the coarse grid (a pruned
  regime: the pairs its corpus's base coarse pass ranked in the ``TOP`` at
  some ``H``), the ``TOP`` pairs per ``H``, the designs, the design that saves
  the most, and the report's seed count from the tuning seeds' spread."""
  phases = {
      name[len(cell) + 1 :]: v
      for name, v in full["phases"].items()
      if name.startswith(cell)
  }
  regime, corpus = cell.split("_")
  coarse_study, coarse = phases["coarse"]
  hs = evidence.frontier_hs(False)
  if regime in evidence.PRUNED_REGIMES:
    base_coarse = full["phases"][f"base_{corpus}_coarse"][1]["stats"]
    pairs = set()
    for h in hs:
      ranked = base.ranked(base_coarse, f"diloco_h{h}_")[: evidence.TOP]
      pairs |= {synthetic_runs.diloco_hab(l)[1:] for l in ranked}
    assert "regime" not in phases
  else:
    pairs = {(a, b) for a in evidence.ALPHAS for b in evidence.BETAS[corpus]}
  assert set(coarse_study.labels) == {
      evidence.diloco_label(h, *p) for h in hs for p in pairs
  }
  tune_study, tune = phases["tune"]
  for h in hs:
    kept = {l for l in tune_study.labels if l.startswith(f"diloco_h{h}_")}
    assert kept == set(base.ranked(coarse["stats"], f"diloco_h{h}_")[: evidence.TOP])
  design_study, design = phases["design"]
  assert set(design_study.syncs_saved) == set(evidence.designs(False, regime))
  report_study, _ = phases["report"]
  saved = {l: float(e["saved"]["mean"]) for l, e in design["syncs_saved"].items()}
  finite = {l: v for l, v in saved.items() if np.isfinite(v)}
  by_delta = lambda l: float(design["syncs_saved"][l]["delta"]["mean"])
  chosen = max(finite, key=finite.get) if finite else min(saved, key=by_delta)
  assert report_study.design == chosen
  entry = design["syncs_saved"][report_study.design]
  sd = float(np.std(entry["per_seed_delta"], ddof=1))
  needed = seed_stats.seeds_needed(
      sd, entry["tolerance"], minimum=evidence.MIN_REPORT_SEEDS
  )
  assert report_study.seeds == tuple(
      100 + i for i in range(min(needed, evidence.MAX_REPORT_SEEDS))
  )
  assert report_study.tolerance == entry["tolerance"]
  for h in hs:
    best = base.ranked(tune["stats"], f"diloco_h{h}_")[0]
    run = report_study.runs[f"diloco_h{h}"]
    assert (run.diloco.alpha, run.diloco.beta) == synthetic_runs.diloco_hab(best)[1:]


def test_full_schedule_and_compression_studies_read_their_evidence_cell(full):
  """The schedule study tunes ``tune_labels`` at each ``H`` and reports on the
  evidence report's seeds with its AutoLoCo runs; compression_many keeps each
  grid's ``TOP``, sizes its report from the tuning spread and pairs every row
  with the many/Python frontier's own runs; the old compression study starts
  from the base/Shakespeare pair tuned at ``H_ref``."""
  root, phases = full["root"], full["phases"]
  ev = phases["base_shakespeare_report"][0]
  cell = engine.parse(evidence, "report,base,shakespeare")
  pairs = evidence.tuned_pairs(cell)
  coarse = phases["schedule_coarse"][1]["stats"]
  want = set()
  for h in schedule.SCHEDULE_HS:
    want |= _schedule_tune_rule(coarse, h, schedule.constant_label(h, pairs[h][1]))
  assert set(phases["schedule_tune"][0].labels) == want
  for phase in ("report", "constant"):
    study = phases[f"schedule_{phase}"][0]
    assert study.seeds == ev.seeds
    assert set(study.syncs_saved) == {
        "autoloco",
        "adaptive_on_schedule",
        *schedule.CORRECTIONS,
    }
    assert _workdirs(study, root, "autoloco") == _workdirs(ev, root, "autoloco")
  assert compression.reference_pair(engine.parse(compression, "report")) == pairs[base.h_ref(False)]
  assert phases["compression_report"][0].seeds == compression.REPORT_SEEDS
  _check_compression_many(full)


def _check_compression_many(full) -> None:
  """compression_many's full phases: each grid's ``TOP`` kept, the report's
  seeds the many/Python report's first, as many as the tuning spread needs,
  every row, and the frontier's own runs."""
  root, phases = full["root"], full["phases"]
  many = phases["many_python_report"][0]
  coarse = phases["compression_many_coarse"][1]["stats"]
  tune_study, tune = phases["compression_many_tune"]
  for family in compression_many.GRIDS:
    kept = {l for l in tune_study.labels if l.startswith(family + "_")}
    assert kept == set(base.ranked(coarse, family + "_")[: compression_many.TOP])
  study = phases["compression_many_report"][0]
  ref = tune["stats"][f"diloco_h{base.h_ref(False)}"]["loss_by_seed"]
  sds = {
      f: float(
          np.std(
              np.subtract(
                  tune["stats"][base.ranked(tune["stats"], f + "_")[0]]["loss_by_seed"],
                  ref,
              ),
              ddof=1,
          )
      )
      for f in compression_many.GRIDS
  }
  plan = seed_stats.seed_plan(
      sds,
      many.tolerance,
      compression_many.MIN_REPORT_SEEDS,
      compression_many.MAX_REPORT_SEEDS,
  )
  assert study.seeds == many.seeds[: plan["seeds"]]
  assert set(study.syncs_saved) == set(compression_many.ROWS)
  for label in many.frontier:
    assert (
        _workdirs(study, root, label) == _workdirs(many, root, label)[: len(study.seeds)]
    )


#: The full-size chains of the phased cells: cell -> its argument's words.
CELL_WORDS = {gossip_g1: "", gossip_g2: "shakespeare", noloco_n1: "k4"}


@pytest.mark.parametrize("cell", tuple(CELL_WORDS), ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_full_gossip_cell_tunes_its_best_coarse_points(full, cell):
  """The tune phase's points, recomputed from the coarse pass's losses: the
  ``TOP`` best of each (method, graph), less those more than the cell's
  ``PRUNE_GAP`` behind the best; the report runs the tune phase's best."""
  phases = full["phases"]
  words = [w for w in CELL_WORDS[cell].split(",") if w]
  coarse = phases[cell.NAME.format(phase="coarse")][1]["stats"]
  tune_study, tune = phases[cell.NAME.format(phase="tune")]
  report_study = phases[cell.NAME.format(phase="report")][0]
  gap = getattr(cell, "PRUNE_GAP", None)
  kept, best = set(), set()
  for topo in cell.TOPOLOGIES:
    for method in gossip_phases.methods(cell):
      labels = [
          gossip_phases.label(method, topo, p)
          for p in gossip_phases.points(cell, method, False, words)
      ]
      top = sorted((coarse[l]["final_eval_bpb"][0], l) for l in labels)[
          : gossip_phases.TOP
      ]
      kept |= {l for score, l in top if gap is None or score - top[0][0] <= gap}
      best.add(
          min(
              (tune["stats"][l]["final_eval_bpb"][0], l)
              for l in labels
              if l in tune["stats"]
          )[1]
      )
  methods = {m.split("_")[0] for m in gossip_phases.methods(cell)}
  assert {l for l in tune_study.labels if l.split("_")[0] in methods} == kept
  if gap is not None:  # the gap pruned some runner-up (else this checks nothing)
    pairs = len(cell.TOPOLOGIES) * len(gossip_phases.methods(cell))
    assert len(kept) < gossip_phases.TOP * pairs
  assert best <= set(report_study.labels)
  assert not set(tune_study.seeds) & set(report_study.seeds)


def test_full_gossip_cells_read_their_references_and_seed_counts(full):
  """G1: DDP's learning rate from the coarse pass, the report's seed count from
  the tuning spread; N1 at ``K = 4`` reuses the evidence cell's DiLoCo coarse
  runs; G2 reports on the long cell's seeds against its frontier's runs."""
  root, phases = full["root"], full["phases"]
  coarse = phases["gossip_g1_coarse"][1]["stats"]
  scales = [gossip_g1.ddp_label(x) for x in gossip_g1.DDP_LR_SCALES]
  ddp = min(scales, key=lambda l: coarse[l]["final_eval_bpb"][0])
  report_study = phases["gossip_g1_report"][0]
  assert ddp in phases["gossip_g1_tune"][0].labels and ddp in report_study.labels
  assert {c[1] for c in report_study.comparisons} - set(report_study.labels) == set()
  assert set(report_study.reference.values()) == {ddp}
  opts = engine.parse(gossip_g1, "report")
  points = gossip_phases.tuned(gossip_g1, opts)
  plan = seed_stats.seed_plan(
      gossip_phases.tuning_spread(gossip_g1, opts, points),
      gossip_g1.TOLERANCE,
      gossip_g1.MIN_REPORT_SEEDS,
      gossip_g1.MAX_REPORT_SEEDS,
  )
  assert report_study.seeds == tuple(100 + i for i in range(plan["seeds"]))
  # N1's DiLoCo points on the evidence cell's grid are that cell's runs.
  n1 = phases["noloco_n1_coarse"][0]
  grid = {(a, b) for a in evidence.ALPHAS for b in evidence.BETAS["shakespeare"]}
  on_grid = [
      l
      for l in n1.labels
      if l.startswith("diloco")
      and (n1.runs[l].diloco.alpha, n1.runs[l].diloco.beta) in grid
  ]
  shared = {w for *_, w in sweep.jobs(n1, root)}
  shared &= {w for *_, w in sweep.jobs(phases["base_shakespeare_coarse"][0], root)}
  assert shared == {w for l in on_grid for w in _workdirs(n1, root, l)} and len(
      on_grid
  ) == len(grid)
  g2, long = phases["gossip_g2_report"][0], phases["long_shakespeare_report"][0]
  assert g2.seeds == long.seeds and g2.tolerance == long.tolerance
  for label in long.frontier:
    assert _workdirs(g2, root, label) == _workdirs(long, root, label)


@pytest.mark.parametrize("design", tuple(evidence.DESIGNS))
def test_full_report_of_each_design_builds_its_controls(full, design, monkeypatch):
  """The base/Shakespeare report as if the design phase had chosen each of the
  designs: its controls (:func:`_check_controls`), every config one the
  trainer accepts."""
  study = _report_choosing(design, monkeypatch, "base,shakespeare")
  _check_controls(
      study, design, full["phases"]["base_shakespeare_design"][1], quick=False
  )


def _quick_study(command: str):
  """The study a documented sweep command loads, at its smallest size, loaded
  as the command line loads it (``engine.load`` with ``--quick``)."""
  study = next(a for a in shlex.split(command) if a.startswith("configs/studies/"))
  path, _, arg = study.partition(":")
  return engine.load(os.path.join(ROOT, path) + (f":{arg}" if arg else ""), quick=True)


@pytest.mark.slow
def test_command_line_quick_mode_reports_finished_runs(synthetic, tmp_path):
  """``--quick`` loads the study's quick mode; ``--report_only`` trains nothing
  and reports the finished runs as ``sweep.run_study`` did."""
  import subprocess
  import sys

  out = tmp_path / "report"
  proc = subprocess.run(
      [sys.executable, "-m", "experiments.sweep", "--study",
       "configs/studies/heterogeneity.py", "--quick", "--report_only",
       "--root", synthetic["root"], "--report_dir", str(out)],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
  )
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "0 runs trained, 4 already finished" in proc.stdout
  summary = json.load(open(out / "summary.json"))
  assert summary["quick"] and summary["stats"] == json.loads(
      json.dumps(synthetic["results"]["heterogeneity"]["stats"])
  )


@pytest.mark.slow
def test_time_to_target_command_line(synthetic, tmp_path):
  """``experiments.time_to_target`` from the command line on finished runs (the
  study's own reference, a grid of its flags): the tables and plots; no
  ``--out`` is bad input (exit 2, one line)."""
  import subprocess
  import sys

  base_cmd = [sys.executable, "-m", "experiments.time_to_target", "--study",
              "configs/studies/heterogeneity.py:quick", "--root", synthetic["root"]]
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
