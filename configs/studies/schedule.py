"""AutoLoCo against a DiLoCo whose outer momentum follows a tuned schedule
(issue 41): does adapting ``H`` save syncs over a baseline tuned as finely as
AutoLoCo's design was?

Run the phases in order, in each of the two cells where AutoLoCo saved syncs
against the constant-``β`` frontier, each by two sweeps pinned one per core (the
runs are locked, so the two share the work; resumable):
  python -m experiments.sweep --study configs/studies/schedule.py:many,python --phases all --copies 2
which runs, each twice:
  python -m experiments.sweep --study configs/studies/schedule.py:coarse,many,python
  python -m experiments.sweep --study configs/studies/schedule.py:tune,many,python
  python -m experiments.sweep --study configs/studies/schedule.py:report,many,python
  python -m experiments.sweep --study configs/studies/schedule.py:constant,many,python
and the same with ``base,shakespeare``. Restore the evidence cell's runs first
(``experiments.archive`` with ``many python --restore``): the study reuses
them (same configs, same hashes) and reads its tuned pairs, chosen design, seeds
and tolerance from its committed reports. Quick pipeline check: ``:coarse,quick``,
``:tune,quick``, ``:report,quick``, ``:constant,quick`` (on the evidence study's
quick base/Shakespeare cell, which must have run first).

The candidates, at each ``H`` of ``SCHEDULE_HS`` (the frontier's points around
AutoLoCo's syncs: its 152 syncs in many/Python sit at ``H = 20``, its 26 in
base/Shakespeare between 20 and 30), with ``α`` held at the evidence study's
tuned value at that ``H`` and ``β*`` its tuned constant (a grid of step 0.2):

* finer constants ``β* + d`` for ``d`` in ``FINE`` (step 0.05-0.1), so that
  "a schedule" and "a finer constant" are told apart;
* momentum schedules ``β(t)`` (``outer.momentum_schedule``, config
  ``diloco.beta_end``, ``beta_shape``, ``beta_rounds``), from ``SCHEDULES``:
  warmups from below ``β*`` over the whole run (linear and cosine) or its first
  quarter, three that end above ``β*`` (by 0.1, by 0.2 and at ``BETA_MAX``: each
  added when the one before was best at every ``H`` of base/Shakespeare's coarse
  pass), and a decay as the control of direction.
  AutoLoCo's own momentum correction ``β^{r_t}`` is a warmup of this kind (its
  rounds are long early, ``r_t > 1``); Pier (arXiv 2511.17849) reports gains from
  an outer-momentum warmup alone.

Phases (every choice on the tuning seeds 0-2, as in the evidence study):

* ``coarse``: every candidate on tuning seed 0, beside ``β*`` (the evidence
  study's own run).
* ``tune``: at each ``H``, ``β*``, the ``TOP`` best candidates of the coarse
  pass, its best finer constant and its best schedule, on the tuning seeds
  (``tune_labels``; the best schedule was added when many/Python's coarse pass
  ranked constants first at ``H`` = 14 and 20, which would have left no schedule
  to tune there). The schedule-tuned
  point at ``H`` has the lowest mean final eval bits/byte (``β*`` itself may
  win: the search contains the constant frontier's).
* ``report``: on the evidence report's fresh seeds (so every pair is by seed with
  its committed runs), the schedule-tuned frontier (the tuned point at each ``H``
  of ``SCHEDULE_HS``, the constant-tuned run at the frontier's other ``H``) and
  against it, each with its syncs saved at equal loss and its Δ at equal syncs:
  - ``autoloco``: the evidence study's chosen design, as committed;
  - ``adaptive_on_schedule``: that design's adaptive ``H`` on top of the
    schedule tuned at ``H_ref``, no ratio correction: does adapting ``H`` add
    anything to a good schedule? (also paired with ``sched_h<H_ref>``);
  - ``autoloco_both``: the paper's full correction (``α`` and ``β``) on the design;
  - ``autoloco_per_progress``, ``autoloco_momentum_per_progress``: the second
    reading of the learning-rate correction, ``α_t = α / r_t`` (the outer step per
    unit of inner progress held constant), without and with the momentum one.
* ``constant``: the same runs read against the constant-``β`` tuned frontier
  (trains nothing new).

The reports: ``docs/studies/schedule/<regime>_<corpus>/<phase>``; the verdict:
docs/results.md §1.

What it reached in base/Shakespeare (18 fresh seeds): the tuned schedule is the
warmup from ``β* − 0.2`` to ``BETA_MAX`` at every ``H``, 0.029-0.047 bits/byte
below the tuned constant; against it AutoLoCo needs more syncs (−27.6%
[−32.1%, −23.1%], monotone frontier), and its adaptive ``H`` on the tuned
schedule saves −1.6% [−6.8%, +4.4%]: equal (inside ±10%). many/Python (20 fresh
seeds): the tuned points end 0.008-0.028 bits/byte below the constant β* at each
``H``; against them AutoLoCo needs more syncs on the monotone frontier (−33.4%
[−50.0%, −10.2%]), its loss difference is not resolved (+0.0006 [−0.0034,
+0.0052]: inconclusive at ±0.0037), and adaptive ``H`` on the schedule is
inconclusive (+0.0040 [−0.0014, +0.0094]); docs/results.md §1 has both cells.
"""

