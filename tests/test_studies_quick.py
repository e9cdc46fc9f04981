"""What real training puts in the studies' runs, checked on the few labels each
check reads.

The studies are built as ``tests/test_study_modules.py`` builds them: every
quick phase from the report the phase before it wrote, on synthetic runs
(``tests/synthetic_runs.py``, its ``synthetic`` fixture, which this module
shares). Here the labels a check reads are then trained for real, at the quick
size, in a root of their own: the senders' mean against the mean over ``K``, a
streaming row's sync counts, the closed-loop design's replay, the clock a run
logs on a second network, and the replayed clocks of every documented
``experiments.time_to_target`` command. What the study layer chooses, and the
sweep's command line, are tests/test_study_modules.py's.
"""

import os

import numpy as np
import pytest

from autoloco_jax.run import config_check, trainer
from configs.studies import compression_many, decentralized, evidence
from experiments import engine, runlog, sweep, time_to_target
from tests import test_documented_commands as documented
from tests.test_study_modules import _quick_study, synthetic  # noqa: F401 (synthetic: the module fixture)

#: The trainer itself: the ``synthetic`` fixture puts its stand-in in
#: ``trainer.train_and_evaluate`` for the module's lifetime.
TRAIN = trainer.train_and_evaluate


def _train(study, labels, root: str, seeds=None) -> dict[str, list[dict]]:
  """Trains the runs of ``labels`` in ``study`` (on ``seeds``, default all of
  the study's) for real into ``root`` and returns them as a report reads them."""
  runs = {label: [] for label in labels}
  for label, seed, config, workdir in sweep.jobs(study, root):
    if label in runs and (seeds is None or seed in seeds):
      if not sweep.is_finished(workdir):
        TRAIN(config, workdir)
      runs[label].append(runlog.load_run(workdir, seed))
  return runs


@pytest.mark.slow
def test_the_senders_mean_sends_what_the_mean_sends_and_steps_otherwise(
    synthetic, tmp_path
):
  """The ``aggregate`` ablation's twins (compression_many, quick): they differ
  in the rule and the outer lr (the senders' mean runs at the paper's) and in
  nothing else; trained, they send the same bytes, and the rule moves the outer
  steps (another final loss on the same seed)."""
  study, _ = synthetic["phases"]["compression_many_aggregate"]
  by_rule = {
      config.compress.aggregate: label
      for label, config in study.runs.items()
      if label.startswith("sparseloco")
  }
  assert set(by_rule) == {"mean", "senders"}
  fields = {
      rule: config_check.trajectory_fields(study.runs[l]) for rule, l in by_rule.items()
  }
  differ = {k for k in fields["mean"] if fields["mean"][k] != fields["senders"].get(k)}
  assert "compress.aggregate" in differ and differ <= {
      "compress.aggregate",
      "diloco.alpha",
  }
  runs = _train(study, tuple(by_rule.values()), str(tmp_path), seeds=(study.seeds[0],))
  mean, senders = (runs[by_rule[rule]][0]["summary"] for rule in ("mean", "senders"))
  assert mean["bytes_per_worker"] == senders["bytes_per_worker"] > 0
  assert mean["final_eval_bpb"] != senders["final_eval_bpb"]


@pytest.mark.slow
def test_a_streaming_row_counts_full_model_syncs(synthetic, tmp_path):
  """A streaming row's syncs are full-model syncs, its trainer's fragment events
  over ``P`` (``experiments/runlog.py``); at the study size ``P`` divides
  ``H_ref``, so each fragment syncs every ``H_ref`` steps and the row sits on
  DiLoCo's frontier at ``H_ref`` (at the quick size ``H = 10`` and ``P = 4``
  make a fragment event every 2 steps)."""
  study, _ = synthetic["phases"]["compression_many_report"]
  P = study.runs["stream_tau1"].stream.fragments
  assert P == compression_many.FRAGMENTS > 1
  assert evidence.h_ref(quick=False) % P == 0
  href = evidence.h_ref(quick=True)
  steps = study.runs["stream_tau1"].total_steps
  diloco = f"diloco_h{href}"
  runs = _train(study, ("stream_tau1", diloco), str(tmp_path), seeds=(study.seeds[0],))
  (stream,), (ref,) = runs["stream_tau1"], runs[diloco]
  assert stream["summary"]["sync_events"] == steps // (href // P)
  assert stream["summary"]["syncs"] == stream["summary"]["sync_events"] / P
  assert ref["summary"]["syncs"] == ref["summary"]["sync_events"] == steps // href


def _report_choosing(design: str, monkeypatch):
  """The quick report phase's study as if the design phase had chosen ``design``."""
  monkeypatch.setattr(evidence, "choose", lambda entries: (design, True))
  return engine.build(evidence, "report,base,shakespeare,quick")


