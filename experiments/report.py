"""Tables, claims and plots from runs' ``metrics.jsonl`` files.

Used by the sweep runner (``experiments/sweep.py``) and by the quickstart
notebook to compare runs:

  runs = {"diloco": [report.load_run("runs/d")], "autoloco": [report.load_run("runs/a")]}
  report.plot_curves(runs, "tokens")            # eval loss against tokens

The pieces, each its own module: reading a run (``runlog``), statistics over seeds,
the frontier, claims and paired comparisons (``seed_stats``), the markdown
(``report_text``) and the plots (``plots``). This module puts them together and
keeps their public functions under one name (``report.compare``, ...).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from experiments.plots import plot_curves, plot_frontier, plot_rounds, write_plots
from experiments.report_text import claim_sentence, comparison_sentence, markdown
from experiments import per_document, runlog, syncs_saved
from experiments.runlog import load_run, sim_key
from experiments.seed_stats import (
    compare,
    evaluate_claim,
    frontier_loss_at,
    frontier_points,
    frontier_syncs_at,
    mean_std,
    paired_interval,
    ref_targets,
    seed_frontier,
    stats,
    time_to_loss,
    verdict,
)

__all__ = [
    "claim_sentence",
    "collect",
    "ref_targets",
    "compare",
    "comparison_sentence",
    "evaluate_claim",
    "frontier_loss_at",
    "frontier_points",
    "frontier_syncs_at",
    "load_run",
    "markdown",
    "mean_std",
    "paired_interval",
    "plot_curves",
    "plot_frontier",
    "plot_rounds",
    "seed_frontier",
    "sim_key",
    "stats",
    "time_to_loss",
    "verdict",
    "write_plots",
    "write_report",
]


def collect(study: Any, runs: dict[str, list[dict]]) -> dict:
  """Everything the report states, JSON-able: per-label statistics, claims,
  and every run's final numbers and curves."""
  networks = tuple(study.networks)
  all_stats = {label: stats(runs[label], networks) for label in study.labels}
  # Simulated time to reach the reference's loss (mean over seeds; None if a
  # seed never does): the "converges N times faster" measure.
  for label, ref in study.reference.items():
    targets = ref_targets(runs[ref])
    for net in networks:
      times = [
          time_to_loss(r, sim_key(r, net), targets[r["seed"]])
          if r["seed"] in targets else None
          for r in runs[label]
      ]
      all_stats[label][f"time_to_ref_loss@{net}"] = (
          None if any(t is None for t in times) else float(np.mean(times))
      )
      all_stats[label][f"time_to_ref_loss_reached@{net}"] = sum(
          t is not None for t in times
      )
  order = list(study.labels)
  claims = {
      name: evaluate_claim(
          all_stats, c.reference, c.candidate, c.min_saving, tuple(study.frontier)
      )
      for name, c in sorted(
          study.claims.items(), key=lambda item: order.index(item[1].candidate)
      )
  }
  both = collect_comparisons(study, runs)
  comparisons = [c for c in both if c["model"] == "headline"]
  worker_comparisons = [c for c in both if c["model"] == "worker"]
  # The paper's metric: syncs the tuned frontier needs for each label's loss,
  # against the pooled log-linear frontier (its monotone twin and the one
  # reading of the two are added by ``complete``).
  saved = {
      label: syncs_saved.from_runs(runs, tuple(study.frontier), label)
      for label in study.get("syncs_saved", ())
  }
  # The same comparisons paired per document, where the runs wrote their losses.
  documents = [
      per_document.paired(runs, c["candidate"], c["reference"])
      for c in comparisons
      if c["reference"] != "frontier"
  ]
  return complete(dict(
      name=study.name,
      title=study.title,
      comparisons=comparisons,
      worker_comparisons=worker_comparisons,
      syncs_saved=saved,
      per_document=[d for d in documents if d is not None],
      power=dict(study.get("power") or {}),
      interim=str(study.get("interim", "")),
      diverged=list(study.get("diverged", ())),
      quick=bool(study.quick),
      seeds=list(study.seeds),
      labels=list(study.labels),
      reference=dict(study.reference),
      frontier=list(study.frontier),
      # Final loss against these per-label costs, beside the syncs plot.
      cost_plots=list(study.get("cost_plots", ())),
      networks=list(networks),
      stats=all_stats,
      claims=claims,
      runs={label: runs[label] for label in study.labels},
  ))


