"""The end of a run: the final evaluation, the throughput window and the summary.

The summary is the last line of ``metrics.jsonl`` and what
``trainer.train_and_evaluate`` returns. Its throughput counts the rounds between
the end of the first round this process read and the end of its last one
(:class:`Window`), so neither compilation nor the last checkpoint's save and
the final evaluation are in it.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import jax

from autoloco_jax.run import distributed, evaluation, mfu as mfu_lib
from autoloco_jax.run.assembly import Run
from autoloco_jax.run.clocks import Clocks
from autoloco_jax.run.resume import HostState
from autoloco_jax.runtime import state as state_lib


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


class Window:
  """The throughput window: the (time, step) at the end of the first round read
  and at the end of the last one.

  Args:
    t_start: when the run (this process) started, ``time.time()``.
    start_step: the inner step it started from (0, or the resumed one).
  """

  def __init__(self, t_start: float, start_step: int):
    self.start = (t_start, start_step)
    self.steady = None

  def mark(self, step: int) -> None:
    """A round ending at inner ``step`` has just been read and logged."""
    now = (time.time(), step)
    self.steady = (self.steady[:2] if self.steady else now) + now

  def tokens_per_sec(self, step: int, tokens_per_step: int) -> float:
    """:func:`steady_rate` of the window (NaN when no round was read and no
    step taken)."""
    steady = self.steady or (0.0, step, time.time(), step)
    return steady_rate(steady, self.start, tokens_per_step)


def final_eval(
    config: Any, run: Run, evaluate_tokens: Any, state: state_lib.TrainState, workdir: str
) -> dict:
  """The final evaluation: the whole validation split (``eval.final_num_batches
  = 0``, capped at ``eval.max_tokens`` targets) or a spread sample of it. Its
  per-document losses go to ``final_eval.json`` in ``workdir``; returns the
  summary's ``final_eval_*`` fields (losses, size, seconds).

  Raises ``FloatingPointError`` for a non-finite loss.
  """
  jax.block_until_ready(state)
  start = time.perf_counter()
  eval_set = run.data.eval_set(
      config.eval.batch_size, config.eval.final_num_batches, config.eval.max_tokens
  )
  losses = evaluate_tokens(state, evaluation.place(eval_set, run.mesh))
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


def summary(
    config: Any,
    run: Run,
    host: HostState,
    clocks: Clocks,
    window: Window,
    t_start: float,
    final: dict,
) -> dict:
  """The run's final record; ``final`` is :func:`final_eval`'s fields. A run of
  one round takes its whole time as the throughput window, its compilation
  included."""
  tokens_per_step = config.num_workers * config.data.batch_size * config.data.seq_len
  tokens_per_sec = window.tokens_per_sec(host.step, tokens_per_step)
  clock = clocks.main.metrics()
  wall_time = time.time() - t_start
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
      **clocks.also_times(),
      tokens_per_sec=tokens_per_sec,
      model_flops_per_sec=tokens_per_sec * run.flops_per_token,
      mfu=mfu_lib.mfu(
          tokens_per_sec * run.flops_per_token,
          int(run.mesh.devices.size),
          mfu_lib.peak_of(run.mesh, config),
      ),
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


def summary_line(s: dict) -> str:
  """The summary in one line, as the command line prints it."""
  return (
      f"[{s['algorithm']}] final eval {s['final_eval_bpb']:.3f} bits/byte "
      f"({s['final_eval_loss']:.4f} nats/token, {s['tokenizer']}, "
      f"{s['final_eval_tokens']} tokens) | syncs {s['syncs']} | "
      f"{s['bytes_per_worker'] / 1e6:.1f} MB sent per worker | "
      f"simulated {s['sim_time']:.1f} s ({s['network']}) | "
      f"{s['tokens_per_sec']:.0f} tokens/s | wall {s['wall_time']:.1f} s"
  )
