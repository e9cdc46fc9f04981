"""Compressed and streaming syncs where their papers run them (issue 42): many
rounds, against the tuned DiLoCo frontier of that regime.

Run the phases in order, each by two sweeps pinned one per core (the runs are
locked, so the two share the work; resumable):
  python -m experiments.sweep --study configs/studies/compression_many.py --phases coarse,tune,report --copies 2
which runs, each twice:
  python -m experiments.sweep --study configs/studies/compression_many.py:coarse
  python -m experiments.sweep --study configs/studies/compression_many.py:tune
  python -m experiments.sweep --study configs/studies/compression_many.py:report
Restore the evidence cell's runs first (``experiments.archive`` with ``many
python --restore``): the frontier and DiLoCo's tuning runs are its own (same
configs, same hashes). Quick pipeline check: ``:coarse,quick``, ``:tune,quick``,
``:report,quick`` (on the evidence study's quick base/Shakespeare cell, which
must have run first).

Regime: the evidence study's many/Python cell (the ``study`` model, K = 4,
3,000 inner steps, ``H_ref = 20``: 150 syncs at ``H_ref``), every row at
``H_ref`` with DiLoCo's pair tuned there, against the tuned frontier over ``H``
10-60 (``docs/studies/evidence_v2/many_python``). The first compression study
(``compression.py``) ran 30 syncs, where a 1.6% top-k sends each coordinate only
a few times in the whole run.

Rows (``ROWS``):

* ``stream_tau0``, ``stream_tau1``: streaming DiLoCo with ``P = 4`` fragments
  (the paper's), the exchange in flight ``τ = 0`` or 1 inner steps. The
  ``study`` model has 2 blocks, so its fragments are sub-layers
  (``stream.unit = "sublayer"``: each block's attention and its MLP, strided):
  unequal, the largest (block 1's MLP with the final norm) 30.8% of the
  parameters, so the peak bandwidth can fall at most 3.25×, short of the 4×
  target by construction (``benchmarks/stream_peak.py`` reads it by depth). ``τ = 1`` is 5% of ``H = 20`` (the paper's 1-5% of
  ``H = 100``; 1% is below one step here); the slot of a fragment is ``H/P = 5``
  steps;
* ``stream_fp4``: ``stream_tau1`` sending float4 (e2m1) with a scale per block;
* ``stream_eager``: ``stream_tau1`` with eager updates (Kale et al. 2025, arXiv
  2502.12996): the worker's own pseudo-gradient stands in until the average arrives;
* ``sparseloco_d1``, ``sparseloco_d3``: SparseLoCo (Sarfi et al. 2025, arXiv
  2508.15706): top-k of each 4,096-value chunk at 1% and 3% density, 2-bit
  values, error feedback, outer SGD with its own lr;
* ``sparseloco_d1_senders``, ``sparseloco_d3_senders``: the same at the paper's
  ``α = 1`` with the averaging of its authors' code (``compress.aggregate =
  "senders"``, each coordinate over the workers that sent it), added after the
  ``aggregate`` ablation below, on the tuning seeds, put it ahead of the tuned
  mean over ``K`` at both densities;
* ``int8``: DiLoCo's all-reduce of int8 values (a scale per 128);
* ``autoloco_stream_fp4``: the evidence study's chosen AutoLoCo design driving
  ``stream_fp4``'s exchange.

Phases (every choice on the tuning seeds 0-2; the report on fresh seeds):

* ``coarse``: each row's grid on tuning seed 0 (``GRIDS``: SparseLoCo's outer lr
  and error-feedback decay at each density, streaming's mixing ``λ``, fp4's block
  size), beside DiLoCo at ``H_ref`` (the evidence study's run);
* ``tune``: the ``TOP`` best of each grid on the tuning seeds; a row's tuned
  point has the lowest mean final bits/byte;
* ``report``: every row with its tuned point, on the evidence report's first
  fresh seeds (paired by seed with its committed frontier runs), as many as the
  tuning seeds' spread of each row's difference from DiLoCo needs to resolve the
  cell's tolerance (``seed_stats.seeds_needed``, within ``[MIN_REPORT_SEEDS,
  MAX_REPORT_SEEDS]``). Each row: its syncs saved at equal loss against the
  frontier, its Δ against DiLoCo at ``H_ref`` (same syncs), bytes per worker and
  peak bandwidth, and the plots of final loss against both with the frontier
  drawn through its tuned points.

An ablation beside the phases (after ``tune``; not part of the report):

* ``aggregate``: each SparseLoCo family on the tuning seeds with the
  averaging of its authors' code (``compress.aggregate = "senders"``: each
  coordinate over the workers that sent it, docs/algorithms.md §6) at the
  paper's ``α = 1``, beside its tuned point with the paper's equation (the mean
  over all ``K``). Run:

    python -m experiments.sweep --study configs/studies/compression_many.py:aggregate

Targets (the issue's): SparseLoCo 100× fewer bytes than DiLoCo's float32 syncs,
streaming 4× lower peak bandwidth, both equal to DiLoCo at the same syncs within
the cell's tolerance. The reports: ``docs/studies/compression_many/<phase>``;
the verdicts: docs/results.md §2.
"""

