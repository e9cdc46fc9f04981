"""One study engine: a study is phases in order, each built from the reports
of the phases before it.

A phased study is a module of ``configs/studies`` that holds data and pure
functions, and declares:

* ``NAME`` and ``TITLE``: format strings over ``phase`` and the cell's options
  (``"evidence_v2_{regime}_{corpus}_{phase}"``);
* ``PHASES``: the phase names in order (a cell may run fewer: ``phases(cell)``);
* ``TOKENS`` and ``DEFAULTS``: the words of the command line's argument besides
  the phase and ``quick``, each ``{word: (option, value)}``, and the options'
  defaults (``QUICK_CELL``: the options a quick check forces);
* ``DOCS_DIR``, ``QUICK_DIR``: where its phases report, one folder per cell
  (``cell_dir(cell)``, default the cell's words) and phase;
* ``PHASE_RUNS``: ``{phase: runs(s, cell)}``, each adding its runs to the study
  ``s`` (``configs/studies/base.py``): labels, configs, seeds, comparisons;
* optionally ``configure(s, cell)``: fields every phase shares (its tolerance,
  its networks).

A phase reads what came before only through the :class:`Cell` the engine hands
it: ``cell.read(phase)`` is an earlier report's ``summary.json`` (another
study's through ``cell.of(study, **options)``), and ``cell.seed_plan(...)`` sizes a report's fresh
seeds from the tuning seeds' spread (``seed_stats.seed_plan``). The study files
themselves do no I/O and no statistics, and never parse a label: a run's
hyperparameters are read from its config.

  python -m experiments.sweep --study configs/studies/evidence.py:coarse,base,shakespeare

runs one phase (``experiments/sweep.py``); with ``--phases`` the sweep runs a
cell's phases in order.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from configs.studies import base
from experiments import runlog, seed_stats


class Cell(dict):
  """A phase's options (``phase``, ``quick`` and the study's own), with the two
  things a phase may ask of the engine: an earlier report, a seed plan."""

  def __init__(self, module: Any, options: dict):
    super().__init__(options)
    self.module = module

  def read(self, phase: str) -> dict:
    """The ``summary.json`` of this cell's ``phase``, or a ``ValueError``
    naming the command that writes it."""
    module = self.module
    cell = self.of(phase=phase)
    path = os.path.join(report_dir(module, cell, phase), "summary.json")
    summary = runlog.read_summary(path)
    if summary is None:
      raise ValueError(
          f"the {module_name(module)} study's {phase!r} phase has no report at "
          f"{path}; run it first: python -m experiments.sweep --study "
          f"configs/studies/{module_name(module)}.py:{argument(module, cell)}"
      )
    return summary

  def of(self, study: Any = None, **options: Any) -> "Cell":
    """The cell of ``study`` (default this one's) with ``options`` changed,
    whose reports a phase reads (a schedule phase reads the evidence cell's)."""
    return Cell(study or self.module, {**self, **options})

  def seed_plan(
      self, sds: dict, tolerance: float, minimum: int, maximum: int, fixed: int | None = None
  ) -> dict:
    """``seed_stats.seed_plan`` at this cell's mode (a quick check: 2 seeds)."""
    return seed_stats.seed_plan(
        sds, tolerance, minimum, maximum, quick=self["quick"], fixed=fixed
    )


def module_name(module: Any) -> str:
  """``evidence`` for ``configs.studies.evidence``."""
  return module.__name__.rsplit(".", 1)[-1]


def is_phased(module: Any) -> bool:
  """Whether a study module declares phases (else its ``get_config(mode)``
  builds the whole study)."""
  return hasattr(module, "PHASE_RUNS")


def parse(module: Any, arg: str) -> Cell:
  """``"phase[,word...][,quick]"`` in any order: the phase (default ``report``),
  ``quick`` or ``full``, and the module's ``TOKENS``."""
  default = "report" if "report" in module.PHASES else module.PHASES[0]
  out = dict(phase=default, quick=False, **getattr(module, "DEFAULTS", {}))
  tokens = getattr(module, "TOKENS", {})
  for token in [t.strip() for t in (arg or "").split(",") if t.strip()]:
    if token in ("quick", "full"):
      out["quick"] = token == "quick"
    elif token in module.PHASES:
      out["phase"] = token
    elif token in tokens:
      option, value = tokens[token]
      out[option] = value
    else:
      raise ValueError(
          f"{module_name(module)} study: unknown token {token!r} in {arg!r}; expected "
          f"a phase {tuple(module.PHASES)}, one of {tuple(tokens)} or 'quick'"
      )
  if out["quick"]:
    out.update(getattr(module, "QUICK_CELL", {}))
  cell = Cell(module, out)
  check = getattr(module, "check_cell", None)
  if check is not None:
    check(cell)
  return cell


def cells(module: Any) -> list[str]:
  """The argument words of each cell of a study: its ``CELLS`` (tuples of
  words, ``("many", "python")``), or each word of its ``TOKENS`` (a worker
  count, a corpus), or one cell with none (``""``)."""
  if hasattr(module, "CELLS"):
    return [",".join(cell) for cell in module.CELLS]
  return list(getattr(module, "TOKENS", {})) or [""]


def words(module: Any, cell: dict) -> list[str]:
  """The module's words that ``cell`` holds (its regime, corpus, worker count)."""
  return [w for w, (o, v) in getattr(module, "TOKENS", {}).items() if cell.get(o) == v]


def argument(module: Any, cell: dict) -> str:
  """The command line's argument that builds ``cell``."""
  quick = ["quick"] if cell["quick"] else []
  return ",".join([cell["phase"]] + words(module, cell) + quick)


def phases(module: Any, cell: dict) -> tuple[str, ...]:
  """The phases ``cell`` runs, in order."""
  chosen = getattr(module, "phases", None)
  return tuple(chosen(cell)) if chosen else tuple(module.PHASES)


def report_dir(module: Any, cell: dict, phase: str) -> str:
  """``<DOCS_DIR or QUICK_DIR>/<cell_dir(cell)>/<phase>``."""
  root = module.QUICK_DIR if cell["quick"] else module.DOCS_DIR
  where: Callable = getattr(module, "cell_dir", None) or (
      lambda c: os.path.join("", *words(module, c))
  )
  return os.path.join(root, where(cell), phase)


def build(module: Any, arg: str = "") -> Any:
  """The study of one phase of ``module`` (``"phase[,word...][,quick]"``)."""
  cell = parse(module, arg)
  s = base.new_study(module.NAME.format(**cell), module.TITLE.format(**cell), cell["quick"])
  s.report_dir = report_dir(module, cell, cell["phase"])
  if hasattr(module, "TOLERANCE"):
    s.tolerance = module.TOLERANCE
  configure = getattr(module, "configure", None)
  if configure is not None:
    configure(s, cell)
  module.PHASE_RUNS[cell["phase"]](s, cell)
  return s


def load(spec: str, quick: bool = False) -> Any:
  """The study a command line names: ``path[:arg]``. A phased module is built
  by :func:`build`; any other by its ``get_config(arg)`` (``"full"`` or
  ``"quick"``). ``quick`` adds ``quick`` to the argument."""
  path, _, arg = spec.partition(":")
  module = base.load_module(path)
  if is_phased(module):
    return build(module, ",".join(x for x in (arg, "quick" if quick else "") if x))
  return module.get_config("quick" if quick else (arg or "full"))
