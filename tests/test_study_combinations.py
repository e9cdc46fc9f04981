"""Every distinct way the studies train, built and run once: each combination
of algorithm, codec, aggregate, interval controller, graph, streaming fragments
(and whether they overlap or go eagerly), replayed ratios and momentum schedule
that some study's run uses is trained for a few steps at a tiny width. The
studies' own tests run on a stand-in trainer (tests/test_study_modules.py), so
this is where a study's config meets the real trainer."""

import functools

import pytest

from autoloco_jax.run import trainer
from experiments import engine, study_names
from tests.helpers import ROOT

GOSSIP = ("gasloc", "noloco", "gossip_adamw")


def key(c) -> tuple:
  """What decides a run's compiled program and code path (not its sizes,
  data or seeds)."""
  stream = c.stream.fragments > 1
  return (
      c.algorithm,
      c.compress.codec,
      c.compress.get("aggregate", "mean"),
      c.interval.controller,
      c.gossip.topology if c.algorithm in GOSSIP else "",
      c.stream.fragments if stream else 1,
      bool(stream and c.stream.tau > 0),
      bool(stream and c.stream.get("eager", False)),
      bool(c.algorithm == "autoloco" and c.autoloco.get("ratio_schedule", ())),
      c.autoloco.get("correction", "") if c.algorithm == "autoloco" else "",
      bool(c.get("diloco", {}).get("beta_end", None) is not None),
  )


@functools.lru_cache(maxsize=None)
def combinations() -> dict:
  """``key -> (where, config)``: one run of each combination, from every study
  variant that builds from the committed reports."""
  import os

  out = {}
  here = os.getcwd()
  os.chdir(ROOT)
  try:
    for module, arg in study_names.variants():
      try:
        study = engine.load(f"configs/studies/{module}.py:{arg}")
      except (ValueError, OSError, KeyError):
        continue
      for label in study.labels:
        config = study.runs[label]
        out.setdefault(key(config), (f"{module}:{arg}:{label}", config))
  finally:
    os.chdir(here)
  return out


def test_the_combinations_cover_every_algorithm_codec_and_controller():
  keys = combinations()
  assert {k[0] for k in keys} == {"autoloco", "ddp", "diloco", *GOSSIP}
  assert {k[1] for k in keys} >= {"identity", "int8", "fp4", "topk"}
  assert {k[3] for k in keys} >= {"fixed", "loss_ratio", "agreement", "budget", "schedule"}
  assert {k[4] for k in keys} >= {"ring", "exponential", "matching", "complete"}
  assert any(k[8] for k in keys) and any(k[10] for k in keys)


def tiny(config):
  """``config`` at a tiny width and two rounds of its first interval: the same
  code path, seconds to build."""
  c = config.copy_and_resolve_references()
  c.model.d_model, c.model.mlp_dim, c.model.num_heads = 32, 64, 2
  c.data.batch_size = 2
  h = c.interval.schedule[0] if c.interval.controller == "schedule" else c.interval.h
  c.total_steps = min(c.total_steps, 2 * max(h, 1) + 2)
  if c.interval.controller == "budget":
    c.interval.syncs = 2
  c.eval.every_steps = c.total_steps
  c.eval.num_batches = c.eval.final_num_batches = 1
  c.checkpoint.every_rounds = 1000
  c.num_devices = 1
  return c


@pytest.mark.slow
@pytest.mark.parametrize("k", sorted(combinations(), key=str), ids=lambda k: "-".join(map(str, k)))
def test_each_combination_builds_and_trains(k, tmp_path):
  where, config = combinations()[k]
  c = tiny(config)
  summary = trainer.train_and_evaluate(c, str(tmp_path))
  tokens = c.total_steps * c.num_workers * c.data.batch_size * c.model.seq_len
  assert summary["tokens"] == tokens, where
  assert summary["syncs"] >= 1 and summary["bytes_per_worker"] > 0, where
  assert 0 < summary["final_eval_bpb"] < 9, where  # finite, below a uniform byte's 8 + slack
