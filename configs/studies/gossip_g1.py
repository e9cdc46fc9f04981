"""GASLoC's claim G1 (issue 40): with one local step per communication, GASLoC
against the decentralized baselines, per topology.

Run the phases in order (2 CPU cores; start each command twice, the runs are
locked, so two single-core runs share the work):
  python -m experiments.sweep --study configs/studies/gossip_g1.py:coarse
  python -m experiments.sweep --study configs/studies/gossip_g1.py:tune
  python -m experiments.sweep --study configs/studies/gossip_g1.py:report
Quick pipeline check (a minute each): ``:coarse,quick``, ``:tune,quick``,
``:report,quick``.

Regime: K = 8 workers, ``H = 1`` (one AdamW step, then one gossip exchange),
the ``study`` model and its 600 inner steps, a global batch of 32 sequences (4
per worker), iid shards, the whole validation split at the end. DDP at the same
global batch is the line every method is read against. The methods, each on the
ring, exponential, random-matching and complete graphs (``TOPOLOGIES``):

* ``gasloc``: GASLoC, its ``η``, ``γ`` and ``α`` tuned (``α`` as a multiple of
  ``1/(d+1)``, the uniform neighbour average);
* ``gasloc_g0``: GASLoC without its acceleration (``γ = 0``), ``η``, ``α`` tuned;
* ``gossip``: gossip AdamW (D-PSGD form), its weight ``w`` tuned (a multiple of
  ``1/(d+1)``);
* ``noloco``: NoLoCo on the same graph, its outer ``(α, β)`` tuned.

Phases (every choice on the tuning seeds 0-2; the report on fresh seeds from 100):

* ``coarse``: each method's grid (``GRIDS``) on every topology, tuning seed 0;
* ``tune``: the ``TOP`` best of each (method, topology) on the three tuning seeds;
  a method's tuned point has the lowest mean final bits/byte;
* ``report``: every tuned point and DDP on fresh seeds, as many as the tuning
  seeds' spread of the paired differences needs for a 95% t-interval of
  half-width ``TOLERANCE`` (``seed_count.seeds_needed``), within
  ``[MIN_REPORT_SEEDS, MAX_REPORT_SEEDS]``; each topology's comparisons are GASLoC
  against each baseline and every method against DDP, paired by seed.

"Outperforms" (the claim) reads the interval: GASLoC lower with the whole
interval below zero; "equal" only when the interval lies inside ``±TOLERANCE``.
The reports: ``docs/studies/gossip_g1/<phase>``; the verdict: docs/results.md §3.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from configs.studies import base, seed_count

PHASES = ("coarse", "tune", "report")
TOPOLOGIES = ("ring", "exponential", "matching", "complete")
QUICK_TOPOLOGIES = ("ring",)
METHODS = ("gasloc", "gasloc_g0", "gossip", "noloco")

#: Each method's grid: config field (``__`` for ``.``) -> values, or a tuple of
#: such products whose union is the grid. ``alpha`` and ``weight`` are multiples
#: of ``1/(d+1)`` (set per topology by :func:`overrides`). The second product of
#: each is the widening the coarse pass asked for: on the ring and exponential
#: graphs (tuning seed 0) the best point sat on an edge of the first product
#: (GASLoC at the lower edge of ``gamma``, 0.5 against 0.9 at 3.9-4.2 bits/byte;
#: ``gamma = 0`` best at ``eta = 1.5, alpha = 0.5``; the gossip weight at 0.5;
#: NoLoCo at ``beta = 0.3``), so each grid goes one step further along those
#: axes, on every topology, before the tune phase.
GRIDS = {
    "gasloc": (
        dict(eta=(0.7, 1.0, 1.5), gamma=(0.5, 0.9), alpha=(1.0, 0.5)),
        dict(eta=(1.5, 2.0), gamma=(0.2, 0.7), alpha=(0.5,)),
        dict(eta=(2.0,), gamma=(0.5,), alpha=(0.5,)),
    ),
    "gasloc_g0": (
        dict(eta=(0.7, 1.0, 1.5), alpha=(1.0, 0.5)),
        dict(eta=(2.0, 3.0), alpha=(0.5,)),
        dict(eta=(2.0,), alpha=(0.25,)),
    ),
    "gossip": (dict(weight=(1.0, 0.5)), dict(weight=(0.25,))),
    "noloco": (
        dict(alpha=(0.5, 0.7, 1.0), beta=(0.3, 0.5, 0.7)),
        dict(alpha=(1.0, 1.5), beta=(0.1,)),
        dict(alpha=(1.5,), beta=(0.3,)),
    ),
}
QUICK_GRIDS = {
    "gasloc": dict(eta=(0.7,), gamma=(0.5,), alpha=(1.0,)),
    "gasloc_g0": dict(eta=(0.7,), alpha=(1.0,)),
    "gossip": dict(weight=(1.0,)),
    "noloco": dict(alpha=(0.7,), beta=(0.5,)),
}
TUNING_SEEDS = (0, 1, 2)
TOP = 2
#: "Equal" in bits/byte, stated before the report (the evidence study's 0.01).
TOLERANCE = 0.01
MIN_REPORT_SEEDS = 6
MAX_REPORT_SEEDS = 12
K, H = 8, 1
QUICK_K = 4
QUICK_DIR = "runs/studies/gossip-g1-quick"
DOCS_DIR = "docs/studies/gossip_g1"


def parse(arg: str) -> dict:
  """``"phase[,quick]"`` (default ``report``)."""
  out = dict(phase="report", quick=False)
  for token in [t.strip() for t in (arg or "").split(",") if t.strip()]:
    if token in ("quick", "full"):
      out["quick"] = token == "quick"
    elif token in PHASES:
      out["phase"] = token
    else:
      raise ValueError(
          f"gossip_g1 study: unknown token {token!r} in {arg!r}; expected a phase "
          f"{PHASES} or 'quick'"
      )
  return out


def report_dir(phase: str, quick: bool) -> str:
  return os.path.join(QUICK_DIR if quick else DOCS_DIR, phase)


def read_summary(phase: str, quick: bool) -> dict:
  """An earlier phase's ``summary.json``, or a clear error naming its command."""
  path = os.path.join(report_dir(phase, quick), "summary.json")
  if not os.path.exists(path):
    arg = phase + (",quick" if quick else "")
    raise ValueError(
        f"the gossip_g1 study's {phase!r} phase has no report at {path}; run it "
        f"first: python -m experiments.sweep --study configs/studies/gossip_g1.py:{arg}"
    )
  with open(path) as f:
    return json.load(f)


