"""A finished run, as read from its ``metrics.jsonl``: final numbers, eval curve and
the adaptive runs' round trace; and a report's ``summary.json`` as readers see it."""

from __future__ import annotations

import json
import math
import os

from autoloco_jax.run import metrics as metrics_lib
from autoloco_jax.run.config_check import stored_config

#: Beside a report's ``summary.json`` written before the frontier readings
#: existed: its ``syncs_saved_monotone`` and ``syncs_saved_reading``
#: (``report.complete``), kept apart so that the large summary is not written
#: again.
READINGS = "readings.json"


def read_summary(path: str) -> dict | None:
  """A report's ``summary.json`` (or any JSON a tool wrote beside it) with the
  fields of a :data:`READINGS` file beside it; ``None`` where not yet written."""
  if not os.path.exists(path):
    return None
  with open(path) as f:
    out = json.load(f)
  extra = os.path.join(os.path.dirname(path), READINGS)
  if os.path.basename(path) == "summary.json" and os.path.exists(extra):
    with open(extra) as f:
      out.update(json.load(f))  # write_report removes it when it writes the summary again
  return out


#: Per-eval columns kept for curves, and per-round columns for adaptive runs.
EVAL_KEYS = ("step", "tokens", "syncs", "bytes_per_worker", "sim_time", "eval_bpb")
ROUND_KEYS = ("step", "h", "outer_lr", "outer_momentum", "ratio")
#: Final numbers kept from a run's summary line.
SUMMARY_KEYS = (
    "algorithm",
    "final_eval_bpb",
    "syncs",
    "bytes_per_worker",
    "sim_time",
    "network",
    "tokens",
    "tokens_per_sec",
    "wall_time",
    "num_params",
    "peak_bandwidth",
    "final_eval_tokens",
    "final_eval_whole",
    "final_eval_seconds",
    "final_eval_share",
)


def events_per_sync(workdir: str) -> int:
  """How many communication events sync every parameter once: a streaming run's
  ``P`` fragments (``stream.fragments`` in the run's ``config.json``) each take
  one event, every other run 1. A run dir without a config counts 1."""
  config = stored_config(workdir) or {}
  return int(config.get("stream", {}).get("fragments", 1))


def worker_bpb(summary: dict) -> float | None:
  """Bits/byte of the model one worker holds at the end: worker 0's own model
  (``final_eval_loss_replica``, nats per token) where a decentralized method logs
  it beside its headline (the average of every worker's weights, a model the
  methods never form); otherwise the headline's, the global model every worker
  holds after the last sync. None for a run without a final evaluation."""
  if summary.get("final_eval_loss_replica") is None:
    return summary.get("final_eval_bpb")
  bytes_per_token = float(summary["final_eval_bytes"]) / float(summary["final_eval_tokens"])
  return float(summary["final_eval_loss_replica"]) / math.log(2) / bytes_per_token


def load_run(workdir: str, seed: int | None = None) -> dict:
  """One finished run: its final numbers, eval curve and adaptive round trace.

  Returns ``dict(seed, workdir, summary, eval, rounds)``; ``eval`` and
  ``rounds`` map a column to a list (``sim_time_<network>`` columns included);
  ``summary["final_eval_bpb_worker"]`` is :func:`worker_bpb`.

  ``syncs`` (summary and eval curve) counts full-model syncs, the times every
  parameter was synchronized: the trainer's count of communication events
  (kept as ``sync_events``) over :func:`events_per_sync`. A streaming run of
  ``P`` fragments at interval ``H`` syncs as often as DiLoCo at ``H`` (its
  fragment syncs are ``P`` times as many, each of ``1/P`` of the model), which
  is how Streaming DiLoCo (Douillard et al. 2025) compares them, and what puts
  it on DiLoCo's frontier at its own ``H``, not ``P`` times further out.

  Raises:
    ValueError: the run has no summary line (not finished).
  """
  records = metrics_lib.read(os.path.join(workdir, "metrics.jsonl"))
  if not records or not records[-1].get("summary"):
    raise ValueError(f"{workdir} holds no finished run (no summary line)")
  summary = records[-1]
  rows = records[:-1]
  extra = sorted(k for k in summary if k.startswith("sim_time_"))
  evals = [r for r in rows if "eval_bpb" in r]
  eval_cols = {k: [r.get(k) for r in evals] for k in EVAL_KEYS + tuple(extra)}
  per_sync = events_per_sync(workdir)
  eval_cols["syncs"] = [None if n is None else n / per_sync for n in eval_cols["syncs"]]
  adaptive = summary["algorithm"] == "autoloco"
  round_cols = {k: [r.get(k) for r in rows] for k in ROUND_KEYS} if adaptive else {}
  return dict(
      seed=seed,
      workdir=workdir,
      summary={
          **{k: summary.get(k) for k in SUMMARY_KEYS + tuple(extra)},
          "sync_events": summary.get("syncs"),
          "final_eval_bpb_worker": worker_bpb(summary),
          "syncs": None if summary.get("syncs") is None else summary["syncs"] / per_sync,
      },
      eval=eval_cols,
      rounds=round_cols,
  )


def sim_key(run: dict, network: str) -> str:
  """The column holding ``run``'s simulated time on ``network``."""
  return "sim_time" if run["summary"]["network"] == network else f"sim_time_{network}"