from __future__ import annotations

import numpy as np

from configs.studies import base, evidence

#: The phases; ``aggregate`` is an ablation beside them, reading ``tune``.
PHASES = ("coarse", "tune", "report", "aggregate")
#: The ``aggregate`` ablation's outer lrs with the senders' mean: the paper's.
AGGREGATE_ALPHAS = (1.0,)
FRAGMENTS = 4
#: What a fragment is made of (``fragments.py``): the model's 2 blocks split
#: into attention and MLP, so that ``P = 4`` fragments are all non-empty.
UNIT = "sublayer"
#: SparseLoCo's outer lr and error-feedback decay. The first grid,
#: ``{0.7, 1.0} × {0.9, 0.95}``, was widened upward twice while the coarse pass
#: ran (``SPARSELOCO_WIDE``). The first runs at 1% density were 0.3 bits/byte
#: behind DiLoCo at step 2,100, with an error-feedback residual 7-10× the
#: round's pseudo-gradient and the larger decay ahead: a step too small, not
#: unstable. Then every doubling of ``α`` (1 → 2 → 4) gained about 0.1 bits/byte
#: at step 1,200, so 8 and 16 were added. Above ``α = 1`` only the decay 0.95 is
#: run (it led 0.9 at both smaller ``α``), and at 3% density ``α = 0.7`` is pruned
#: (0.1 behind ``α = 1`` at 1%).
SPARSELOCO_GRID = {
    "sparseloco_d1": tuple((a, e) for a in (0.7, 1.0) for e in (0.9, 0.95)),
    "sparseloco_d3": ((1.0, 0.9), (1.0, 0.95)),
}
SPARSELOCO_WIDE = tuple((a, 0.95) for a in (2.0, 4.0, 8.0, 16.0))
#: Each grid: row family -> {label suffix: overrides}.
GRIDS = {
    family: {f"a{a}_ef{e}": dict(alpha=a, ef_beta=e) for a, e in first + SPARSELOCO_WIDE}
    for family, first in SPARSELOCO_GRID.items()
} | {
    # The paper's 0.5 and 0.75 first; 0.5 led by 0.029 on the coarse pass, at
    # the grid's lower edge, so 0.25 and 0 (the arriving average replaces the
    # local copy) were added.
    "stream_tau1": {f"mix{m}": dict(mix=m) for m in (0.5, 0.75, 0.25, 0.0)},
    "stream_fp4": {f"block{b}": dict(block=b) for b in (32, 128)},
}
QUICK_GRIDS = {
    "sparseloco_d3": {"a1.0_ef0.95": dict(alpha=1.0, ef_beta=0.95)},
    "stream_tau1": {"mix0.5": dict(mix=0.5)},
}
#: The report's rows with the senders' mean: row -> its family (whose tuned
#: error-feedback decay it takes, with ``α`` the ablation's, the paper's).
SENDERS_ROWS = {"sparseloco_d1_senders": "sparseloco_d1", "sparseloco_d3_senders": "sparseloco_d3"}
#: Top-k density of each SparseLoCo row; a senders row takes its family's.
FAMILY_DENSITY = {"sparseloco_d1": 0.01, "sparseloco_d3": 0.03}
DENSITY = {**FAMILY_DENSITY, **{row: FAMILY_DENSITY[f] for row, f in SENDERS_ROWS.items()}}
ROWS = (
    "stream_tau0",
    "stream_tau1",
    "stream_fp4",
    "stream_eager",
    "sparseloco_d1",
    "sparseloco_d3",
    "int8",
    "autoloco_stream_fp4",
    "sparseloco_d1_senders",
    "sparseloco_d3_senders",
)
#: The rows the quick pipeline check trains (every row's config is checked
#: without training: tests/test_compression_many.py).
QUICK_ROWS = ("stream_tau1", "sparseloco_d3")
#: The defaults of a grid's field where a row takes no tuned point.
DEFAULT_POINT = dict(mix=0.5, block=128, aggregate="mean")
TOP = 2
MIN_REPORT_SEEDS = 6
MAX_REPORT_SEEDS = 20
QUICK_DIR = "runs/studies/compression-many-quick"
DOCS_DIR = "docs/studies/compression_many"


