"""The sweep runner and its report: every study's quick mode end to end, run
sharing and skipping, interruption, stale runs, and the claim arithmetic."""

import json
import os

import ml_collections
import numpy as np
import pytest

from autoloco_jax import train
from configs.studies import ablations, base, decentralized, heterogeneity
from experiments import report, sweep

STUDIES = (ablations, decentralized, heterogeneity)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
  """The studies in quick mode, sharing one root of runs (the evidence study's
  phases have their own test, test_evidence_quick.py)."""
  root = str(tmp_path_factory.mktemp("runs"))
  reports = str(tmp_path_factory.mktemp("reports"))
  results = {}
  for module in STUDIES:
    study = module.get_config("quick")
    results[study.name] = sweep.run_study(
        study, root, os.path.join(reports, study.name), progress=False
    )
  return root, reports, results


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
    assert run["eval"]["eval_bpb"][-1] == run["summary"]["final_eval_bpb"]
    assert run["summary"]["sim_time_hetero"] > 0
  for name, claim in summary["claims"].items():
    assert claim["holds"] in (True, False)
    assert f"Claim `{name}`" in text


@pytest.mark.slow
def test_studies_share_identical_runs(quick):
  root, _, _ = quick
  dirs = {
      sweep.run_dir(root, config)
      for module in STUDIES
      for *_, config, _ in sweep.jobs(module.get_config("quick"), root)
  }
  runs = [name for name in os.listdir(root) if not name.endswith(".lock")]
  assert sorted(runs) == sorted(os.path.basename(d) for d in dirs)
  # DiLoCo at H_ref is in all three studies (decentralized's diloco_k4 too): 20
  # labelled runs, 18 trainings. (The ablations' loss_ratio run is no longer the
  # default AutoLoCo, which now starts from 1.5 H_ref with the tuned pair.)
  labelled = sum(len(m.get_config("quick").labels) for m in STUDIES)
  assert (labelled, len(dirs)) == (20, 18)


@pytest.mark.slow
def test_finished_runs_are_skipped(quick, monkeypatch, tmp_path):
  root, _, _ = quick

  def no_training(*args, **kwargs):
    raise AssertionError("a finished run was trained again")

  monkeypatch.setattr(train, "train_and_evaluate", no_training)
  study = heterogeneity.get_config("quick")
  result = sweep.run_study(study, root, str(tmp_path), progress=False)
  assert set(result["stats"]) == set(study.labels)


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


def test_interrupted_run_stops_the_study(monkeypatch, tmp_path):
  monkeypatch.setattr(
      train, "train_and_evaluate", lambda config, workdir: dict(preempted=True, step=7)
  )
  study = ablations.get_config("quick")
  with pytest.raises(sweep.Interrupted, match="step 7"):
    sweep.run_study(study, str(tmp_path), str(tmp_path / "r"), progress=False)


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
  alone = train.train_and_evaluate(config, str(tmp_path))
  assert alone["final_eval_bpb"] == logged["final_eval_bpb"]
  np.testing.assert_allclose(alone["sim_time"], logged["sim_time_hetero"], rtol=1e-12)
  assert logged["sim_time_hetero"] > logged["sim_time"]


def test_check_study_names_unknown_labels():
  study = base.new_study("bad", "bad", quick=True)
  base.add_run(study, "a", base.run_config("diloco", True), reference="missing")
  with pytest.raises(ValueError, match="missing"):
    sweep.check_study(study)
  with pytest.raises(ValueError, match="duplicate"):
    base.add_run(study, "a", base.run_config("diloco", True))
  with pytest.raises(KeyError, match="interval.nope"):
    base.run_config("diloco", True, interval__nope=1)


def test_run_dir_depends_on_trajectory_only():
  c = base.run_config("diloco", True)
  d = sweep.run_dir("r", c)
  c2 = c.copy_and_resolve_references()
  c2.log.progress = True
  c2.eval.every_steps = 5
  assert sweep.run_dir("r", c2) == d
  c2.seed = 1
  assert sweep.run_dir("r", c2) != d


def test_run_dir_leaves_out_empty_fields():
  c = base.run_config("diloco", True)
  d = sweep.run_dir("r", c)
  # A field added to the configs later with an empty default keeps the name of
  # every finished run.
  for name, empty in (("extra_tuple", ()), ("extra_str", ""), ("extra_none", None)):
    c2 = c.copy_and_resolve_references()
    c2.interval[name] = empty
    assert sweep.run_dir("r", c2) == d, name
  # As does removing one that is empty (a run stored before the field existed).
  assert tuple(c.interval.schedule) == ()
  c3 = c.copy_and_resolve_references()
  del c3.interval["schedule"]
  assert sweep.run_dir("r", c3) == d
  # A non-empty value is part of the trajectory.
  c4 = c.copy_and_resolve_references()
  c4.interval.schedule = (5, 3, 4)
  d4 = sweep.run_dir("r", c4)
  assert d4 != d and os.path.basename(d4).startswith("diloco-")
  c4.interval.schedule = (5, 3, 5)
  assert sweep.run_dir("r", c4) != d4
  c5 = c.copy_and_resolve_references()
  c5.interval.extra = (1,)
  assert sweep.run_dir("r", c5) != d
  # Zero and False are values, not "empty".
  c6 = c.copy_and_resolve_references()
  c6.interval.extra = 0
  assert sweep.run_dir("r", c6) != d


