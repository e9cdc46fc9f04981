"""The best recipe (issue 65): streaming, compression and the outer-momentum schedule, every row read against the schedule-tuned DiLoCo frontier.

Are streaming's and SparseLoCo's gains over DiLoCo (issue 42, read against the
constant-``β`` frontier) a better outer-momentum schedule in disguise, and what,
at this scale, is the best way to communicate less? Each row of
``compression_many`` that the issue names, at its tuned point, with its own
constant ``β`` and with an outer-momentum schedule tuned for it on the tuning
seeds (the schedule study's grid, ``schedule.SCHEDULES``, around the row's own
``β``), read against the schedule-tuned DiLoCo frontier of many/Python
(``configs/studies/schedule.py``, its ``report`` phase's runs, shared by hash).

  python -m experiments.sweep --study configs/studies/recipe.py --phases all --copies 2

which runs, each twice:

  python -m experiments.sweep --study configs/studies/recipe.py:coarse
  python -m experiments.sweep --study configs/studies/recipe.py:tune
  python -m experiments.sweep --study configs/studies/recipe.py:report

Restore the cells it reads first (``experiments.archive`` with ``many python
--restore``, then with ``--study`` for ``schedule.py`` and
``compression_many.py``): the rows' constant runs and the frontier are theirs
(same configs, same hashes). Quick pipeline check:
``:coarse,quick``, ``:tune,quick``, ``:report,quick`` (after the quick
evidence, schedule and compression_many chains).

Rows (``ROWS``): ``stream_tau0``, ``stream_tau1`` (its tuned mixing ``λ``:
the arriving average replaces the local copy at ``λ = 0``), ``stream_fp4``,
``sparseloco_d1_senders``, ``sparseloco_d3_senders`` (top-k at 1% and 3%, the
senders' mean, outer SGD: ``β = 0``, so its schedules rise from 0).

Phases (every choice on the tuning seeds 0-2; the report on fresh seeds):

* ``coarse``: each row at its constant ``β`` and with each schedule on seed 0
  (many/Python: about 5 minutes a run on one core; 5 rows × up to 9 labels);
* ``tune``: each row's constant and its ``TOP`` best schedules of the coarse
  pass on the tuning seeds; a row's tuned label has the lowest mean final
  bits/byte (the constant may win);
* ``report``: the schedule study's fresh seeds (100 on, paired by seed with
  its frontier's runs), as many as the largest tuning-seed spread of a row's
  tuned-minus-constant difference needs to resolve the tolerance, at most
  ``MAX_REPORT_SEEDS``: the schedule-tuned frontier, each row constant and
  tuned, and the best of them on the tuning seeds with AutoLoCo's adaptive ``H``
  on top (``best_adaptive``: the evidence study's chosen design, no ratio
  correction, the row's exchange and schedule). Every label against the
  frontier (Δ at equal syncs, syncs saved at equal loss), each tuned row against
  its constant (what the schedule adds), ``best_adaptive`` against the best;
* ``ablate``: the best label on the same fresh seeds with one part removed at a
  time, its schedule, its compression, its staggering (:func:`ablations`),
  each against it;
* ``transfer``: the best label and its row at constant ``β`` moved to
  base/Shakespeare (:func:`transferred`: the row's many/Python point, that
  cell's ``β*``, the label's schedule shape around it), against that cell's
  schedule-tuned frontier on its fresh seeds.

The tolerance of the report is the schedule report's (the many/Python cell's,
fixed before its report: ``docs/studies/evidence_v2/many_python``). The claims
read from it are records in ``configs/claims.py`` once the report exists.
"""

from __future__ import annotations

import numpy as np

from configs.studies import base, compression_many, evidence, schedule

NAME = "recipe_{phase}"
TITLE = "The best recipe ({phase}): rows against the schedule-tuned frontier, many/Python"
PHASES = ("coarse", "tune", "report", "ablate", "transfer")
TOLERANCE = evidence.TOLERANCE
DOCS_DIR = "docs/studies/recipe"
QUICK_DIR = "runs/studies/recipe-quick"
ROWS = ("stream_tau0", "stream_tau1", "stream_fp4", "sparseloco_d1_senders", "sparseloco_d3_senders")
#: The rows a quick check can build (compression_many's quick grids), and two
#: schedules that change both a positive ``β`` and SparseLoCo's 0.
QUICK_ROWS = ("stream_tau1", "sparseloco_d3")
QUICK_SCHEDULES = ("lin", "top")
TOP = 2
MIN_REPORT_SEEDS = 6
MAX_REPORT_SEEDS = 20


def cell_dir(cell: dict) -> str:
  return ""


