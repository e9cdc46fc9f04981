"""The round driver: stage a chunk of batches, run the inner loop, sync.

Every caller that trains on the replica axis (the trainer, the benchmarks, the
checkpoint benchmark, PLoRA's packed jobs, the tests) runs its steps through
:func:`run_steps` and its rounds through :func:`run_round`, so there is one copy
of the staging loop. This is the device's side of a round; the trainer's side
(injected faults, simulated clocks, the next ``H``, evaluations) is
``run/stepper.py``, in the run layer above.

A round of ``h`` inner steps is staged in chunks of at most ``C`` batches
(:func:`chunk_size`): each chunk is read on the host, padded to ``C`` so the
jitted inner loop sees one shape, placed on the mesh with the workers split
over devices, and consumed by one call of the inner loop with a traced step
count. A long round's data therefore never sits on the device all at once, and
changing ``h`` never recompiles.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import jax
import numpy as np
from jax.sharding import Mesh

from autoloco_jax.runtime import replicas

#: Batches staged per inner call when ``config.chunk_steps`` is 0.
DEFAULT_CHUNK = 64

#: ``read(n) -> tokens_KxnxBxL1``: the next ``n`` batches of every worker.
Reader = Callable[[int], np.ndarray]


def chunk_size(chunk_steps: int, h_max: int) -> int:
  """``C``: batches staged per inner call; ``chunk_steps`` (0 = 64), at most
  the longest round ``h_max`` rounded up to a power of two. The rounding costs
  at most twice the staged tokens of the longest round and lets runs whose
  ``h_max`` differ a little (a grid over ``H``) stage one shape, and so share
  one compiled inner loop through the persistent compilation cache; the steps
  taken are the same."""
  return min(chunk_steps or DEFAULT_CHUNK, 1 << (max(h_max, 1) - 1).bit_length())


def round_steps(planned: int, remaining: int, min_steps: int) -> int:
  """Inner steps of the next round: ``planned``, or all ``remaining`` steps of
  the run when fewer remain or when the rest after ``planned`` would be a stub
  round shorter than ``min(min_steps, planned)``, which then joins this one.

  A stub round would cost a sync, and a full outer (momentum) step, for a
  handful of inner steps right before the final evaluation. With a fixed
  ``H`` (``min_steps = H``) that divides the run, no round changes.
  """
  if remaining - planned < min(min_steps, planned):
    return remaining
  return planned


def stage(batch_KxnxBxL1: np.ndarray, chunk: int, mesh: Mesh) -> jax.Array:
  """Pads ``n <= C`` batches to ``C`` and places them on the mesh (workers split
  over devices), in the batch's own dtype (uint8 tokens move a quarter of the
  bytes of int32), each worker's ``B`` sequences split over ``fsdp``
  (``replicas.tokens_spec``). The rows are this process's workers (all of them in a
  single process). A fresh host array per call: the device may still read the
  previous one."""
  k, n = batch_KxnxBxL1.shape[:2]
  if n > chunk:
    raise ValueError(f"cannot stage {n} batches in a chunk of {chunk}")
  tokens_KxCxBxL1 = np.zeros((k, chunk) + batch_KxnxBxL1.shape[2:], batch_KxnxBxL1.dtype)
  tokens_KxCxBxL1[:, :n] = batch_KxnxBxL1
  return replicas.put_local_workers(tokens_KxCxBxL1, mesh, replicas.tokens_spec(mesh))


def run_steps(
    inner: Callable, state: Any, read: Reader, num_steps: int, chunk: int, mesh: Mesh
) -> Any:
  """``num_steps`` inner steps, staged ``chunk`` batches at a time.

  Args:
    inner: a jitted ``(state, tokens_KxCxBxL1, n) -> state`` (``Algorithm.inner``,
      or any loop of the same shape, e.g. PLoRA's packed adapters).
    state: the state ``inner`` advances (donated).
    read: ``read(n) -> tokens_KxnxBxL1``, the next ``n`` batches.
    num_steps: steps to take (>= 0).
    chunk: ``C``, the staged shape (:func:`chunk_size`).
    mesh: where the workers live.
  """
  done = 0
  while done < num_steps:
    n = min(chunk, num_steps - done)
    state = inner(state, stage(read(n), chunk, mesh), np.int32(n))
    done += n
  return state


def run_round(
    algo: Any,
    state: Any,
    read: Reader,
    h: int,
    chunk: int,
    mesh: Mesh,
    present_K: np.ndarray | None = None,
) -> tuple[Any, dict]:
  """One round: ``h`` inner steps, then the algorithm's sync.

  ``present_K`` (0/1 per worker, injected faults): whose round counts; ``None``
  means everyone. Returns ``(state, metrics)`` with the metrics still on device
  (``jax.device_get`` them when they are needed).
  """
  state = run_steps(algo.inner, state, read, h, chunk, mesh)
  if present_K is None:
    present_K = np.ones(state.acc.loss_sum_K.shape[0], np.float32)
  return algo.sync(state, replicas.put_workers(np.asarray(present_K, np.float32), mesh))


def measure_step_time(
    inner: Callable,
    state: Any,
    tokens_KxCxBxL1: Any,
    num_workers: int,
    num_steps: int = 2,
) -> float:
  """Seconds of one inner step of one worker, measured on this machine.

  Runs the jitted ``inner`` (an ``Algorithm.inner``) on a copy of ``state``
  (the real state is untouched; ``inner`` donates the copy): once with 0 steps,
  which compiles it, then timed with ``num_steps`` steps of the staged batches
  (``num_steps`` must not exceed their count C). This machine runs all K
  workers, so one worker that had it to itself takes ``elapsed / (num_steps K)``.
  """
  probe = jax.tree.map(lambda x: x.copy(), state)
  probe = jax.block_until_ready(inner(probe, tokens_KxCxBxL1, np.int32(0)))
  start = time.perf_counter()
  probe = jax.block_until_ready(inner(probe, tokens_KxCxBxL1, np.int32(num_steps)))
  elapsed = time.perf_counter() - start
  del probe
  return elapsed / (num_steps * num_workers)
