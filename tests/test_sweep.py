"""The sweep runner and its report without training: interruption, malformed
studies, run directories and locks, and the claim arithmetic (the studies' quick
modes end to end: test_study_modules.py)."""

import os

import numpy as np
import pytest

from autoloco_jax.run import trainer
from configs.studies import ablations, base
from experiments import report, sweep


def test_interrupted_run_stops_the_study(monkeypatch, tmp_path):
  monkeypatch.setattr(
      trainer, "train_and_evaluate", lambda config, workdir: dict(preempted=True, step=7)
  )
  study = ablations.get_config("quick")
  with pytest.raises(sweep.Interrupted, match="step 7"):
    sweep.run_study(study, str(tmp_path), str(tmp_path / "r"), progress=False)


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


def test_training_order_is_seed_by_seed_in_report_order():
  study = ablations.get_config("quick")
  study.seeds = (0, 1, 2)
  todo = sweep.jobs(study, "r")
  order = sweep.training_order(todo)
  assert sorted(order) == sorted(todo)
  # Every seed's runs come before the next seed's, so a stopped study holds whole
  # seeds; within a seed the labels keep their report order.
  assert [seed for _, seed, _, _ in order] == sorted(s for _, s, _, _ in todo)
  n = len(study.labels)
  for i, seed in enumerate(study.seeds):
    assert [label for label, *_ in order[i * n : (i + 1) * n]] == list(study.labels)
    assert {s for _, s, _, _ in order[i * n : (i + 1) * n]} == {seed}


def test_complete_seeds_keeps_the_seeds_with_every_label(monkeypatch):
  study = ablations.get_config("quick")
  study.seeds = (0, 1, 2)
  # Seed 1 lacks one label's run; seeds 0 and 2 have them all.
  _, seed, _, missing = sweep.jobs(study, "r")[len(study.seeds) + 1]
  assert seed == 1
  monkeypatch.setattr(sweep, "is_finished", lambda workdir: workdir != missing)
  interim = sweep.with_complete_seeds(study, "r")
  assert tuple(interim.seeds) == (0, 2)
  assert interim.interim == "2 of the planned 3 seeds"
  assert tuple(study.seeds) == (0, 1, 2)  # the study itself is unchanged
  monkeypatch.setattr(sweep, "is_finished", lambda workdir: workdir == missing)
  with pytest.raises(ValueError, match="at least 2"):
    sweep.with_complete_seeds(study, "r")


@pytest.mark.slow
def test_a_diverged_run_is_recorded_and_left_out_of_the_report(tmp_path):
  """A run whose loss turns non-finite stops alone: the study goes on, the run's
  workdir keeps ``diverged.json`` (so it is not trained again), and the report
  names it and leaves it out, with its reference row; a label the report needs
  may not diverge."""
  study = base.new_study("diverging", "diverging", quick=True)
  small = dict(total_steps=10, interval__h=5, eval__every_steps=5)
  base.add_run(study, "ok", base.run_config("diloco", True, **small))
  # Its own reference row goes with it (a grid point read against a baseline).
  base.add_run(
      study, "bad", base.run_config("diloco", True, inner__lr=1e9, **small), "ok"
  )
  # Locked, as the command line's ``--study`` (config_flags) hands it over.
  study.lock()
  result = sweep.run_study(study, str(tmp_path), str(tmp_path / "r"), progress=False)
  assert result["labels"] == ["ok"] and result["reference"] == {}
  assert len(result["diverged"]) == 1 and result["diverged"][0].startswith("bad, seed 0")
  bad = sweep.jobs(study, str(tmp_path))[1][3]
  assert "not finite" in sweep.diverged(bad) or " is nan" in sweep.diverged(bad)
  assert "Diverged" in open(tmp_path / "r" / "results.md").read()
  # Nothing trains again; a comparison that needs the diverged label is an error.
  study.unlock()
  study.comparisons = (("bad", "ok"),)
  with pytest.raises(ValueError, match="runs the report needs diverged: bad"):
    sweep.run_study(study, str(tmp_path), str(tmp_path / "r2"), progress=False)
