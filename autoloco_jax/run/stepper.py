"""One round at a time, on the host's side: dispatch it, read it later, log it.

:class:`Stepper` is to a round what nanodo's ``Trainer.do_step`` is to a step:
:meth:`Stepper.dispatch` runs the round through the round driver
(``runtime.rounds.run_round``) without reading the device, and does the host's
share of the round on the way: the injected faults (``sim.faults.for_round``),
the simulated clocks (``run.clocks``), the next round's ``H`` when the
algorithm plans it (``Algorithm.next_round_steps``), and the evaluation when one is
due, dispatched on the round's state before the next round donates it.
:meth:`Stepper.read` later turns a dispatched round into its record, and stops
the run on a non-finite value, naming the round; :meth:`Stepper.log` writes it.
The trainer's loop decides when each is called.

A record holds the same fields in the same order whether the round is read at
once or one round late; only the host timings (:data:`TIMING_FIELDS`) differ
between runs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, NamedTuple

import jax
from absl import logging

from autoloco_jax.data import pipeline as pipeline_lib
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.run import checkpoint, clocks as clocks_lib, distributed, evaluation
from autoloco_jax.run import metrics as metrics_lib, mfu as mfu_lib, resume
from autoloco_jax.run import summary as summary_lib
from autoloco_jax.run.assembly import Run, setup
from autoloco_jax.runtime import replicas, rounds
from autoloco_jax.sim import faults

#: Fields of a round's record measured on the host's wall clock: they differ
#: between any two runs. ``data_wait_s``: blocked on the input pipeline;
#: ``host_wait_s``: blocked reading the round's device values (its ``next_h``,
#: metrics and evaluation), i.e. waiting for the device; ``model_flops_per_sec``
#: and ``mfu`` (``run/mfu.py``): the round's model FLOP/s over the wall time
#: since the round before was read (the first round's includes compiling).
TIMING_FIELDS = ("wall_time", "data_wait_s", "host_wait_s", "model_flops_per_sec", "mfu")


class Dispatched(NamedTuple):
  """A dispatched round whose device results the host has not read yet.

  Attributes:
    host_record: the record's host-side fields (clocks, counters, data wait), in
      the order they are logged.
    metrics: the sync's metrics, on device.
    losses: the evaluation's losses on device (``evaluation.make_evaluate``), or None
      when the round ends without an evaluation.
    next_steps: the next driver round's inner steps once the host knows them
      (``algo.next_round_steps``, or the sync's ``next_h`` read early for
      adaptive controllers), or None.
    waited: seconds the host already spent blocked on this round's device values.
  """

  host_record: dict
  metrics: Any
  losses: dict | None
  next_steps: int | None = None
  waited: float = 0.0


def check_finite(record: dict, keys: tuple[str, ...]) -> None:
  """Raises ``FloatingPointError`` naming the round if a ``keys`` value is not finite."""
  for key in keys:
    value = record.get(key)
    # Metrics hold non-finite values as strings ('nan') to keep JSON strict.
    if value is not None and not math.isfinite(float(value)):
      raise FloatingPointError(
          f"{key} is {value} in round {record['round']} (inner step {record['step']}): "
          "stopping without saving this state; the last good checkpoint is kept "
          "(lower inner.lr or raise inner.warmup_steps, then resume)"
      )


@dataclasses.dataclass
class Stepper:
  """A run's state and what advances it by one round (built by :func:`start`).

  Attributes:
    config: the run's config.
    run: what :func:`assembly.setup` built.
    state: the device state after the last round dispatched.
    host: the host state after the last round dispatched (``resume.HostState``).
    ckpt: the run's checkpoints.
    clocks: the simulated clocks.
    eval_batches: the periodic evaluation's batches, on the mesh.
    pipeline: the input pipeline (a ``rounds.Reader``).
    writer: metrics.jsonl and TensorBoard (process 0), or None.
    t_start: when this process started the run (``time.time()``).
    evaluate, evaluate_tokens: ``evaluation.make_evaluate``'s functions.
    progress: the progress bar (disabled off process 0).
    window: the throughput window (``summary.Window``).
  """

  config: Any
  run: Run
  state: Any
  host: resume.HostState
  ckpt: checkpoint.Checkpointer
  clocks: clocks_lib.Clocks
  eval_batches: evaluation.EvalBatches
  pipeline: pipeline_lib.Pipeline
  writer: metrics_lib.Writer | None
  t_start: float

  def __post_init__(self):
    config, run = self.config, self.run
    self.evaluate, self.evaluate_tokens = evaluation.make_evaluate(
        functools.partial(model_lib.token_losses, run.apply), run.layout, run.algo
    )
    leader = distributed.is_leader()
    self.progress = _progress(
        config.total_steps, self.host.step, config.log.progress and leader
    )
    self.window = summary_lib.Window(self.t_start, self.host.step)
    self.peak = mfu_lib.peak_of(run.mesh, config)
    self._last_read = (0.0, self.host.step)  # (wall time, step) of the last round read

  def dispatch(self) -> Dispatched:
    """Dispatches the next round through the round driver, and its evaluation
    when one is due, without reading the device; advances :attr:`host` by what
    the host knows (steps, rounds, data state, clocks, and the next round's
    steps when ``algo.next_round_steps`` gives them)."""
    config, algo, host = self.config, self.run.algo, self.host
    r = host.rounds
    steps = rounds.round_steps(
        host.next_round_steps, config.total_steps - host.step, algo.min_round_steps
    )
    state, present_K = faults.for_round(
        config.faults, self.state, r, config.num_workers, config.seed
    )
    self.state, metrics = rounds.run_round(
        algo, state, self.pipeline, steps, self.run.chunk, self.run.mesh, present_K
    )
    data_wait = self.pipeline.take_wait()
    # Syncs, bytes, messages and simulated time of this round, every algorithm.
    record = self.clocks.advance_round(algo, r, steps, present_K)
    host.step += steps
    host.rounds = r + 1
    planned = None
    if algo.next_round_steps is not None:
      planned = host.next_round_steps = algo.next_round_steps(r)
    host.data_state = self.pipeline.get_state()
    host.clock, host.also_clocks = self.clocks.state_dicts()
    tokens_per_step = config.num_workers * config.data.batch_size * config.data.seq_len
    record.update(
        round=host.rounds, step=host.step, h=steps, tokens=host.step * tokens_per_step
    )
    record["data_wait_s"] = data_wait
    return Dispatched(record, metrics, self._evaluate_if_due(), planned)

  def _evaluate_if_due(self) -> dict | None:
    """The evaluation's losses on device when one is due after this round (every
    ``eval.every_steps`` inner steps, and after the last round), else None."""
    config, host = self.config, self.host
    if host.step < host.next_eval and host.step < config.total_steps:
      return None
    # On this round's state, before the next round donates it.
    losses = self.evaluate(self.state, self.eval_batches)
    every = config.eval.every_steps
    host.next_eval = (host.step // every + 1) * every
    return losses

  def read_next_steps(self, round_: Dispatched) -> Dispatched:
    """The round with its next ``H`` known: planned, or the sync's ``next_h``
    read alone (blocks until the round is done), what the next round needs when
    the controller is adaptive."""
    if round_.next_steps is not None:
      return round_
    start = time.perf_counter()
    steps = int(jax.device_get(round_.metrics["next_h"]))
    self.host.next_round_steps = steps
    return round_._replace(next_steps=steps, waited=time.perf_counter() - start)

  def read(self, round_: Dispatched) -> dict:
    """Reads a dispatched round's metrics and evaluation, and returns its record
    (the same fields and order whether it is read at once or one round late).

    Raises ``FloatingPointError`` for a non-finite loss or norm, or evaluation.
    """
    start = time.perf_counter()
    metrics = jax.device_get(round_.metrics)
    losses = (
        None if round_.losses is None else {k: float(v) for k, v in round_.losses.items()}
    )
    waited = round_.waited + time.perf_counter() - start
    record = {k: metrics_lib.to_python(v) for k, v in metrics.items()}
    record.update(round_.host_record)
    data_wait = record.pop("data_wait_s")
    record.update(wall_time=time.time() - self.t_start, data_wait_s=data_wait)
    record["host_wait_s"] = waited
    record.update(self._round_flops(record["wall_time"], record["step"]))
    if round_.next_steps is None:
      self.host.next_round_steps = int(record["next_h"])
    check_finite(record, ("loss_mean", "loss_end", "delta_norm", "param_norm"))
    if losses is not None:
      self.host.eval_loss = evaluation.main_loss(losses)
      record.update(
          eval_loss=self.host.eval_loss,
          eval_bpb=self.run.data.bits_per_byte(self.host.eval_loss),
      )
      record.update({f"eval_loss_{name}": v for name, v in losses.items() if name})
      record.update(evaluation.size_record(self.eval_batches.host))
      check_finite(record, ("eval_loss",))
    return record

  def _round_flops(self, wall_time: float, step: int) -> dict:
    """The round's ``model_flops_per_sec`` and ``mfu`` since the last read."""
    config, run = self.config, self.run
    t0, step0 = self._last_read
    self._last_read = (wall_time, step)
    tokens = (step - step0) * config.num_workers * config.data.batch_size * config.data.seq_len
    rate = tokens * run.flops_per_token / max(wall_time - t0, 1e-9)
    return dict(
        model_flops_per_sec=rate,
        mfu=mfu_lib.mfu(rate, int(run.mesh.devices.size), self.peak),
    )

  def log(self, record: dict) -> None:
    """A round's record to metrics.jsonl and TensorBoard, the progress bar, and
    the end of the throughput window."""
    if self.writer:
      self.writer.write(record["step"], record)
    self.progress.update(record["h"])
    self.progress.set_postfix(
        loss=f"{record['loss_mean']:.3f}",
        eval=f"{self.host.eval_loss:.3f}",
        H=record["h"],
    )
    self.window.mark(record["step"])

  def save(self) -> None:
    """Checkpoints the state and host state of the last round dispatched."""
    self.ckpt.save(self.host.step, self.state, self.host.to_json())

  def close(self) -> None:
    self.progress.close()
    self.pipeline.close()
    self.ckpt.close()
    if self.writer:
      self.writer.close()


