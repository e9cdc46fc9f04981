"""Comparisons paired per document as well as per seed.

Every run's final evaluation writes, for each validation document ``d``, its
counted target tokens ``n_d`` and the sum of their losses (nats) to
``<workdir>/final_eval.json`` (``autoloco_jax/run/evaluation.py``). A document's loss
in bits/byte is

    l_d = loss_sum_d / (n_d · ln 2 · bytes_per_token),

with the run's own ``bytes_per_token = final_eval_bytes / final_eval_tokens`` (1
for the byte tokenizer). For a candidate and a reference on the same seeds the
per-document difference is averaged over seeds,

    Δ_d = mean_s (l_{cand,s,d} − l_{ref,s,d}),

and the report says on how many documents the candidate is lower, the smallest
and largest ``Δ_d``, and the token-weighted mean ``sum_d n_d Δ_d / sum_d n_d``
(the whole-split difference). It tells a gain spread over the split from one
carried by a single document; documents differ in size and kind, so it is a
description, not a second interval.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np

from autoloco_jax.run import evaluation


def document_bpb(workdir: str) -> tuple[np.ndarray, np.ndarray] | None:
  """``(tokens_D, bpb_D)`` of the run's headline model's final eval in
  ``workdir`` (``evaluation.main_loss``'s: the global model, or the decentralized
  methods' replica mean), or None where the run has no ``final_eval.json``
  (written before it existed)."""
  path = os.path.join(workdir, "final_eval.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    record = json.load(f)
  doc = evaluation.main_loss(record["documents"])
  tokens_D = np.asarray(doc["tokens"], np.float64)
  loss_D = np.asarray(doc["loss_sum"], np.float64)
  bytes_per_token = float(record["final_eval_bytes"]) / float(record["final_eval_tokens"])
  with np.errstate(invalid="ignore", divide="ignore"):
    bpb_D = loss_D / (tokens_D * math.log(2) * bytes_per_token)
  return tokens_D, bpb_D


def paired(runs: dict[str, list[dict]], candidate: str, reference: str) -> dict | None:
  """The candidate against the reference per document (module docstring):
  ``dict(candidate, reference, seeds, documents, lower, delta_min, delta_max,
  weighted_delta, per_document_delta)``, or None where a run lacks its
  per-document losses."""
  cand, ref = runs[candidate], runs[reference]
  if [r["seed"] for r in cand] != [r["seed"] for r in ref]:
    raise ValueError(f"{candidate} and {reference} are not on the same seeds")
  deltas, tokens = [], None
  for c, r in zip(cand, ref):
    a, b = document_bpb(c["workdir"]), document_bpb(r["workdir"])
    if a is None or b is None:
      return None
    if not np.array_equal(a[0], b[0]):
      raise ValueError(
          f"{candidate} and {reference} were evaluated on different documents"
      )
    tokens = a[0]
    deltas.append(a[1] - b[1])
  keep = tokens > 0
  delta_D = np.mean(deltas, axis=0)[keep]
  return dict(
      candidate=candidate,
      reference=reference,
      seeds=[r["seed"] for r in cand],
      documents=int(keep.sum()),
      lower=int((delta_D < 0).sum()),
      delta_min=float(delta_D.min()),
      delta_max=float(delta_D.max()),
      weighted_delta=float((tokens[keep] * delta_D).sum() / tokens[keep].sum()),
      per_document_delta=delta_D.tolist(),
  )


def table(entries: list[dict]) -> list[str]:
  """Markdown lines: one row per comparison of :func:`paired`."""
  if not entries:
    return []
  lines = [
      "Paired per document (`experiments/per_document.py`; Δ_d is the candidate's "
      "bits/byte minus the reference's on document d, mean over seeds):",
      "",
      "| candidate | reference | documents lower | Δ_d range | token-weighted Δ |",
      "| --- | --- | ---: | ---: | ---: |",
  ]
  for e in entries:
    lines.append(
        f"| `{e['candidate']}` | `{e['reference']}` | {e['lower']}/{e['documents']} | "
        f"[{e['delta_min']:+.4f}, {e['delta_max']:+.4f}] | {e['weighted_delta']:+.4f} |"
    )
  return lines
