"""The evaluation sets (every validation target once, or a spread sample), the
weighted evaluation, the final whole-split record, and the end of a run
without stub rounds."""

import functools
import json
import os

import jax
import numpy as np
import pytest

from autoloco_jax.data import eval_sets
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.run import evaluation, trainer
from autoloco_jax.runtime import replicas, rounds
from tests import helpers


def _counted_targets(eval_set):
  """Stream positions of the targets ``eval_set`` counts (with repeats)."""
  L = eval_set.weights_NxBxL.shape[-1]
  tokens = eval_set.tokens_NxBxL1.reshape(-1, L + 1)
  weights = eval_set.weights_NxBxL.reshape(-1, L)
  # Tokens are the stream positions themselves (see `_stream`), so a window's
  # first token is its start.
  starts = tokens[:, 0].astype(np.int64)
  positions = starts[:, None] + 1 + np.arange(L)
  return np.sort(positions[weights > 0])


def _stream(T):
  """A stream whose token at position t is t (int32), to read positions back."""
  return np.arange(T, dtype=np.int32)


@pytest.mark.parametrize("T", [50, 49, 41, 9])
def test_whole_counts_every_target_once(T):
  L, B = 8, 3
  doc_starts = np.array([0, 20, 35])
  s = eval_sets.whole(_stream(T), doc_starts, L, B, bytes_per_token=2.0)
  np.testing.assert_array_equal(_counted_targets(s), np.arange(1, T))
  assert s.whole and s.num_tokens == T - 1 and s.num_bytes == 2.0 * (T - 1)
  assert s.tokens_NxBxL1.shape[1:] == (B, L + 1)
  # Each counted target's document: the last document starting at or before it.
  flat_doc = s.doc_NxBxL.reshape(-1)
  flat_pos = (s.tokens_NxBxL1.reshape(-1, L + 1)[:, :1] + 1 + np.arange(L)).reshape(-1)
  counted = s.weights_NxBxL.reshape(-1) > 0
  expected = np.searchsorted(doc_starts, flat_pos[counted], side="right") - 1
  np.testing.assert_array_equal(flat_doc[counted], expected)
  assert np.all(flat_doc[~counted] == -1)


def test_whole_last_window_counts_only_the_rest():
  # T = 50, L = 8: 6 whole windows hold targets 1..48; the last window is the
  # stream's last 9 tokens (start 41) and counts only target 49.
  s = eval_sets.whole(_stream(50), np.array([0]), 8, 7)
  tokens = s.tokens_NxBxL1.reshape(-1, 9)
  weights = s.weights_NxBxL.reshape(-1, 8)
  assert tokens[6, 0] == 41 and weights[6].tolist() == [0] * 7 + [1]
  assert weights[7:].sum() == 0  # padding to whole batches of 7


def test_whole_capped_is_an_even_sample():
  s = eval_sets.whole(_stream(1001), np.array([0]), 10, 4, max_tokens=200)
  starts = s.tokens_NxBxL1.reshape(-1, 11)[:, 0]
  assert not s.whole and s.num_tokens == 200
  assert starts[0] == 0 and starts[-1] == 990  # first and last windows
  assert len(set(np.diff(starts).tolist()) - {50, 60}) == 0


def test_spread_depends_on_the_count_only_and_refuses_too_many():
  a = eval_sets.spread(_stream(1001), np.array([0]), 10, 4, 3)
  b = eval_sets.spread(_stream(1001), np.array([0]), 10, 12, 1)
  np.testing.assert_array_equal(a.tokens_NxBxL1.reshape(12, -1), b.tokens_NxBxL1[0])
  starts = a.tokens_NxBxL1.reshape(-1, 11)[:, 0]
  assert starts[0] == 0 and starts[-1] == 990 and a.num_tokens == 120
  assert not a.whole
  assert eval_sets.select(_stream(1001), np.array([0]), 10, 4, 0).whole
  with pytest.raises(ValueError, match="too little validation data"):
    eval_sets.spread(_stream(1001), np.array([0]), 10, 4, 26)


def test_per_document_sums_by_hand():
  s = eval_sets.whole(_stream(9), np.array([0, 4]), 4, 2)
  # Targets 1..8: document 0 holds 1..3, document 1 holds 4..8.
  losses = s.weights_NxBxL * 0.5
  losses.reshape(-1, 4)[0, 0] = 2.0  # target 1
  tokens_D, loss_sum_D = eval_sets.per_document(losses, s, 2)
  assert tokens_D.tolist() == [3, 5]
  np.testing.assert_allclose(loss_sum_D, [2.0 + 0.5 + 0.5, 2.5])


def test_a_sample_as_large_as_the_split_is_the_whole_split():
  from autoloco_jax.data import corpus as data_lib

  rows = np.arange(2 * 9, dtype=np.uint8).reshape(2, 9)  # 2 rows of L + 1 = 9
  wd = data_lib.WorkerData(rows, [np.array([0]), np.array([1])], rows, seed=0)
  # The validation stream has 18 tokens: 2 whole windows of 8 targets, plus one.
  assert wd.num_eval_sequences == 2
  s = wd.eval_set(batch_size=2, num_batches=4)
  assert s.whole and s.num_tokens == 17
  assert not wd.eval_set(batch_size=1, num_batches=1).whole


