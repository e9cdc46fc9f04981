"""A study cell's words, a widened grid, an interim report: the study layer's
rules that need no run at all (the phases on synthetic runs:
``tests/test_study_modules.py``; kept apart from that module's fixtures, which
point the studies' report folders at temporary ones)."""

import itertools
import json
import os
import types

import pytest

from configs.studies import gossip_g1, gossip_g2, gossip_phases, heterogeneity, noloco_n1
from experiments import engine, sweep


def test_a_cells_words_name_its_reports_and_a_wrong_word_says_what_it_takes(
    monkeypatch, tmp_path
):
  """A cell's argument: the phase, its words (a corpus, a worker count) and
  ``quick``; each word keeps its own report folders, an unknown one is refused
  with the words the cell takes, and a phase whose earlier phase has no report
  names that phase's command."""
  assert engine.build(gossip_g2, "coarse,python").report_dir == (
      "docs/studies/gossip_g2/python/coarse"
  )
  assert (
      engine.build(noloco_n1, "coarse,k16").report_dir == "docs/studies/noloco_n1/k16/coarse"
  )
  assert engine.build(gossip_g1, "coarse").report_dir == "docs/studies/gossip_g1/coarse"
  with pytest.raises(ValueError, match="unknown token 'k5'.*'k4', 'k8', 'k16'"):
    engine.build(noloco_n1, "coarse,k5")
  monkeypatch.setattr(noloco_n1, "DOCS_DIR", str(tmp_path))  # no reports there
  with pytest.raises(ValueError, match=r"noloco_n1.py:tune,k8"):
    engine.build(noloco_n1, "report,k8")
  with pytest.raises(ValueError, match=r"noloco_n1.py:report,k8"):
    engine.build(noloco_n1, "longer,k8")


def test_gossip_g1_grid_is_the_union_of_its_products_each_point_once():
  """A widened grid adds its points after the first product's, each point once:
  the labels of finished runs stay."""
  grid = gossip_phases.points(gossip_g1, "gasloc", quick=False)
  first = [
      dict(eta=e, gamma=g, alpha=a)
      for e in (0.7, 1.0, 1.5)
      for g in (0.5, 0.9)
      for a in (1.0, 0.5)
  ]
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
  cell = types.SimpleNamespace(
      GRIDS=dict(gossip=(dict(weight=(1.0, 0.5)), dict(weight=(0.5, 0.25))))
  )
  assert gossip_phases.points(cell, "gossip", quick=False) == [
      dict(weight=1.0),
      dict(weight=0.5),
      dict(weight=0.25),
  ]
  assert dict(eta=2.0, gamma=0.2, alpha=0.5) in grid
  assert dict(eta=3.0, gamma=0.1, alpha=0.5) in grid  # the second widening
  assert gossip_phases.points(gossip_g1, "gossip", quick=False) == [
      dict(weight=1.0),
      dict(weight=0.5),
      dict(weight=0.25),
  ]


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
