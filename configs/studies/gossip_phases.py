"""How a decentralized claim's study is put together: each method's grid on each
graph, tuned on the tuning seeds, reported on fresh ones (issue 40).

A *cell* is a study module (``gossip_g1.py``, ``gossip_g2.py``, ``noloco_n1.py``)
run by the study engine (``experiments/engine.py``: ``NAME``, ``TITLE``,
``PHASES``, ``TOKENS``, ``DEFAULTS``, ``DOCS_DIR``, ``QUICK_DIR``,
``PHASE_RUNS``, ``configure``); this file holds the phases they share
(:func:`phase_runs`, :func:`configure`). Reading the settings from the module
when a phase is built (not copying them) keeps one place for each. A phase's
``opts`` is the engine's cell: ``opts.read(phase)`` is an earlier report.

The cell's own constants: ``METHODS`` (its candidate first), ``TOPOLOGIES`` and
``QUICK_TOPOLOGIES``, ``GRIDS`` (method -> a product ``{field: values}`` or a
tuple of products whose union is the grid; ``alpha`` and ``weight`` in
multiples of ``1/(d+1)``; quick mode uses this file's ``QUICK_GRIDS``),
``WIDENINGS`` (optional: ``{word: {method: product}}``, products added to the
grid when the argument holds ``word``, a widening one corpus's coarse pass asked
for that the other's finished phases must not see), ``TOLERANCE``, ``PRUNE_GAP``
(optional). Its functions:

* ``run_config(method, opts, **extra)``: a run of the regime (``extra``: the
  grid point's config overrides, ``a__b`` for ``a.b``);
* ``add_references(s, opts)``: the runs every phase shows beside the methods
  (``ddp``; a DiLoCo run), added before them; returns the label every method's
  row is read against in the tables (``""``: none);
* ``report_runs(s, opts)``: the report phase (:func:`tuned`,
  :func:`tuning_spread` and :func:`add` do the shared part).

Phases (every choice on the tuning seeds; the report on fresh seeds):

* ``coarse``: each method's grid on every topology, the first tuning seed;
* ``tune``: the ``TOP`` best of each (method, topology) on every tuning seed,
  less those more than the cell's ``PRUNE_GAP`` (if it sets one) above the
  best (:func:`to_tune`); a method's tuned point has the lowest mean final
  bits/byte;
* ``report``: the cell's own (``report_runs``).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from configs.studies import base

PHASES = ("coarse", "tune", "report")
METHODS = ("gasloc", "gasloc_g0", "gossip", "noloco")
#: The algorithm each method runs (GASLoC with ``gamma = 0`` is GASLoC).
ALGORITHMS = dict(gasloc_g0="gasloc", gossip="gossip_adamw")
#: Every cell's quick grids (a pipeline check: one point per method).
QUICK_GRIDS = {
    "gasloc": dict(eta=(0.7,), gamma=(0.5,), alpha=(1.0,)),
    "gasloc_g0": dict(eta=(0.7,), alpha=(1.0,)),
    "gossip": dict(weight=(1.0,)),
    "noloco": dict(alpha=(0.7,), beta=(0.5,)),
    "diloco": dict(alpha=(0.7,), beta=(0.9,)),
}
#: Every cell's tuning seeds and how many points of each coarse pass go on to them.
TUNING_SEEDS = (0, 1, 2)
TOP = 2


def methods(cell: Any) -> tuple[str, ...]:
  """The cell's methods, its candidate first (default :data:`METHODS`)."""
  return tuple(getattr(cell, "METHODS", METHODS))


def words(cell: Any, opts: dict) -> list[str]:
  """The cell's words ``opts`` holds (its corpus, its worker count)."""
  return [w for w, (o, v) in cell.TOKENS.items() if opts.get(o) == v]


def points(cell: Any, method: str, quick: bool, cell_words=()) -> list[dict]:
  """The method's grid points, each ``{field: value}``: the union of its
  products, in order, each point once; then the cell's ``WIDENINGS`` of the
  argument's words (``cell_words``), full mode only."""
  grid = (QUICK_GRIDS if quick else cell.GRIDS)[method]
  products = list(grid if isinstance(grid, tuple) else (grid,))
  widenings = {} if quick else getattr(cell, "WIDENINGS", {})
  products += [widenings[w][method] for w in cell_words if method in widenings.get(w, {})]
  out = []
  for product in products:
    block = [{}]
    for name, values in product.items():
      block = [dict(p, **{name: v}) for p in block for v in values]
    out += [p for p in block if p not in out]
  return out


def label(method: str, topology: str, point: dict) -> str:
  """``gasloc_ring_eta0p7_gamma0p5_alpha1p0``: method, graph, grid point (a
  ``p`` for the decimal point: labels are config field names); DiLoCo, which
  all-reduces, has no graph in its label."""
  values = [f"{k}{v}".replace(".", "p") for k, v in point.items()]
  graph = [] if method == "diloco" else [topology]
  return "_".join([method] + graph + values)


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
  elif method == "diloco":  # the all-reduce: no graph
    out = dict(diloco__alpha=point["alpha"], diloco__beta=point["beta"])
  else:
    out.update(noloco__alpha=point["alpha"], noloco__beta=point["beta"])
  return out


def degree(cell: Any, opts: dict, topology: str) -> int:
  """The graph's degree at the cell's worker count (``topology.from_config``)."""
  from autoloco_jax.algorithms.gossip import topology as topology_lib

  c = cell.run_config("gasloc", opts, gossip__topology=topology)
  return topology_lib.from_config(c).degree