def complete(result: dict) -> dict:
  """``result`` with each syncs-saved label's saving against the pooled
  monotone frontier (``syncs_saved_monotone``, with its ``flat_stretch``) and
  its one reading of the two frontiers (``syncs_saved_reading``:
  ``syncs_saved.reading``), where it lacks them: every report
  (:func:`collect`), and once the 16 committed summaries written before the
  readings existed, whose readings are kept beside them
  (``runlog.READINGS``)."""
  entries = result.get("syncs_saved") or {}
  if not entries:
    return dict(result, syncs_saved_monotone={}, syncs_saved_reading={})
  runs = result["runs"]
  frontier = next(iter(entries.values()))["frontier"]
  fs, fl = syncs_saved.frontier_arrays(runs, frontier)
  fit = syncs_saved.lack_of_fit(fs, fl)
  mono = dict(result.get("syncs_saved_monotone") or {})
  for label in entries:
    m = dict(mono.get(label) or syncs_saved.from_runs(runs, frontier, label, model="monotone"))
    if "flat_stretch" not in m:
      loss_S = [r["summary"]["final_eval_bpb"] for r in runs[label]]
      m["flat_stretch"] = syncs_saved.on_flat_stretch(fs, fl, loss_S, m["tolerance"])
    mono[label] = m
  readings = {
      label: dict(syncs_saved.reading(entries[label], mono[label], fit), fit=fit)
      for label in entries
  }
  return dict(result, syncs_saved_monotone=mono, syncs_saved_reading=readings)


def collect_comparisons(study: Any, runs: dict[str, list[dict]]) -> list[dict]:
  """The study's paired comparisons (``seed_stats.compare`` at the study's
  tolerance) on the headline model, and, where a label's workers hold models of
  their own, the same on the model one worker holds (``model="worker"``): a
  decentralized method's headline is the average of every worker's weights,
  which the method never forms."""
  tolerance = float(study.get("tolerance", 0.01))
  frontier = tuple(study.frontier)
  out = []
  for cand, ref in study.get("comparisons", ()):
    out.append(compare(runs, cand, ref, frontier, tolerance))
    if any(_own_worker_model(runs[label]) for label in (cand, ref) if label in runs):
      out.append(compare(runs, cand, ref, frontier, tolerance, key="final_eval_bpb_worker"))
  return out


def _own_worker_model(runs: list[dict]) -> bool:
  """Whether a label's workers hold models of their own at the end (their
  model differs from the headline's on some seed)."""
  return any(
      r["summary"].get("final_eval_bpb_worker") not in (None, r["summary"]["final_eval_bpb"])
      for r in runs
  )


def write_report(study: Any, runs: dict[str, list[dict]], report_dir: str) -> dict:
  """Writes ``summary.json``, the plots and ``results.md`` to ``report_dir``;
  returns the collected result."""
  os.makedirs(report_dir, exist_ok=True)
  result = collect(study, runs)
  with open(os.path.join(report_dir, "summary.json"), "w") as f:
    json.dump(_finite(result), f, indent=1)
  # A report written again holds its readings itself.
  stale = os.path.join(report_dir, runlog.READINGS)
  if os.path.exists(stale):
    os.remove(stale)
  plots = write_plots(result, report_dir)
  body = [f"# {study.title}", "", markdown(study, result)]
  if plots:
    body.append(
        "Plots, drawn beside this file by the report command (not kept in the "
        "repository's docs/): " + ", ".join(f"[{name[:-4]}]({name})" for name in plots) + "."
    )
  with open(os.path.join(report_dir, "results.md"), "w") as f:
    f.write("\n".join(body) + "\n")
  result["plots"] = plots
  return result


def _finite(tree: Any) -> Any:
  """NaN and inf as strings, so the JSON is strict."""
  if isinstance(tree, dict):
    return {k: _finite(v) for k, v in tree.items()}
  if isinstance(tree, (list, tuple)):
    return [_finite(v) for v in tree]
  if isinstance(tree, float) and not math.isfinite(tree):
    return str(tree)
  return tree
