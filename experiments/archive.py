"""A study's finished runs, kept across fresh checkouts as records in ``docs/runs``.

``runs/`` is not committed, and a phase's report (``<phase>/summary.json``) is
written only when all its runs are done, so a session that stops mid-phase would
lose its finished runs on a fresh checkout. This command keeps each settled run
(finished, or diverged) of a study as a record (``experiments/records.py``:
what ``sweep.is_finished`` and the reports read, no checkpoints), appended as a
new batch under ``docs/runs/<study>``; nothing committed is rewritten, and a
run another study's records already hold is not stored again. A phase whose
earlier phase has no report yet has no runs to keep, so the runs stop at the
first such phase.

An evidence cell's runs (``docs/runs/evidence_v2/<regime>_<corpus>``)::

  python -m experiments.archive many python            # record the cell's new runs
  python -m experiments.archive many python --restore  # write them into runs/studies
  python -m experiments.sweep --study configs/studies/evidence.py:many,python --phases report

Any other study file's runs the same way (``docs/runs/<file's name>``), every
phase of its ``PHASES`` that can be built, in each of its
cells (:func:`engine.cells`: N1's worker counts, G2's corpora)::

  python -m experiments.archive --study configs/studies/gossip_g1.py
  python -m experiments.archive --study configs/studies/gossip_g1.py --restore

Restoring writes the runs the study lists from the records of every study, so a
study that reuses another's runs (compression_many the evidence cell's frontier)
finds them; ``--restore`` alone writes every record. A run already in
``--root`` is left as it is.
"""

import os
from typing import Any

from absl import app, flags

from configs.studies import base, evidence
from experiments import cli, engine, records, sweep


def cell_name(regime: str, corpus: str) -> str:
  """The records folder of an evidence cell, named as its reports' folder
  (``evidence_v2/many_python``)."""
  return os.path.join(os.path.basename(evidence.DOCS_DIR), f"{regime}_{corpus}")


def study_name(path: str) -> str:
  """The records folder of a study file: its name (``gossip_g1``)."""
  return os.path.splitext(os.path.basename(path))[0]


def cell_workdirs(regime: str, corpus: str, root: str, quick: bool = False) -> list[str]:
  """The workdirs of every run of the cell's phases that can be built now (each
  phase needs the report of the one before it), in phase order, each once."""
  out = {}  # an ordered set: later phases share runs with earlier ones
  for phase in evidence.regime_phases(regime):
    try:
      study = engine.build(evidence, f"{phase},{regime},{corpus}" + (",quick" if quick else ""))
    except ValueError:  # an earlier phase has no report yet
      break
    out.update(dict.fromkeys(workdir for *_, workdir in sweep.jobs(study, root)))
  return list(out)


def study_workdirs(study: Any, root: str, quick: bool = False) -> list[str]:
  """The workdirs of every run of a study (its module, or its file's path): for
  each of its :func:`engine.cells`, of each phase of its ``PHASES`` (``engine.build(module, "<phase>[,<cell>][,quick]")``) up to the first
  whose earlier phase has no report yet; or of ``get_config()`` for a study
  without phases."""
  module = base.load_module(study) if isinstance(study, str) else study
  suffix = ",quick" if quick else ""
  phases = tuple(getattr(module, "PHASES", ()))
  if not phases:
    return _workdirs(module, ["quick" if quick else "full"], root)
  out = {}
  for cell in engine.cells(module):
    args = [",".join(w for w in (phase, cell) if w) + suffix for phase in phases]
    out.update(dict.fromkeys(_workdirs(module, args, root)))
  return list(out)


def _workdirs(module: Any, args: list[str], root: str) -> list[str]:
  """The workdirs of the study of each arg in order (``engine.build``, or
  ``get_config`` without phases), up to the first that cannot be built (an
  earlier phase has no report yet)."""
  out = {}
  for arg in args:
    try:
      study = engine.build(module, arg) if engine.is_phased(module) else module.get_config(arg)
    except ValueError:
      break
    out.update(dict.fromkeys(workdir for *_, workdir in sweep.jobs(study, root)))
  return list(out)


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> dict:
  """The command line's flags, in ``flag_values`` (defined when run as a
  program, so a test can parse its own)."""
  return dict(
      root=flags.DEFINE_string(
          "root", "runs/studies", "Where the runs' workdirs are.", flag_values=flag_values
      ),
      restore=flags.DEFINE_bool(
          "restore",
          False,
          "Write the runs from the records into --root instead.",
          flag_values=flag_values,
      ),
      study=flags.DEFINE_string(
          "study",
          None,
          "A study file whose phases' runs to keep.",
          flag_values=flag_values,
      ),
      records=flags.DEFINE_string(
          "records",
          records.RECORDS_DIR,
          "Where the records are.",
          flag_values=flag_values,
      ),
  )


_FLAGS: dict = {}
USAGE = (
    "usage: python -m experiments.archive <regime> <corpus> [--restore], or "
    "--study FILE [--restore], or --restore"
)


def main(argv):
  f = {name: holder.value for name, holder in _FLAGS.items()}
  root, records_dir = f["root"], f["records"]
  if len(argv) == 1 and f["restore"] and not f["study"]:
    print(f"{records.restore(root, records_dir)} runs restored into {root}")
    return
  if len(argv) == 1 and f["study"]:
    workdirs, name = study_workdirs(f["study"], root), study_name(f["study"])
  elif len(argv) == 3 and not f["study"]:
    regime, corpus = argv[1], argv[2]
    if regime not in evidence.REGIMES or corpus not in evidence.CORPORA:
      raise app.UsageError(
          f"unknown cell {regime} {corpus}: regime in {evidence.REGIMES}, "
          f"corpus in {evidence.CORPORA}"
      )
    workdirs, name = cell_workdirs(regime, corpus, root), cell_name(regime, corpus)
  else:
    raise app.UsageError(USAGE)
  if f["restore"]:
    names = [os.path.basename(w) for w in workdirs]
    print(f"{records.restore(root, records_dir, names)} runs restored into {root}")
  else:
    count, batch = records.add(workdirs, name, records_dir)
    print(f"{count} new finished runs recorded" + (f" in {batch}" if batch else ""))


if __name__ == "__main__":
  _FLAGS.update(define_flags())
  cli.run(main)
