"""Digests of the compiled programs a config runs, to show that a change of code
left them alone (and so their speed: the same program runs at the same speed).

  python -m benchmarks.same_programs --out /tmp/before.json            # on the old tree
  python -m benchmarks.same_programs --out /tmp/after.json --against /tmp/before.json

For each config (at ``--size``, on ``--num_devices`` devices) the run's inner
step and sync are lowered on its real initial state and compiled; the digest
is the SHA-256 of the compiled HLO text without its source locations (file
names, line numbers, stack frames and ``metadata={...}``: they move whenever a
file is edited). ``experiments.fingerprint`` checks the metrics bit for bit;
this checks that the programs behind them are the same programs.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import re

import numpy as np
from absl import flags

from autoloco_jax.run import assembly
from autoloco_jax.runtime import replicas, rounds

_CONFIGS = flags.DEFINE_list(
    "configs", ["diloco", "ddp", "noloco", "streaming"], "Config modules of configs/."
)
_SIZE = flags.DEFINE_string("size", "cpu", "The configs' size.")
_DEVICES = flags.DEFINE_integer("num_devices", 2, "Devices of each run.")
_OUT = flags.DEFINE_string("out", "", "Write the digests' JSON here.")
_AGAINST = flags.DEFINE_string("against", "", "Earlier digests to compare with.")

_LOCATION = re.compile(
    r'^\d+ ("|\{)|^(FileNames|FunctionNames|FileLocations|StackFrames)|^HloModule'
)


def digest(hlo_text: str) -> str:
  """SHA-256 (16 hex digits) of HLO text without its source locations."""
  lines = [line for line in hlo_text.splitlines() if not _LOCATION.match(line)]
  text = re.sub(r", metadata=\{[^}]*\}|stack_frame_id=\d+", "", "\n".join(lines))
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def programs(name: str, size: str, num_devices: int) -> dict:
  """``{'inner': digest, 'sync': digest}`` of ``configs/<name>.py:<size>``."""
  config = importlib.import_module(f"configs.{name}").get_config(size)
  config.num_devices = num_devices
  run = assembly.setup(config)
  k, b, l = config.num_workers, config.data.batch_size, config.data.seq_len
  tokens = rounds.stage(np.zeros((k, 1, b, l + 1), np.uint8), run.chunk, run.mesh)
  present = replicas.put_workers(np.ones(k, np.float32), run.mesh)
  inner = run.algo.inner.lower(run.state, tokens, np.int32(1)).compile()
  sync = run.algo.sync.lower(run.state, present).compile()
  return dict(inner=digest(inner.as_text()), sync=digest(sync.as_text()))


def main(argv):
  del argv
  result = {
      name: programs(name, _SIZE.value, _DEVICES.value) for name in _CONFIGS.value
  }
  before = {}
  if _AGAINST.value:
    with open(_AGAINST.value) as f:
      before = json.load(f)
  for name, digests in result.items():
    same = "" if name not in before else (
        "  same" if before[name] == digests else "  DIFFERENT"
    )
    print(f"{name:12s} inner {digests['inner']}  sync {digests['sync']}{same}")
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  from experiments import cli

  cli.run(main)
