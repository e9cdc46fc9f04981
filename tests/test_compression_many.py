"""Issue 42's study (``configs/studies/compression_many.py``) as built from the
evidence study's committed many/Python reports: its rows, its reuse of the
evidence runs, its grids. Its phases run end to end in
``tests/test_study_modules.py``."""

import pytest

from configs.studies import compression_many as cm
from configs.studies import evidence
from experiments import engine, sweep

OPTS = engine.parse(cm, "coarse")


def test_the_coarse_phase_reuses_the_evidence_reference_run():
  s = engine.build(cm, "coarse")
  cell = cm._evidence(OPTS)
  pair = evidence.tuned_pairs(cell)[20]
  ours = s.runs["diloco_h20"].copy_and_resolve_references()
  theirs = evidence.diloco_config(cell, 20, *pair)
  ours.seed = theirs.seed = 0
  assert sweep.run_dir("r", ours) == sweep.run_dir("r", theirs)
  assert ours.total_steps == 3000 and ours.interval.h == 20
  assert len(s.labels) == 1 + sum(len(g) for g in cm.GRIDS.values())


def test_rows_are_the_methods_of_their_papers():
  rows = {row: cm.row_config(OPTS, row, dict(alpha=1.0, ef_beta=0.95)) for row in cm.ROWS}
  for row in ("stream_tau0", "stream_tau1", "stream_fp4", "stream_eager"):
    c = rows[row]
    # Four fragments of sub-layers (the model has two blocks).
    assert (c.stream.fragments, c.stream.unit, c.model.num_layers) == (4, "sublayer", 2)
    assert c.stream.tau == (0 if row == "stream_tau0" else 1)
  assert rows["stream_eager"].stream.eager
  assert rows["stream_fp4"].compress.codec == "fp4"
  for row, density in (("sparseloco_d1", 0.01), ("sparseloco_d3", 0.03)):
    c = rows[row]
    assert c.compress.codec == "topk" and c.compress.density == density
    assert c.compress.value_bits == 2 and c.compress.ef_beta == 0.95
    assert c.diloco.beta == 0.0  # outer SGD: the error feedback is its momentum
  assert rows["int8"].compress.codec == "int8"
  auto = rows["autoloco_stream_fp4"]
  assert auto.algorithm == "autoloco" and auto.compress.codec == "fp4"
  # The overlap fits the shortest round AutoLoCo may take: tau < h_min / P.
  assert auto.stream.tau < auto.interval.h_min // cm.FRAGMENTS


def test_the_aggregate_ablation_reuses_the_tuned_points_and_changes_only_the_rule():
  """Each SparseLoCo family's tuned point with the mean is the tune phase's run
  (same directory); its senders' twin differs in the rule and the outer lr only."""
  s = engine.build(cm, "aggregate")
  tune = engine.build(cm, "tune")
  dirs = lambda study: {sweep.run_dir("r", c) for c in study.runs.values()}
  points = cm.tuned_points(engine.parse(cm, "tune"))
  for family in ("sparseloco_d1", "sparseloco_d3"):
    p = points[family]
    mean = cm._tag(f"{family}_mean_a{p['alpha']}_ef{p['ef_beta']}")
    senders = cm._tag(f"{family}_senders_a1.0_ef{p['ef_beta']}")
    assert sweep.run_dir("r", s.runs[mean]) in dirs(tune)
    a, b = s.runs[mean], s.runs[senders]
    assert (a.compress.aggregate, b.compress.aggregate) == ("mean", "senders")
    assert b.diloco.alpha == 1.0
    b.compress.aggregate, b.diloco.alpha = "mean", a.diloco.alpha
    assert sweep.run_dir("r", a) == sweep.run_dir("r", b)
  assert tuple(s.seeds) == tuple(evidence.TUNING_SEEDS)


def test_the_reports_senders_rows_are_the_ablations_runs_on_fresh_seeds():
  """Each ``*_senders`` report row is its family's report row with the senders'
  mean at the paper's ``α = 1``: on a tuning seed it would be the ablation's run."""
  report, ablation = engine.build(cm, "report"), engine.build(cm, "aggregate")
  for row, family in cm.SENDERS_ROWS.items():
    ours, theirs = report.runs[row], report.runs[family]
    assert (ours.compress.aggregate, ours.diloco.alpha) == ("senders", 1.0)
    assert ours.compress.density == theirs.compress.density
    twin = ablation.runs[cm._tag(f"{family}_senders_a1.0_ef{theirs.compress.ef_beta}")]
    assert sweep.run_dir("r", ours) == sweep.run_dir("r", twin)
    ours.compress.aggregate, ours.diloco.alpha = "mean", theirs.diloco.alpha
    assert sweep.run_dir("r", ours) == sweep.run_dir("r", theirs)


def test_parse_refuses_other_tokens():
  assert cm._evidence(engine.parse(cm, "tune,quick"))["regime"] == "base"
  with pytest.raises(ValueError, match="unknown token"):
    engine.parse(cm, "tune,python")


def test_the_four_fragments_are_non_empty_and_the_largest_bounds_the_peak():
  """The docstring's bound: on the study model each of the 4 sub-layer fragments
  holds parameters, the largest 30.8% of them, so the peak bandwidth of a
  fragment's sync is at least that share of the whole model's (at most 3.25×
  lower)."""
  import jax
  import numpy as np

  from autoloco_jax.algorithms.diloco import fragments
  from autoloco_jax.model import transformer as model_lib

  c = cm.row_config(OPTS, "stream_tau1")
  model = c.model.copy_and_resolve_references()
  with model.unlocked():
    model.vocab_size, model.seq_len = 256, c.data.seq_len
  init, _ = model_lib.make(model)
  shapes = jax.eval_shape(init, jax.random.key(0))
  sizes = [int(np.prod(x.shape)) for x in jax.tree.leaves(shapes)]
  ids = fragments.leaf_fragments(shapes, c.stream.fragments, c.stream.mode, c.stream.unit)
  per_fragment = np.bincount(ids, weights=sizes, minlength=4)
  assert (per_fragment > 0).all()
  share = per_fragment.max() / sum(sizes)
  assert round(share, 3) == 0.308 and round(1 / share, 2) == 3.25
