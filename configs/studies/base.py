"""How a study is put together: its runs, seeds, references and claims.

A study is an ``ml_collections.ConfigDict`` read by ``experiments/sweep.py``
(a phased study's module builds one per phase through ``experiments/engine.py``):

* ``name``, ``title``: the report's folder name and heading;
* ``seeds``: every run is trained once per seed;
* ``labels``: the runs in report order, ``runs[label]``: each run's training
  config (an ordinary config of ``configs/``, so any run can be repeated alone
  with ``experiments.run``);
* ``reference[label]``: the run a label is compared to in the table (loss
  difference, sync and simulated-time ratios);
* ``claims[name]``: ``reference``, ``candidate``, ``min_saving``: "the
  candidate needs at least ``min_saving`` fewer syncs than the reference with a
  final eval loss no worse than the reference's mean plus its seed spread";
  ``frontier``: labels whose (syncs, loss) points form the fixed-H frontier the
  candidate is compared to at equal syncs;
* ``networks``: the networks whose simulated time is plotted (every run logs
  the homogeneous and the heterogeneous one).

Sizes: the full studies use the ``study`` size of ``configs/common.py`` (2
layers, d_model 128, 64-byte sequences, 8 sequences per worker and step, 600
inner steps, H_ref = 20: about a minute per run on 2 CPU cores); ``quick``
mode uses ``tiny`` with 40 steps and one seed, to check the pipeline, not the
numbers.
"""

from typing import Any

import ml_collections

from configs import autoloco, common, ddp, diloco, gasloc, gossip_adamw, noloco

ALGORITHMS = dict(
    autoloco=autoloco,
    ddp=ddp,
    diloco=diloco,
    gasloc=gasloc,
    gossip_adamw=gossip_adamw,
    noloco=noloco,
)

#: Simulated seconds of one inner step of one worker with 8 sequences of the
#: ``study`` model (about what a worker takes on these cores); the clock scales
#: it with the per-worker batch. Fixed, so simulated times do not depend on load.
STEP_TIME = 0.02

SEEDS = (0, 1, 2)


def new_study(name: str, title: str, quick: bool) -> ml_collections.ConfigDict:
  s = ml_collections.ConfigDict()
  s.name = name
  s.title = title
  s.quick = quick
  s.seeds = (0,) if quick else SEEDS
  s.labels = ()
  s.runs = ml_collections.ConfigDict()
  s.reference = ml_collections.ConfigDict()
  s.claims = ml_collections.ConfigDict()
  s.frontier = ()
  s.networks = ("homogeneous", "hetero")
  return s


def run_config(
    algorithm: str, quick: bool, **overrides: Any
) -> ml_collections.ConfigDict:
  """The ``algorithm``'s config at the study (or quick) size, with ``overrides``
  given as dotted field names written with ``__`` (``interval__h=40``)."""
  c = ALGORITHMS[algorithm].get_config("tiny" if quick else "study")
  c.network.also = ("hetero",)
  c.log.progress = False
  c.log.tensorboard = False
  c.checkpoint.every_rounds = 10
  if quick:
    c.eval.every_steps = 20
    c.eval.num_batches = 1
    # One device, as the study's runs have (a sweep's process sees one CPU
    # device); the tests show four (tests/conftest.py), over which a quick
    # study's programs took 12-15% longer to build (docs/performance.md).
    c.num_devices = 1
  for name, value in overrides.items():
    common.set_field(c, name.replace("__", "."), value)
  c.network.step_time = STEP_TIME * c.data.batch_size / 8
  return c


def add_run(
    study: ml_collections.ConfigDict,
    label: str,
    config: ml_collections.ConfigDict,
    reference: str = "",
) -> None:
  """Appends a run to ``study`` (its label keeps the report order)."""
  if label in study.runs:
    raise ValueError(f"duplicate run label {label!r}")
  study.runs[label] = config
  study.labels = tuple(study.labels) + (label,)
  if reference:
    study.reference[label] = reference


def ranked(stats: dict, prefix: str) -> list[str]:
  """The labels of a summary's ``stats`` that start with ``prefix``, best (lowest
  mean final eval) first."""
  return [
      label
      for _, label in sorted(
          (s["final_eval_bpb"][0], label) for label, s in stats.items() if label.startswith(prefix)
      )
  ]


def h_ref(quick: bool) -> int:
  """DiLoCo's interval at the study size: 20 (``tiny``: 10)."""
  return 10 if quick else 20


def load_module(path: str) -> Any:
  """The study module a file path names. A file of ``configs/studies`` is the
  package's own module (``configs.studies.<name>``), so every caller in one
  process shares its settings (a test's patched ``QUICK_DIR`` included); any
  other file is loaded alone."""
  import importlib
  import importlib.util
  import os

  here = os.path.dirname(os.path.abspath(__file__))
  full = os.path.abspath(path)
  if os.path.dirname(full) == here and full.endswith(".py"):
    return importlib.import_module(f"configs.studies.{os.path.basename(full)[:-3]}")
  spec = importlib.util.spec_from_file_location("_study_file", full)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
