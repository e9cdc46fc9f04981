"""Runs one training job from an ml_collections config file.

  python -m experiments.run --config configs/default.py --workdir runs/default
  python -m experiments.run --config configs/diloco.py:tiny --config.inner.lr=1e-3
"""

from absl import app, flags
from ml_collections import config_flags

from autoloco_jax import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a config file (with an optional :size argument).",
    lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Where metrics.jsonl, TensorBoard events and the config go.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
