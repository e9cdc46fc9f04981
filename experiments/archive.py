"""One evidence cell's finished runs, kept across fresh checkouts.

A phase's report (``<phase>/summary.json``) is written only when all its runs are
done, and ``runs/`` is not committed, so a session that stops mid-phase would lose
its finished runs on a fresh checkout. The archive holds the small files of every
finished run of the cell's phases (``config.json``, ``metrics.jsonl``,
``final_eval.json``; no checkpoints), which is all ``sweep.is_finished`` and the
reports read. A phase whose earlier phase has no report yet has no runs to keep,
so the archive stops at the first such phase.

  python -m experiments.archive many python            # write the cell's archive
  python -m experiments.archive many python --restore  # unpack it into runs/studies
  EVIDENCE_FROM=report experiments/evidence.sh many python

The archive is ``docs/studies/evidence_v2/<regime>_<corpus>/finished_runs.tar.xz``
(``--file`` for another, ``--root`` for another runs folder).
"""

import os
import tarfile

from absl import app, flags

from configs.studies import evidence
from experiments import sweep

#: The files of a finished run that the sweep and the reports read.
RUN_FILES = ("config.json", "metrics.jsonl", "final_eval.json")


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


def write(regime: str, corpus: str, root: str, out: str | None = None, quick: bool = False) -> int:
  """Archive the cell's finished runs under ``root`` into ``out`` (default
  ``path(...)``); returns how many runs it holds."""
  out = out or path(regime, corpus, quick)
  finished = [w for w in cell_workdirs(regime, corpus, root, quick) if sweep.is_finished(w)]
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
  if len(argv) != 3:
    raise app.UsageError("usage: python -m experiments.archive <regime> <corpus> [--restore]")
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

if __name__ == "__main__":
  app.run(main)
