"""The evidence study: AutoLoCo against a tuned DiLoCo, choosing apart from reporting.

One study in five phases, run in order, for each regime (``base``, ``long``,
``many``) and corpus (``shakespeare``, ``python``): ``<phase>,<regime>,<corpus>``,
add ``,quick`` for the tiny pipeline check. All of one cell's phases in order,
two sweeps pinned one per core:

  python -m experiments.sweep --study configs/studies/evidence.py:base,shakespeare --phases all --copies 2

or by hand:

  python -m experiments.sweep --study configs/studies/evidence.py:regime,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:coarse,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:tune,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:design,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:report,base,shakespeare

and the same with ``python`` for the Python corpus, ``many`` for the
many-rounds regime or ``long`` for 8 workers on non-iid shards (these two are
pruned by the base cell of their corpus: their ``--phases all`` starts at
``coarse``).

Each phase writes its report to ``docs/studies/evidence_v2/<regime>_<corpus>/<phase>``
(quick: ``runs/studies/evidence-v2-quick/...``), which the next phase reads. Two
copies of one command share the work (the runs are locked), so on 2 cores start
each phase twice. The report phase's headline is the syncs the tuned frontier
needs to reach each design's loss, with paired bootstrap and t-intervals over
the fresh seeds (``experiments/syncs_saved.py``).

The results: ``docs/results.md`` §1. Below: the phases, grids and designs, how
each phase chooses its runs from the one before, and where the ``many`` and
``long`` regimes are pruned.

This is the study's second protocol (issue 24): the final evaluation covers the
whole validation split, the frontier spans ``H in {10, 14, 20, 30, 40, 60}``, the
headline is the syncs a tuned DiLoCo needs to reach a design's loss
(``experiments/syncs_saved.py``: a pooled log-linear frontier, a paired bootstrap
interval, a tolerance tied to the frontier's slope) and the report's seed count
comes from the tuning seeds' spread. The first protocol's reports stay in
``docs/studies/evidence`` as the record of what its 8 KB eval showed.

Phases (every choice on the tuning seeds 0-2; the report on fresh seeds from 100):

* ``regime``: does H matter here? DiLoCo (0.7, 0.9) at the shortest and longest
  frontier H on the tuning seeds, with the paired interval of their difference.
* ``coarse``: DiLoCo's outer ``(alpha, beta)`` on ``ALPHAS x BETAS[corpus]`` at
  each frontier interval, tuning seed 0 only.
* ``tune``: the ``TOP`` best pairs of the coarse pass at each ``H``, on the three
  tuning seeds; the tuned pair at ``H`` has the lowest mean final eval bits/byte.
  The pair tuned at ``H_ref`` is AutoLoCo's reference ``(alpha, beta)``.
* ``design``: AutoLoCo's designs (``DESIGNS``) beside the tuned frontier on the
  tuning seeds, each with its syncs saved at equal loss (interval over the tuning
  seeds); the design chosen saves the most.
* ``report``: on fresh seeds, as many as the tuning seeds' spread needs to resolve
  the cell's tolerance (``report_seed_count``, at least ``MIN_REPORT_SEEDS``, at
  most ``MAX_REPORT_SEEDS``): the tuned frontier, the chosen design and its
  controls (correction without adaptation, adaptation without correction, and for
  a closed-loop design its own ``H`` sequence replayed open loop).

Regimes: ``base`` is the ``study`` size (K = 4, 600 inner steps, H_ref = 20: 30
syncs at H_ref); ``long`` has K = 8 workers with half the per-worker batch, non-iid
shards and 1,200 steps; ``many`` is ``base`` run 3,000 steps (150 syncs at H_ref),
where the loss curve is flatter, not flat (each report states what the last 20%
of steps still gain). To fit the CPU time, ``many`` and ``long`` are pruned by
the base cell of their corpus, and say so: the coarse grid is the pairs the base
coarse pass ranked in the top ``TOP`` at some ``H`` (:func:`base_top_pairs`), the
designs are ``PRUNED_DESIGNS``, and there is no ``regime`` phase (the tuned
frontier's ``H = 60`` against ``H = 10`` in the report answers whether ``H``
matters; ``--phases all`` starts at ``coarse`` there). For
``long`` the first protocol's own long coarse passes back the pruning: there the
best pair at every ``H`` was one of ``base_top_pairs`` on both corpora. Corpora:
``shakespeare`` (embedded) and ``python``: the top-level modules of the Python
standard library of the interpreter that runs the study (``sysconfig``'s
``stdlib``), through ``data.source=files``.
"""