from __future__ import annotations

from typing import Any

from configs.studies import base, evidence

PHASES = ("coarse", "tune", "report", "constant")
CELLS = (("many", "python"), ("base", "shakespeare"))
#: The frontier's points whose momentum is tuned beyond the constant grid.
SCHEDULE_HS = (14, 20, 30)
#: Finer constants: ``β* + d``.
FINE = (-0.1, -0.05, 0.05, 0.1)
#: The largest momentum any candidate takes.
BETA_MAX = 0.95
#: Schedules relative to ``β*``: name -> (``β_0 − β*``, ``β_1 − β*``, shape,
#: share of the run's rounds the change takes).
SCHEDULES = {
    "lin": (-0.2, 0.0, "linear", 1.0),
    "cos": (-0.2, 0.0, "cosine", 1.0),
    "deep": (-0.4, 0.0, "linear", 1.0),
    "over": (-0.2, 0.1, "linear", 1.0),
    "warm": (-0.2, 0.0, "linear", 0.25),
    "decay": (0.1, -0.1, "linear", 1.0),
    # Added after base/Shakespeare's coarse pass (before its tune), which put
    # ``over`` (ending 0.1 above ``β*``) best at every ``H``, the grid's edge;
    # then ``high`` was best at every ``H``, so ``top`` ends at ``BETA_MAX``.
    "high": (-0.2, 0.2, "linear", 1.0),
    "top": (-0.2, BETA_MAX, "linear", 1.0),
}
QUICK_FINE = (0.05,)
QUICK_SCHEDULES = ("lin", "warm")
TOP = 2
QUICK_DIR = "runs/studies/schedule-quick"
DOCS_DIR = "docs/studies/schedule"
TOLERANCE = evidence.TOLERANCE
#: The study engine's names (experiments/engine.py); a quick check runs on the
#: evidence study's quick base/Shakespeare cell.
TOKENS = evidence.TOKENS
DEFAULTS = dict(regime="many", corpus="python")
QUICK_CELL = dict(regime="base", corpus="shakespeare")
NAME = "schedule_{regime}_{corpus}_{phase}"
TITLE = "Momentum schedules ({phase}): AutoLoCo vs schedule-tuned DiLoCo, {regime}/{corpus}"
cell_dir = evidence.cell_dir


def check_cell(cell: dict) -> None:
  if not cell["quick"] and (cell["regime"], cell["corpus"]) not in CELLS:
    raise ValueError(f"schedule study: cell {cell['regime']}/{cell['corpus']} not in {CELLS}")


def schedule_hs(quick: bool) -> tuple[int, ...]:
  return (base.h_ref(True),) if quick else SCHEDULE_HS


def _b(x: float) -> float:
  return round(min(max(x, 0.0), BETA_MAX), 2)


def _num(x: float) -> str:
  return f"{x:g}".replace(".", "p")


def schedule_points(beta: float, rounds: int, names=tuple(SCHEDULES)) -> dict[str, dict]:
  """``suffix -> overrides`` of the momentum schedules ``names`` around ``β*`` =
  ``beta`` over a run of ``rounds`` outer steps (``SCHEDULES``: each clipped to
  ``[0, BETA_MAX]``; one that no longer changes, or equals another, is dropped).
  The recipe study (``recipe.py``) tunes its rows' momentum on the same grid."""
  out: dict[str, dict] = {}
  for name in names:
    d0, d1, shape, share = SCHEDULES[name]
    b0, b1 = _b(beta + d0), _b(beta + d1)
    overrides = dict(
        diloco__beta=b0,
        diloco__beta_end=b1,
        diloco__beta_shape=shape,
        diloco__beta_rounds=0 if share == 1.0 else max(1, int(round(share * rounds))),
    )
    if b0 != b1 and overrides not in out.values():
      out[f"{name}_b{_num(b0)}_{_num(b1)}"] = overrides
  return out


