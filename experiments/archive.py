"""One evidence cell's finished runs, kept across fresh checkouts.

A phase's report (``<phase>/summary.json``) is written only when all its runs are
done, and ``runs/`` is not committed, so a session that stops mid-phase would lose
its finished runs on a fresh checkout. The archive holds the small files of every
finished run of the cell's phases (``config.json``, ``metrics.jsonl``,
``final_eval.json``, and ``diverged.json`` for a run that diverged; no checkpoints), which is all ``sweep.is_finished`` and the
reports read. A phase whose earlier phase has no report yet has no runs to keep,
so the archive stops at the first such phase.

  python -m experiments.archive many python            # write the cell's archive
  python -m experiments.archive many python --restore  # unpack it into runs/studies
  EVIDENCE_FROM=report experiments/evidence.sh many python

The archive is ``docs/studies/evidence_v2/<regime>_<corpus>/finished_runs.tar.xz``
(``--file`` for another, ``--root`` for another runs folder). Any other study
file's runs the same way, every phase of its ``PHASES`` that can be built, in
each of its cells (:func:`cells`: N1's worker counts, G2's corpora)::

  python -m experiments.archive --study configs/studies/gossip_g1.py \
      --file docs/studies/gossip_g1/finished_runs.tar.xz
  python -m experiments.archive --restore --file docs/studies/gossip_g1/finished_runs.tar.xz

A study that reuses an evidence cell's runs (its frontier, its fresh seeds) can
leave them to that cell's archive, restored first::

  python -m experiments.archive --study configs/studies/compression_many.py \
      --file docs/studies/compression_many/finished_runs.tar.xz \
      --leave_out docs/studies/evidence_v2/many_python/finished_runs.tar.xz
"""

import os
import tarfile
from typing import Any

from absl import app, flags

from configs.studies import base, evidence
from experiments import sweep

#: The files of a finished run that the sweep and the reports read.
RUN_FILES = ("config.json", "metrics.jsonl", "final_eval.json", sweep.DIVERGED)


def path(regime: str, corpus: str, quick: bool = False) -> str:
  """Where the cell's archive lives, beside its phases' reports."""
  cell = os.path.dirname(evidence.report_dir("report", regime, corpus, quick))
  return os.path.join(cell, "finished_runs.tar.xz")


def cell_workdirs(regime: str, corpus: str, root: str, quick: bool = False) -> list[str]:
  """The workdirs of every run of the cell's phases that can be built now (each
  phase needs the report of the one before it), in phase order, each once."""
  out = {}  # an ordered set: later phases share runs with earlier ones
  for phase in evidence.regime_phases(regime):
    try:
      study = evidence.study(f"{phase},{regime},{corpus}" + (",quick" if quick else ""))
    except ValueError:  # an earlier phase has no report yet
      break
    out.update(dict.fromkeys(workdir for *_, workdir in sweep.jobs(study, root)))
  return list(out)


def cells(module: Any) -> list[str]:
  """The argument words of each cell of a phased study: its ``CELLS`` (tuples of
  words, ``("many", "python")``), or each word of its ``TOKENS`` (a worker
  count, a corpus), or one cell with none."""
  if hasattr(module, "CELLS"):
    return [",".join(cell) for cell in module.CELLS]
  return list(getattr(module, "TOKENS", {})) or [""]


def study_workdirs(study: Any, root: str, quick: bool = False) -> list[str]:
  """The workdirs of every run of a study (its module, or its file's path): for
  each of its :func:`cells`, of each phase of its ``PHASES`` and then its
  ``ABLATIONS`` (``get_config("<phase>[,<cell>][,quick]")``) up to the first
  whose earlier phase has no report yet; or of ``get_config()`` for a study
  without phases."""
  module = base.load_module(study) if isinstance(study, str) else study
  suffix = ",quick" if quick else ""
  phases = tuple(getattr(module, "PHASES", ())) + tuple(getattr(module, "ABLATIONS", ()))
  if not phases:
    return _workdirs(module, ["quick" if quick else "full"], root)
  out = {}
  for cell in cells(module):
    args = [",".join(w for w in (phase, cell) if w) + suffix for phase in phases]
    out.update(dict.fromkeys(_workdirs(module, args, root)))
  return list(out)


