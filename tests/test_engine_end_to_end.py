"""The study engine once, end to end, with real (tiny) training: a two-phase
study written as data, run by ``experiments.sweep --phases``. The second phase
reads the first one's report through the engine, shares a run with it (one
config hash: trained once), goes on after a stop (finished runs are skipped),
refuses a finished run whose stored config no longer matches, and writes its
report."""

import json
import os

import pytest

from experiments import engine, sweep

STUDY = '''
"""A tiny two-phase study (tests/test_engine_end_to_end.py)."""
from configs.studies import base

NAME = "tiny_{phase}"
TITLE = "Tiny ({phase})"
PHASES = ("coarse", "report")
DOCS_DIR = QUICK_DIR = REPORTS
ALPHAS = (0.7, 1.0)


def _run(alpha):
  c = base.run_config("diloco", True, interval__h=2, total_steps=4, diloco__alpha=alpha)
  c.eval.every_steps, c.eval.num_batches, c.eval.final_num_batches = 4, 1, 1
  return c


def label(alpha):
  return f"diloco_a{alpha:g}".replace(".", "p")


def coarse(s, cell):
  s.seeds = (0,)
  for a in ALPHAS:
    base.add_run(s, label(a), _run(a))


def report(s, cell):
  stats = cell.read("coarse")["stats"]
  best = min(ALPHAS, key=lambda a: stats[label(a)]["final_eval_bpb"][0])
  s.seeds = (0, 1)
  base.add_run(s, "best", _run(best))
  base.add_run(s, "other", _run(ALPHAS[1] if best == ALPHAS[0] else ALPHAS[0]))
  s.comparisons = (("best", "other"),)


PHASE_RUNS = dict(coarse=coarse, report=report)
'''


@pytest.mark.slow
def test_a_study_runs_its_phases_shares_skips_resumes_and_refuses_stale_runs(
    tmp_path, monkeypatch
):
  path = tmp_path / "tiny.py"
  path.write_text(STUDY.replace("REPORTS", repr(str(tmp_path / "reports"))))
  root = str(tmp_path / "runs")
  trained = []
  real = sweep.trainer.train_and_evaluate

  def counting(config, workdir):
    trained.append(workdir)
    return real(config, workdir)

  monkeypatch.setattr(sweep.trainer, "train_and_evaluate", counting)
  flags = dict(report_dir="", root=root, complete_seeds=False, report_only=False)
  specs = sweep.phase_args(f"{path}:quick", ["all"])
  assert [s.split(":")[1] for s in specs] == ["coarse,quick", "report,quick"]

  sweep.run_one(engine.load(specs[0]), flags)
  assert len(trained) == 2  # both grid points, seed 0

  # The report phase stops after its first run; the same command goes on.
  def stop_after_one(config, workdir):
    if len(trained) == 3:
      raise sweep.Interrupted("stopped")
    return counting(config, workdir)

  monkeypatch.setattr(sweep.trainer, "train_and_evaluate", stop_after_one)
  report = engine.load(specs[1])
  with pytest.raises(SystemExit):  # the command exits 1: "run the same command to go on"
    sweep.run_one(report, flags)
  monkeypatch.setattr(sweep.trainer, "train_and_evaluate", counting)
  sweep.run_one(engine.load(specs[1]), flags)
  # Seed 0 of both labels is the coarse pass's (shared by hash); seed 1 is new.
  assert len(trained) == 4 and len(set(trained)) == 4
  summary = json.loads((tmp_path / "reports" / "report" / "summary.json").read_text())
  assert summary["labels"] == ["best", "other"] and summary["seeds"] == [0, 1]
  assert [(c["candidate"], c["reference"]) for c in summary["comparisons"]] == [("best", "other")]
  assert os.path.exists(tmp_path / "reports" / "report" / "results.md")

  # A finished run whose stored config differs from the study's is refused.
  workdir = sweep.jobs(engine.load(specs[1]), root)[0][3]
  stored = json.loads(open(os.path.join(workdir, "config.json")).read())
  stored["inner"]["lr"] = 1.0
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump(stored, f)
  with pytest.raises(ValueError, match="another config"):
    sweep.run_one(engine.load(specs[1]), flags)
