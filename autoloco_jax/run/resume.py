"""Resume: what the host carries between rounds, and where a run starts again.

A checkpoint holds the device state and :class:`HostState` (one JSON item,
``checkpoint.Checkpointer``). :func:`resume` restores the newest readable one,
or starts afresh, and trims ``metrics.jsonl`` to the restored step, so a
resumed run's records equal an uninterrupted run's: the same rounds on the same
tokens (the input pipeline's reading state is in :class:`HostState`), the same
clocks, the same evaluation steps.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from autoloco_jax.run import checkpoint, distributed
from autoloco_jax.run import metrics as metrics_lib
from autoloco_jax.run.assembly import Run, setup
from autoloco_jax.runtime import state as state_lib


@dataclasses.dataclass
class HostState:
  """What the Python loop carries between rounds, checkpointed with the device
  state as one JSON item (``checkpoint.Checkpointer``).

  Attributes:
    data_state: the input pipeline's reading state (``pipeline.Pipeline.get_state``).
    step: inner steps taken.
    rounds: rounds (syncs) completed.
    next_round_steps: inner steps of the next driver round, as the last sync
      chose (its metric ``next_h``) or the algorithm planned.
    next_eval: inner step at or after which the next evaluation runs.
    eval_loss: the last evaluation's loss (nats per token).
    clock: the simulated clock's state (``clock.SimClock.state_dict``).
    also_clocks: the states of the clocks of ``config.network.also``.
  """

  data_state: dict
  next_round_steps: int
  next_eval: int
  step: int = 0
  rounds: int = 0
  eval_loss: float = float("nan")
  clock: dict = dataclasses.field(default_factory=dict)
  also_clocks: dict = dataclasses.field(default_factory=dict)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, saved: dict) -> "HostState":
    names = {f.name for f in dataclasses.fields(cls)}
    if set(saved) != names:
      raise checkpoint.CheckpointError(
          f"the checkpoint's host state has fields {sorted(saved)}, expected "
          f"{sorted(names)}: it was written by another version of autoloco_jax"
      )
    return cls(**saved)


def truncate_metrics(path: str, step: int) -> None:
  """Drops records written after the checkpoint we resume from, so a resumed
  run's metrics.jsonl equals an uninterrupted run's."""
  if not os.path.exists(path):
    return
  kept = [r for r in metrics_lib.read(path) if not r.get("summary") and r["step"] <= step]
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in kept)


def resume(
    config: Any, workdir: str, run: Run, ckpt: checkpoint.Checkpointer
) -> tuple[state_lib.TrainState, HostState]:
  """The newest checkpoint's state, or a fresh one; trims metrics.jsonl to it."""
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  restored = ckpt.restore(run.state)
  leader = distributed.is_leader()
  if restored is None:
    if leader:
      truncate_metrics(metrics_path, -1)
    return run.state, HostState(
        data_state={},
        next_round_steps=run.algo.first_round_steps,
        next_eval=config.eval.every_steps,
    )
  _, state, saved = restored
  host = HostState.from_json(saved)
  if leader:
    truncate_metrics(metrics_path, host.step)
    print(
        f"Resumed from the checkpoint at inner step {host.step} in {workdir}", flush=True
    )
  return state, host


def load_run(config: Any, workdir: str) -> tuple[Run, state_lib.TrainState, HostState]:
  """The newest checkpoint of a run as ``(run, state, host)``."""
  run = setup(config)
  _, state, host = checkpoint.load_state(workdir, run.state)
  return run, state, HostState.from_json(host)
