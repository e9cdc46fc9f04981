"""Runs a study (configs x seeds), resumably, and writes its report.

  python -m experiments.sweep --study configs/studies/heterogeneity.py \
      --report_dir docs/studies/heterogeneity
  python -m experiments.sweep --study configs/studies/decentralized.py --quick
  python -m experiments.sweep --study configs/studies/evidence.py:base,shakespeare,quick \
      --phases all

A phased study (``experiments/engine.py`` builds it) runs one phase per
command (``--study configs/studies/<name>.py:<phase>,<words>``), or, with
``--phases``, the cell's phases in order, each when the one before has
reported; ``--copies 2`` runs each phase by two sweeps pinned one per core.

Every run is an ordinary training job (``trainer.train_and_evaluate``) in
``<root>/<algorithm>-<hash>``, where the hash is that of the config's
trajectory fields (seed included): a run that two studies share (DiLoCo at
H_ref is in three) is trained once. Finished runs are skipped; an interrupted
run resumes from its checkpoint; Ctrl-C or SIGTERM saves a checkpoint and stops
the study, and the same command goes on from there. A run that diverges (a
non-finite loss or norm: ``FloatingPointError``) is a result, not a crash: its
workdir keeps ``diverged.json`` (the error), the study goes on, and the report
leaves that label out and names it (a grid point that diverges is not chosen);
a label the report needs (a reference, the frontier, a comparison) that
diverged is an error. Delete ``diverged.json`` to train that run again. When every run is done,
``experiments/report.py`` writes ``results.md`` (tables, claims), PNG plots and
``summary.json`` (each run's final numbers and curves) to ``--report_dir``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging as py_logging
import os
import sys
import time
from typing import Any, Iterator

import filelock
from absl import app, flags

from autoloco_jax.run import config_check, trainer
from configs.studies import base as study_base
from experiments import cli, engine, report


def define_flags() -> dict:
  """The command line's flags (defined when run as a program, so importing this
  module next to other absl programs, as the tests do, defines nothing)."""
  out = dict(
      study=flags.DEFINE_string(
          "study",
          None,
          "A study file and its argument: configs/studies/<name>.py[:phase,words][,quick].",
      ),
      phases=flags.DEFINE_list(
          "phases",
          [],
          "Run these phases of the study's cell in order (`all`: every phase the "
          "cell has), each starting when the one before has reported.",
      ),
      copies=flags.DEFINE_integer(
          "copies",
          1,
          "Sweeps per phase, each a process pinned to one core, sharing the "
          "phase's runs by locks (on 2 cores, 2 finish a batch 1.47x sooner: "
          "docs/parallel_runs.json).",
      ),
      root=flags.DEFINE_string("root", "runs/studies", "Where the runs' workdirs go."),
      quick=flags.DEFINE_bool(
          "quick",
          False,
          "The study's quick mode (tiny runs, one seed: checks the "
          "pipeline, not the numbers); the same as --study=<file>:quick.",
      ),
      report_only=flags.DEFINE_bool(
          "report_only",
          False,
          "Train nothing: write the report from finished runs, "
          "or fail naming the runs that are missing.",
      ),
      complete_seeds=flags.DEFINE_bool(
          "complete_seeds",
          False,
          "Train nothing: an interim report over the seeds on which every "
          "label is finished (default --report_dir: the study's, plus /interim).",
      ),
      report_dir=flags.DEFINE_string(
          "report_dir",
          "",
          "Where results.md, the plots and summary.json go; "
          "default the study's own report_dir, else "
          "<root>/<study name>-report (or -quick-report).",
      ),
  )
  flags.mark_flags_as_required(["study"])
  return out


_FLAGS: dict = {}


class Interrupted(Exception):
  """A signal stopped a run; its checkpoint is saved."""


def run_dir(root: str, config: Any) -> str:
  """``<root>/<algorithm>-<hash>``: one directory per distinct trajectory.

  Empty fields (``()``, ``""``, ``None``) and fields added later at the value
  runs had before they existed (``config_check.VALUES_BEFORE_THE_FIELD``) are
  left out of the hash, so adding a field to the configs keeps finished runs'
  names."""
  added = config_check.VALUES_BEFORE_THE_FIELD
  fields = {
      k: v
      for k, v in config_check.trajectory_fields(config).items()
      if v not in ([], (), "", None) and not (k in added and v == added[k])
  }
  digest = hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
  return os.path.join(root, f"{config.algorithm}-{digest}")


@contextlib.contextmanager
def run_lock(workdir: str, wait: bool) -> Iterator[bool]:
  """An exclusive lock (``filelock``) on ``<workdir>.lock`` for as long as the
  block runs.

  Yields True when held; with ``wait=False`` yields False at once when another
  process holds it. The lock file stays (an empty file); the lock itself goes
  with the process that held it, however that process ends."""
  os.makedirs(os.path.dirname(os.path.abspath(workdir)), exist_ok=True)
  lock = filelock.FileLock(workdir + ".lock", blocking=wait)
  try:
    lock.acquire()
  except filelock.Timeout:
    yield False
    return
  try:
    yield True
  finally:
    lock.release()


DIVERGED = "diverged.json"


def diverged(workdir: str) -> str | None:
  """The error that stopped a diverged run in ``workdir``, else None."""
  path = os.path.join(workdir, DIVERGED)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)["error"]


def _without_diverged(study: Any, todo: list) -> Any:
  """The study without its labels that diverged on some seed, each named in its
  ``diverged`` field; raises ``ValueError`` if the report needs such a label
  (a reference of another label, the frontier, a comparison, a claim)."""
  out = {}
  for label, seed, _, workdir in todo:
    error = diverged(workdir)
    if error is not None and label not in out:
      out[label] = f"seed {seed}: {error}"
  if not out:
    return study
  needed = set(study.reference.values()) | set(study.frontier)
  needed |= {x for pair in study.get("comparisons", ()) for x in pair}
  needed |= set(study.get("syncs_saved", ()))
  for c in study.claims.values():
    needed |= {c.reference, c.candidate}
  lost = sorted(needed & set(out))
  if lost:
    raise ValueError(
        f"study {study.name!r}: runs the report needs diverged: "
        + "; ".join(f"{label} ({out[label]})" for label in lost)
    )
  kept = study.copy_and_resolve_references()
  # The command line locks its study (config_flags): the copy keeps the lock.
  with kept.unlocked():
    kept.labels = tuple(label for label in study.labels if label not in out)
    for label in out:
      del kept.runs[label]
      if label in kept.reference:
        del kept.reference[label]
    kept.diverged = tuple(f"{label}, {why}" for label, why in out.items())
  return kept


def is_settled(workdir: str) -> bool:
  """True if the run in ``workdir`` needs no more training: finished, or
  diverged."""
  return is_finished(workdir) or diverged(workdir) is not None


def is_finished(workdir: str) -> bool:
  """True if ``workdir/metrics.jsonl`` ends with a run's summary line, written
  by a trainer that logs its final evaluation's size (``final_eval_tokens``).
  An older summary (the first 8 KB eval) counts as unfinished: training it
  again resumes from its last checkpoint, at the end, and runs only the final
  evaluation."""
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return False
  with open(path, "rb") as f:
    lines = f.read().splitlines()
  if not lines:
    return False
  try:
    last = json.loads(lines[-1])
  except json.JSONDecodeError:
    return False
  return (
      bool(last.get("summary"))
      and not last.get("preempted")
      and "final_eval_tokens" in last
  )


def check_study(study: Any) -> None:
  """Raises ``ValueError`` on a malformed study: labels and runs disagree, or a
  reference, claim or frontier names a label that is not in it."""
  labels = tuple(study.labels)
  if not labels:
    raise ValueError(f"study {study.name!r} has no runs")
  if sorted(labels) != sorted(study.runs.keys()) or len(set(labels)) != len(labels):
    raise ValueError(
        f"study {study.name!r}: labels {labels} do not match runs "
        f"{sorted(study.runs.keys())}"
    )
  if not study.seeds:
    raise ValueError(f"study {study.name!r} has no seeds")
  named = list(study.reference.values()) + list(study.frontier)
  for candidate, reference in study.get("comparisons", ()):
    named += [candidate] + ([] if reference == "frontier" else [reference])
  for claim in study.claims.values():
    named += [claim.reference, claim.candidate]
  unknown = sorted(set(named) - set(labels))
  if unknown:
    raise ValueError(f"study {study.name!r} refers to runs it does not have: {unknown}")


def jobs(study: Any, root: str) -> list[tuple[str, int, Any, str]]:
  """``(label, seed, config, workdir)`` of every run, in report order."""
  out = []
  for label in study.labels:
    for seed in study.seeds:
      config = study.runs[label].copy_and_resolve_references()
      config.seed = int(seed)
      out.append((label, int(seed), config, run_dir(root, config)))
  return out


def training_order(todo: list[tuple[str, int, Any, str]]) -> list:
  """The jobs seed by seed, each seed's labels in report order: a study stopped
  before its end holds whole seeds, each one a complete paired set (every label
  on the same seed), where label by label it would hold some labels on every
  seed and others on none. The order changes no run (each is its own trajectory)."""
  return sorted(todo, key=lambda job: job[1])


def with_complete_seeds(study: Any, root: str) -> Any:
  """``study`` cut to its seeds on which every label's run is finished, for an
  interim report of a study stopped before its end: each seed kept is a complete
  paired set, and ``study.interim`` says how many of the planned seeds it holds.
  Raises ``ValueError`` with fewer than two such seeds (no interval)."""
  unfinished = {seed for _, seed, _, workdir in jobs(study, root) if not is_finished(workdir)}
  seeds = tuple(int(seed) for seed in study.seeds if int(seed) not in unfinished)
  if len(seeds) < 2:
    raise ValueError(
        f"study {study.name!r}: {len(seeds)} seeds have every label finished; "
        "an interim report needs at least 2"
    )
  out = study.copy_and_resolve_references()
  with out.unlocked():
    out.seeds = seeds
    out.interim = f"{len(seeds)} of the planned {len(study.seeds)} seeds"
  return out


def _train_one(name: str, label: str, seed: int, config: Any, workdir: str, write) -> bool:
  """Trains one run of study ``name`` unless it is settled; True if it trained.
  ``write`` prints a line (the progress bar's). A divergence is recorded in
  ``diverged.json``; a finished run of another config and a stopped run raise."""
  if is_finished(workdir):
    changed = config_check.changed_fields(config, workdir)
    if changed:
      raise ValueError(
          f"{workdir} holds a finished run of another config "
          f"({', '.join(changed)}); delete it or use another --root"
      )
    return False
  if diverged(workdir) is not None:
    return False
  try:
    summary = trainer.train_and_evaluate(config, workdir)
  except FloatingPointError as e:
    with open(os.path.join(workdir, DIVERGED), "w") as f:
      json.dump(dict(error=str(e)), f)
    write(f"{name}: {label} seed {seed}: diverged: {e}")
    return False
  if summary.get("preempted"):
    raise Interrupted(f"{label} seed {seed} stopped at step {summary['step']}")
  write(
      f"{name}: {label} seed {seed}: final eval "
      f"{summary['final_eval_bpb']:.4f} bits/byte, {summary['syncs']} syncs, "
      f"wall {summary['wall_time']:.0f} s"
  )
  return True


def run_study(
    study: Any,
    root: str,
    report_dir: str,
    progress: bool = True,
    report_only: bool = False,
) -> dict:
  """Trains every run of ``study`` not yet finished, then writes the report.

  Returns the report's summary (``report.collect``). Raises
  :class:`Interrupted` when a signal stopped a run (its checkpoint is saved),
  ``ValueError`` when a finished run's stored config no longer matches the
  study's (delete that directory, or change ``--root``), or, with
  ``report_only``, when a run is not finished.
  """
  from tqdm.auto import tqdm

  check_study(study)
  todo = jobs(study, root)
  missing = [
      f"{label} seed {seed} ({w})"
      for label, seed, _, w in todo
      if not is_settled(w)
  ]
  if report_only and missing:
    raise ValueError(
        f"report_only: {len(missing)} runs are not finished: " + "; ".join(missing)
    )
  done_before = len(todo) - len(missing)
  bar = tqdm(
      total=len(todo),
      initial=0,
      unit="run",
      disable=not progress,
      desc=study.name,
      dynamic_ncols=True,
  )
  t0 = time.time()
  trained = 0

  # Several sweeps may share a root (the same study started twice on a machine with
  # cores to spare, or two studies that share runs): each run is trained under an
  # exclusive lock on ``<workdir>.lock``. A run another process holds is skipped on
  # the first pass and waited for on the second (and trained there if that process
  # died before finishing it: the kernel drops a dead process's locks).
  try:
    busy = []
    for job in training_order(todo):
      bar.set_postfix_str(f"{job[0]} seed {job[1]}")
      with run_lock(job[3], wait=False) as held:
        if not held:
          busy.append(job)
          continue
        trained += _train_one(study.name, *job, bar.write)
      bar.update(1)
    for job in busy:
      bar.set_postfix_str(f"waiting for {job[0]} seed {job[1]}")
      with run_lock(job[3], wait=True):
        trained += _train_one(study.name, *job, bar.write)
      bar.update(1)
  finally:
    bar.close()
  print(
      f"{study.name}: {trained} runs trained, {done_before} already finished, "
      f"{time.time() - t0:.0f} s",
      flush=True,
  )
  study = _without_diverged(study, todo)
  runs = {
      label: [report.load_run(w, seed) for l, seed, _, w in todo if l == label]
      for label in study.labels
  }
  return report.write_report(study, runs, report_dir)


def phase_args(spec: str, phases: list[str]) -> list[str]:
  """``path:phase,words`` for each of ``phases`` (``all``: every phase the
  cell runs), the words of ``spec``'s argument kept."""
  path, _, arg = spec.partition(":")
  module = study_base.load_module(path)
  if not engine.is_phased(module):
    raise ValueError(f"--phases: {path} has no phases")
  tokens = [t for t in arg.split(",") if t.strip() and t.strip() not in module.PHASES]
  if phases == ["all"]:
    phases = list(engine.phases(module, engine.parse(module, ",".join(tokens))))
  unknown = [p for p in phases if p not in module.PHASES]
  if unknown:
    raise ValueError(f"--phases: {unknown} are not phases of {path}: {module.PHASES}")
  return [f"{path}:{','.join([phase] + tokens)}" for phase in phases]


def run_copies(spec: str, copies: int, argv: list[str]) -> None:
  """One phase by ``copies`` sweeps, each pinned to a core where there are
  enough (``os.sched_setaffinity``), sharing its runs by locks; raises
  ``RuntimeError`` if one fails (the next phase would read its report)."""
  import subprocess

  cores = sorted(os.sched_getaffinity(0))
  procs = []
  for i in range(copies):
    pin = {cores[i]} if copies <= len(cores) else None
    cmd = [sys.executable, "-m", "experiments.sweep", f"--study={spec}", *argv]
    procs.append(
        subprocess.Popen(cmd, preexec_fn=(lambda p=pin: os.sched_setaffinity(0, p)) if pin else None)
    )
    time.sleep(1)
  failed = [p.args for p in procs if p.wait() != 0]
  if failed:
    raise RuntimeError(f"{len(failed)} of {copies} sweeps of {spec} failed")


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from experiments.run import _QuietLibraries
  from absl import logging

  logging.get_absl_handler().addFilter(_QuietLibraries())
  logging.set_verbosity(logging.WARNING)
  # Studies keep one CPU device, whatever the machine's cores, so their runs stay
  # comparable (an XLA_FLAGS of the user's wins).
  from autoloco_jax.run import distributed

  distributed.set_host_devices(1)
  f = {name: holder.value for name, holder in _FLAGS.items()}
  specs = phase_args(f["study"], f["phases"]) if f["phases"] else [f["study"]]
  passed = [f"--root={f['root']}"] + (["--quick"] if f["quick"] else [])
  for spec in specs:
    if f["copies"] > 1:
      run_copies(spec, f["copies"], passed)
    else:
      run_one(engine.load(spec, quick=f["quick"]), f)


def run_one(study: Any, f: dict) -> None:
  """Trains one phase (or a study without phases) and writes its report."""
  report_dir = (
      f["report_dir"]
      or study.get("report_dir")
      or os.path.join(f["root"], f"{study.name}{'-quick' if study.quick else ''}-report")
  )
  if f["complete_seeds"]:
    study = with_complete_seeds(study, f["root"])
    report_dir = f["report_dir"] or os.path.join(report_dir, "interim")
  report_only = f["report_only"] or f["complete_seeds"]
  try:
    run_study(study, f["root"], report_dir, report_only=report_only)
  except Interrupted as e:
    print(f"Interrupted: {e}. Run the same command to go on.", flush=True)
    sys.exit(1)
  print(f"Report: {os.path.join(report_dir, 'results.md')}", flush=True)


if __name__ == "__main__":
  _FLAGS.update(define_flags())
  py_logging.getLogger("jax").setLevel(py_logging.WARNING)
  cli.run(main)
