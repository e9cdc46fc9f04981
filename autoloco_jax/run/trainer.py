"""The trainer: rounds of inner steps and syncs until the inner-step budget ``T``.

``train_and_evaluate(config, workdir)`` is the whole run: data, model, mesh,
algorithm and simulated clocks are built from the config (:func:`setup`); each
round runs through the round driver (``rounds.run_round``), then one record per
round goes to ``workdir/metrics.jsonl`` (and TensorBoard). The last round is
truncated so that every method takes exactly ``T`` inner steps on the same
tokens.

Nothing is lost on a crash: the run state is checkpointed every
``checkpoint.every_rounds`` rounds and at the end; running the same command on
the same workdir resumes from the newest readable checkpoint and reproduces the
uninterrupted run exactly; SIGTERM or Ctrl-C saves and exits cleanly; a NaN or
Inf stops the run without overwriting the last good checkpoint.

The host does not stall the device between rounds: round ``r + 1`` is
dispatched before round ``r``'s metrics are read, so logging, TensorBoard and
the progress bar run while the device trains (nanodo's loop). When the next
``H`` does not depend on the round's statistics (``algo.planned_h``: fixed
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
import dataclasses
import functools
import json
import math
import os
import signal
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from autoloco_jax.algorithms import registry
from autoloco_jax.data import corpus as data_lib, pipeline as pipeline_lib
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.run import checkpoint, config_check, distributed, evaluation
from autoloco_jax.run import metrics as metrics_lib
from autoloco_jax.runtime import contract, replicas, rounds, state as state_lib
from autoloco_jax.sim import clock as clock_lib, faults

#: Fields of a round's record measured on the host's wall clock: they differ
#: between any two runs. ``data_wait_s``: blocked on the input pipeline;
#: ``host_wait_s``: blocked reading the round's device values (its ``next_h``,
#: metrics and evaluation), i.e. waiting for the device.
TIMING_FIELDS = ("wall_time", "data_wait_s", "host_wait_s")


class Preempted(Exception):
  """Raised inside the loop when SIGTERM or SIGINT arrived; the run is saved."""


@dataclasses.dataclass
class HostState:
  """What the Python loop carries between rounds, checkpointed with the device
  state as one JSON item (``checkpoint.Checkpointer``).

  Attributes:
    data_state: the input pipeline's reading state (``pipeline.Pipeline.get_state``).
    step: inner steps taken.
    rounds: rounds (syncs) completed.
    next_h: inner steps of the next round, as the last sync chose.
    next_eval: inner step at or after which the next evaluation runs.
    eval_loss: the last evaluation's loss (nats per token).
    clock: the simulated clock's state (``clock.SimClock.state_dict``).
    also_clocks: the states of the clocks of ``config.network.also``.
  """

  data_state: dict
  next_h: int
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


class Run(NamedTuple):
  """Everything built from a config before the first round."""

  data: data_lib.WorkerData
  mesh: Any
  model_cfg: Any
  apply: Any
  loss_fn: Any
  algo: contract.Algorithm
  state: state_lib.TrainState
  num_params: int
  flops_per_token: float
  chunk: int


def setup(config: Any) -> Run:
  """Builds data, mesh, model, algorithm and the initial state (on the mesh)."""
  K = config.num_workers
  data = data_lib.build(config.data, K, config.seed)
  mesh = replicas.make_mesh(K, config.num_devices)
  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = data.vocab_size
    model_cfg.seq_len = config.data.seq_len
  init, apply = model_lib.make(model_cfg)
  loss_fn = functools.partial(model_lib.loss_fn, apply)
  algo = registry.make(config, loss_fn, mesh)
  params = init(jax.random.key(config.seed))
  num_params = model_lib.param_count(params)
  state = state_lib.place(algo.init_state(params), mesh)
  return Run(
      data,
      mesh,
      model_cfg,
      apply,
      loss_fn,
      algo,
      state,
      num_params,
      model_lib.flops_per_token(model_cfg, num_params),
      rounds.chunk_size(config.chunk_steps, algo.h_max),
  )


def load_run(config: Any, workdir: str) -> tuple[Run, state_lib.TrainState, HostState]:
  """The newest checkpoint of a run as ``(run, state, host)``."""
  run = setup(config)
  _, state, host = checkpoint.load_state(workdir, run.state)
  return run, state, HostState.from_json(host)


@jax.jit
def _poison(params_K):
  return jax.tree.map(lambda x: x * jnp.nan, params_K)


def _check_finite(record: dict, keys: tuple[str, ...]) -> None:
  for key in keys:
    value = record.get(key)
    # Metrics hold non-finite values as strings ('nan') to keep JSON strict.
    if value is not None and not math.isfinite(float(value)):
      raise FloatingPointError(
          f"{key} is {value} in round {record['round']} (inner step {record['step']}): "
          "stopping without saving this state; the last good checkpoint is kept "
          "(lower inner.lr or raise inner.warmup_steps, then resume)"
      )


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


def _truncate_metrics(path: str, step: int) -> None:
  """Drops records written after the checkpoint we resume from, so a resumed
  run's metrics.jsonl equals an uninterrupted run's."""
  if not os.path.exists(path):
    return
  kept = [r for r in metrics_lib.read(path) if not r.get("summary") and r["step"] <= step]
  with open(path, "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in kept)


class _Loop(NamedTuple):
  """What the loop's steps read: the run, its config and the helpers built
  once in setup."""

  config: Any
  run: Run
  ckpt: checkpoint.Checkpointer
  clock: clock_lib.SimClock
  also: dict
  evaluate: Any
  evaluate_tokens: Any
  eval_batches: evaluation.EvalBatches
  writer: metrics_lib.Writer | None
  t_start: float
  start_step: int
  pipeline: pipeline_lib.Pipeline


def _resume(
    config: Any, workdir: str, run: Run, ckpt: checkpoint.Checkpointer
) -> tuple[state_lib.TrainState, HostState]:
  """The newest checkpoint's state, or a fresh one; trims metrics.jsonl to it."""
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  restored = ckpt.restore(run.state)
  leader = distributed.is_leader()
  if restored is None:
    if leader:
      _truncate_metrics(metrics_path, -1)
    return run.state, HostState(
        data_state={},
        next_h=run.algo.first_h or int(config.interval.h),
        next_eval=config.eval.every_steps,
    )
  _, state, saved = restored
  host = HostState.from_json(saved)
  if leader:
    _truncate_metrics(metrics_path, host.step)
    print(
        f"Resumed from the checkpoint at inner step {host.step} in {workdir}", flush=True
    )
  return state, host