def candidates(opts: dict, h: int, beta: float) -> dict[str, dict]:
  """``label -> overrides`` of the candidates at ``H`` around ``β*`` = ``beta``
  (finer constants, then schedules; a candidate equal to another is dropped)."""
  quick = opts["quick"]
  out: dict[str, dict] = {}
  for d in QUICK_FINE if quick else FINE:
    b = _b(beta + d)
    if b != beta:
      out[f"h{h}_const_b{_num(b)}"] = dict(diloco__beta=b)
  rounds = _config(opts, h, (0.7, 0.5), {}).total_steps // h
  names = QUICK_SCHEDULES if quick else tuple(SCHEDULES)
  out.update({f"h{h}_{k}": v for k, v in schedule_points(beta, rounds, names).items()})
  return out


def constant_label(h: int, beta: float) -> str:
  return f"h{h}_const_b{_num(beta)}"


def _cell(opts: dict) -> dict:
  """The evidence cell this study reads (its report phase's)."""
  return opts.of(evidence, phase="report")


def _config(opts: dict, h: int, pair, overrides: dict):
  c = evidence.diloco_config(_cell(opts), h, *pair)
  for name, value in overrides.items():
    base.common.set_field(c, name.replace("__", "."), value)
  return c


def grid_runs(s, opts: dict, pairs: dict, keep=None) -> None:
  """``β*`` (the evidence run) and the candidates at every ``H`` (those
  ``keep(h, label)`` accepts)."""
  for h in schedule_hs(opts["quick"]):
    beta = pairs[h][1]
    runs = {constant_label(h, beta): {}, **candidates(opts, h, beta)}
    for label, overrides in runs.items():
      if keep is None or keep(h, label):
        base.add_run(s, label, _config(opts, h, pairs[h], overrides))


def _ranked(stats: dict, h: int) -> list[str]:
  return base.ranked(stats, f"h{h}_")


def tuned(opts: dict, pairs: dict) -> dict[int, str]:
  """``H -> label``: the tune phase's lowest mean final eval at each ``H``."""
  stats = opts.read("tune")["stats"]
  return {h: _ranked(stats, h)[0] for h in schedule_hs(opts["quick"])}


def _coarse_runs(s, opts: dict, pairs: dict) -> None:
  s.seeds = evidence.TUNING_SEEDS[:1]
  grid_runs(s, opts, pairs)


def tune_labels(ranked: list[str], star: str) -> set[str]:
  """The labels at one ``H`` that go on to the tuning seeds, from the coarse
  pass's ``ranked`` (best first): ``star`` (``β*``), the ``TOP`` best others,
  the best finer constant and the best schedule, so that the tuning seeds tell
  "a schedule" and "a finer constant" apart even where the coarse seed ranks
  every schedule below the constants."""
  others = [l for l in ranked if l != star]
  constants = [l for l in others if "_const_" in l]
  schedules = [l for l in others if "_const_" not in l]
  return {star, *others[:TOP], *constants[:1], *schedules[:1]}


def _tune_runs(s, opts: dict, pairs: dict) -> None:
  s.seeds = (0,) if opts["quick"] else evidence.TUNING_SEEDS
  stats = opts.read("coarse")["stats"]
  keep = set()
  for h in schedule_hs(opts["quick"]):
    keep |= tune_labels(_ranked(stats, h), constant_label(h, pairs[h][1]))
  grid_runs(s, opts, pairs, keep=lambda h, label: label in keep)