from __future__ import annotations

import os
import sysconfig
from typing import Any

import numpy as np

from configs.studies import base

PHASES = ("regime", "coarse", "tune", "design", "report")
REGIMES = ("base", "long", "many")
#: The regimes pruned by the base cell of their corpus (grid, designs, no
#: ``regime`` phase), to fit the CPU time of their longer runs.
PRUNED_REGIMES = ("long", "many")
CORPORA = ("shakespeare", "python")


def regime_phases(regime: str) -> tuple[str, ...]:
  """The phases ``regime`` runs, in order: a pruned regime has no ``regime`` phase."""
  return PHASES[1:] if regime in PRUNED_REGIMES else PHASES


#: The frontier's fixed intervals, in units of H_ref: H in {10, 14, 20, 30, 40, 60}
#: at H_ref = 20, so that it spans designs that sync more often than H_ref too.
H_MULTS = (0.5, 0.7, 1, 1.5, 2, 3)
TUNING_SEEDS = (0, 1, 2)
#: Bits/byte, the first protocol's fixed "equal quality" (kept for the studies
#: that still use it); this protocol's tolerance is the frontier's loss for 10%
#: fewer syncs (``syncs_saved.tolerance``).
TOLERANCE = 0.01

#: The share of DiLoCo@H_ref's syncs a budget design may spend (the paper's 27% fewer).
BUDGET = 0.73
#: AutoLoCo's designs: label -> config overrides (the reference pair and H_ref are
#: added; ``h_mult``, ``h_min_mult`` and ``h_max_mult`` set ``interval.h``,
#: ``interval.h_min`` and ``interval.h_max`` to that many H_ref; ``budget`` sets a
#: sync budget of that share of T / H_ref). Every one keeps AutoLoCo's momentum
#: correction beta_t = beta^(S_t / S_ref,t), which front-loaded shapes exercise
#: (r_t up to the shape's ratio, and below 1 late).
DESIGNS = {
    # The first protocol's chosen design: AdaComm's loss ratio from 1.5 H_ref.
    "autoloco_h0x1p5": dict(h_mult=1.5),
    # Open loop, a sync budget of 0.73 T / H_ref placed by a front-loaded shape
    # (autoloco_jax/algorithms/diloco/budget.py); "constant" is the budget's fixed-H control.
    "budget_constant": dict(budget=BUDGET, interval__shape="constant"),
    "budget_linear_r2": dict(
        budget=BUDGET, interval__shape="linear", interval__ratio=2.0
    ),
    "budget_linear_r4": dict(
        budget=BUDGET, interval__shape="linear", interval__ratio=4.0
    ),
    "budget_exp_r4": dict(
        budget=BUDGET, interval__shape="exponential", interval__ratio=4.0
    ),
    "budget_two_phase_r3": dict(
        budget=BUDGET, interval__shape="two_phase", interval__ratio=3.0
    ),
    # Closed loop, front-loaded: long first rounds, never below H_ref.
    "loss_ratio_hmin_ref": dict(h_mult=3, h_min_mult=1, h_max_mult=4),
    "agreement_hmin_ref": dict(
        interval__controller="agreement",
        interval__target=0.7,
        h_mult=3,
        h_min_mult=1,
        h_max_mult=4,
    ),
}
#: The quick pipeline check's designs: one open-loop budget and one closed loop.
QUICK_DESIGNS = ("budget_linear_r2", "autoloco_h0x1p5")
#: The pruned regimes' designs (``many``, ``long``), pruned by the base/Python
#: design phase to save CPU time (base/Shakespeare's ranked them the same way): every shape family once (linear r4 sits between linear r2 and
#: exponential r4 there; the agreement rule with h_min = H_ref synced and lost as
#: the loss-ratio rule did), since many rounds is where an early deficit has the
#: most time to be recovered.
PRUNED_DESIGNS = (
    "autoloco_h0x1p5",
    "budget_constant",
    "budget_linear_r2",
    "budget_exp_r4",
    "budget_two_phase_r3",
    "loss_ratio_hmin_ref",
)
#: The coarse grid of every cell: the first protocol's pruned grid (its one full
#: search, base/Shakespeare's 84 runs, never ranked alpha = 0.5 or beta >= 0.85 in
#: the top 4 at any H). On Python the grid moves one step down in beta: the first
#: protocol's base/Python coarse pass put beta = 0.9 last or next to last at every
#: H (0.10-0.62 bits/byte behind the best pair), and beta = 0.5, the lower edge
#: before 0.3 was added, best at three of the four H.
ALPHAS = (0.7, 1.0)
BETAS = {"shakespeare": (0.5, 0.7, 0.9), "python": (0.3, 0.5, 0.7)}
TOP = 2
#: The report's fresh seeds: enough for the tolerance, within these bounds.
MIN_REPORT_SEEDS = 10
MAX_REPORT_SEEDS = 20

