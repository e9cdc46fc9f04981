"""Comparisons paired per document (experiments/per_document.py), by hand."""

import json
import math

import numpy as np
import pytest

from experiments import per_document


def _run(tmp_path, name, seed, tokens, bpb):
  """A run whose final_eval.json has these per-document tokens and bits/byte."""
  workdir = tmp_path / name
  workdir.mkdir()
  loss_sum = [b * n * math.log(2) for b, n in zip(bpb, tokens)]
  record = dict(
      final_eval_tokens=sum(tokens),
      final_eval_bytes=float(sum(tokens)),
      documents={"": dict(tokens=tokens, loss_sum=loss_sum)},
  )
  (workdir / "final_eval.json").write_text(json.dumps(record))
  return dict(seed=seed, workdir=str(workdir))


def test_paired_per_document_by_hand(tmp_path):
  tokens = [100, 300, 0]  # the third document has no counted target
  runs = {
      "cand": [
          _run(tmp_path, "c0", 0, tokens, [2.0, 3.0, 0.0]),
          _run(tmp_path, "c1", 1, tokens, [2.2, 2.8, 0.0]),
      ],
      "ref": [
          _run(tmp_path, "r0", 0, tokens, [2.1, 2.9, 0.0]),
          _run(tmp_path, "r1", 1, tokens, [2.3, 3.1, 0.0]),
      ],
  }
  out = per_document.paired(runs, "cand", "ref")
  # Δ_0 = mean(-0.1, -0.1) = -0.1; Δ_1 = mean(+0.1, -0.3) = -0.1.
  np.testing.assert_allclose(out["per_document_delta"], [-0.1, -0.1])
  assert (out["documents"], out["lower"]) == (2, 2)
  assert out["weighted_delta"] == pytest.approx(-0.1)
  assert "| `cand` | `ref` | 2/2 |" in "\n".join(per_document.table([out]))


def test_weighted_delta_is_the_whole_split_difference(tmp_path):
  tokens = [100, 300]
  runs = {
      "cand": [_run(tmp_path, "c0", 0, tokens, [2.0, 3.0])],
      "ref": [_run(tmp_path, "r0", 0, tokens, [2.4, 2.9])],
  }
  out = per_document.paired(runs, "cand", "ref")
  # (100 (-0.4) + 300 (+0.1)) / 400 = -0.025: the whole split's bits/byte difference.
  assert out["weighted_delta"] == pytest.approx(-0.025)
  assert (out["lower"], out["delta_min"], out["delta_max"]) == (1, pytest.approx(-0.4), pytest.approx(0.1))


def test_runs_without_per_document_losses_give_none(tmp_path):
  (tmp_path / "old").mkdir()
  runs = {
      "cand": [dict(seed=0, workdir=str(tmp_path / "old"))],
      "ref": [_run(tmp_path, "r0", 0, [10], [2.0])],
  }
  assert per_document.paired(runs, "cand", "ref") is None


def test_different_documents_or_seeds_are_refused(tmp_path):
  runs = {
      "cand": [_run(tmp_path, "c0", 0, [10, 20], [2.0, 2.0])],
      "ref": [_run(tmp_path, "r0", 0, [10, 21], [2.0, 2.0])],
      "other": [_run(tmp_path, "o1", 1, [10, 20], [2.0, 2.0])],
  }
  with pytest.raises(ValueError, match="different documents"):
    per_document.paired(runs, "cand", "ref")
  with pytest.raises(ValueError, match="same seeds"):
    per_document.paired(runs, "cand", "other")