def _clocks(
    config: Any, run: Run, state: state_lib.TrainState, host: HostState
) -> tuple[clock_lib.SimClock, dict]:
  """The simulated clock and those of ``network.also``: from the checkpoint on
  resume; else with ``network.step_time``, or one measured now on a copy of the
  state."""
  if host.clock:
    step_time = host.clock["step_time"]
  elif config.network.step_time:
    step_time = config.network.step_time
  else:
    B, L = config.data.batch_size, config.data.seq_len
    local = len(replicas.local_workers(run.mesh, config.num_workers))
    probe_tokens = rounds.stage(
        np.zeros((local, run.chunk, B, L + 1), run.data.dtype), run.chunk, run.mesh
    )
    step_time = rounds.measure_step_time(
        run.algo.inner, state, probe_tokens, config.num_workers, min(2, run.chunk)
    )
  clock = clock_lib.clock_from_config(config, run.num_params, step_time)
  also = clock_lib.also_clocks(config, run.num_params, step_time)
  if host.clock:
    clock.load_state_dict(host.clock)
    for name, other in also.items():
      other.load_state_dict(host.also_clocks[name])
  return clock, also


class _Round(NamedTuple):
  """A dispatched round whose device results the host has not read yet.

  Attributes:
    host_record: the record's host-side fields (clocks, counters, data wait), in
      the order they are logged.
    metrics: the sync's metrics, on device.
    losses: the evaluation's losses on device (``evaluation.make_evaluate``), or None
      when the round ends without an evaluation.
    next_h: the next round's ``H`` once the host knows it (``algo.planned_h``,
      or the sync's ``next_h`` read early for adaptive controllers), or None.
    waited: seconds the host already spent blocked on this round's device values.
  """

  host_record: dict
  metrics: Any
  losses: dict | None
  next_h: int | None = None
  waited: float = 0.0


