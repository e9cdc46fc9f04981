"""Runs one training job from an ml_collections config file.

  python -m experiments.run --config configs/default.py --workdir runs/default
  python -m experiments.run --config configs/diloco.py:tiny --config.inner.lr=1e-3

Running the same command on an existing --workdir resumes it from its newest
checkpoint; SIGTERM or Ctrl-C saves a checkpoint and exits.

Many hosts: run the same command on every host with --coordinator_address,
--num_processes and --process_id (or --distributed_auto on a TPU pod slice or a
SLURM GPU cluster); experiments/launch_local.py does this on one machine.
"""

import logging as py_logging

from absl import app, flags, logging
from ml_collections import config_flags

from autoloco_jax.run import distributed, trainer
from experiments import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Path to a config file (with an optional :size argument).",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Where metrics.jsonl, TensorBoard events and the config go."
)
_ALLOW_CHANGE = flags.DEFINE_bool(
    "allow_config_change",
    False,
    "Resume a workdir even if the config changes fields that alter the trajectory.",
)
_COORDINATOR = flags.DEFINE_string(
    "coordinator_address",
    "",
    "Multi-process: host:port of process 0 " "(or env JAX_COORDINATOR_ADDRESS).",
)
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", 0, "Multi-process: number of processes (or env JAX_NUM_PROCESSES)."
)
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", -1, "Multi-process: this process's index (or env JAX_PROCESS_ID)."
)
_DISTRIBUTED_AUTO = flags.DEFINE_bool(
    "distributed_auto",
    False,
    "Call jax.distributed.initialize() with no arguments "
    "(TPU pod slices, SLURM / Open MPI GPU clusters detect their settings).",
)
_HEARTBEAT = flags.DEFINE_integer(
    "heartbeat_timeout",
    60,
    "Seconds after which a silent process is declared dead "
    "and the run stops with an error instead of hanging.",
)
flags.mark_flags_as_required(["config", "workdir"])


class _QuietLibraries(py_logging.Filter):
  """Keeps orbax's and TFDS's per-save/per-read INFO lines out of the console."""

  def filter(self, record):
    noisy = any(part in record.pathname for part in ("/orbax/", "/tensorflow_datasets/"))
    return record.levelno >= py_logging.WARNING or not noisy


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  logging.get_absl_handler().addFilter(_QuietLibraries())
  config = _CONFIG.value
  many_processes = (
      _COORDINATOR.value or _NUM_PROCESSES.value > 1 or _DISTRIBUTED_AUTO.value
  )
  if not many_processes:
    # One CPU device per core (the largest count dividing K) unless num_devices
    # or XLA_FLAGS says otherwise: the workers' blocks then run side by side.
    distributed.use_every_core(config.num_workers, config.num_devices)
  distributed.initialize(
      _COORDINATOR.value,
      _NUM_PROCESSES.value,
      _PROCESS_ID.value,
      auto=_DISTRIBUTED_AUTO.value,
      heartbeat_timeout_seconds=_HEARTBEAT.value,
  )
  trainer.train_and_evaluate(
      _CONFIG.value, _WORKDIR.value, allow_config_change=_ALLOW_CHANGE.value
  )


if __name__ == "__main__":
  cli.run(main)