def _compression(cell):
  """compression_many's cell (its tuned points, its report rows)."""
  return cell.of(compression_many, phase="report")


def _of(cell, study):
  """``study``'s report cell of this study's regime: many/Python (quick: the
  quick base/Shakespeare cell)."""
  regime, corpus = ("base", "shakespeare") if cell["quick"] else ("many", "python")
  return cell.of(study, phase="report", regime=regime, corpus=corpus)


def rows(cell) -> tuple[str, ...]:
  return QUICK_ROWS if cell["quick"] else ROWS


def row_configs(cell) -> dict[str, dict]:
  """``row -> {label: config}``: the row at its tuned point and constant ``β``
  (label: the row), then with each schedule around that ``β``."""
  cm = _compression(cell)
  points = compression_many.tuned_points(cm)
  names = QUICK_SCHEDULES if cell["quick"] else tuple(schedule.SCHEDULES)
  out = {}
  for row in rows(cell):
    c = compression_many.row_config(cm, row, compression_many.report_point(points, row))
    rounds = c.total_steps // c.interval.h
    out[row] = {row: c}
    for suffix, overrides in schedule.schedule_points(c.diloco.beta, rounds, names).items():
      v = c.copy_and_resolve_references()
      for name, value in overrides.items():
        base.common.set_field(v, name.replace("__", "."), value)
      out[row][f"{row}_{suffix}"] = v
  return out


def _ranked(stats: dict, labels) -> list[str]:
  return sorted((l for l in labels if l in stats), key=lambda l: stats[l]["final_eval_bpb"][0])


def coarse(s, cell) -> None:
  s.seeds = evidence.TUNING_SEEDS[:1]
  for configs in row_configs(cell).values():
    for label, config in configs.items():
      base.add_run(s, label, config)


def tune_labels(stats: dict, row: str, labels) -> list[str]:
  """The row's constant and its ``TOP`` best schedules of the coarse pass."""
  return [row] + [l for l in _ranked(stats, labels) if l != row][:TOP]


def tune(s, cell) -> None:
  s.seeds = evidence.TUNING_SEEDS[:1] if cell["quick"] else evidence.TUNING_SEEDS
  stats = cell.read("coarse")["stats"]
  for row, configs in row_configs(cell).items():
    for label in tune_labels(stats, row, configs):
      base.add_run(s, label, configs[label])


def tuned(stats: dict, cell) -> dict[str, str]:
  """``row -> its label with the lowest mean final loss on the tuning seeds``."""
  return {row: _ranked(stats, configs)[0] for row, configs in row_configs(cell).items()}


def winner(stats: dict, cell) -> tuple[str, str]:
  """``(row, label)``: the tuned label with the lowest mean final loss on the
  tuning seeds, and its row."""
  best = tuned(stats, cell)
  label = _ranked(stats, list(best.values()))[0]
  return {l: row for row, l in best.items()}[label], label


def _adaptive(cell, config):
  """AutoLoCo's chosen design (adaptive ``H``, no ratio correction) with
  ``config``'s exchange and outer step (its ``stream``, ``compress`` and
  ``diloco`` groups: lr, momentum and its schedule)."""
  ev = _of(cell, evidence)
  design, _ = evidence.chosen_design(ev)
  pair = (config.diloco.alpha, config.diloco.beta)
  auto = evidence.autoloco_config(
      ev, pair, **evidence.DESIGNS.get(design, {}), autoloco__correction="none"
  )
  for group in ("stream", "compress", "diloco"):
    auto[group] = config[group].copy_and_resolve_references()
  if auto.diloco.get("beta_end") is not None and not auto.diloco.beta_rounds:
    auto.diloco.beta_rounds = auto.total_steps // base.h_ref(cell["quick"])
  return auto


def report(s, cell) -> None:
  sched = _of(cell, schedule)
  committed = sched.read("report")
  tune_stats = cell.read("tune")["stats"]
  best = tuned(tune_stats, cell)
  sds = {
      row: float(np.std(np.subtract(tune_stats[label]["loss_by_seed"], tune_stats[row]["loss_by_seed"]), ddof=1))
      for row, label in best.items()
      if label != row and len(tune_stats[row]["loss_by_seed"]) > 1
  }
  tolerance = float(committed["power"]["tolerance"])
  s.power = cell.seed_plan(sds or {"none": 0.0}, tolerance, MIN_REPORT_SEEDS, MAX_REPORT_SEEDS)
  s.seeds = tuple(committed["seeds"])[: s.power["seeds"]]
  s.tolerance = tolerance
  schedule.add_tuned_frontier(s, sched, evidence.tuned_pairs(sched.of(evidence)))
  configs = row_configs(cell)
  labels = []
  for row, label in best.items():
    for name in dict.fromkeys((row, label)):
      base.add_run(s, name, configs[row][name])
      labels.append(name)
  row, best_label = winner(tune_stats, cell)
  base.add_run(s, "best_adaptive", _adaptive(cell, configs[row][best_label]))
  s.syncs_saved = tuple(labels) + ("best_adaptive",)
  s.cost_plots = ("bytes_per_worker", "peak_bandwidth")
  s.comparisons = (
      tuple((label, "frontier") for label in s.syncs_saved)
      + tuple((label, row) for row, label in best.items() if label != row)
      + (("best_adaptive", best_label),)
  )