def _report_runs(s, opts: dict, pairs: dict) -> None:
  """The constant frontier, the schedule-tuned points and AutoLoCo's variants
  on the evidence report's seeds; ``report`` reads them against the
  schedule-tuned frontier, ``constant`` against the constant one."""
  cell = _cell(opts)
  committed = cell.read("report")
  s.seeds = tuple(committed["seeds"])
  s.power = dict(committed["power"])
  s.tolerance = float(committed["power"]["tolerance"])
  points = add_tuned_frontier(s, opts, pairs)
  if opts["phase"] == "constant":
    s.frontier = tuple(f"diloco_h{h}" for h in evidence.frontier_hs(opts["quick"]))
  href = base.h_ref(opts["quick"])
  variants = _autoloco_runs(s, opts, pairs[href], points[href])
  s.syncs_saved = variants
  s.comparisons = tuple(
      (label, ref) for label in variants for ref in ("frontier", f"sched_h{href}")
  ) + (("autoloco", "adaptive_on_schedule"),)


def add_tuned_frontier(s, opts: dict, pairs: dict) -> dict[int, dict]:
  """Adds the schedule-tuned frontier to ``s`` (the tuned point ``sched_h<H>``
  at each ``H`` of ``SCHEDULE_HS``, the constant-tuned ``diloco_h<H>`` at the
  frontier's other ``H``; the constant ones at every ``H`` too) and sets
  ``s.frontier``; returns ``H -> the tuned point's overrides``."""
  evidence.add_frontier(s, _cell(opts), pairs)
  best = tuned(opts, pairs)
  points = {h: candidate_overrides(opts, h, pairs[h][1], label) for h, label in best.items()}
  for h, overrides in points.items():
    base.add_run(s, f"sched_h{h}", _config(opts, h, pairs[h], overrides))
  s.frontier = tuple(
      f"sched_h{h}" if h in points else f"diloco_h{h}" for h in evidence.frontier_hs(opts["quick"])
  )
  return points


def candidate_overrides(opts: dict, h: int, beta: float, label: str) -> dict:
  """The overrides of a grid label at ``H`` (``β*``'s own: none)."""
  return {constant_label(h, beta): {}, **candidates(opts, h, beta)}[label]


#: AutoLoCo's variants: label -> ``autoloco.correction`` on the chosen design.
CORRECTIONS = {
    "autoloco_both": "both",
    "autoloco_per_progress": "per_progress",
    "autoloco_momentum_per_progress": "momentum_per_progress",
}


#: The variants the quick pipeline check trains (the corrections' configs are
#: checked without training: tests/test_schedule_study.py).
QUICK_VARIANTS = ("autoloco", "adaptive_on_schedule")


def variants(opts: dict, ref_pair, schedule: dict) -> dict[str, Any]:
  """``label -> config`` of AutoLoCo's variants: the evidence study's chosen
  design (its committed run), the design's adaptive ``H`` on the schedule tuned
  at ``H_ref`` without a ratio correction (the schedule over the rounds it takes
  at ``H_ref``), and the design with each of :data:`CORRECTIONS`."""
  cell = _cell(opts)
  design, _ = evidence.chosen_design(cell)
  overrides = evidence.DESIGNS[design]
  out = {"autoloco": evidence.autoloco_config(cell, ref_pair, **overrides)}
  on_schedule = dict(overrides, autoloco__correction="none", **schedule)
  if "diloco__beta_end" in schedule and not schedule["diloco__beta_rounds"]:
    on_schedule["diloco__beta_rounds"] = out["autoloco"].total_steps // base.h_ref(opts["quick"])
  out["adaptive_on_schedule"] = evidence.autoloco_config(cell, ref_pair, **on_schedule)
  for label, correction in CORRECTIONS.items():
    out[label] = evidence.autoloco_config(
        cell, ref_pair, **overrides, autoloco__correction=correction
    )
  return out


def _autoloco_runs(s, opts: dict, ref_pair, schedule: dict) -> tuple[str, ...]:
  """Adds :func:`variants` (quick: :data:`QUICK_VARIANTS`); returns their labels."""
  configs = variants(opts, ref_pair, schedule)
  labels = QUICK_VARIANTS if opts["quick"] else tuple(configs)
  for label in labels:
    base.add_run(s, label, configs[label])
  return labels


def _with_pairs(runs):
  """A phase's runs given the evidence cell's tuned pairs ``H -> (α, β*)``."""
  return lambda s, cell: runs(s, cell, evidence.tuned_pairs(_cell(cell)))


PHASE_RUNS = dict(
    coarse=_with_pairs(_coarse_runs),
    tune=_with_pairs(_tune_runs),
    report=_with_pairs(_report_runs),
    constant=_with_pairs(_report_runs),
)
