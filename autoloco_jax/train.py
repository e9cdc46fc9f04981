"""The trainer: rounds of inner steps and syncs until the inner-step budget ``T``.

``train_and_evaluate(config, workdir)`` is the whole run: data, model, mesh and
algorithm are built from the config; each round stages its batches in chunks,
runs the jitted inner loop and the jitted sync, then logs one record per round
to ``workdir/metrics.jsonl`` (and TensorBoard). The last round is truncated so
that every method takes exactly ``T`` inner steps on the same tokens.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from autoloco_jax import algorithms, comm, data as data_lib, metrics as metrics_lib
from autoloco_jax import model as model_lib, replicas, state as state_lib

LN2 = math.log(2.0)

_POSITIVE_INTS = ("num_workers", "total_steps", "data.seq_len", "data.batch_size",
                  "interval.h", "eval.batch_size", "eval.num_batches",
                  "eval.every_steps")
_NON_NEGATIVE = ("inner.warmup_steps", "inner.weight_decay", "num_devices",
                 "chunk_steps")


def _get(config: Any, dotted: str) -> Any:
  value = config
  for part in dotted.split("."):
    value = value[part]
  return value


def validate(config: Any) -> None:
  """Range-checks the fields the trainer relies on; errors name the field."""
  for name in _POSITIVE_INTS:
    value = _get(config, name)
    if not isinstance(value, int) or value < 1:
      raise ValueError(f"config.{name} must be an integer >= 1, got {value!r}")
  for name in _NON_NEGATIVE:
    if _get(config, name) < 0:
      raise ValueError(f"config.{name} must be >= 0, got {_get(config, name)!r}")
  if not config.inner.lr > 0:
    raise ValueError(f"config.inner.lr must be > 0, got {config.inner.lr!r}")
  if not 0 <= config.inner.min_lr_ratio <= 1:
    raise ValueError("config.inner.min_lr_ratio must be in [0, 1], "
                     f"got {config.inner.min_lr_ratio!r}")
  if not config.inner.clip_norm > 0:
    raise ValueError(f"config.inner.clip_norm must be > 0, got {config.inner.clip_norm!r}")


def make_evaluate(loss_fn):
  """Jitted mean loss of worker 0's parameters (the global model after a sync)
  over fixed validation batches."""

  @jax.jit
  def evaluate(params_K, tokens_NxBxL1):
    params = jax.tree.map(lambda x: x[0], params_K)
    return jnp.mean(jax.lax.map(functools.partial(loss_fn, params), tokens_NxBxL1))

  return evaluate


def _check_finite(record: dict, keys: tuple[str, ...]) -> None:
  for key in keys:
    value = record.get(key)
    if value is not None and not np.isfinite(value):
      raise FloatingPointError(
          f"{key} is {value} at round {record['round']}, inner step {record['step']}: "
          "stopping (lower inner.lr or raise inner.warmup_steps)")


def train_and_evaluate(config: Any, workdir: str) -> dict:
  """Trains with ``config.algorithm`` for ``config.total_steps`` inner steps.

  Returns the final summary (also the last line of ``metrics.jsonl``): final
  eval loss and bits per byte, syncs, bytes sent per worker, tokens, tokens/s,
  wall time.
  """
  validate(config)
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    f.write(config.to_json_best_effort(indent=2))

  t_start = time.time()
  K, T = config.num_workers, config.total_steps
  B, L = config.data.batch_size, config.data.seq_len
  data = data_lib.build(config.data, K, config.seed)
  mesh = replicas.make_mesh(K, config.num_devices)

  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = data.vocab_size
    model_cfg.seq_len = L
  init, apply = model_lib.make(model_cfg)
  loss_fn = functools.partial(model_lib.loss_fn, apply)
  algo = algorithms.make(config, loss_fn, mesh)

  params = init(jax.random.key(config.seed))
  num_params = model_lib.param_count(params)
  flops_per_token = model_lib.flops_per_token(model_cfg, num_params)
  state = state_lib.place(algo.init_state(params), mesh)
  del params
  logging.info("%s: %d workers on %d devices, %.2fM params, %d inner steps",
               algo.name, K, mesh.devices.size, num_params / 1e6, T)

  evaluate = make_evaluate(loss_fn)
  eval_tokens = jnp.asarray(data.eval_batches(config.eval.batch_size,
                                              config.eval.num_batches))
  allreduce = comm.ring_allreduce(num_params, K, config.comm.bytes_per_param)
  chunk = min(config.chunk_steps or 64, algo.h_max)

  writer = metrics_lib.Writer(workdir, tensorboard=config.log.tensorboard)
  positions = data.init_positions()
  step, syncs, traffic = 0, 0, comm.Traffic(0.0, 0)
  next_h = int(config.interval.h)
  next_eval = config.eval.every_steps
  eval_loss = float("nan")
  tokens_per_step = K * B * L
  progress = _progress(T, config.log.progress)
  # Throughput is timed from the end of the first round, which includes compilation.
  t_steady, steady_step = None, 0

  while step < T:
    h = min(next_h, T - step)
    done = 0
    while done < h:
      n = min(chunk, h - done)
      batch_KxnxBxL1, positions = data.train_batches(positions, n, B)
      # A fresh padded array per call: the device may still read the last one.
      tokens_KxCxBxL1 = np.zeros((K, chunk) + batch_KxnxBxL1.shape[2:], np.int32)
      tokens_KxCxBxL1[:, :n] = batch_KxnxBxL1
      state = algo.inner(state, replicas.put_workers(tokens_KxCxBxL1, mesh),
                         np.int32(n))
      done += n
    state, round_metrics = algo.sync(state)
    record = {k: metrics_lib.to_python(v) for k, v in jax.device_get(round_metrics).items()}
    step += h
    syncs += algo.allreduces_per_round(h)
    traffic = traffic + allreduce * algo.allreduces_per_round(h)
    record.update(round=record["round"] + 1, step=step, interval=h,
                  tokens=step * tokens_per_step, syncs=syncs,
                  bytes_per_worker=traffic.bytes, messages_per_worker=traffic.messages,
                  wall_time=time.time() - t_start)
    _check_finite(record, ("loss_mean", "loss_end", "delta_norm"))
    if step >= next_eval or step >= T:
      eval_loss = float(evaluate(state.params_K, eval_tokens))
      next_eval = (step // config.eval.every_steps + 1) * config.eval.every_steps
      record.update(eval_loss=eval_loss, eval_bpb=eval_loss / LN2)
      _check_finite(record, ("eval_loss",))
    writer.write(step, record)
    if t_steady is None:
      t_steady, steady_step = time.time(), step
    next_h = int(record["next_interval"])
    progress.update(h)
    progress.set_postfix(loss=f"{record['loss_mean']:.3f}", eval=f"{eval_loss:.3f}", H=h)

  progress.close()
  steady_tokens = (step - steady_step) * tokens_per_step
  steady_time = time.time() - t_steady
  tokens_per_sec = steady_tokens / steady_time if steady_tokens else float("nan")
  summary = dict(
      summary=True, algorithm=algo.name, final_eval_loss=eval_loss,
      final_eval_bpb=eval_loss / LN2, syncs=syncs,
      bytes_per_worker=traffic.bytes, tokens=T * tokens_per_step,
      tokens_per_sec=tokens_per_sec,
      model_flops_per_sec=tokens_per_sec * flops_per_token,
      num_params=num_params, wall_time=time.time() - t_start,
      # Compilations of the round functions over the run: 1 each when H changes
      # never recompile.
      inner_compilations=algo.inner._cache_size(),
      sync_compilations=algo.sync._cache_size(),
      unigram_entropy=data.unigram_entropy())
  writer.write(step, summary)
  writer.close()
  print(_summary_line(summary), flush=True)
  return summary


def _summary_line(s: dict) -> str:
  return (f"[{s['algorithm']}] final eval loss {s['final_eval_loss']:.4f} nats "
          f"({s['final_eval_bpb']:.3f} bits/byte) | syncs {s['syncs']} | "
          f"{s['bytes_per_worker'] / 1e6:.1f} MB sent per worker | "
          f"{s['tokens_per_sec']:.0f} tokens/s | wall {s['wall_time']:.1f} s")


def _progress(total: int, enabled: bool):
  from tqdm.auto import tqdm
  return tqdm(total=total, unit="step", disable=not enabled, dynamic_ncols=True)
