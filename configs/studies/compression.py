"""Compressed, streaming and overlapped syncs: loss against bytes and peak bandwidth.

Two phases, tuning then report, like the evidence study (configs/studies/evidence.py,
whose tuned DiLoCo pair at H_ref every row here starts from):

  python -m experiments.sweep --study configs/studies/compression.py:tune
  python -m experiments.sweep --study configs/studies/compression.py:report
  (add ``,quick`` for the tiny pipeline check; two copies of a command share the work)

Rows (``study`` size with 4 blocks instead of 2, so each of P = 4 fragments holds
one; K = 4, H_ref = 20, 600 inner steps, Shakespeare; every run is timed on the
homogeneous and the hetero network):

* ``ddp``; ``diloco`` (the tuned pair at H_ref);
* ``stream_tau0`` / ``stream_tau1`` / ``stream_tau4``: streaming DiLoCo, P = 4 strided
  fragments, exchange in flight for tau inner steps (tau < H/P = 5, so the issue's
  tau = 5 becomes 4 here), mixing 0.5 local + 0.5 global on arrival;
* ``stream_fp4``: ``stream_tau4`` sending float4 e2m1 with a scale per 128 values;
* ``sparseloco``: chunk top-k (1/64 of each 4096 values), 2-bit values, error
  feedback, outer SGD; its outer lr and error-feedback decay are tuned in ``tune``;
* ``autoloco_stream_fp4``: the evidence study's chosen AutoLoCo driving the
  streaming schedule, with ``stream_fp4``'s exchange.

Tuning (seeds 0-2): SparseLoCo's ``alpha in {0.7, 1.0} x ef_beta in {0.9, 0.95}``
and streaming's mixing ``lambda in {0.5, 0.75}`` (at tau = 4). Report: seeds
100-104, each row against ``diloco`` with the paired 95% interval of the loss
difference; targets: at least 100x fewer bytes than DiLoCo's float32 syncs, at
least 4x lower peak bandwidth, equal quality within +-0.01 bits/byte.
"""

from __future__ import annotations

import os

from configs.studies import base, evidence

PHASES = ("tune", "report")
SPARSE_GRID = tuple((a, e) for a in (0.7, 1.0) for e in (0.9, 0.95))
MIXES = (0.5, 0.75)
TOLERANCE = evidence.TOLERANCE
#: The report's fresh seeds (the first evidence protocol's five).
REPORT_SEEDS = (100, 101, 102, 103, 104)


#: The study engine's names (experiments/engine.py). The reports go beside the
#: evidence study's folder: ``docs/studies/compression/<phase>``.
NAME = "compression_{phase}"
TITLE = "Compressed and streaming syncs ({phase})"
DOCS_DIR = os.path.join(os.path.dirname(evidence.DOCS_DIR), "compression")
QUICK_DIR = os.path.join(os.path.dirname(evidence.QUICK_DIR), "compression")


def cell_dir(cell: dict) -> str:
  return ""


def _evidence(cell: dict):
  """The evidence cell every row starts from: base/Shakespeare's report."""
  return cell.of(evidence, phase="report", regime="base", corpus="shakespeare")


def _tag(x: float) -> str:
  return f"{x:g}".replace(".", "p")


def reference_pair(cell: dict) -> tuple[float, float]:
  """DiLoCo's pair tuned at H_ref by the evidence study (base regime, Shakespeare)."""
  return evidence.tuned_pairs(_evidence(cell))[evidence.h_ref(cell["quick"])]


#: Blocks of the model: the ``study`` size has 2, which would leave two of P = 4
#: block-strided fragments empty; every row here uses 4 (one block per fragment).
NUM_LAYERS = 4


def diloco(quick: bool, pair, **overrides):
  c = base.run_config("diloco", quick, model__num_layers=NUM_LAYERS, **overrides)
  c.diloco.alpha, c.diloco.beta = pair
  return c


def stream(quick: bool, pair, tau: int, mix: float = 0.5, codec: str = "identity"):
  h = evidence.h_ref(quick)
  return diloco(
      quick,
      pair,
      stream__fragments=4,
      stream__tau=min(tau, h // 4 - 1),
      stream__mix=mix,
      compress__codec=codec,
  )


def sparseloco(quick: bool, alpha: float, ef_beta: float):
  return diloco(
      quick,
      (alpha, 0.0),
      compress__codec="topk",
      compress__chunk_size=4096,
      compress__density=1 / 64,
      compress__value_bits=2,
      compress__ef_beta=ef_beta,
  )


def _best(summary: dict, labels: dict) -> object:
  """Of ``labels`` (label -> its grid point), the point whose label has the
  lowest mean final eval in ``summary``."""
  stats = summary["stats"]
  return min((stats[l]["final_eval_bpb"][0], l, p) for l, p in labels.items() if l in stats)[2]


def sparse_label(alpha: float, ef_beta: float) -> str:
  return f"sparseloco_a{_tag(alpha)}_ef{_tag(ef_beta)}"


def mix_label(mix: float) -> str:
  return f"stream_tau4_mix{_tag(mix)}"


def _tune_runs(s, cell: dict) -> None:
  quick = cell["quick"]
  pair = reference_pair(cell)
  s.seeds = (0,) if quick else evidence.TUNING_SEEDS
  for a, e in SPARSE_GRID[-1:] if quick else SPARSE_GRID:
    base.add_run(s, sparse_label(a, e), sparseloco(quick, a, e))
  for mix in MIXES[:1] if quick else MIXES:
    base.add_run(s, mix_label(mix), stream(quick, pair, 4, mix))


def _report_runs(s, cell: dict) -> None:
  quick = cell["quick"]
  pair = reference_pair(cell)
  tune = cell.read("tune")
  alpha, ef_beta = _best(tune, {sparse_label(a, e): (a, e) for a, e in SPARSE_GRID})
  mix = _best(tune, {mix_label(m): m for m in MIXES})
  s.seeds = (100,) if quick else REPORT_SEEDS
  base.add_run(s, "ddp", base.run_config("ddp", quick, model__num_layers=NUM_LAYERS))
  base.add_run(s, "diloco", diloco(quick, pair))
  for tau in (0, 1, 4):
    base.add_run(s, f"stream_tau{tau}", stream(quick, pair, tau, mix))
  base.add_run(s, "stream_fp4", stream(quick, pair, 4, mix, codec="fp4"))
  base.add_run(s, "sparseloco", sparseloco(quick, alpha, ef_beta))
  design, _ = evidence.chosen_design(_evidence(cell))
  auto = evidence.autoloco_config(_evidence(cell), pair, **evidence.DESIGNS.get(design, {}))
  auto.model.num_layers = NUM_LAYERS
  base.common.set_field(auto, "stream.fragments", 4)
  base.common.set_field(auto, "stream.tau", min(4, evidence.h_ref(quick) // 2 // 4 - 1))
  base.common.set_field(auto, "stream.mix", mix)
  base.common.set_field(auto, "compress.codec", "fp4")
  base.add_run(s, "autoloco_stream_fp4", auto)
  s.comparisons = tuple((label, "diloco") for label in s.labels if label != "diloco")


PHASE_RUNS = dict(tune=_tune_runs, report=_report_runs)
