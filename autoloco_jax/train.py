"""The trainer: rounds of inner steps and syncs until the inner-step budget ``T``.

``train_and_evaluate(config, workdir)`` is the whole run: data, model, mesh and
algorithm are built from the config; each round stages its batches in chunks,
runs the jitted inner loop and the jitted sync, then logs one record per round
to ``workdir/metrics.jsonl`` (and TensorBoard). The last round is truncated so
that every method takes exactly ``T`` inner steps on the same tokens.

Nothing is lost on a crash: the run state is checkpointed every
``checkpoint.every_rounds`` rounds and at the end; running the same command on
the same workdir resumes from the newest readable checkpoint and reproduces the
uninterrupted run exactly; SIGTERM or Ctrl-C saves and exits cleanly; a NaN or
Inf stops the run without overwriting the last good checkpoint.
"""

from __future__ import annotations

import contextlib
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

from autoloco_jax import algorithms, checkpoint, comm, config_check, distributed
from autoloco_jax import data as data_lib, faults, metrics as metrics_lib
from autoloco_jax import model as model_lib, replicas, state as state_lib

LN2 = math.log(2.0)


class Preempted(Exception):
  """Raised inside the loop when SIGTERM or SIGINT arrived; the run is saved."""


def make_evaluate(loss_fn, mesh, algo):
  """``state -> {name: mean loss}`` over fixed validation batches: worker 0's
  parameters (the global model after a sync) under the name ``''`` or, for
  decentralized algorithms, each model of ``algo.eval_params`` (``mean``, the
  replicas' mean, and ``replica``, replica 0). Losses are replicated so every
  process can read them."""

  @functools.partial(jax.jit, out_shardings=jax.sharding.NamedSharding(
      mesh, replicas.REPLICATED))
  def loss(params, tokens_NxBxL1):
    return jnp.mean(jax.lax.map(functools.partial(loss_fn, params), tokens_NxBxL1))

  worker0 = jax.jit(lambda params_K: jax.tree.map(lambda x: x[0], params_K),
                    out_shardings=jax.sharding.NamedSharding(mesh, replicas.REPLICATED))

  def evaluate(state, tokens_NxBxL1):
    models = ({"": worker0(state.params_K)} if algo.eval_params is None
              else algo.eval_params(state))
    return {name: float(loss(p, tokens_NxBxL1)) for name, p in models.items()}

  return evaluate


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
          "(lower inner.lr or raise inner.warmup_steps, then resume)")


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


class Run(NamedTuple):
  """Everything built from a config before the first round."""
  data: data_lib.WorkerData
  mesh: Any
  model_cfg: Any
  apply: Any
  loss_fn: Any
  algo: algorithms.Algorithm
  state: state_lib.TrainState
  num_params: int
  flops_per_token: float


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
  algo = algorithms.make(config, loss_fn, mesh)
  params = init(jax.random.key(config.seed))
  num_params = model_lib.param_count(params)
  state = state_lib.place(algo.init_state(params), mesh)
  return Run(data, mesh, model_cfg, apply, loss_fn, algo, state, num_params,
             model_lib.flops_per_token(model_cfg, num_params))


def load_run(config: Any, workdir: str) -> tuple[Run, state_lib.TrainState, dict]:
  """The newest checkpoint of a run as ``(run, state, host)``; the global
  parameters are ``jax.tree.map(lambda x: x[0], state.params_K)``."""
  run = setup(config)
  _, state, host = checkpoint.load_state(workdir, run.state)
  return run, state, host