def test_weighted_mean_equals_loss_fn_on_whole_windows():
  """With every weight 1 the evaluation is the mean of ``model.loss_fn``
  over the batches, the loss the inner steps minimise."""
  cfg = helpers.tiny().model.copy_and_resolve_references()
  with cfg.unlocked():
    cfg.vocab_size, cfg.seq_len = 256, 16
  init, apply = model_lib.make(cfg)
  params = init(jax.random.key(0))
  stream = np.random.default_rng(0).integers(0, 256, 16 * 40 + 1).astype(np.uint8)
  s = eval_sets.spread(stream, np.array([0]), 16, 4, 5)
  mesh = replicas.make_mesh(1, 1)

  class Algo:
    eval_params = None

  evaluate, evaluate_tokens = evaluation.make_evaluate(
      functools.partial(model_lib.token_losses, apply), mesh, Algo
  )

  class State:
    params_K = jax.tree.map(lambda x: x[None], params)

  got = float(evaluate(State, evaluation.place(s, mesh))[""])
  loss = functools.partial(model_lib.loss_fn, apply, params)
  want = np.mean([float(loss(batch)) for batch in s.tokens_NxBxL1])
  np.testing.assert_allclose(got, want, rtol=1e-5)
  means, _ = evaluation.final_report(
      jax.device_get(evaluate_tokens(State, evaluation.place(s, mesh))), s, 1
  )
  np.testing.assert_allclose(means[""], want, rtol=1e-5)


# ----------------------------------------------------------------------------
# The end of a run: no stub rounds.


@pytest.mark.parametrize(
    "next_h, remaining, h_min, steps",
    [
        (10, 40, 10, 10),  # fixed H, plenty left
        (10, 10, 10, 10),  # exactly the last round
        (10, 15, 10, 15),  # a 5-step remainder joins this round
        (10, 20, 10, 10),  # a whole round remains after this one
        (10, 5, 10, 5),  # fewer steps left than H
        (13, 14, 1, 13),  # adaptive, h_min = 1: a 1-step round is allowed
        (13, 14, 2, 14),  # adaptive, h_min = 2: it joins
        (4, 6, 8, 6),  # h_min above H: the threshold is min(h_min, H)
        (4, 8, 8, 4),
    ],
)
def test_round_steps(next_h, remaining, h_min, steps):
  assert rounds.round_steps(next_h, remaining, h_min) == steps


def _old_rule(next_h, remaining, h_min):
  del h_min
  return min(next_h, remaining)


def test_fixed_h_run_unchanged_when_h_divides_t(tmp_path, monkeypatch):
  """Fixed H = 10: a run of 40 steps is the run the old rule (clip the last
  round to what remains) gave, bit for bit; a run of 45 steps ends with one
  15-step round (4 syncs) where the old rule gave a 5-step stub (5 syncs)."""

  def tiny(total):
    return helpers.tiny(
        **{"total_steps": total, "interval.controller": "fixed", "interval.h": 10}
    )

  stub = trainer.train_and_evaluate(tiny(45), str(tmp_path / "stub"))
  assert [r["h"] for r in helpers.rounds(str(tmp_path / "stub"))] == [10, 10, 10, 15]
  assert stub["syncs"] == 4
  new = trainer.train_and_evaluate(tiny(40), str(tmp_path / "new"))
  monkeypatch.setattr(rounds, "round_steps", _old_rule)
  old = trainer.train_and_evaluate(tiny(40), str(tmp_path / "old"))
  new_rounds, old_rounds = (helpers.rounds(str(tmp_path / n)) for n in ("new", "old"))
  assert [r["h"] for r in new_rounds] == [10] * 4
  keys = ("loss_mean", "loss_end", "param_norm", "delta_norm", "eval_loss")
  assert [[r.get(k) for k in keys] for r in new_rounds] == [
      [r.get(k) for k in keys] for r in old_rounds
  ]
  assert new["final_eval_loss"] == old["final_eval_loss"]


def test_final_eval_record_and_documents(tmp_path):
  """The summary says what the final evaluation measured, and
  ``final_eval.json`` holds per-document losses that add up to it."""
  cfg = helpers.tiny(
      **{"total_steps": 10, "eval.final_num_batches": 0, "eval.max_tokens": 3000}
  )
  summary = trainer.train_and_evaluate(cfg, str(tmp_path))
  assert summary["final_eval_tokens"] == 3000 // cfg.data.seq_len * cfg.data.seq_len
  assert not summary["final_eval_whole"]  # 3,000 targets: the split is cut to them
  assert 0 < summary["final_eval_share"] < 1
  with open(os.path.join(tmp_path, "final_eval.json")) as f:
    final = json.load(f)
  docs = final["documents"][""]
  assert sum(docs["tokens"]) == summary["final_eval_tokens"]
  np.testing.assert_allclose(
      sum(docs["loss_sum"]) / sum(docs["tokens"]), summary["final_eval_loss"], rtol=1e-9
  )
  records = helpers.rounds(str(tmp_path))
  evals = [r for r in records if "eval_loss" in r]
  assert evals and all(r["eval_tokens"] == 2 * 16 * cfg.data.seq_len for r in evals)
