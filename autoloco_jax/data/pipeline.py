"""The input pipeline: every worker's batches through Grain, prefetched.

For the workers this process feeds (all of them in a single process; on many
hosts, those on the process's devices), each worker's rows in reading order
(`WorkerData.worker_dataset(k)`, a Grain `MapDataset`: the shard reshuffled
every epoch) are batched, zipped across workers into one element per inner
step, `[K_local, B, L + 1]`, and read through a Grain iterator that a
background thread keeps `prefetch` steps ahead, so the host has the next
round's batches ready while the device trains. The iterator's state (the next
step's index) is the pipeline's whole reading state: it goes into the
checkpoint, and a pipeline restored from it yields exactly the batches the
uninterrupted one would have.

Batches keep the data's token dtype (uint8 for the byte tokenizer), so staging
moves a quarter of the bytes of int32.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np


class Pipeline:
  """Batches of `workers` for the round driver (`rounds.Reader`).

  Args:
    data: the run's `data.WorkerData`.
    batch_size: B, sequences per worker per step.
    workers: the workers this process feeds (`replicas.local_workers`).
    prefetch: steps the background thread reads ahead (0: no thread).
    state: a `get_state()` of an earlier pipeline of the same run, to resume.
  """

  def __init__(
      self,
      data: Any,
      batch_size: int,
      workers: Sequence[int],
      prefetch: int = 64,
      state: dict | None = None,
  ):
    import grain

    self.workers = list(workers)
    per_worker = [data.worker_dataset(k).batch(batch_size) for k in self.workers]
    steps = grain.experimental.ZipMapDataset(per_worker).map(np.stack)
    dataset = steps.to_iter_dataset()
    if prefetch > 0:
      dataset = grain.experimental.ThreadPrefetchIterDataset(
          dataset, prefetch_buffer_size=prefetch
      )
    self._iterator = iter(dataset)
    if state:
      self._iterator.set_state(state)
    #: Seconds the host spent blocked waiting for batches since the last `take_wait`.
    self.wait_seconds = 0.0

  def __call__(self, num_steps: int) -> np.ndarray:
    """The next `num_steps` steps: tokens_KxnxBxL1 for the local workers."""
    start = time.perf_counter()
    steps = [next(self._iterator) for _ in range(num_steps)]
    self.wait_seconds += time.perf_counter() - start
    return np.stack(steps, axis=1)

  def get_state(self) -> dict:
    """The reading state (JSON-able): steps consumed so far."""
    return self._iterator.get_state()

  def take_wait(self) -> float:
    """Seconds blocked on data since the last call, and reset."""
    wait, self.wait_seconds = self.wait_seconds, 0.0
    return wait

  def close(self) -> None:
    close = getattr(self._iterator, "close", None)
    if close is not None:
      close()