#: The study engine's names (experiments/engine.py): the cell is many/Python,
#: a quick check the evidence study's quick base/Shakespeare cell.
NAME = "compression_many_{phase}"
TITLE = "Compressed and streaming syncs, many rounds ({phase})"
TOLERANCE = evidence.TOLERANCE


def cell_dir(cell: dict) -> str:
  return ""


def _evidence(opts: dict):
  """The evidence cell the rows build on (its report phase's)."""
  quick = opts["quick"]
  regime, corpus = ("base", "shakespeare") if quick else ("many", "python")
  return opts.of(evidence, phase="report", regime=regime, corpus=corpus)


def grids(quick: bool) -> dict:
  return QUICK_GRIDS if quick else GRIDS


def _tag(label: str) -> str:
  return label.replace(".", "p")


def row_config(opts: dict, row: str, point: dict | None = None, cell=None):
  """The run of ``row`` at ``H_ref`` with its grid ``point`` (the row's
  defaults where ``None``), built on the evidence report ``cell`` (default:
  this study's, many/Python; the recipe study moves its best row to
  base/Shakespeare)."""
  cell, quick = cell or _evidence(opts), opts["quick"]
  href = base.h_ref(quick)
  pair = evidence.tuned_pairs(cell)[href]
  p = {**DEFAULT_POINT, **(point or {})}
  stream = dict(stream__fragments=FRAGMENTS, stream__unit=UNIT, stream__mix=p["mix"])
  fp4 = dict(compress__codec="fp4", compress__block_size=p["block"])
  if row.startswith("sparseloco"):
    c = evidence.diloco_config(cell, href, p["alpha"], 0.0)
    overrides = dict(compress__codec="topk", compress__chunk_size=4096,
                     compress__density=DENSITY[row], compress__value_bits=2,
                     compress__ef_beta=p["ef_beta"], compress__aggregate=p["aggregate"])
  elif row == "autoloco_stream_fp4":
    design, _ = evidence.chosen_design(cell)
    c = evidence.autoloco_config(cell, pair, **evidence.DESIGNS[design])
    overrides = dict(stream, stream__tau=1, **fp4)
  else:
    c = evidence.diloco_config(cell, href, *pair)
    overrides = {
        "stream_tau0": dict(stream, stream__tau=0),
        "stream_tau1": dict(stream, stream__tau=1),
        "stream_fp4": dict(stream, stream__tau=1, **fp4),
        "stream_eager": dict(stream, stream__tau=1, stream__eager=True),
        "int8": dict(compress__codec="int8", compress__block_size=128),
    }[row]
  for name, value in overrides.items():
    base.common.set_field(c, name.replace("__", "."), value)
  return c


def _ranked(stats: dict, family: str) -> list[str]:
  return base.ranked(stats, family + "_")


def _add_reference(s, opts: dict) -> str:
  """DiLoCo at ``H_ref`` with its tuned pair (the evidence study's run)."""
  href = base.h_ref(opts["quick"])
  pair = evidence.tuned_pairs(_evidence(opts))[href]
  label = f"diloco_h{href}"
  base.add_run(s, label, evidence.diloco_config(_evidence(opts), href, *pair))
  return label


def _grid_runs(s, opts: dict, keep=None) -> None:
  ref = _add_reference(s, opts)
  for family, points in grids(opts["quick"]).items():
    for suffix, point in points.items():
      label = _tag(f"{family}_{suffix}")
      if keep is None or label in keep:
        base.add_run(s, label, row_config(opts, family, point), ref)