def _workdirs(module: Any, args: list[str], root: str) -> list[str]:
  """The workdirs of ``module.get_config(arg)`` for each arg in order, up to the
  first that cannot be built (an earlier phase has no report yet)."""
  out = {}
  for arg in args:
    try:
      study = module.get_config(arg)
    except ValueError:
      break
    out.update(dict.fromkeys(workdir for *_, workdir in sweep.jobs(study, root)))
  return list(out)


def write(regime: str, corpus: str, root: str, out: str | None = None, quick: bool = False) -> int:
  """Archive the cell's finished runs under ``root`` into ``out`` (default
  ``path(...)``); returns how many runs it holds."""
  out = out or path(regime, corpus, quick)
  return write_runs(cell_workdirs(regime, corpus, root, quick), out)


def runs_in(archive_file: str) -> set[str]:
  """The names of the runs (workdir basenames) an archive holds."""
  with tarfile.open(archive_file, "r:xz") as tar:
    return {member.name.split("/")[0] for member in tar.getmembers()}


def write_runs(workdirs: list[str], out: str, leave_out: tuple[str, ...] = ()) -> int:
  """Archive the finished ones of ``workdirs`` into ``out``, except the runs
  that the archives ``leave_out`` already hold (a study that reuses an evidence
  cell's runs restores that cell's archive first, so it need not hold them
  twice); returns how many it holds."""
  held = set().union(*(runs_in(a) for a in leave_out))
  finished = [
      w for w in workdirs if sweep.is_settled(w) and os.path.basename(w) not in held
  ]
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  tmp = out + ".tmp"
  with tarfile.open(tmp, "w:xz") as tar:
    for workdir in finished:
      for name in RUN_FILES:
        if os.path.exists(os.path.join(workdir, name)):
          tar.add(os.path.join(workdir, name), arcname=f"{os.path.basename(workdir)}/{name}")
  os.replace(tmp, out)  # never a half-written archive in place of the old one
  return len(finished)


def restore(source: str, root: str) -> int:
  """Unpack an archive into ``root``; a run already there is left as it is.
  Returns how many runs were added."""
  os.makedirs(root, exist_ok=True)
  present = set(os.listdir(root))  # this checkout's own runs: kept whole
  added = set()
  with tarfile.open(source, "r:xz") as tar:
    for member in tar.getmembers():
      run = member.name.split("/")[0]
      if member.isfile() and run not in present:
        tar.extract(member, root, filter="data")
        added.add(run)
  return len(added)


def main(argv):
  if FLAGS.leave_out and not FLAGS.study:
    raise app.UsageError("--leave_out is for writing a study's archive (--study)")
  if FLAGS.study or (FLAGS.restore and FLAGS.file and len(argv) == 1):
    if not FLAGS.file:
      raise app.UsageError("--study needs --file, the archive to write")
    if FLAGS.restore:
      print(f"{restore(FLAGS.file, FLAGS.root)} runs restored from {FLAGS.file}")
    else:
      count = write_runs(
          study_workdirs(FLAGS.study, FLAGS.root), FLAGS.file, tuple(FLAGS.leave_out)
      )
      print(f"{count} finished runs archived in {FLAGS.file}")
    return
  if len(argv) != 3:
    raise app.UsageError(
        "usage: python -m experiments.archive <regime> <corpus> [--restore], or "
        "--study FILE --file ARCHIVE, or --restore --file ARCHIVE"
    )
  regime, corpus = argv[1], argv[2]
  if regime not in evidence.REGIMES or corpus not in evidence.CORPORA:
    raise app.UsageError(
        f"unknown cell {regime} {corpus}: regime in {evidence.REGIMES}, corpus in {evidence.CORPORA}"
    )
  archive = FLAGS.file or path(regime, corpus)
  if FLAGS.restore:
    print(f"{restore(archive, FLAGS.root)} runs restored from {archive} into {FLAGS.root}")
  else:
    count = write(regime, corpus, FLAGS.root, archive)
    print(f"{count} finished runs archived in {archive}")


FLAGS = flags.FLAGS
flags.DEFINE_string("root", "runs/studies", "Where the runs' workdirs are.")
flags.DEFINE_bool("restore", False, "Unpack the cell's archive into --root instead.")
flags.DEFINE_string("file", None, "The archive (default: the cell's, beside its reports).")
flags.DEFINE_string("study", None, "A study file whose phases' runs to archive.")
flags.DEFINE_multi_string(
    "leave_out", [], "With --study: archives whose runs this one leaves out "
    "(restore them before this one)."
)

if __name__ == "__main__":
  app.run(main)