QUICK_DIR = "runs/studies/evidence-v2-quick"
DOCS_DIR = "docs/studies/evidence_v2"
#: The study engine's names (experiments/engine.py): the argument's words and
#: the report's name and title.
TOKENS = {
    **{r: ("regime", r) for r in REGIMES},
    **{c: ("corpus", c) for c in CORPORA},
}
DEFAULTS = dict(regime="base", corpus="shakespeare")
CELLS = tuple((r, c) for r in REGIMES for c in CORPORA)
NAME = "evidence_v2_{regime}_{corpus}_{phase}"
TITLE = "Evidence ({phase}): AutoLoCo vs tuned DiLoCo, {regime} regime, {corpus}"


def cell_dir(cell: dict) -> str:
  """A cell's folder: ``<regime>_<corpus>``."""
  return f"{cell['regime']}_{cell['corpus']}"


def phases(cell: dict) -> tuple[str, ...]:
  return regime_phases(cell["regime"])


def h_ref(quick: bool) -> int:
  return base.h_ref(quick)


def frontier_hs(quick: bool) -> tuple[int, ...]:
  """The frontier's fixed intervals (quick: H_ref and 3 H_ref)."""
  h = h_ref(quick)
  mults = (1, 3) if quick else H_MULTS
  return tuple(int(round(h * m)) for m in mults)


QUICK_GRID = ((0.7, 0.8), (0.7, 0.9), (1.0, 0.8), (1.0, 0.9))


def grid(cell: dict) -> tuple[tuple[float, float], ...]:
  """DiLoCo's outer ``(alpha, beta)`` pairs of the coarse pass in one cell.

  A pruned regime (``many``: ``base`` run five times longer; ``long``: twice
  the tokens on 8 workers) searches the pairs of the base cell's coarse pass
  (:func:`base_top_pairs`); every other cell searches ``ALPHAS x BETAS[corpus]``."""
  if cell["quick"]:
    return QUICK_GRID
  if cell["regime"] in PRUNED_REGIMES:
    return base_top_pairs(cell.of(regime="base").read("coarse"), cell["corpus"])
  return tuple((a, b) for a in ALPHAS for b in BETAS[cell["corpus"]])


def base_top_pairs(base_coarse: dict, corpus: str) -> tuple[tuple[float, float], ...]:
  """The pairs ranked in the ``TOP`` at some frontier ``H`` by the base cell's
  coarse pass on ``corpus`` (its report ``base_coarse``; on Python: four of
  the six, dropping ``(0.7, 0.7)`` and ``(1.0, 0.7)``, never in the top two)."""
  coarse = base_coarse["stats"]
  keep = set()
  for h in frontier_hs(False):
    scored = sorted(
        (coarse[diloco_label(h, a, b)]["final_eval_bpb"][0], (a, b))
        for a in ALPHAS
        for b in BETAS[corpus]
    )
    keep.update(pair for _, pair in scored[:TOP])
  return tuple(sorted(keep))


def designs(quick: bool, regime: str = "base") -> dict:
  """The AutoLoCo designs of the design phase (label -> overrides); the
  pruned regimes try ``PRUNED_DESIGNS``."""
  if quick:
    return {label: DESIGNS[label] for label in QUICK_DESIGNS}
  if regime in PRUNED_REGIMES:
    return {label: DESIGNS[label] for label in PRUNED_DESIGNS}
  return dict(DESIGNS)


def diloco_label(h: int, alpha: float, beta: float) -> str:
  """``diloco_h20_a0p7_b0p85``: labels are config keys, which take no dots."""
  return f"diloco_h{h}_a{alpha:g}_b{beta:g}".replace(".", "p")