def _dispatch_round(
    loop: _Loop, state: state_lib.TrainState, host: HostState
) -> tuple[state_lib.TrainState, _Round]:
  """Dispatches one round through the round driver, and its evaluation when one
  is due, without reading the device; advances ``host`` by what the host knows
  (steps, rounds, data state, clocks, and ``next_h`` when ``algo.planned_h``
  gives it)."""
  config, run = loop.config, loop.run
  K = config.num_workers
  round_index = host.rounds
  h = rounds.round_steps(host.next_h, config.total_steps - host.step, run.algo.h_min)
  if round_index == config.faults.nan_at_round:
    if state.params_K is None:  # DDP: its one model is state.algo
      state = state._replace(
          algo=state.algo._replace(params=_poison(state.algo.params))
      )
    else:
      state = state._replace(params_K=_poison(state.params_K))
  present = (
      faults.present_workers(config.faults, K, round_index, config.seed)
      if faults.enabled(config.faults)
      else None
  )
  state, device_metrics = rounds.run_round(
      run.algo, state, loop.pipeline, h, run.chunk, run.mesh, present
  )
  data_wait = loop.pipeline.take_wait()
  # Syncs, bytes, messages and simulated time of this round, every algorithm.
  record = loop.clock.advance_round(run.algo, round_index, h, present_K=present)
  for name, other in loop.also.items():
    record[f"sim_time_{name}"] = other.advance_round(
        run.algo, round_index, h, present_K=present
    )["sim_time"]
  host.step += h
  host.rounds = round_index + 1
  planned = None
  if run.algo.planned_h is not None:
    planned = host.next_h = run.algo.planned_h(round_index)
  host.data_state = loop.pipeline.get_state()
  host.clock = loop.clock.state_dict()
  host.also_clocks = {name: c.state_dict() for name, c in loop.also.items()}
  tokens_per_step = K * config.data.batch_size * config.data.seq_len
  record.update(
      round=host.rounds, step=host.step, h=h, tokens=host.step * tokens_per_step
  )
  record["data_wait_s"] = data_wait
  losses = None
  if host.step >= host.next_eval or host.step >= config.total_steps:
    # On this round's state, before the next round donates it.
    losses = loop.evaluate(state, loop.eval_batches)
    every = config.eval.every_steps
    host.next_eval = (host.step // every + 1) * every
  return state, _Round(record, device_metrics, losses, planned)


def _read_next_h(round_: _Round, host: HostState) -> _Round:
  """Reads only the sync's ``next_h`` (blocks until the round is done): what
  the next round needs when the controller is adaptive."""
  start = time.perf_counter()
  next_h = int(jax.device_get(round_.metrics["next_h"]))
  host.next_h = next_h
  return round_._replace(next_h=next_h, waited=time.perf_counter() - start)


def _finish_round(loop: _Loop, host: HostState, round_: _Round) -> dict:
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
  record.update(wall_time=time.time() - loop.t_start, data_wait_s=data_wait)
  record["host_wait_s"] = waited
  if round_.next_h is None:
    host.next_h = int(record["next_h"])
  _check_finite(record, ("loss_mean", "loss_end", "delta_norm", "param_norm"))
  if losses is not None:
    host.eval_loss = evaluation.main_loss(losses)
    record.update(
        eval_loss=host.eval_loss, eval_bpb=loop.run.data.bits_per_byte(host.eval_loss)
    )
    record.update({f"eval_loss_{name}": v for name, v in losses.items() if name})
    record.update(evaluation.size_record(loop.eval_batches.host))
    _check_finite(record, ("eval_loss",))
  return record


def _start(
    config: Any, workdir: str, t_start: float
) -> tuple[_Loop, state_lib.TrainState, HostState]:
  """Setup: the run, its checkpoint (resumed if there is one), the clocks, the
  evaluation batches, the writer and the input pipeline."""
  run = setup(config)
  if faults.enabled(config.faults) and not run.algo.supports_faults:
    raise ValueError(f"config.faults: worker faults are not supported by {run.algo.name}")
  ckpt = checkpoint.Checkpointer(workdir, keep=config.checkpoint.keep)
  state, host = _resume(config, workdir, run, ckpt)
  clock, also = _clocks(config, run, state, host)
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
  loop = _Loop(
      config,
      run,
      ckpt,
      clock,
      also,
      *evaluation.make_evaluate(
          functools.partial(model_lib.token_losses, run.apply), run.mesh, run.algo
      ),
      eval_batches,
      writer,
      t_start,
      host.step,
      pipeline,
  )
  return loop, state, host


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
  loop, state, host = _start(config, workdir, time.time())
  leader = distributed.is_leader()
  progress = _progress(config.total_steps, host.step, config.log.progress and leader)
  # Throughput is timed from the end of the first round, which includes compilation.
  steady = None
  rounds_since_save, preempted = 0, False
  pending = None  # a dispatched round whose metrics are read after the next dispatch
  try:
    with _stop_signals() as stop:
      while host.step < config.total_steps:
        state, current = _dispatch_round(loop, state, host)
        if pending is not None:  # the previous round, read while this one runs
          steady = _record(loop, host, pending, progress, steady)
          pending = None
        stopping = bool(stop)
        rounds_since_save += 1
        if (
            stopping
            or host.step >= config.total_steps
            or rounds_since_save >= config.checkpoint.every_rounds
        ):
          # Read (and check) this round before it is saved: a NaN round is never saved.
          steady = _record(loop, host, current, progress, steady)
          loop.ckpt.save(host.step, state, host.to_json())
          rounds_since_save = 0
        else:
          if current.next_h is None:  # adaptive: the next round needs next_h
            current = _read_next_h(current, host)
          pending = current
        if stopping and host.step < config.total_steps:
          raise Preempted()
  except Preempted:
    preempted = True
  finally:
    progress.close()
    loop.pipeline.close()
    loop.ckpt.close()
    if loop.writer:
      loop.writer.close()

  if preempted:
    if leader:
      print(
          f"Stopped by a signal at inner step {host.step} of {config.total_steps}; a "
          "checkpoint was saved. Resume by running the same command with --workdir "
          f"{workdir}",
          flush=True,
      )
    return dict(preempted=True, step=host.step)
  final = _final_eval(loop, state, workdir)
  summary = _summary(loop, host, steady, final)
  if leader:
    with open(os.path.join(workdir, "metrics.jsonl"), "a") as f:
      f.write(
          json.dumps({k: metrics_lib.to_python(v) for k, v in summary.items()}) + "\n"
      )
    print(_summary_line(summary), flush=True)
  return summary


def _record(loop: _Loop, host: HostState, round_: _Round, progress, steady):
  """Reads, checks and logs a dispatched round; returns ``steady``, the (time,
  step) at the end of the first round read and at the end of this one."""
  record = _finish_round(loop, host, round_)
  _log(loop, host, record, progress)
  now = (time.time(), record["step"])
  return (steady[:2] if steady else now) + now


def _log(loop: _Loop, host: HostState, record: dict, progress) -> None:
  """The round's record to metrics.jsonl and TensorBoard, and the progress bar."""
  if loop.writer:
    loop.writer.write(host.step, record)
  progress.update(record["h"])
  progress.set_postfix(
      loss=f"{record['loss_mean']:.3f}", eval=f"{host.eval_loss:.3f}", H=record["h"]
  )


def _final_eval(loop: _Loop, state: state_lib.TrainState, workdir: str) -> dict:
  """The final evaluation: the whole validation split (``eval.final_num_batches
  = 0``, capped at ``eval.max_tokens`` targets) or a spread sample of it. Its
  per-document losses go to ``final_eval.json`` in ``workdir``; returns the
  summary's ``final_eval_*`` fields (losses, size, seconds)."""
  config, run = loop.config, loop.run
  jax.block_until_ready(state)
  start = time.perf_counter()
  eval_set = run.data.eval_set(
      config.eval.batch_size, config.eval.final_num_batches, config.eval.max_tokens
  )
  losses = loop.evaluate_tokens(state, evaluation.place(eval_set, run.mesh))
  means, documents = evaluation.final_report(
      jax.device_get(losses), eval_set, run.data.num_eval_documents
  )
  seconds = time.perf_counter() - start
  main = evaluation.main_loss(means)
  fields = dict(
      final_eval_loss=main,
      final_eval_bpb=run.data.bits_per_byte(main),
      **{f"final_eval_loss_{name}": v for name, v in means.items() if name},
      **evaluation.size_record(eval_set, "final_eval"),
      final_eval_whole=eval_set.whole,
      final_eval_seconds=seconds,
  )
  if not math.isfinite(main):
    raise FloatingPointError(f"the final evaluation's loss is {main}")
  if distributed.is_leader():
    with open(os.path.join(workdir, "final_eval.json"), "w") as f:
      json.dump(dict(fields, documents=documents), f)
  return fields


def steady_rate(steady: tuple, start: tuple, tokens_per_step: int) -> float:
  """Tokens/s from ``steady = (t_first, step_first, t_last, step_last)``, the
  ends of the first and last rounds read; one round (equal steps) counts from
  ``start = (t_start, step_start)``, its compilation included; NaN if no step
  was taken."""
  t_first, first_step, t_last, last_step = steady
  if last_step == first_step:
    t_first, first_step = start
  tokens = (last_step - first_step) * tokens_per_step
  return tokens / (t_last - t_first) if tokens else float("nan")


def _summary(
    loop: _Loop, host: HostState, steady: tuple | None, final: dict
) -> dict:
  """The run's final record; ``final`` is ``_final_eval``'s fields.

  Throughput counts the rounds between the end of the first round this process
  ran and the end of its last one (``steady``: their times and steps, from
  ``_record``), so neither compilation nor the last checkpoint's save and the
  final evaluation are in it; a run of one round takes its whole time, its
  compilation included."""
  config, run = loop.config, loop.run
  tokens_per_step = config.num_workers * config.data.batch_size * config.data.seq_len
  tokens_per_sec = steady_rate(
      steady or (0.0, host.step, time.time(), host.step),
      (loop.t_start, loop.start_step),
      tokens_per_step,
  )
  clock = loop.clock.metrics()
  wall_time = time.time() - loop.t_start
  return dict(
      summary=True,
      algorithm=run.algo.name,
      **final,
      last_sample_eval_loss=host.eval_loss,
      syncs=clock["syncs"],
      bytes_per_worker=clock["bytes_per_worker"],
      peak_bandwidth=clock["peak_bandwidth_max"],
      sim_time=clock["sim_time"],
      network=config.network.name,
      tokens=config.total_steps * tokens_per_step,
      **{
          f"sim_time_{name}": other.metrics()["sim_time"]
          for name, other in loop.also.items()
      },
      tokens_per_sec=tokens_per_sec,
      model_flops_per_sec=tokens_per_sec * run.flops_per_token,
      num_params=run.num_params,
      devices=int(run.mesh.devices.size),
      wall_time=wall_time,
      final_eval_share=final["final_eval_seconds"] / wall_time,
      # Compilations of the round functions in this process: 1 each when H
      # changes never recompile.
      inner_compilations=run.algo.inner._cache_size(),
      sync_compilations=run.algo.sync._cache_size(),
      unigram_entropy=run.data.unigram_entropy(),
      tokenizer=run.data.info["tokenizer"],
      eval_bytes_per_token=run.data.bytes_per_token,
  )


def _summary_line(s: dict) -> str:
  return (
      f"[{s['algorithm']}] final eval {s['final_eval_bpb']:.3f} bits/byte "
      f"({s['final_eval_loss']:.4f} nats/token, {s['tokenizer']}, "
      f"{s['final_eval_tokens']} tokens) | syncs {s['syncs']} | "
      f"{s['bytes_per_worker'] / 1e6:.1f} MB sent per worker | "
      f"simulated {s['sim_time']:.1f} s ({s['network']}) | "
      f"{s['tokens_per_sec']:.0f} tokens/s | wall {s['wall_time']:.1f} s"
  )


def _progress(total: int, initial: int, enabled: bool):
  from tqdm.auto import tqdm

  return tqdm(
      total=total, initial=initial, unit="step", disable=not enabled, dynamic_ncols=True
  )