def train_and_evaluate(config: Any, workdir: str, allow_config_change: bool = False) -> dict:
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

  t_start = time.time()
  run = setup(config)
  data, mesh, algo, state = run.data, run.mesh, run.algo, run.state
  K, T = config.num_workers, config.total_steps
  B, L = config.data.batch_size, config.data.seq_len
  num_params, flops_per_token, loss_fn = run.num_params, run.flops_per_token, run.loss_fn
  inject_faults = faults.enabled(config.faults)
  if inject_faults and state.present_K is None:
    raise ValueError(f"config.faults: worker faults are not supported by {algo.name}")

  host = dict(positions=data.init_positions().tolist(), step=0, syncs=0,
              bytes=0.0, messages=0, next_eval=config.eval.every_steps,
              next_h=int(config.interval.h), eval_loss=float("nan"), rounds=0)
  ckpt = checkpoint.Checkpointer(workdir, keep=config.checkpoint.keep)
  restored = ckpt.restore(state)
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  leader = distributed.is_leader()
  if restored is not None:
    _, state, host = restored
    if leader:
      _truncate_metrics(metrics_path, host["step"])
      print(f"Resumed from the checkpoint at inner step {host['step']} in {workdir}",
            flush=True)
  elif leader:
    _truncate_metrics(metrics_path, -1)
  logging.info("%s: %d workers on %d devices, %.2fM params, %d inner steps",
               algo.name, K, mesh.devices.size, num_params / 1e6, T)

  evaluate = make_evaluate(loss_fn, mesh, algo)
  # The simulated clock (comm.SimClock): built at the first inner call, once the
  # step time is measured (or read from config.network.step_time); restored
  # from the checkpoint's host state on resume.
  clock = None
  eval_tokens = replicas.put_replicated(
      data.eval_batches(config.eval.batch_size, config.eval.num_batches), mesh)
  chunk = min(config.chunk_steps or 64, algo.h_max)
  tokens_per_step = K * B * L
  positions = np.asarray(host["positions"], np.int64)
  step = host["step"]
  rounds_since_save = 0

  # Metrics, TensorBoard and progress come from process 0 only.
  writer = (metrics_lib.Writer(workdir, tensorboard=config.log.tensorboard)
            if leader else None)
  progress = _progress(T, step, config.log.progress and leader)
  # Throughput is timed from the end of the first round, which includes compilation.
  t_steady, steady_step = None, step
  preempted = False
  try:
    with _stop_signals() as stop:
      while step < T:
        rnd = host["rounds"]
        h = min(host["next_h"], T - step)
        if rnd == config.faults.nan_at_round:
          state = state._replace(params_K=_poison(state.params_K))
        present = (faults.present_workers(config.faults, K, rnd, config.seed)
                   if inject_faults else None)
        if present is not None:
          state = state._replace(present_K=replicas.put_workers(present, mesh))
        done = 0
        while done < h:
          n = min(chunk, h - done)
          batch_KxnxBxL1, positions = data.train_batches(positions, n, B)
          # A fresh padded array per call: the device may still read the last one.
          tokens_KxCxBxL1 = np.zeros((K, chunk) + batch_KxnxBxL1.shape[2:], np.int32)
          tokens_KxCxBxL1[:, :n] = batch_KxnxBxL1
          tokens_dev = replicas.put_workers(tokens_KxCxBxL1, mesh)
          if clock is None:
            step_time = (host["clock"]["step_time"] if "clock" in host else
                         config.network.step_time or comm.measure_step_time(
                             algo.inner, state, tokens_dev, K, num_steps=min(2, n)))
            clock = comm.clock_from_config(config, num_params, step_time)
            also = comm.also_clocks(config, num_params, step_time)
            if "clock" in host:
              clock.load_state_dict(host["clock"])
              for name, other in also.items():
                other.load_state_dict(host["also_clocks"][name])
          state = algo.inner(state, tokens_dev, np.int32(n))
          done += n
        state, round_metrics = algo.sync(state)
        record = {k: metrics_lib.to_python(v)
                  for k, v in jax.device_get(round_metrics).items()}
        step += h
        # Syncs, bytes, messages and simulated time of this round, every algorithm.
        clock_metrics = clock.advance_round(algo, rnd, h, present_K=present)
        host.update(step=step, syncs=clock_metrics["syncs"],
                    bytes=clock_metrics["bytes_per_worker"],
                    messages=clock_metrics["messages_per_worker"],
                    sim_time=clock_metrics["sim_time"], clock=clock.state_dict(),
                    positions=positions.tolist(), next_h=int(record["next_interval"]),
                    rounds=rnd + 1)
        record.update(clock_metrics)
        for name, other in also.items():
          record[f"sim_time_{name}"] = other.advance_round(
              algo, rnd, h, present_K=present)["sim_time"]
        host["also_clocks"] = {name: c.state_dict() for name, c in also.items()}
        record.update(round=rnd + 1, step=step, interval=h,
                      tokens=step * tokens_per_step, wall_time=time.time() - t_start)
        _check_finite(record, ("loss_mean", "loss_end", "delta_norm", "param_norm"))
        if step >= host["next_eval"] or step >= T:
          losses = evaluate(state, eval_tokens)
          # The global model; for decentralized algorithms the replicas' mean.
          host["eval_loss"] = losses.get("", losses.get("mean"))
          every = config.eval.every_steps
          host["next_eval"] = (step // every + 1) * every
          record.update(eval_loss=host["eval_loss"], eval_bpb=host["eval_loss"] / LN2)
          record.update({f"eval_loss_{name}": v for name, v in losses.items() if name})
          _check_finite(record, ("eval_loss",))
        if writer:
          writer.write(step, record)
        rounds_since_save += 1
        if stop or step >= T or rounds_since_save >= config.checkpoint.every_rounds:
          ckpt.save(step, state, host)
          rounds_since_save = 0
        if t_steady is None:
          t_steady, steady_step = time.time(), step
        progress.update(h)
        progress.set_postfix(loss=f"{record['loss_mean']:.3f}",
                             eval=f"{host['eval_loss']:.3f}", H=h)
        if stop and step < T:
          raise Preempted()
  except Preempted:
    preempted = True
  finally:
    progress.close()
    ckpt.close()
    if writer:
      writer.close()

  if preempted:
    if leader:
      print(f"Stopped by a signal at inner step {step} of {T}; a checkpoint was saved. "
            f"Resume by running the same command with --workdir {workdir}", flush=True)
    return dict(preempted=True, step=step)

  steady_tokens = (step - steady_step) * tokens_per_step
  steady_time = time.time() - t_steady if t_steady is not None else 0.0
  tokens_per_sec = steady_tokens / steady_time if steady_tokens else float("nan")
  summary = dict(
      summary=True, algorithm=algo.name, final_eval_loss=host["eval_loss"],
      final_eval_bpb=host["eval_loss"] / LN2, syncs=host["syncs"],
      bytes_per_worker=host["bytes"], sim_time=host.get("sim_time", 0.0),
      network=config.network.name, tokens=T * tokens_per_step,
      **{f"sim_time_{name}": max(saved["time_K"])
         for name, saved in host.get("also_clocks", {}).items()},
      tokens_per_sec=tokens_per_sec,
      model_flops_per_sec=tokens_per_sec * flops_per_token,
      num_params=num_params, wall_time=time.time() - t_start,
      # Compilations of the round functions in this process: 1 each when H
      # changes never recompile.
      inner_compilations=algo.inner._cache_size(),
      sync_compilations=algo.sync._cache_size(),
      unigram_entropy=data.unigram_entropy())
  if leader:
    with open(metrics_path, "a") as f:
      f.write(json.dumps({k: metrics_lib.to_python(v) for k, v in summary.items()}) + "\n")
    print(_summary_line(summary), flush=True)
  return summary


def _summary_line(s: dict) -> str:
  return (f"[{s['algorithm']}] final eval loss {s['final_eval_loss']:.4f} nats "
          f"({s['final_eval_bpb']:.3f} bits/byte) | syncs {s['syncs']} | "
          f"{s['bytes_per_worker'] / 1e6:.1f} MB sent per worker | "
          f"simulated {s['sim_time']:.1f} s ({s['network']}) | "
          f"{s['tokens_per_sec']:.0f} tokens/s | wall {s['wall_time']:.1f} s")


def _progress(total: int, initial: int, enabled: bool):
  from tqdm.auto import tqdm
  return tqdm(total=total, initial=initial, unit="step", disable=not enabled,
              dynamic_ncols=True)