def regime_overrides(regime: str, corpus: str, quick: bool) -> dict:
  """Config overrides (``a__b`` names) of a regime and corpus."""
  out: dict[str, Any] = {}
  if regime == "long":
    out.update(
        num_workers=8,
        data__batch_size=2 if quick else 4,
        data__partition="non_iid",
        total_steps=80 if quick else 1200,
    )
    if not quick:
      out["eval__every_steps"] = 200
  if regime == "many":
    out["total_steps"] = 120 if quick else 3000
    out["eval__every_steps"] = 40 if quick else 300
  if corpus == "python":
    stdlib = sysconfig.get_paths()["stdlib"]
    out.update(data__source="files", data__path=os.path.join(stdlib, "*.py"))
  return out


def diloco_config(opts: dict, h: int, alpha: float, beta: float):
  quick = opts["quick"]
  return base.run_config(
      "diloco",
      quick,
      interval__h=h,
      diloco__alpha=alpha,
      diloco__beta=beta,
      **regime_overrides(opts["regime"], opts["corpus"], quick),
  )


def autoloco_config(opts: dict, pair: tuple[float, float], **overrides: Any):
  """AutoLoCo with the reference pair ``pair`` tuned at H_ref and a design's
  ``overrides`` (``h_mult``, ``h_min_mult``, ``h_max_mult``: that many H_ref;
  ``budget``: a sync budget of that share of ``T / H_ref``)."""
  quick = opts["quick"]
  c = base.run_config(
      "autoloco", quick, **regime_overrides(opts["regime"], opts["corpus"], quick)
  )
  c.diloco.alpha, c.diloco.beta = pair
  href = h_ref(quick)
  c.autoloco.h_ref = href
  overrides = dict(overrides)
  # H_0 = 2 H_ref unless a design says otherwise (fixed here, not taken from
  # configs/autoloco.py, so a change of that default leaves finished runs valid).
  c.interval.h = int(overrides.pop("h_mult", 2) * href)
  for key, field in (("h_min_mult", "h_min"), ("h_max_mult", "h_max")):
    if key in overrides:
      c.interval[field] = int(overrides.pop(key) * href)
  if "budget" in overrides:
    c.interval.controller = "budget"
    c.interval.syncs = int(round(overrides.pop("budget") * c.total_steps / href))
  for name, value in overrides.items():
    base.common.set_field(c, name.replace("__", "."), value)
  return c


def tuned_pairs(opts: dict) -> dict[int, tuple[float, float]]:
  """H -> the grid's pair with the lowest mean final eval over the tuning seeds
  (the tune report's)."""
  stats = opts.read("tune")["stats"]
  out = {}
  for h in frontier_hs(opts["quick"]):
    scored = [
        (stats[diloco_label(h, a, b)]["final_eval_bpb"][0], diloco_label(h, a, b), (a, b))
        for a, b in grid(opts)
        if diloco_label(h, a, b) in stats
    ]
    out[h] = min(scored)[2]
  return out


def choose(entries: dict) -> tuple[str, bool]:
  """``(label, by_saving)``: of a design report's ``syncs_saved`` entries, the
  one that saves the most syncs at equal loss (mean over seeds); where the
  fitted frontier is flat or rising (no saving defined for any), the one lowest
  against it at equal syncs (``by_saving`` False). Entries read back from JSON
  hold NaN as ``"nan"``."""
  saved = {label: float(e["saved"]["mean"]) for label, e in entries.items()}
  finite = {label: v for label, v in saved.items() if np.isfinite(v)}
  if finite:
    return max(finite, key=finite.get), True
  return min(entries, key=lambda label: float(entries[label]["delta"]["mean"])), False


def chosen_design(opts: dict) -> tuple[str, dict]:
  """The design phase's :func:`choose`, with the evidence: every design's
  saving and the chosen one's ``H`` sequence on tuning seed 0."""
  summary = opts.read("design")
  entries = summary["syncs_saved"]
  best, _ = choose(entries)
  saved = {label: entry["saved"]["mean"] for label, entry in entries.items()}
  rounds = summary["runs"][best][0]["rounds"]
  return best, dict(
      saved=saved,
      syncs=summary["stats"][best]["syncs"][0],
      h_seq=rounds["h"],
      ratio_seq=rounds["ratio"],
  )