def points(method: str, quick: bool) -> list[dict]:
  """The method's grid points, each ``{field: value}``: the union of its
  products, in order, each point once."""
  grid = (QUICK_GRIDS if quick else GRIDS)[method]
  out = []
  for product in grid if isinstance(grid, tuple) else (grid,):
    block = [{}]
    for name, values in product.items():
      block = [dict(p, **{name: v}) for p in block for v in values]
    out += [p for p in block if p not in out]
  return out


def label(method: str, topology: str, point: dict) -> str:
  """``gasloc_ring_eta0p7_gamma0p5_alpha1p0``: method, graph, grid point (a
  ``p`` for the decimal point: labels are config field names)."""
  values = [f"{k}{v}".replace(".", "p") for k, v in point.items()]
  return "_".join([method, topology] + values)


def overrides(method: str, topology: str, point: dict, degree: int) -> dict:
  """The run's config overrides for a grid point on a graph of ``degree``."""
  uniform = 1.0 / (degree + 1)
  out = dict(gossip__topology=topology)
  if method.startswith("gasloc"):
    out.update(
        gasloc__eta=point["eta"],
        gasloc__gamma=point.get("gamma", 0.0),
        gasloc__alpha=point["alpha"] * uniform,
    )
  elif method == "gossip":
    out.update(gossip_adamw__weight=point["weight"] * uniform)
  else:
    out.update(noloco__alpha=point["alpha"], noloco__beta=point["beta"])
  return out


def run_config(method: str, quick: bool, **extra: Any):
  """A run of the regime: K workers, one step per round, the global batch of
  the study size split over them, a checkpoint every 100 rounds. Quick mode
  (a pipeline check): 4 workers and 20 steps."""
  algorithm = dict(gasloc_g0="gasloc", gossip="gossip_adamw").get(method, method)
  k = QUICK_K if quick else K
  size = dict(total_steps=20, eval__every_steps=10) if quick else {}
  return base.run_config(
      algorithm,
      quick,
      num_workers=k,
      data__batch_size=(4 if quick else 8) * 4 // k,
      interval__h=H,
      checkpoint__every_rounds=100,
      **size,
      **extra,
  )


def degree(topology: str, quick: bool) -> int:
  """The graph's degree at K workers (``topology.from_config``)."""
  from autoloco_jax.algorithms.gossip import topology as topology_lib

  c = run_config("gasloc", quick, gossip__topology=topology)
  return topology_lib.from_config(c).degree


