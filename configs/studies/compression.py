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

import json
import os

from configs.studies import base, evidence

PHASES = ("tune", "report")
SPARSE_GRID = tuple((a, e) for a in (0.7, 1.0) for e in (0.9, 0.95))
MIXES = (0.5, 0.75)
TOLERANCE = evidence.TOLERANCE
#: The report's fresh seeds (the first evidence protocol's five).
REPORT_SEEDS = (100, 101, 102, 103, 104)


def parse(arg: str) -> dict:
  out = dict(phase="report", quick=False)
  for token in [t.strip() for t in (arg or "").split(",") if t.strip()]:
    if token in PHASES:
      out["phase"] = token
    elif token in ("quick", "full"):
      out["quick"] = token == "quick"
    else:
      raise ValueError(
          f"compression study: unknown token {token!r} in {arg!r}; expected a phase "
          f"{PHASES} or 'quick'"
      )
  return out


def report_dir(phase: str, quick: bool) -> str:
  """Beside the evidence study's folder: ``docs/studies/compression/<phase>`` (quick:
  ``compression/<phase>`` beside ``evidence.QUICK_DIR``)."""
  root = os.path.dirname(evidence.QUICK_DIR if quick else evidence.DOCS_DIR)
  return os.path.join(root, "compression", phase)


def _tag(x: float) -> str:
  return f"{x:g}".replace(".", "p")


def reference_pair(quick: bool) -> tuple[float, float]:
  """DiLoCo's pair tuned at H_ref by the evidence study (base regime, Shakespeare)."""
  opts = dict(regime="base", corpus="shakespeare", quick=quick)
  return evidence.tuned_pairs(opts)[evidence.h_ref(quick)]


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


def _best(summary: dict, prefix: str) -> str:
  return min(
      (s["final_eval_bpb"][0], label)
      for label, s in summary["stats"].items()
      if label.startswith(prefix)
  )[1]


def get_config(arg: str = "report"):
  opts = parse(arg)
  quick = opts["quick"]
  s = base.new_study(
      f"compression_{opts['phase']}",
      f"Compressed and streaming syncs ({opts['phase']})",
      quick,
  )
  s.report_dir = report_dir(opts["phase"], quick)
  s.tolerance = TOLERANCE
  pair = reference_pair(quick)

  if opts["phase"] == "tune":
    s.seeds = (0,) if quick else evidence.TUNING_SEEDS
    for a, e in SPARSE_GRID[-1:] if quick else SPARSE_GRID:
      base.add_run(s, f"sparseloco_a{_tag(a)}_ef{_tag(e)}", sparseloco(quick, a, e))
    for mix in MIXES[:1] if quick else MIXES:
      base.add_run(s, f"stream_tau4_mix{_tag(mix)}", stream(quick, pair, 4, mix))
    return s

  path = os.path.join(report_dir("tune", quick), "summary.json")
  if not os.path.exists(path):
    raise ValueError(
        f"the compression study's tune phase has no report at {path}; run it first: "
        "python -m experiments.sweep --study configs/studies/compression.py:tune"
        + (",quick" if quick else "")
    )
  with open(path) as f:
    tune = json.load(f)
  sparse = _best(tune, "sparseloco_")
  a_tag, e_tag = sparse[len("sparseloco_a") :].split("_ef")
  alpha, ef_beta = (float(t.replace("p", ".")) for t in (a_tag, e_tag))
  mix = float(_best(tune, "stream_tau4_mix")[len("stream_tau4_mix") :].replace("p", "."))

  s.seeds = (100,) if quick else REPORT_SEEDS
  base.add_run(s, "ddp", base.run_config("ddp", quick, model__num_layers=NUM_LAYERS))
  base.add_run(s, "diloco", diloco(quick, pair))
  for tau in (0, 1, 4):
    base.add_run(s, f"stream_tau{tau}", stream(quick, pair, tau, mix))
  base.add_run(s, "stream_fp4", stream(quick, pair, 4, mix, codec="fp4"))
  base.add_run(s, "sparseloco", sparseloco(quick, alpha, ef_beta))
  ev = dict(regime="base", corpus="shakespeare", quick=quick)
  design, _ = evidence.chosen_design(ev)
  auto = evidence.autoloco_config(ev, pair, **evidence.DESIGNS.get(design, {}))
  auto.model.num_layers = NUM_LAYERS
  base.common.set_field(auto, "stream.fragments", 4)
  base.common.set_field(auto, "stream.tau", min(4, evidence.h_ref(quick) // 2 // 4 - 1))
  base.common.set_field(auto, "stream.mix", mix)
  base.common.set_field(auto, "compress.codec", "fp4")
  base.add_run(s, "autoloco_stream_fp4", auto)
  s.comparisons = tuple(
      (label, "diloco") for label in s.labels if label not in ("diloco",)
  )
  return s