def report_seed_count(opts: dict, design: str) -> dict:
  """How many fresh seeds the report needs: the chosen design's per-seed loss
  against the tuning seeds' fitted frontier at equal syncs has spread ``sd``;
  the count is the smallest that resolves the cell's tolerance
  (``seed_stats.seeds_needed``), kept in ``[MIN_REPORT_SEEDS,
  MAX_REPORT_SEEDS]``, with the half-width that count reaches."""
  summary = opts.read("design")
  entry = summary["syncs_saved"][design]
  deltas = entry["per_seed_delta"]
  sd = float(np.std(deltas, ddof=1)) if len(deltas) > 1 else 0.0
  if opts["quick"]:
    return dict(seeds=2, sd=sd, tolerance=entry["tolerance"], needed=2, half_width=None)
  plan = opts.seed_plan({design: sd}, entry["tolerance"], MIN_REPORT_SEEDS, MAX_REPORT_SEEDS)
  return {k: plan[k] for k in ("seeds", "sd", "tolerance", "needed", "half_width")}


def _tuning_seeds(quick: bool) -> tuple[int, ...]:
  return (0,) if quick else TUNING_SEEDS


def _regime_runs(s, opts: dict) -> None:
  """DiLoCo's paper pair (0.7, 0.9) at the shortest and longest frontier H."""
  hs = frontier_hs(opts["quick"])
  s.seeds = _tuning_seeds(opts["quick"])
  for h in (hs[0], hs[-1]):
    base.add_run(s, f"diloco_h{h}", diloco_config(opts, h, 0.7, 0.9))
  s.comparisons = ((f"diloco_h{hs[-1]}", f"diloco_h{hs[0]}"),)


def _coarse_runs(s, opts: dict) -> None:
  """The cell's grid at every frontier H, on the first tuning seed."""
  s.seeds = _tuning_seeds(opts["quick"])[:1]
  for h in frontier_hs(opts["quick"]):
    for a, b in grid(opts):
      base.add_run(s, diloco_label(h, a, b), diloco_config(opts, h, a, b))


def _tune_runs(s, opts: dict) -> None:
  """The best ``TOP`` pairs of the coarse pass at each H, on the tuning seeds."""
  quick = opts["quick"]
  s.seeds = _tuning_seeds(quick)
  coarse = opts.read("coarse")["stats"]
  for h in frontier_hs(quick):
    scored = sorted(
        (coarse[diloco_label(h, a, b)]["final_eval_bpb"][0], (a, b)) for a, b in grid(opts)
    )
    for _, (a, b) in sorted(scored[:TOP], key=lambda x: x[1]):
      base.add_run(s, diloco_label(h, a, b), diloco_config(opts, h, a, b))


def add_frontier(s, opts: dict, pairs: dict) -> None:
  """DiLoCo with its tuned pair at every frontier H, and the frontier's labels."""
  hs = frontier_hs(opts["quick"])
  for h in hs:
    base.add_run(s, f"diloco_h{h}", diloco_config(opts, h, *pairs[h]))
  s.frontier = tuple(f"diloco_h{h}" for h in hs)


def _design_runs(s, opts: dict) -> None:
  """The tuned frontier beside every design, on the tuning seeds, each design's
  syncs saved at equal loss with its interval."""
  quick = opts["quick"]
  pairs = tuned_pairs(opts)
  ref_pair = pairs[h_ref(quick)]
  s.seeds = _tuning_seeds(quick)
  add_frontier(s, opts, pairs)
  chosen = designs(quick, opts["regime"])
  for label, overrides in chosen.items():
    base.add_run(s, label, autoloco_config(opts, ref_pair, **overrides))
  s.syncs_saved = tuple(chosen)