def _add(s, method: str, topo: str, point: dict, quick: bool) -> str:
  name = label(method, topo, point)
  extra = overrides(method, topo, point, degree(topo, quick))
  base.add_run(s, name, run_config(method, quick, **extra), reference="ddp")
  return name


def _topologies(quick: bool) -> tuple[str, ...]:
  return QUICK_TOPOLOGIES if quick else TOPOLOGIES


def _coarse_runs(s, opts: dict) -> None:
  for topo in _topologies(opts["quick"]):
    for method in METHODS:
      for point in points(method, opts["quick"]):
        _add(s, method, topo, point, opts["quick"])


def _best(summary: dict, method: str, topo: str, quick: bool, top: int) -> list[dict]:
  """The ``top`` grid points of (method, topology) with the lowest mean final
  bits/byte in an earlier phase's summary."""
  scored = sorted(
      (summary["stats"][label(method, topo, p)]["final_eval_bpb"][0], i)
      for i, p in enumerate(points(method, quick))
      if label(method, topo, p) in summary["stats"]
  )
  grid = points(method, quick)
  return [grid[i] for _, i in scored[:top]]


def _tune_runs(s, opts: dict) -> None:
  coarse = read_summary("coarse", opts["quick"])
  for topo in _topologies(opts["quick"]):
    for method in METHODS:
      for point in _best(coarse, method, topo, opts["quick"], TOP):
        _add(s, method, topo, point, opts["quick"])


def tuned(opts: dict) -> dict[tuple[str, str], dict]:
  """(method, topology) -> its tuned grid point (the tune phase's lowest mean)."""
  summary = read_summary("tune", opts["quick"])
  return {
      (method, topo): _best(summary, method, topo, opts["quick"], 1)[0]
      for topo in _topologies(opts["quick"])
      for method in METHODS
  }


def report_seed_count(opts: dict, points_: dict) -> dict:
  """Fresh seeds for the report: the tuning seeds' largest spread of a paired
  difference (GASLoC against each baseline, per topology), and the count whose
  95% t-interval resolves ``TOLERANCE`` at that spread."""
  summary = read_summary("tune", opts["quick"])
  sds = {}
  for topo in _topologies(opts["quick"]):
    g = summary["stats"][label("gasloc", topo, points_[("gasloc", topo)])]
    for method in METHODS[1:]:
      b = summary["stats"][label(method, topo, points_[(method, topo)])]
      diffs = np.subtract(g["loss_by_seed"], b["loss_by_seed"])
      sds[f"{topo}: gasloc - {method}"] = (
          float(np.std(diffs, ddof=1)) if len(diffs) > 1 else 0.0
      )
  sd = max(sds.values())
  sds = tuple(sds.items())  # pairs: a study field cannot hold a nested dict
  if opts["quick"]:
    return dict(seeds=2, sd=sd, sds=sds, tolerance=TOLERANCE, needed=2, half_width=None)
  needed = seed_count.seeds_needed(sd, TOLERANCE, minimum=MIN_REPORT_SEEDS)
  seeds = min(needed, MAX_REPORT_SEEDS)
  return dict(
      seeds=seeds,
      sd=sd,
      sds=sds,
      tolerance=TOLERANCE,
      needed=needed,
      half_width=seed_count.resolvable(sd, seeds),
  )


def _report_runs(s, opts: dict) -> None:
  points_ = tuned(opts)
  s.power = report_seed_count(opts, points_)
  s.seeds = tuple(100 + i for i in range(s.power["seeds"]))
  comparisons = []
  for topo in _topologies(opts["quick"]):
    names = {m: _add(s, m, topo, points_[(m, topo)], opts["quick"]) for m in METHODS}
    comparisons += [(names["gasloc"], names[m]) for m in METHODS[1:]]
    comparisons += [(names[m], "ddp") for m in METHODS]
  s.comparisons = tuple(comparisons)


_PHASE_RUNS = dict(coarse=_coarse_runs, tune=_tune_runs, report=_report_runs)


def get_config(arg: str = "report"):
  """The study of one phase (``"phase[,quick]"``)."""
  opts = parse(arg)
  phase, quick = opts["phase"], opts["quick"]
  s = base.new_study(
      f"gossip_g1_{phase}",
      f"GASLoC claim G1 ({phase}): one step per communication, K = {K}, by topology",
      quick,
  )
  if phase != "report":
    s.seeds = (0,) if quick or phase == "coarse" else TUNING_SEEDS
  s.report_dir = report_dir(phase, quick)
  s.tolerance = TOLERANCE
  s.networks = ("homogeneous",)
  base.add_run(s, "ddp", run_config("ddp", quick))
  _PHASE_RUNS[phase](s, opts)
  return s
