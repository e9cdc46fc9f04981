"""Checkpoints: the whole run state in one orbax checkpoint, saved atomically.

A checkpoint holds two items:

* ``state``: the device state (:class:`~autoloco_jax.runtime.state.TrainState`): every
  worker's fast weights, the global parameters, inner and outer optimizer states,
  round accumulators, step and round counters, the interval controller's state;
* ``host``: what the Python loop carries (JSON, ``resume.HostState``): data
  reading positions, counters, the next evaluation step, the ``H`` chosen for
  the next round, the simulated clocks; stamped with :data:`FORMAT`.

Orbax writes each checkpoint into a temporary folder and renames it only when
complete, so a crash during a save leaves the previous checkpoints intact. On
restore, a checkpoint that cannot be read (truncated, corrupted) is reported and
the next older one is tried; if none can be read, :class:`CheckpointError` is
raised rather than silently starting from scratch. A checkpoint written in
another layout of the run state (another :data:`FORMAT`) is refused with an
error that says so.
"""

from __future__ import annotations

import os
from typing import Any

import jax
from absl import logging

import orbax.checkpoint as ocp

#: Layout of the run state in a checkpoint (:data:`LAYOUTS` says what changed
#: at each). Checkpoints of another layout cannot be resumed.
FORMAT = 3

#: What each layout changed, named in the error that refuses an older checkpoint.
LAYOUTS = {
    1: "the first layout, before the run state was split by algorithm",
    2: "each algorithm owns its state (TrainState.outer) and the host state is "
    "one typed item",
    3: "the fields say what they hold: TrainState.outer became TrainState.algo; "
    "DiLoCo's params and opt became global_params and outer_opt, and its "
    "exchange (streaming's ExchangeState) is split by owner into fragments "
    "(each fragment's S and steps since its send), pending_K (eager's "
    "correction) and residual_K (error feedback); DDP's opt became inner_opt; "
    "NoLoCo's params_K and momentum_K became outer_params_K and "
    "outer_momentum_K; the host state's next_h became next_round_steps",
}


class CheckpointError(RuntimeError):
  """Checkpoints exist but none could be restored."""


class Checkpointer:
  """Saves and restores ``(state, host)`` under ``workdir/checkpoints``.

  Args:
    workdir: the run's folder.
    keep: how many recent checkpoints to keep (older ones are deleted).
  """

  def __init__(self, workdir: str, keep: int = 2):
    if keep < 1:
      raise ValueError(f"config.checkpoint.keep must be >= 1, got {keep}")
    self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
    )

  def steps(self) -> list[int]:
    """Inner steps at which complete checkpoints exist, oldest first."""
    return sorted(self._manager.all_steps())

  def save(self, step: int, state: Any, host: dict) -> None:
    """Starts saving (asynchronously); call :meth:`wait` before exiting."""
    self._manager.save(
        step,
        args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            host=ocp.args.JsonSave(dict(host, format=FORMAT)),
        ),
        force=True,
    )

  def wait(self) -> None:
    self._manager.wait_until_finished()

  def restore(self, like_state: Any) -> tuple[int, Any, dict] | None:
    """The newest readable checkpoint as ``(step, state, host)``, or None if the
    folder holds no checkpoint.

    Args:
      like_state: a state with the shapes, dtypes and shardings to restore into
        (a freshly initialised and placed one).

    Raises:
      CheckpointError: checkpoints exist but none can be read.
    """
    steps = self.steps()
    if not steps:
      return None
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like_state)
    errors = []
    for step in reversed(steps):
      self._check_format(step)
      try:
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract), host=ocp.args.JsonRestore()
            ),
        )
        if errors:
          logging.warning("restored the older checkpoint at step %d", step)
        host = dict(restored.host)
        host.pop("format")
        return step, restored.state, host
      except Exception as e:  # orbax raises many types for damaged files
        logging.warning("checkpoint at step %d is unreadable: %s", step, e)
        errors.append(f"step {step}: {type(e).__name__}: {e}")
    raise CheckpointError(
        f"no checkpoint in {self.directory} could be restored:\n  "
        + "\n  ".join(errors)
        + "\nRemove the folder to start from scratch."
    )

  def _check_format(self, step: int) -> None:
    """Refuses a readable checkpoint of another layout, naming it."""
    try:
      host = self._manager.restore(
          step, args=ocp.args.Composite(host=ocp.args.JsonRestore())
      ).host
    except Exception:  # damaged: restore() reports it and tries an older one
      return
    found = host.get("format", 1) if isinstance(host, dict) else 1
    if found != FORMAT:
      changes = "; ".join(
          f"format {v}: {LAYOUTS[v]}" for v in range(found + 1, FORMAT + 1) if v in LAYOUTS
      )
      raise CheckpointError(
          f"the checkpoint at step {step} in {self.directory} was written by another "
          f"version of autoloco_jax (run-state format {found}; this version reads "
          f"format {FORMAT}: {changes}) and cannot be resumed. Start the run in a "
          "new --workdir, or resume it with the version that wrote it."
      )

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()


def load_state(workdir: str, like_state: Any) -> tuple[int, Any, dict]:
  """Restores the newest checkpoint of a finished or interrupted run."""
  ckpt = Checkpointer(workdir)
  try:
    restored = ckpt.restore(like_state)
  finally:
    ckpt.close()
  if restored is None:
    raise CheckpointError(f"no checkpoint under {ckpt.directory}")
  return restored