def add(
    cell: Any, s, opts: dict, method: str, topo: str, point: dict, suffix: str = "",
    **more: Any,
) -> str:
  """Adds the run of a grid point to ``s``, read against the cell's reference
  (``opts["reference"]``); returns its label. ``more``: config overrides
  beyond the point's (``a__b`` for ``a.b``), named in the label by ``suffix``."""
  name = label(method, topo, point) + suffix
  extra = dict(overrides(method, topo, point, degree(cell, opts, topo)), **more)
  base.add_run(s, name, cell.run_config(method, opts, **extra), opts["reference"])
  return name


def topologies(cell: Any, quick: bool) -> tuple[str, ...]:
  return cell.QUICK_TOPOLOGIES if quick else cell.TOPOLOGIES


def ranked(cell: Any, summary: dict, method: str, topo: str, quick: bool, cell_words=()):
  """``[(mean final bits/byte, grid point)]`` of (method, topology) in an
  earlier phase's summary, lowest first (``base.ranked`` on the grid's labels)."""
  by_label = {label(method, topo, p): p for p in points(cell, method, quick, cell_words)}
  stats = {l: s for l, s in summary["stats"].items() if l in by_label}
  return [(stats[l]["final_eval_bpb"][0], by_label[l]) for l in base.ranked(stats, "")]


def best(cell: Any, summary: dict, method: str, topo: str, quick: bool, top: int, cell_words=()):
  """The ``top`` grid points of (method, topology) with the lowest mean final
  bits/byte in an earlier phase's summary."""
  return [p for _, p in ranked(cell, summary, method, topo, quick, cell_words)[:top]]


def to_tune(cell: Any, coarse: dict, method: str, topo: str, quick: bool, cell_words=()) -> list[dict]:
  """The coarse pass's points that go on to the tuning seeds: its ``TOP`` best,
  less any that is more than the cell's ``PRUNE_GAP`` bits/byte above the best
  (a clear optimum: no gap, ``None``, keeps all ``TOP``)."""
  gap = getattr(cell, "PRUNE_GAP", None)
  top = ranked(cell, coarse, method, topo, quick, cell_words)[:TOP]
  return [p for score, p in top if gap is None or score - top[0][0] <= gap]


def coarse_runs(cell: Any, s, opts: dict) -> None:
  s.seeds = TUNING_SEEDS[:1]
  for topo in topologies(cell, opts["quick"]):
    for method in methods(cell):
      for point in points(cell, method, opts["quick"], words(cell, opts)):
        add(cell, s, opts, method, topo, point)


def tune_runs(cell: Any, s, opts: dict) -> None:
  s.seeds = TUNING_SEEDS[:1] if opts["quick"] else TUNING_SEEDS
  coarse = opts.read("coarse")
  for topo in topologies(cell, opts["quick"]):
    for method in methods(cell):
      for point in to_tune(cell, coarse, method, topo, opts["quick"], words(cell, opts)):
        add(cell, s, opts, method, topo, point)


def tuned(cell: Any, opts: dict) -> dict[tuple[str, str], dict]:
  """(method, topology) -> its tuned grid point (the tune phase's lowest mean)."""
  summary = opts.read("tune")
  return {
      (method, topo): best(cell, summary, method, topo, opts["quick"], 1, words(cell, opts))[0]
      for topo in topologies(cell, opts["quick"])
      for method in methods(cell)
  }


def tuning_spread(cell: Any, opts: dict, points_: dict) -> dict[str, float]:
  """The tuning seeds' sd of each paired difference the report decides: the
  candidate (the first method) against each baseline, per topology (0 with one
  seed)."""
  summary = opts.read("tune")
  first, *others = methods(cell)
  sds = {}
  for topo in topologies(cell, opts["quick"]):
    g = summary["stats"][label(first, topo, points_[(first, topo)])]
    for method in others:
      b = summary["stats"][label(method, topo, points_[(method, topo)])]
      diffs = np.subtract(g["loss_by_seed"], b["loss_by_seed"])
      sds[f"{topo}: {first} - {method}"] = (
          float(np.std(diffs, ddof=1)) if len(diffs) > 1 else 0.0
      )
  return sds


def report_seed_count(cell: Any, opts: dict, points_: dict) -> dict:
  """Fresh seeds for the report: the tuning seeds' largest spread of a paired
  difference (:func:`tuning_spread`), and the count whose 95% t-interval
  resolves the cell's ``TOLERANCE`` at that spread, within
  ``[MIN_REPORT_SEEDS, MAX_REPORT_SEEDS]`` (quick: 2; ``opts.seed_plan``)."""
  return opts.seed_plan(
      tuning_spread(cell, opts, points_), cell.TOLERANCE, cell.MIN_REPORT_SEEDS,
      cell.MAX_REPORT_SEEDS,
  )


def configure(cell: Any, s, opts: dict) -> None:
  """What every phase of a decentralized cell shares: one network, and the
  cell's references (``add_references``), added before the methods."""
  s.networks = ("homogeneous",)
  opts["reference"] = cell.add_references(s, opts)


def phase_runs(cell: Any, **more: Any) -> dict:
  """``PHASE_RUNS`` of a cell: the shared coarse and tune phases, the cell's
  ``report_runs`` and its own phases ``more``."""
  return dict(
      coarse=functools.partial(coarse_runs, cell),
      tune=functools.partial(tune_runs, cell),
      report=cell.report_runs,
      **more,
  )
