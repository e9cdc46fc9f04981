"""Finished runs kept once, in append-only records committed under ``docs/runs``.

``runs/`` is not committed, so a fresh checkout has none of the runs a study
trained. A *record* keeps one settled run (finished, or diverged) with exactly
what the sweep and the reports read of it, and nothing else:

* ``name``: the workdir's basename, ``<algorithm>-<hash>`` (``sweep.run_dir``);
* ``seed`` and ``config`` (``config.json`` as stored, which the sweep compares
  with the study's config before it skips a finished run);
* ``rounds``: each row of ``metrics.jsonl`` with only :func:`keep_row`'s columns
  (the eval curve, the round trace, each round's ``H``);
* ``summary``: the summary line, for a finished run;
* ``final_eval``: ``final_eval.json`` (the per-document losses), where written;
* ``diverged``: ``diverged.json``, for a diverged run.

Records are stored in batches, ``docs/runs/<study>/<UTC time>-<count>.jsonl.xz``:
xz-compressed JSON lines, one record a line. xz, not gzip: the runs of a study
repeat each other's rows (same schedules, same clocks), which xz's window spans
and gzip's 32 KB does not (the 2,302 runs of the nine former archives take 2.4
MB as xz, one batch a study, where gzip took 25 MB). Each write adds a new
batch of the runs no batch under ``docs/runs`` holds yet; no batch is ever
rewritten, so git keeps each run once. A run two studies share is stored in the batch of the first to keep
it, and read from there by both: readers look across all of ``docs/runs``.
``experiments/archive.py`` is the command line.
"""

from __future__ import annotations

import datetime
import glob
import json
import lzma
import os
import shutil

from autoloco_jax.run import config_check
from autoloco_jax.run import metrics as metrics_lib
from experiments import runlog, sweep

#: Where the batches live (one folder per study).
RECORDS_DIR = os.path.join("docs", "runs")
SUFFIX = ".jsonl.xz"
#: The columns of a round row that are kept: ``runlog.load_run``'s eval curve
#: and round trace, the ``h`` and ``round`` that ``planner.h_sequence`` reads
#: (``time_to_target`` replays them), and each round's ``next_h`` and
#: ``peak_bandwidth``; also every ``sim_time_*`` column (:func:`keep_row`).
ROW_KEYS = tuple(
    dict.fromkeys(
        runlog.EVAL_KEYS + runlog.ROUND_KEYS + ("round", "h", "next_h", "peak_bandwidth")
    )
)
#: Columns kept by prefix: the clock on other networks, and the eval's numbers.
ROW_PREFIXES = ("sim_time_", "eval_")


def keep_row(row: dict) -> dict:
  """``row`` of ``metrics.jsonl`` with only the columns a reader uses
  (:data:`ROW_KEYS`, :data:`ROW_PREFIXES`): the per-round diagnostics (norms,
  losses, host timings) are read by none."""
  return {k: v for k, v in row.items() if k in ROW_KEYS or k.startswith(ROW_PREFIXES)}


def _read_json(path: str) -> dict | None:
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def from_workdir(workdir: str) -> dict:
  """The record of the settled run in ``workdir`` (module docstring).

  Raises:
    ValueError: the run is neither finished nor diverged.
  """
  if not sweep.is_settled(workdir):
    raise ValueError(f"{workdir} holds no settled run (neither finished nor diverged)")
  config = config_check.stored_config(workdir)
  path = os.path.join(workdir, "metrics.jsonl")
  rows = metrics_lib.read(path) if os.path.exists(path) else []  # diverged at once
  record = dict(name=os.path.basename(os.path.normpath(workdir)), seed=config["seed"])
  record["config"] = config
  if rows and rows[-1].get("summary"):
    record["summary"] = rows.pop()
  record["rounds"] = [keep_row(row) for row in rows]
  for key, name in (("final_eval", "final_eval.json"), ("diverged", sweep.DIVERGED)):
    content = _read_json(os.path.join(workdir, name))
    if content is not None:
      record[key] = content
  return record


def _write_json(path: str, content: dict) -> None:
  with open(path, "w") as f:
    json.dump(content, f, indent=2)


