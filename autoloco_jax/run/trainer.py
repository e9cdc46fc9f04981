"""The trainer: rounds of inner steps and syncs until the inner-step budget ``T``.

``train_and_evaluate(config, workdir)`` is the whole run: data, model, mesh,
algorithm and simulated clocks are built from the config (:func:`setup`); each
round runs through the round driver (``rounds.run_round``), then one record per
round goes to ``workdir/metrics.jsonl`` (and TensorBoard). The last round is
truncated so that every method takes exactly ``T`` inner steps on the same
tokens. The loop is :func:`train_rounds`; its parts live in modules of their own:

* ``run/assembly.py``: the run built from its config (:func:`setup`);
* ``run/resume.py``: the host state in a checkpoint, resuming (:func:`load_run`);
* ``run/clocks.py``: the simulated clocks, with a timing probe;
* ``sim/faults.py``: injected faults (dropped workers, a poisoned round);
* ``run/stepper.py``: a round dispatched, read later, logged (:data:`TIMING_FIELDS`);
* ``run/summary.py``: the final evaluation, throughput (:func:`steady_rate`), summary.

Nothing is lost on a crash: the run state is checkpointed every
``checkpoint.every_rounds`` rounds and at the end; running the same command on
the same workdir resumes from the newest readable checkpoint and reproduces the
uninterrupted run exactly; SIGTERM or Ctrl-C saves and exits cleanly; a NaN or
Inf stops the run without overwriting the last good checkpoint.

The host does not stall the device between rounds: round ``r + 1`` is
dispatched before round ``r``'s metrics are read, so logging, TensorBoard and
the progress bar run while the device trains (nanodo's loop). When the next
``H`` does not depend on the round's statistics (``algo.next_round_steps``: fixed
intervals, schedules, computed by the functions the sync runs) nothing is read
before the next dispatch; for adaptive controllers only the scalar ``next_h``
is. An evaluation is dispatched on round ``r``'s state before the next round
donates it, and read with the round. A round that ends with a checkpoint, and
the last round, are read before the save: a NaN round is never saved. Without a
save it stops the run one round later, with the same error naming the same
round, after round ``r + 1`` has run on the poisoned state (never saved either).
Only the records' host timings (:data:`TIMING_FIELDS`) differ between runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from typing import Any

from autoloco_jax.run import config_check, distributed, stepper, summary as summary_lib
from autoloco_jax.run import metrics as metrics_lib

# The trainer's API, from the modules that hold them.
from autoloco_jax.run.assembly import setup  # noqa: F401
from autoloco_jax.run.resume import load_run  # noqa: F401
from autoloco_jax.run.stepper import TIMING_FIELDS  # noqa: F401
from autoloco_jax.run.summary import steady_rate  # noqa: F401


class Preempted(Exception):
  """Raised inside the loop when SIGTERM or SIGINT arrived; the run is saved."""


class EveryRounds:
  """A periodic action's trigger, counted in rounds: due every ``every`` rounds
  since it was last due, or when forced. (clu's ``PeriodicAction`` fires at
  ``step % every == 0`` and must see every step; a round advances ``H`` steps.)"""

  def __init__(self, every: int):
    self.every, self.count = every, 0

  def __call__(self, force: bool = False) -> bool:
    self.count += 1
    due = force or self.count >= self.every
    if due:
      self.count = 0
    return due


def train_rounds(steps: stepper.Stepper, stop: list) -> None:
  """Rounds until the inner-step budget ``T``: dispatch round ``r + 1``, read
  round ``r`` while it runs, log it, checkpoint.

  A round is read one round late, unless it ends with a checkpoint (every
  ``checkpoint.every_rounds`` rounds, the last round, a stop signal): then it is
  read, and checked, before the save, so a NaN round is never saved. Raises
  :class:`Preempted`, after the save, when ``stop`` holds a signal.
  """
  T, host = steps.config.total_steps, steps.host
  save_due = EveryRounds(steps.config.checkpoint.every_rounds)
  pending = []  # round r: dispatched, read after round r + 1 is dispatched
  while host.step < T:
    current = steps.dispatch()
    for round_ in pending:
      steps.log(steps.read(round_))
    stopping = bool(stop)
    if save_due(force=stopping or host.step >= T):
      steps.log(steps.read(current))
      steps.save()
      pending = []
    else:
      pending = [steps.read_next_steps(current)]  # adaptive H: only next_h, now
    if stopping and host.step < T:
      raise Preempted()


def train_and_evaluate(
    config: Any, workdir: str, allow_config_change: bool = False
) -> dict:
  """Trains with ``config.algorithm`` for ``config.total_steps`` inner steps.

  Resumes from ``workdir`` when it holds a checkpoint of the same run (a config
  that changes the trajectory is refused unless ``allow_config_change``).

  Returns the final summary (also the last line of ``metrics.jsonl``): final
  eval loss and bits per byte, syncs, bytes sent per worker, tokens, tokens/s,
  wall time; ``preempted=True`` if a signal stopped the run early.
  """
  config_check.validate(config)
  os.makedirs(workdir, exist_ok=True)
  config_check.check_resume(config, workdir, allow_config_change)
  steps = stepper.start(config, workdir, time.time())
  leader = distributed.is_leader()
  preempted = False
  try:
    with _stop_signals() as stop:
      train_rounds(steps, stop)
  except Preempted:
    preempted = True
  finally:
    steps.close()

  host = steps.host
  if preempted:
    if leader:
      print(
          f"Stopped by a signal at inner step {host.step} of {config.total_steps}; a "
          "checkpoint was saved. Resume by running the same command with --workdir "
          f"{workdir}",
          flush=True,
      )
    return dict(preempted=True, step=host.step)
  final = summary_lib.final_eval(
      config, steps.run, steps.evaluate_tokens, steps.state, workdir
  )
  summary = summary_lib.summary(
      config, steps.run, host, steps.clocks, steps.window, steps.t_start, final
  )
  if leader:
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
      f.write(
          json.dumps({k: metrics_lib.to_python(v) for k, v in summary.items()}) + "\n"
      )
    print(summary_lib.summary_line(summary), flush=True)
  return summary


@contextlib.contextmanager
def _stop_signals():
  """Turns SIGTERM and SIGINT into a flag the loop checks at round ends."""
  received: list[int] = []
  handler = lambda signum, frame: received.append(signum)
  previous = {}
  for sig in (signal.SIGTERM, signal.SIGINT):
    try:
      previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
      pass
  try:
    yield received
  finally:
    for sig, old in previous.items():
      signal.signal(sig, old)