def _coarse_runs(s, opts: dict) -> None:
  s.seeds = evidence.TUNING_SEEDS[:1]
  _grid_runs(s, opts)


def _tune_runs(s, opts: dict) -> None:
  s.seeds = (0,) if opts["quick"] else evidence.TUNING_SEEDS
  stats = opts.read("coarse")["stats"]
  keep = {l for family in grids(opts["quick"]) for l in _ranked(stats, family)[:TOP]}
  _grid_runs(s, opts, keep)


def tuned_points(opts: dict) -> dict[str, dict]:
  """Row family -> its point with the lowest mean final eval in the tune phase."""
  stats = opts.read("tune")["stats"]
  out = {}
  for family, points in grids(opts["quick"]).items():
    best = _ranked(stats, family)[0]
    out[family] = next(p for sfx, p in points.items() if _tag(f"{family}_{sfx}") == best)
  return out


def report_seed_count(opts: dict, ref: str) -> dict:
  """Fresh seeds enough for the widest tuned row's paired spread against
  DiLoCo at ``H_ref`` on the tuning seeds (quick: 2)."""
  tune = opts.read("tune")
  tolerance = float(_evidence(opts).read("report")["power"]["tolerance"])
  ref_loss = np.asarray(tune["stats"][ref]["loss_by_seed"])
  sds = {}
  for family in grids(opts["quick"]):
    best = _ranked(tune["stats"], family)[0]
    diff = np.asarray(tune["stats"][best]["loss_by_seed"]) - ref_loss
    sds[family] = float(np.std(diff, ddof=1)) if diff.size > 1 else 0.0
  return opts.seed_plan(sds, tolerance, MIN_REPORT_SEEDS, MAX_REPORT_SEEDS)


def _report_runs(s, opts: dict) -> None:
  """Every row with its tuned point on fresh seeds, against the frontier and
  DiLoCo at ``H_ref``."""
  cell, quick = _evidence(opts), opts["quick"]
  href = base.h_ref(quick)
  committed = cell.read("report")
  s.power = report_seed_count(opts, f"diloco_h{href}")
  s.seeds = tuple(committed["seeds"])[: s.power["seeds"]]
  s.tolerance = s.power["tolerance"]
  evidence.add_frontier(s, cell, evidence.tuned_pairs(cell))
  points = tuned_points(opts)
  ref = f"diloco_h{href}"
  rows = QUICK_ROWS if quick else ROWS
  for row in rows:
    base.add_run(s, row, row_config(opts, row, report_point(points, row)), ref)
  s.syncs_saved = rows
  s.cost_plots = ("bytes_per_worker", "peak_bandwidth")
  s.comparisons = tuple((row, r) for row in rows for r in ("frontier", ref))


def report_point(points: dict, row: str) -> dict:
  """The grid point a row reports at, from the tuned ``points`` (``tuned_points``):
  its own, over streaming's tuned mixing and fp4's block; a senders row takes its
  family's error-feedback decay at the ablation's ``α``."""
  if row in SENDERS_ROWS:
    return dict(points[SENDERS_ROWS[row]], alpha=AGGREGATE_ALPHAS[0], aggregate="senders")
  return {**points.get("stream_tau1", {}), **points.get("stream_fp4", {}), **points.get(row, {})}


def _aggregate_runs(s, opts: dict) -> None:
  """Each SparseLoCo family's tuned point (the mean over ``K``) beside the
  senders' mean at :data:`AGGREGATE_ALPHAS`, on the tuning seeds."""
  s.seeds = (0,) if opts["quick"] else evidence.TUNING_SEEDS
  ref = _add_reference(s, opts)
  points = tuned_points(opts)
  for family in [f for f in grids(opts["quick"]) if f in SPARSELOCO_GRID]:
    tuned = points[family]
    for aggregate, alphas in (("mean", (tuned["alpha"],)), ("senders", AGGREGATE_ALPHAS)):
      for alpha in alphas:
        point = dict(tuned, alpha=alpha, aggregate=aggregate)
        label = _tag(f"{family}_{aggregate}_a{alpha}_ef{tuned['ef_beta']}")
        base.add_run(s, label, row_config(opts, family, point), ref)


PHASE_RUNS = dict(
    coarse=_coarse_runs, tune=_tune_runs, report=_report_runs, aggregate=_aggregate_runs
)