def start(config: Any, workdir: str, t_start: float) -> Stepper:
  """A run ready for its next round: built (``assembly.setup``), resumed from
  its newest checkpoint if there is one, with its clocks, writer (process 0)
  and input pipeline."""
  run = setup(config)
  faults.refuse_unsupported(config.faults, run.algo)
  ckpt = checkpoint.Checkpointer(workdir, keep=config.checkpoint.keep)
  state, host = resume.resume(config, workdir, run, ckpt)
  clocks = clocks_lib.build(config, run, state, host)
  logging.info(
      "%s: %d workers on %d devices, %.2fM params, %d inner steps",
      run.algo.name,
      config.num_workers,
      run.mesh.devices.size,
      run.num_params / 1e6,
      config.total_steps,
  )
  eval_batches = evaluation.place(
      run.data.eval_set(config.eval.batch_size, config.eval.num_batches), run.mesh
  )
  # Metrics, TensorBoard and progress come from process 0 only.
  writer = (
      metrics_lib.Writer(workdir, tensorboard=config.log.tensorboard)
      if distributed.is_leader()
      else None
  )
  pipeline = pipeline_lib.Pipeline(
      run.data,
      config.data.batch_size,
      replicas.local_workers(run.mesh, config.num_workers),
      prefetch=run.chunk,
      state=host.data_state,
  )
  return Stepper(
      config, run, state, host, ckpt, clocks, eval_batches, pipeline, writer, t_start
  )


def _progress(total: int, initial: int, enabled: bool):
  from tqdm.auto import tqdm

  return tqdm(
      total=total, initial=initial, unit="step", disable=not enabled, dynamic_ncols=True
  )