def ablations(config, constant) -> dict:
  """The best row with one part removed at a time (``label -> config``):
  ``best_constant`` its schedule (the row at its constant ``β``: ``constant``),
  ``best_uncompressed`` its compression (the codec off, no error feedback,
  the plain mean), ``best_unstaggered`` its staggering (one fragment: the
  whole model synced every ``H``, nothing in flight). A part the row does not
  have is not removed."""
  out = {}
  if config.to_dict() != constant.to_dict():
    out["best_constant"] = constant
  if config.compress.codec != "identity" or config.compress.ef_beta is not None:
    v = config.copy_and_resolve_references()
    v.compress.codec, v.compress.ef_beta, v.compress.aggregate = "identity", None, "mean"
    out["best_uncompressed"] = v
  if config.stream.fragments > 1:
    v = config.copy_and_resolve_references()
    v.stream.fragments, v.stream.tau = 1, 0
    out["best_unstaggered"] = v
  return out


def ablate(s, cell) -> None:
  """The tuning seeds' best label (the report's ``best_adaptive`` base) and its
  :func:`ablations`, on the report's fresh seeds (paired), each against it:
  what its schedule, compression and staggering each add."""
  reported = cell.read("report")
  row, best_label = winner(cell.read("tune")["stats"], cell)
  configs = row_configs(cell)[row]
  s.seeds = tuple(reported["seeds"])
  s.tolerance = float(reported["power"]["tolerance"])
  base.add_run(s, best_label, configs[best_label])
  parts = ablations(configs[best_label], configs[row])
  for label, config in parts.items():
    base.add_run(s, label, config)
  s.comparisons = tuple((label, best_label) for label in parts)


def _second(cell, study):
  """``study``'s report cell of the second corpus, base/Shakespeare (quick:
  the quick cell, which is base/Shakespeare too)."""
  return cell.of(study, phase="report", regime="base", corpus="shakespeare")


def transferred(cell, row: str, label: str) -> dict:
  """``row`` (at its tuned point of many/Python) built on base/Shakespeare at
  that cell's tuned ``β`` at ``H_ref``, and, if ``label`` is one of its
  schedules, that schedule's shape around that ``β`` (``label -> config``)."""
  cm = _compression(cell)
  point = compression_many.report_point(compression_many.tuned_points(cm), row)
  c = compression_many.row_config(cm, row, point, cell=_second(cell, evidence))
  out = {row: c}
  if label != row:
    name = label[len(row) + 1 :].split("_")[0]
    rounds = c.total_steps // c.interval.h
    ((suffix, overrides),) = schedule.schedule_points(c.diloco.beta, rounds, (name,)).items()
    v = c.copy_and_resolve_references()
    for field, value in overrides.items():
      base.common.set_field(v, field.replace("__", "."), value)
    out[f"{row}_{suffix}"] = v
  return out


def transfer(s, cell) -> None:
  """The tuning seeds' best label and its row at constant ``β`` on the second
  corpus (base/Shakespeare: :func:`transferred`), against that cell's
  schedule-tuned frontier (the schedule study's runs, shared by hash), on its
  schedule report's fresh seeds, as many as this study's report has: does
  the answer hold on a second corpus?"""
  sched = _second(cell, schedule)
  committed = sched.read("report")
  row, label = winner(cell.read("tune")["stats"], cell)
  s.seeds = tuple(committed["seeds"])[: len(cell.read("report")["seeds"])]
  s.tolerance = float(committed["power"]["tolerance"])
  schedule.add_tuned_frontier(s, sched, evidence.tuned_pairs(sched.of(evidence)))
  configs = transferred(cell, row, label)
  for name, config in configs.items():
    base.add_run(s, name, config)
  s.syncs_saved = tuple(configs)
  s.cost_plots = ("bytes_per_worker", "peak_bandwidth")
  best = list(configs)[-1]
  s.comparisons = tuple((l, "frontier") for l in configs) + (
      ((best, row),) if best != row else ()
  )


PHASE_RUNS = dict(coarse=coarse, tune=tune, report=report, ablate=ablate, transfer=transfer)
