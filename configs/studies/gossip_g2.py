"""GASLoC's claim G2 (issue 40): with many local steps, GASLoC against DiLoCo's
tuned frontier, beside the decentralized baselines that the claim says are not
competitive with it.

Run the phases in order, each by two sweeps pinned one per core (the runs are
locked, so the two share the work; resumable):
  python -m experiments.sweep --study configs/studies/gossip_g2.py:shakespeare --phases coarse,tune,report --copies 2
which runs, each twice:
  python -m experiments.sweep --study configs/studies/gossip_g2.py:coarse,shakespeare
  python -m experiments.sweep --study configs/studies/gossip_g2.py:tune,shakespeare
  python -m experiments.sweep --study configs/studies/gossip_g2.py:report,shakespeare
and the same with ``python``. A diagnostic phase, added after the Shakespeare
coarse pass showed every decentralized method 0.09-0.15 bits/byte above DiLoCo,
decides nothing and touches no report seed (:func:`mixing_runs`: the tuned
points on iid shards, and GASLoC on the exponential graph, on the tuning seeds):
  python -m experiments.sweep --study configs/studies/gossip_g2.py:mixing,shakespeare
After the Shakespeare report showed GASLoC far from DiLoCo's loss in the same
steps but its rounds far cheaper, GASLoC given twice the steps (the ``longer``
phase, :func:`longer_runs`, as N1's for NoLoCo) and its time to DiLoCo's loss,
read by G3's rule as its own result (it does not change G3's verdict):
  python -m experiments.sweep --study configs/studies/gossip_g2.py:longer,shakespeare
  python -m experiments.time_to_target --study configs/studies/gossip_g2.py:longer,shakespeare --out docs/studies/gossip_g2/shakespeare/longer_time Then each method's simulated time to DiLoCo's
loss on two-site networks of 0.1-10 Gbit/s and 10-200 ms (claims G3 and N2;
bytes, peak bandwidth and idle time, N3), from the same runs:
  python -m experiments.time_to_target --study configs/studies/gossip_g2.py:report,shakespeare --out docs/studies/gossip_g2/shakespeare/time
Restore the evidence cell's runs first
(``experiments.archive`` with ``long shakespeare --restore``), or the report
trains the frontier again. Quick pipeline check: ``:coarse,quick``,
``:tune,quick``, ``:report,quick``, ``:mixing,quick``, ``:longer,quick`` (on the evidence study's quick
base/Shakespeare cell, which must have run first).

Regime: the evidence study's ``long`` regime of the corpus (``K = 8``, 4
sequences per worker, non-iid shards, 1,200 steps; ``configs/studies/evidence.py``),
every method at ``H = H_ref = 20`` (60 rounds) on the random-matching graph:
each round pairs the workers at random, NoLoCo's own setting (groups of 2) and
one of GASLoC's. Each worker sends one model per round (DiLoCo's ring
all-reduce moves ``2 (K - 1)/K = 1.75`` of one per worker). The methods, as in G1 (``gossip_phases.py``): ``gasloc``
(``η``, ``γ`` tuned), ``gasloc_g0`` (``γ = 0``, ``η`` tuned), ``gossip`` (gossip
AdamW with 20 local steps, its weight tuned) and ``noloco`` (its outer ``(α,
β)`` tuned; its public code's ``(0.7, 0.5)`` is in the grid).

The line every method is read against is DiLoCo's tuned frontier of that cell
(``H in {10, ..., 60}``, each with its outer pair tuned), whose runs the
evidence study committed in ``docs/studies/evidence_v2/long_<corpus>``: the
report uses the same fresh seeds and the same configs (same hashes), so it
trains only the four tuned methods and pairs each with them by seed. Each
method gets its syncs saved at equal loss (``experiments/syncs_saved.py``) and
its Δ against the frontier at equal syncs, with paired intervals. "Competitive"
(the claim) reads the interval of that Δ: inside ``±`` the cell's tolerance,
the evidence report's (the frontier's loss for 10% fewer syncs: 0.0165
bits/byte on Python, 0.0084 on Shakespeare). The report's seed count is the
evidence report's (12 on Python, 10 on Shakespeare); it states the half-width
those seeds reach at the tuning seeds' spread. The claim's verdict, fixed before
the report, per corpus and then over both. Each Δ reads by the rule of every
table (``experiments/seed_stats.verdict``: better, equal, worse,
inconclusive), and a method is competitive where its Δ reads better or equal.
*Reproduced* if GASLoC is competitive while the other decentralized methods are
not (the abstract's contrast); if a baseline is competitive too, GASLoC's half
is reproduced and the contrast is not, and the verdict says so; *not
reproduced* if GASLoC's Δ reads worse; *inconclusive* otherwise (an interval
the tolerance cannot resolve). Over both corpora: their verdict where they
agree, else *inconclusive*, naming each. (This wording, one interval rule for
every table, replaced "inside the tolerance or below it" before any G2 report.) The claim's tables and verdict by this rule, from the reports
(``docs/studies/gossip_g2/claims.md``, with G1's):
  python -m experiments.results_page
Claim G3 (heterogeneous bandwidth) reads the same report runs replayed on the
two-site grid (``time_to_target`` above): GASLoC's speed-up over DiLoCo at
``H_ref`` in simulated time to DiLoCo's final loss, paired by seed, by claim
N2's rule, fixed before G2's report ran: *reproduced* if on some network
GASLoC reaches that loss on every seed with its speed-up's interval above 1;
*not reproduced* if on every network it misses on most seeds or its interval
lies at or below 1; *inconclusive* otherwise; over both corpora as G2
(``experiments/results_page.py`` writes it beside G2's, in ``claims.md``).
The reports: ``docs/studies/gossip_g2/<corpus>/<phase>``; the verdict:
docs/results.md §3.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from configs.studies import base, evidence, gossip_phases
from configs.studies.gossip_phases import METHODS

NAME = "gossip_g2_{phase}"
TITLE = "GASLoC claim G2 ({phase}): 20 local steps, K = 8, against tuned DiLoCo"
TOPOLOGIES = ("matching",)
QUICK_TOPOLOGIES = ("matching",)
TOKENS = {c: ("corpus", c) for c in evidence.CORPORA}
DEFAULTS = dict(corpus="shakespeare")
#: Each method's grid (``gossip_phases.points``); ``alpha`` and ``weight`` in
#: multiples of ``1/(d+1)`` (1/2 on a matching). Centred on DiLoCo's tuned pairs
#: of the long cells (``(0.7, 0.5)`` on Python, ``(0.7, 0.7)`` on Shakespeare at
#: ``H_ref``), GASLoC's ``(η, γ)`` being DiLoCo's ``(α, β)`` on the complete graph.
#: Each method's grid (a product, or a tuple of products whose union is the
#: grid). The second product of ``gasloc`` and ``noloco`` is a widening the
#: Shakespeare coarse pass asked for (seed 0): GASLoC's best, ``eta = 0.7,
#: gamma = 0.5`` (2.766 bits/byte), sat on the lower edge of ``eta``, and
#: NoLoCo's, ``alpha = 1.0, beta = 0.5`` (2.740), on the upper edge of
#: ``alpha``. The gossip weight's edge 1.0 is the pair's average, its bound.
GRIDS = {
    "gasloc": (
        dict(eta=(0.7, 1.0), gamma=(0.3, 0.5, 0.7), alpha=(1.0,)),
        dict(eta=(0.5,), gamma=(0.3, 0.5, 0.7), alpha=(1.0,)),
    ),
    "gasloc_g0": dict(eta=(0.7, 1.0, 1.5), alpha=(1.0,)),
    "gossip": dict(weight=(1.0, 0.5)),
    "noloco": (
        dict(alpha=(0.5, 0.7, 1.0), beta=(0.3, 0.5, 0.7)),
        dict(alpha=(1.5,), beta=(0.3, 0.5, 0.7)),
    ),
}
#: Python's widening (``gossip_phases.points``: products its coarse pass adds,
#: which Shakespeare's finished phases never see). Its coarse pass on seed 0
#: (``docs/studies/gossip_g2/python/coarse``) put GASLoC's best, ``eta = 0.7,
#: gamma = 0.3`` (2.660 bits/byte), and NoLoCo's, ``alpha = 1.0, beta = 0.3``
#: (2.620), on the lower edge of the momentum; the widening goes one and two
#: steps below it (``gamma = 0`` is ``gasloc_g0``'s own grid). After it NoLoCo's
#: best is interior (``beta = 0.1`` and ``0.3`` tie at 2.620; ``0`` is 2.648).
#: GASLoC's ``eta = 1.0, gamma = 0.1`` (2.659) ties ``0.7, 0.3`` (2.660) on a
#: ridge of ``eta`` against ``gamma``; it sits on ``eta``'s upper edge, not widened
#: further since at ``gamma = 0`` ``eta = 1.5`` is 0.148 above ``eta = 1.0``.
WIDENINGS = {
    "python": dict(
        gasloc=dict(eta=(0.5, 0.7, 1.0), gamma=(0.1,), alpha=(1.0,)),
        noloco=dict(alpha=(0.7, 1.0), beta=(0.0, 0.1)),
    )
}
#: The coarse and tune phases' tables only; the report reads the cell's own.
TOLERANCE = 0.01
#: The methods' training-time evals (the spread sample): every 2 rounds, 30 in
#: the run, so that their time to DiLoCo's loss (claims G3 and N2,
#: ``experiments/time_to_target.py``) is read between evals 40 steps apart. The
#: evidence frontier's runs, reused, evaluate every 200; the target, DiLoCo's
#: last eval, is at the end of its run either way.
EVAL_EVERY = 40
QUICK_DIR = "runs/studies/gossip-g2-quick"
DOCS_DIR = "docs/studies/gossip_g2"


def evidence_cell(opts: dict) -> dict:
  """The evidence study's cell G2 reads: ``long`` of the corpus; quick: the
  quick base/Shakespeare cell (the one the tests train)."""
  quick = opts["quick"]
  return opts.of(
      evidence,
      phase="report",
      regime="base" if quick else "long",
      corpus="shakespeare" if quick else opts["corpus"],
  )


def run_config(method: str, opts: dict, **extra: Any):
  """A run of the cell's regime at ``H_ref``, evaluated every
  :data:`EVAL_EVERY` steps."""
  e = evidence_cell(opts)
  regime = evidence.regime_overrides(e["regime"], e["corpus"], e["quick"])
  if not e["quick"]:
    regime["eval__every_steps"] = EVAL_EVERY
  return base.run_config(
      gossip_phases.ALGORITHMS.get(method, method),
      e["quick"],
      interval__h=base.h_ref(e["quick"]),
      **dict(regime, **extra),
  )


def add_references(s, opts: dict) -> str:
  """DiLoCo at ``H_ref`` with its tuned pair (the evidence study's runs), the
  line each method's row is read against; the report has the whole tuned
  frontier."""
  e = evidence_cell(opts)
  pairs = evidence.tuned_pairs(e)
  href = base.h_ref(e["quick"])
  if opts["phase"] == "report":
    evidence.add_frontier(s, e, pairs)
  else:
    base.add_run(s, f"diloco_h{href}", evidence.diloco_config(e, href, *pairs[href]))
  return f"diloco_h{href}"


def report_runs(s, opts: dict) -> None:
  """The tuned methods on the evidence report's seeds, against its frontier and
  DiLoCo at ``H_ref``; GASLoC against each baseline."""
  cell = sys.modules[__name__]
  points_ = gossip_phases.tuned(cell, opts)
  committed = evidence_cell(opts).read("report")
  s.seeds = tuple(committed["seeds"])
  s.tolerance = float(committed["power"]["tolerance"])
  sds = gossip_phases.tuning_spread(cell, opts, points_)
  s.power = opts.seed_plan(sds, s.tolerance, 2, len(s.seeds), fixed=len(s.seeds))
  topo = TOPOLOGIES[0]
  names = {
      m: gossip_phases.add(cell, s, opts, m, topo, points_[(m, topo)]) for m in METHODS
  }
  href = base.h_ref(opts["quick"])
  s.syncs_saved = tuple(names.values())
  s.comparisons = (
      tuple((names[m], ref) for m in METHODS for ref in ("frontier", f"diloco_h{href}"))
      + tuple((names["gasloc"], names[m]) for m in METHODS[1:])
  )


def mixing_runs(s, opts: dict) -> None:
  """The ``mixing`` phase, a diagnostic that decides nothing: why do the
  decentralized methods trail DiLoCo in this regime? On the tuning seeds (no
  report seed), each tuned point changed in one thing: GASLoC and NoLoCo on iid
  shards, read against DiLoCo at ``H_ref`` on iid shards (is it the shards'
  drift?), and GASLoC on the exponential graph, ``log2 K`` peers a round (is it
  one peer a round?), each beside the tune phase's runs of the same points."""
  cell = sys.modules[__name__]
  points_ = gossip_phases.tuned(cell, opts)
  s.seeds = gossip_phases.TUNING_SEEDS[:1] if opts["quick"] else gossip_phases.TUNING_SEEDS
  e = evidence_cell(opts)
  href = base.h_ref(e["quick"])
  diloco = evidence.diloco_config(e, href, *evidence.tuned_pairs(e)[href])
  diloco.data.partition = "iid"
  iid_ref = f"diloco_h{href}_iid"
  base.add_run(s, iid_ref, diloco)
  topo = TOPOLOGIES[0]
  iid = opts.of(reference=iid_ref)
  shards = {
      gossip_phases.add(cell, s, iid, m, topo, points_[(m, topo)], "_iid", data__partition="iid"): m
      for m in ("gasloc", "noloco")
  }
  names = {m: gossip_phases.add(cell, s, opts, m, topo, points_[(m, topo)]) for m in METHODS}
  exp = gossip_phases.add(cell, s, opts, "gasloc", "exponential", points_[("gasloc", topo)])
  # Each change read paired by seed: on iid shards and on non-iid ones against
  # DiLoCo on the same shards, and the exponential graph against the matching.
  ref = opts["reference"]
  s.comparisons = (
      tuple((label, iid_ref) for label in shards)
      + tuple((names[m], ref) for m in shards.values())
      + ((exp, names["gasloc"]), (exp, ref))
  )


def longer_runs(s, opts: dict) -> None:
  """The ``longer`` phase (claim G3): GASLoC's tuned point at :data:`LONGER`
  times the steps on the report's seeds, beside DiLoCo at ``H_ref``'s report runs
  (the same runs, the reference of every phase): given the steps, does GASLoC
  reach DiLoCo's final loss sooner in simulated time? (N1's ``longer`` phase,
  for NoLoCo, is the same.)"""
  cell = sys.modules[__name__]
  report = opts.read("report")
  topo = TOPOLOGIES[0]
  point = gossip_phases.tuned(cell, opts)[("gasloc", topo)]
  s.seeds = tuple(report["seeds"])
  steps = LONGER * run_config("gasloc", opts).total_steps
  gossip_phases.add(cell, s, opts, "gasloc", topo, point, f"_steps{steps}", total_steps=steps)


#: The phases: the shared three, then ``mixing`` (:func:`mixing_runs`) and
#: ``longer`` (:func:`longer_runs`).
PHASES = gossip_phases.PHASES + ("mixing", "longer")
PHASE_RUNS = gossip_phases.phase_runs(
    sys.modules[__name__], mixing=mixing_runs, longer=longer_runs
)
configure = functools.partial(gossip_phases.configure, sys.modules[__name__])
#: GASLoC's budget in the ``longer`` phase, in multiples of the study's steps.
LONGER = 2


