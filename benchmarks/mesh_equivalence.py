"""Every algorithm with its workers spanning devices equals the same run with a
worker per device: ``replica R × fsdp F`` against ``replica R × fsdp 1``.

  XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
      python -m benchmarks.mesh_equivalence --fsdp 4 --out docs/mesh_equivalence.json
  python -m benchmarks.mesh_equivalence --table docs/mesh_equivalence.json   # docs/mesh.md's table

Each config of :data:`CONFIGS` (the algorithms' ``:tiny`` configs, and
streaming with its codec off) trains twice in this process from the same seed:
on ``R · F`` devices with ``config.mesh.fsdp = F`` and on ``R`` devices with
``F = 1``, the same ``K`` workers (``R`` rows of ``K / R``). The model axes
change only where the compiler splits a sum (the gradient's reduction over
the batch, a weight's all-gather), so the two runs agree up to float rounding,
which training then carries forward; the report is each run's largest relative
difference of a logged loss and of the final evaluation on the whole
validation split. A quantizing codec (fp4) rounds each value to a code: a
rounding difference that moves a value across a code's boundary moves it by a
whole code step, so such a run drifts further (``streaming`` against
``streaming_identity``).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import tempfile
import time
from typing import Any

from absl import flags

from autoloco_jax.run import trainer
from configs import common

#: name -> (config module, overrides): every algorithm at ``:tiny``.
CONFIGS = {
    "ddp": ("ddp", {}),
    "diloco": ("diloco", {}),
    "autoloco": ("autoloco", {}),
    "streaming": ("streaming", {}),
    "streaming_identity": ("streaming", {"compress.codec": "identity"}),
    "sparseloco": ("sparseloco", {}),
    "noloco": ("noloco", {}),
    "gasloc": ("gasloc", {}),
    "gossip_adamw": ("gossip_adamw", {}),
    # NoLoCo's int8 payloads with error feedback, ppermute'd segment by segment.
    "noloco_int8": ("noloco", {"compress.codec": "int8", "compress.ef_beta": 0.9}),
}



def config_of(
    name: str, fsdp: int, replicas: int, num_workers: int, steps: int, tensor: int = 1
) -> Any:
  """``CONFIGS[name]`` at ``:tiny`` on ``replicas · fsdp · tensor`` devices."""
  module, overrides = CONFIGS[name]
  c = importlib.import_module(f"configs.{module}").get_config("tiny")
  settings = {
      "num_workers": num_workers, "num_devices": replicas * fsdp * tensor,
      "mesh.fsdp": fsdp, "mesh.tensor": tensor, "total_steps": steps,
      "eval.every_steps": steps // 2, "network.step_time": 0.01,
      "log.progress": False, "log.tensorboard": False, **overrides,
  }
  for dotted, value in settings.items():
    common.set_field(c, dotted, value)
  return c


def train(config: Any) -> list[dict]:
  """The run's ``metrics.jsonl`` records (its output kept quiet)."""
  workdir = tempfile.mkdtemp(prefix="mesh_equivalence_")
  with contextlib.redirect_stdout(io.StringIO()):
    trainer.train_and_evaluate(config, workdir)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def relative_difference(a: list[dict], b: list[dict]) -> dict:
  """The largest ``|a − b| / |a|`` over the logged losses of every round
  (``loss_mean``, ``loss_end``, ``eval_loss``...), and over the final
  evaluation's, of two runs' records.

  Raises:
    ValueError: runs whose rounds (steps and ``H``) differ: an adaptive ``H``
      that rounding moved is a different run, not a small difference.
  """
  rounds_of = lambda records: [(r.get("step"), r.get("h")) for r in records]
  if rounds_of(a) != rounds_of(b):
    raise ValueError(
        f"the runs took different rounds: {rounds_of(a)} against {rounds_of(b)}"
    )
  rounds, final = 0.0, 0.0
  for ra, rb in zip(a, b):
    for key, value in ra.items():
      if "loss" in key and isinstance(value, float) and isinstance(rb.get(key), float):
        diff = abs(value - rb[key]) / max(abs(value), 1e-12)
        if key.startswith("final_eval"):
          final = max(final, diff)
        else:
          rounds = max(rounds, diff)
  return dict(rounds=rounds, final_eval=final)


def compare(
    name: str, fsdp: int, replicas: int, num_workers: int, steps: int, tensor: int = 1
) -> dict:
  """One row: both runs of ``name`` and their differences."""
  t0 = time.perf_counter()
  one = train(config_of(name, 1, replicas, num_workers, steps))
  spanning = train(config_of(name, fsdp, replicas, num_workers, steps, tensor))
  final = lambda records: records[-1].get("final_eval_loss")
  return dict(
      name=name,
      algorithm=one[-1].get("algorithm"),
      records=len(one),
      final_eval_loss={"worker_per_device": final(one), "spanning": final(spanning)},
      max_relative_difference=relative_difference(one, spanning),
      seconds=round(time.perf_counter() - t0, 1),
  )


def table(result: dict) -> str:
  """The markdown table of a result (what ``main`` prints, ``docs/mesh.md``)."""
  lines = [
      f"| config | algorithm | rounds: max relative difference | final eval (whole split) | "
      f"final eval loss, fsdp 1 / fsdp {result['fsdp']}"
      f"{' × tensor %d' % result['tensor'] if result.get('tensor', 1) > 1 else ''}"
      f"{' (one replica row)' if result.get('replicas') == 1 else ''} |",
      "| --- | --- | ---: | ---: | ---: |",
  ]
  for row in result["rows"]:
    d, losses = row["max_relative_difference"], list(row["final_eval_loss"].values())
    lines.append(
        f"| {row['name']} | {row['algorithm']} | {d['rounds']:.2e} | {d['final_eval']:.2e} | "
        f"{losses[0]:.6f} / {losses[1]:.6f} |"
    )
  return "\n".join(lines)


def main(argv):
  del argv
  f = flags.FLAGS
  if f.table:
    with open(f.table) as file:
      print(table(json.load(file)))
    return
  rows = [
      compare(name, f.fsdp, f.replicas, f.num_workers, f.total_steps, f.tensor)
      for name in f.configs
  ]
  result = dict(
      fsdp=f.fsdp, tensor=f.tensor, replicas=f.replicas, num_workers=f.num_workers,
      total_steps=f.total_steps, rows=rows,
  )
  print(table(result))
  if f.out:
    with open(f.out, "w") as file:
      json.dump(result, file, indent=2)
      file.write("\n")


def define_flags() -> None:
  """The command's flags (defined only when it runs, so the tests can import
  this module beside others that define ``--out``)."""
  flags.DEFINE_list("configs", list(CONFIGS), "Which of CONFIGS to run.")
  flags.DEFINE_integer("fsdp", 4, "F: devices each worker's state and batch split over.")
  flags.DEFINE_integer("tensor", 1, "T: devices its heads, MLP and vocabulary split over.")
  flags.DEFINE_integer("replicas", 2, "R: rows of the replica axis.")
  flags.DEFINE_integer("num_workers", 4, "K, the same in both runs.")
  flags.DEFINE_integer("total_steps", 20, "Inner steps of each run.")
  flags.DEFINE_string("out", "", "Also write the JSON here.")
  flags.DEFINE_string("table", "", "Print the table of this JSON result instead.")


if __name__ == "__main__":
  from experiments import cli

  define_flags()
  cli.run(main)