def _report_runs(s, opts: dict) -> None:
  """On fresh seeds: the tuned frontier, the chosen design and its controls,
  each one's syncs saved at equal loss, and the paired comparisons."""
  quick = opts["quick"]
  href = h_ref(quick)
  pairs = tuned_pairs(opts)
  design, why = chosen_design(opts)
  power = report_seed_count(opts, design)
  s.seeds = tuple(100 + i for i in range(power["seeds"]))
  add_frontier(s, opts, pairs)
  controls = _controls(s, opts, pairs[href], DESIGNS.get(design, {}), why)
  s.design = design
  s.design_saved = why["saved"]
  s.power = power
  # "Equal quality" is fixed before the report: the tuning seeds' frontier's
  # loss for 10% fewer syncs (syncs_saved.tolerance), not the first protocol's 0.01.
  s.tolerance = float(power["tolerance"])
  s.syncs_saved = ("autoloco",) + controls
  hs = frontier_hs(quick)
  # Each label against the frontier and DiLoCo at H_ref; the design against each
  # control (what that component adds); the frontier's two ends.
  s.comparisons = (
      tuple(
          (label, ref)
          for label in s.syncs_saved
          for ref in ("frontier", f"diloco_h{href}")
      )
      + tuple(("autoloco", control) for control in controls)
      # The replay against its constant level: does the schedule's shape matter?
      + (
          (("ctrl_correction_replay", "ctrl_ratio_median"),)
          if "ctrl_ratio_median" in controls
          else ()
      )
      + ((f"diloco_h{hs[-1]}", f"diloco_h{hs[0]}"),)
  )


def _controls(s, opts: dict, ref_pair, overrides: dict, why: dict) -> tuple[str, ...]:
  """Adds the chosen design (``autoloco``) and its controls to ``s``; returns
  the controls' labels: ``ctrl_adaptation_only`` (no correction), the
  correction without the adaptation and, for a closed-loop design,
  ``ctrl_open_loop`` (its ``H`` sequence on tuning seed 0).

  The correction without the adaptation is ``ctrl_correction_only``, the fixed
  ``H`` nearest ``T / syncs`` of the design with the correction, unless that
  ``H`` is ``H_ref``: there ``r_t = 1`` and the run is DiLoCo at ``H_ref`` bit
  for bit (many/Python's interim report showed it), so the study takes
  ``ctrl_correction_replay`` instead: DiLoCo's rounds of ``H_ref`` with the
  design's ratios ``r_t`` on tuning seed 0 replayed round by round
  (``outer.replayed_ratios``), the same sequence of corrected outer steps
  without the adaptive ``H``; and beside it ``ctrl_ratio_median``, the same
  rounds with one constant ratio, the median ``r̃`` of that sequence: DiLoCo at
  ``H_ref`` with the design's correction applied at ``r̃`` (with ``momentum``,
  the pair ``(α, β^r̃)``). The replay against it
  says whether the schedule's shape matters or only its level, a pair between
  the tuning grid's points (added after many/Python's 16-seed interim)."""
  base.add_run(s, "autoloco", autoloco_config(opts, ref_pair, **overrides))
  uncorrected = {**overrides, "autoloco__correction": "none"}
  base.add_run(s, "ctrl_adaptation_only", autoloco_config(opts, ref_pair, **uncorrected))
  h_fixed = max(1, int(round(s.runs["autoloco"].total_steps / why["syncs"])))
  fixed = autoloco_config(
      opts, ref_pair, interval__controller="fixed", interval__h=h_fixed
  )
  labels = ("ctrl_adaptation_only",)
  if h_fixed == h_ref(opts["quick"]):
    fixed.autoloco.ratio_schedule = tuple(float(r) for r in why["ratio_seq"])
    base.add_run(s, "ctrl_correction_replay", fixed)
    # The replay's level without its shape: one constant r, the median of r_t.
    level = fixed.copy_and_resolve_references()
    level.autoloco.ratio_schedule = (float(np.median(why["ratio_seq"])),)
    base.add_run(s, "ctrl_ratio_median", level)
    labels += ("ctrl_correction_replay", "ctrl_ratio_median")
  else:
    base.add_run(s, "ctrl_correction_only", fixed)
    labels += ("ctrl_correction_only",)
  if "budget" in overrides:
    return labels
  schedule = tuple(int(h) for h in why["h_seq"])
  replay = autoloco_config(
      opts,
      ref_pair,
      interval__controller="schedule",
      interval__schedule=schedule,
      interval__h=schedule[0],
      interval__h_min=min(schedule),
      interval__h_max=max(schedule),
  )
  base.add_run(s, "ctrl_open_loop", replay)
  return labels + ("ctrl_open_loop",)


PHASE_RUNS = dict(
    regime=_regime_runs,
    coarse=_coarse_runs,
    tune=_tune_runs,
    design=_design_runs,
    report=_report_runs,
)