def to_workdir(record: dict, root: str) -> str:
  """Writes the run of ``record`` as ``<root>/<name>``, the files the sweep and
  the reports read (``config.json``, ``metrics.jsonl`` of the kept rows and the
  summary line, ``final_eval.json``, ``diverged.json``), and returns its path.
  A run dir already there is left untouched (this checkout's own run). The
  files are written in a temporary folder renamed at the end, so a stopped
  restore leaves no half run that would count as present."""
  workdir = os.path.join(root, record["name"])
  if os.path.exists(workdir):
    return workdir
  tmp = os.path.join(root, f".{record['name']}.tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  _write_json(os.path.join(tmp, config_check.CONFIG_FILE), record["config"])
  rows = record["rounds"] + ([record["summary"]] if "summary" in record else [])
  with open(os.path.join(tmp, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(row) + "\n" for row in rows)
  if "final_eval" in record:
    _write_json(os.path.join(tmp, "final_eval.json"), record["final_eval"])
  if "diverged" in record:
    _write_json(os.path.join(tmp, sweep.DIVERGED), record["diverged"])
  os.rename(tmp, workdir)
  return workdir


def batches(records_dir: str = RECORDS_DIR) -> list[str]:
  """Every batch under ``records_dir`` (all studies), oldest first: batch names
  start with their UTC time."""
  paths = glob.glob(os.path.join(records_dir, "**", "*" + SUFFIX), recursive=True)
  return sorted(paths, key=os.path.basename)


def read_batch(path: str) -> list[dict]:
  """The records of one batch."""
  with lzma.open(path, "rt") as f:
    return [json.loads(line) for line in f if line.strip()]


def read(records_dir: str = RECORDS_DIR) -> dict[str, dict]:
  """Every record under ``records_dir``, by name. Where two batches hold a
  run (one that diverged, then was trained again and finished: :func:`add`),
  the later batch's record is the run's."""
  out = {}
  for path in batches(records_dir):
    out.update((record["name"], record) for record in read_batch(path))
  return out


def write_batch(records: list[dict], folder: str) -> str:
  """Writes ``records`` as a new batch in ``folder`` and returns its path. An
  existing batch is never overwritten (its name holds the time to the
  microsecond); the batch appears whole or not at all."""
  os.makedirs(folder, exist_ok=True)
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
  path = os.path.join(folder, f"{stamp}-{len(records)}{SUFFIX}")
  if os.path.exists(path):
    raise FileExistsError(f"{path} exists: batches are never rewritten")
  text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
  with open(path + ".tmp", "xb") as f:
    f.write(lzma.compress(text.encode(), preset=9))
  os.rename(path + ".tmp", path)
  return path


def new_runs(workdirs: list[str], held: dict[str, dict]) -> list[str]:
  """Those of ``workdirs`` (each once) that no record in ``held`` keeps: a
  settled run with no record, or a finished run whose record says it diverged
  (its ``diverged.json`` deleted and the run trained again)."""
  out = []
  for workdir in dict.fromkeys(workdirs):
    record = held.get(os.path.basename(os.path.normpath(workdir)))
    if record is None and sweep.is_settled(workdir):
      out.append(workdir)
    elif record is not None and "diverged" in record and sweep.is_finished(workdir):
      out.append(workdir)
  return out


def add(
    workdirs: list[str], study: str, records_dir: str = RECORDS_DIR
) -> tuple[int, str | None]:
  """Records the runs of ``workdirs`` that no record under ``records_dir`` keeps
  (:func:`new_runs`) as one new batch in ``<records_dir>/<study>``. Returns how
  many, and the batch's path (None when there were none: no batch is written)."""
  todo = new_runs(workdirs, read(records_dir))
  if not todo:
    return 0, None
  batch = [from_workdir(w) for w in todo]
  return len(batch), write_batch(batch, os.path.join(records_dir, study))


def restore(
    root: str, records_dir: str = RECORDS_DIR, names: list[str] | None = None
) -> int:
  """Writes the runs of the records under ``records_dir`` into ``root``
  (:func:`to_workdir`): those named in ``names``, or all. A run already in
  ``root`` is left as it is. Returns how many runs were added."""
  os.makedirs(root, exist_ok=True)
  held = read(records_dir)
  wanted = held if names is None else [n for n in dict.fromkeys(names) if n in held]
  added = 0
  for name in wanted:
    if not os.path.exists(os.path.join(root, name)):
      to_workdir(held[name], root)
      added += 1
  return added