def test_run_lock_is_exclusive_until_released(tmp_path):
  workdir = str(tmp_path / "sub" / "diloco-abc")
  with sweep.run_lock(workdir, wait=False) as held:
    assert held is True
    assert os.path.exists(workdir + ".lock")  # its folder is made
    # Another open file of the same lock (as another sweep would hold) conflicts,
    # even within one process: flock locks belong to the open file.
    with sweep.run_lock(workdir, wait=False) as other:
      assert other is False
    # A lock on another run is independent.
    with sweep.run_lock(str(tmp_path / "sub" / "diloco-def"), wait=False) as free:
      assert free is True
  # Released with the block, so the next sweep gets it, and so does one that waits.
  with sweep.run_lock(workdir, wait=False) as again:
    assert again is True
  with sweep.run_lock(workdir, wait=True) as waited:
    assert waited is True
  assert os.path.exists(workdir + ".lock")  # the (empty) file stays
  assert os.path.getsize(workdir + ".lock") == 0


def test_run_lock_is_released_when_the_block_raises(tmp_path):
  workdir = str(tmp_path / "run")
  with pytest.raises(RuntimeError, match="boom"):
    with sweep.run_lock(workdir, wait=False) as held:
      assert held
      raise RuntimeError("boom")
  with sweep.run_lock(workdir, wait=False) as held:
    assert held is True


def test_run_lock_sees_a_lock_held_through_another_file(tmp_path):
  import fcntl

  workdir = str(tmp_path / "run")
  with open(workdir + ".lock", "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with sweep.run_lock(workdir, wait=False) as held:
      assert held is False
    fcntl.flock(f, fcntl.LOCK_UN)
    with sweep.run_lock(workdir, wait=False) as held:
      assert held is True


def _stats(points):
  return {
      k: {"syncs": (s, 0.0), "final_eval_bpb": (l, sd)}
      for k, (s, l, sd) in points.items()
  }


def test_frontier_is_pareto_and_claims_follow_their_definition():
  # h30 (20 syncs, 2.30) is beaten by h40 (fewer syncs, lower loss); bad ties
  # h20's syncs with a higher loss: neither is on the frontier.
  st = _stats(
      {
          "h10": (60, 2.00, 0.01),
          "h20": (30, 2.05, 0.02),
          "h40": (15, 2.20, 0.01),
          "h30": (20, 2.30, 0.0),
          "h60": (10, 2.40, 0.0),
          "bad": (30, 2.50, 0.0),
      }
  )
  pts = report.frontier_points(st, ["h10", "h20", "h30", "h40", "h60", "bad"])
  np.testing.assert_allclose(pts, [[10, 2.40], [15, 2.20], [30, 2.05], [60, 2.00]])
  st["cand"] = {"syncs": (21.0, 0.0), "final_eval_bpb": (2.06, 0.01)}
  c = report.evaluate_claim(st, "h20", "cand", 0.27, ["h10", "h20", "h40", "h60"])
  assert c["sync_saving"] == pytest.approx(0.3)
  assert c["loss_delta"] == pytest.approx(0.01) and c["tolerance"] == 0.02
  assert c["equal_quality"] and c["holds"]
  assert c["frontier_loss_at_syncs"] == pytest.approx(2.20 - 0.15 * 6 / 15)
  assert c["below_frontier"]
  # The frontier reaches 2.06 between 15 and 30 syncs: 15 + 15 * 0.14 / 0.15.
  assert c["frontier_syncs_at_loss"] == pytest.approx(29.0)
  assert c["saving_at_equal_loss"] == pytest.approx(1 - 21 / 29)
  st["worse"] = {"syncs": (21.0, 0.0), "final_eval_bpb": (2.08, 0.0)}
  w = report.evaluate_claim(st, "h20", "worse", 0.27)
  assert not w["equal_quality"] and not w["holds"]
  st["few"] = {"syncs": (25.0, 0.0), "final_eval_bpb": (2.0, 0.0)}
  assert not report.evaluate_claim(st, "h20", "few", 0.27)["holds"]


def test_mean_std_uses_sample_spread():
  assert report.mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
  assert report.mean_std([4.0]) == (4.0, 0.0)


def test_claim_pairs_seeds_when_both_runs_have_the_same():
  st = {
      "ref": {
          "seeds": [0, 1],
          "loss_by_seed": [2.0, 2.2],
          "syncs": (30.0, 0.0),
          "final_eval_bpb": (2.1, 0.14),
      },
      "cand": {
          "seeds": [0, 1],
          "loss_by_seed": [1.9, 2.15],
          "syncs": (20.0, 0.0),
          "final_eval_bpb": (2.025, 0.18),
      },
      "other": {
          "seeds": [5],
          "loss_by_seed": [1.0],
          "syncs": (20.0, 0.0),
          "final_eval_bpb": (1.0, 0.0),
      },
  }
  np.testing.assert_allclose(
      report.evaluate_claim(st, "ref", "cand", 0.27)["paired_deltas"], [-0.1, -0.05]
  )
  assert report.evaluate_claim(st, "ref", "other", 0.27)["paired_deltas"] is None
  assert "per seed -0.100, -0.050" in report.claim_sentence(
      "c", report.evaluate_claim(st, "ref", "cand", 0.27)
  )


def test_time_to_loss_interpolates_between_evals():
  run = {"eval": {"sim_time": [1.0, 2.0, 4.0], "eval_bpb": [3.0, 2.5, 1.5]}}
  assert report.time_to_loss(run, "sim_time", 2.0) == pytest.approx(3.0)
  assert report.time_to_loss(run, "sim_time", 3.5) == 1.0
  assert report.time_to_loss(run, "sim_time", 1.0) is None