@pytest.mark.slow
def test_the_open_loop_control_replays_the_designs_rounds(
    synthetic, monkeypatch, tmp_path
):
  """The closed-loop design's control ``ctrl_open_loop`` (evidence, quick): its
  schedule is the design's own ``H`` sequence on tuning seed 0, and trained on a
  report seed it runs exactly those rounds."""
  closed = [d for d in evidence.QUICK_DESIGNS if "budget" not in evidence.DESIGNS[d]]
  assert closed, evidence.QUICK_DESIGNS
  design = closed[0]
  study = _report_choosing(design, monkeypatch)
  replay = study.runs["ctrl_open_loop"]
  assert replay.interval.controller == "schedule"
  design_runs = synthetic["phases"]["design"][1]["runs"][design]
  assert list(replay.interval.schedule) == design_runs[0]["rounds"]["h"]
  (run,) = _train(study, ("ctrl_open_loop",), str(tmp_path), seeds=(study.seeds[0],))[
      "ctrl_open_loop"
  ]
  n = len(replay.interval.schedule)
  hs = run["rounds"]["h"]
  assert hs and hs[:n] == list(replay.interval.schedule)[: len(hs)]


@pytest.mark.slow
def test_also_network_times_match_a_run_on_that_network(synthetic, tmp_path):
  """``network.also`` adds clocks without changing training: the hetero time a
  homogeneous run logs equals that of the same run on the hetero network."""
  config = decentralized.get_config("quick").runs["noloco_k4"]
  config.seed = 0
  logged = TRAIN(config, str(tmp_path / "homogeneous"))
  config.network.name = "hetero"
  config.network.also = ()
  alone = TRAIN(config, str(tmp_path / "hetero"))
  assert alone["final_eval_bpb"] == logged["final_eval_bpb"]
  np.testing.assert_allclose(alone["sim_time"], logged["sim_time_hetero"], rtol=1e-12)
  assert logged["sim_time_hetero"] > logged["sim_time"]


@pytest.mark.slow
def test_documented_time_to_target_commands_replay_each_runs_clock(synthetic, tmp_path):
  """Every ``experiments.time_to_target`` command the config docstrings show,
  at its smallest size (its quick study, trained for real here): each run's
  replayed time at each eval on the two-site 1 Gbit/s, 50 ms network is the
  time it logged on ``hetero``, the same network, exactly (DiLoCo, GASLoC,
  GASLoC γ = 0, gossip AdamW, NoLoCo); slower or later links make every run
  (each communicates) end later; each label's time to the target is where its
  eval curve, read forward, reaches the target, and its speed-up is the
  geometric mean of the reference's time over its own; the tables and plots
  are written."""
  commands = sorted(
      {c for _, c in documented.documented_commands() if "time_to_target" in c}
  )
  assert len(commands) >= 2, commands
  root = str(tmp_path / "runs")
  algorithms = set()
  for i, command in enumerate(commands):
    study = _quick_study(command)
    _train(study, study.labels, root)
    result = time_to_target.collect(study, root, "", (0.1, 1.0), (50.0, 200.0))
    for label, runs in result["runs"].items():
      for run in runs:
        algorithms.add(run["summary"]["algorithm"])
        _check_replayed_clocks(run["eval"], (command, label))
    _check_speedups(result, len(study.seeds))
    out = tmp_path / f"time{i}"
    names = time_to_target.write(result, str(out), dpi=20)
    assert all(os.path.getsize(out / n) > 0 for n in names)
    assert f"`{result['reference']}`" in (out / "time_to_target.md").read_text()
  assert {"diloco", "gasloc", "gossip_adamw", "noloco"} <= algorithms, algorithms


def _check_replayed_clocks(ev: dict, where) -> None:
  """The replay on the runs' own network is the logged clock; a slower or a
  later link never makes a run sooner and makes it end later (it would not if
  the replay ignored the links)."""
  assert ev["sim_time_1gbps_50ms"] == ev["sim_time_hetero"], where
  assert all(
      a >= b for a, b in zip(ev["sim_time_0.1gbps_50ms"], ev["sim_time_1gbps_50ms"])
  )
  assert all(
      a >= b for a, b in zip(ev["sim_time_1gbps_200ms"], ev["sim_time_1gbps_50ms"])
  )
  assert ev["sim_time_0.1gbps_50ms"][-1] > ev["sim_time_1gbps_50ms"][-1], where
  assert ev["sim_time_1gbps_200ms"][-1] > ev["sim_time_1gbps_50ms"][-1], where


def _check_speedups(result: dict, num_seeds: int) -> None:
  """Each time to target is where the curve, read forward, is at the target;
  each speed-up is the geometric mean of the reference's times over the label's."""
  ref = result["reference"]
  targets = {r["seed"]: r["eval"]["eval_bpb"][-1] for r in result["runs"][ref]}
  checked = 0
  for net, rows in result["speedups"].items():
    for label, row in rows.items():
      for run in result["runs"][label]:
        t = row["times"][run["seed"]]
        if t is not None:
          x, y = run["eval"][f"sim_time_{net}"], run["eval"]["eval_bpb"]
          assert np.interp(t, x, y) == pytest.approx(targets[run["seed"]], abs=1e-9)
          checked += 1
      if "speedup" in row:
        ratios = [rows[ref]["times"][s] / t for s, t in row["times"].items()]
        assert row["speedup"] == pytest.approx(float(np.exp(np.mean(np.log(ratios)))))
  assert checked > num_seeds
