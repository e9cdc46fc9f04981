"""The run names of every study variant: a change of code must keep them.

  python -m experiments.study_names --out tests/data/study_run_names.json

A study's runs live in ``<root>/<algorithm>-<hash of the trajectory fields>``
(``sweep.run_dir``); finished runs are found again only if a config still
hashes to the same name. This lists, for every variant of every study in
``configs/studies`` that can be built from what is committed (a later evidence
phase reads its earlier phase's report in ``docs/studies``), how many runs it
has and a digest of their sorted names. ``tests/test_study_names.py`` holds
the committed list against the code.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json

from absl import app, flags

from experiments import engine, sweep

#: Studies whose argument is ``full`` or ``quick``.
SIMPLE = ("ablations", "attention", "decentralized", "heterogeneity")
#: Studies with phases (``experiments/engine.py``).
PHASED = (
    "evidence", "schedule", "compression", "compression_many", "gossip_g1", "gossip_g2",
    "noloco_n1", "recipe",
)


def variants() -> list[tuple[str, str]]:
  """``(study module, argument)`` of every variant: every phase of every cell
  (a phased study's ``CELLS``, else each of its ``TOKENS``, else none)."""
  out = [(name, mode) for name in SIMPLE for mode in ("full", "quick")]
  for name in PHASED:
    module = importlib.import_module(f"configs.studies.{name}")
    for phase, cell in itertools.product(module.PHASES, engine.cells(module)):
      out.append((name, ",".join(x for x in (phase, cell) if x)))
  return out


def names(module: str, arg: str) -> list[str]:
  """The sorted run names of one variant (``ValueError``/``OSError`` when it
  cannot be built from the committed reports)."""
  study = engine.load(f"configs/studies/{module}.py:{arg}")
  return sorted({workdir for *_, workdir in sweep.jobs(study, "")})


def manifest() -> dict:
  """``{"module:arg": {"runs": n, "sha256": digest}}`` for every variant that builds."""
  out = {}
  for module, arg in variants():
    try:
      listed = names(module, arg)
    except (ValueError, OSError, KeyError):
      continue  # a later phase of a cell whose earlier reports are not committed
    digest = hashlib.sha256("\n".join(listed).encode()).hexdigest()
    out[f"{module}:{arg}"] = dict(runs=len(listed), sha256=digest)
  return out


def main(argv):
  del argv
  with open(flags.FLAGS.out, "w") as f:
    json.dump(manifest(), f, indent=1, sort_keys=True)


if __name__ == "__main__":
  flags.DEFINE_string("out", None, "Where the JSON goes.")
  flags.mark_flag_as_required("out")
  app.run(main)
