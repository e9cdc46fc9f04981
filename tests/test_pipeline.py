"""The Grain input pipeline: the batches it yields are the workers' reading order,
its state resumes exactly, and it feeds only this process's workers."""

import numpy as np
import pytest

from autoloco_jax.data import corpus, pipeline
from autoloco_jax.runtime import replicas

L = 16


def worker_data(num_workers=3, rows=90, seed=0):
  rng = np.random.default_rng(7)
  tokens = rng.integers(0, 256, size=(rows, L + 1)).astype(np.uint8)
  shards = list(np.random.default_rng(seed).permutation(rows).reshape(num_workers, -1))
  return corpus.WorkerData(tokens, shards, tokens[:10], seed)


@pytest.mark.parametrize("prefetch", [0, 8])
def test_batches_follow_each_workers_reading_order(prefetch):
  wd = worker_data()
  pipe = pipeline.Pipeline(wd, batch_size=4, workers=range(3), prefetch=prefetch)
  got = np.concatenate([pipe(3), pipe(5), pipe(9)], axis=1)  # 17 steps > 1 epoch
  want, _ = wd.train_batches(wd.init_positions(), num_steps=17, batch_size=4)
  np.testing.assert_array_equal(got, want)
  assert got.dtype == np.uint8 and got.shape == (3, 17, 4, L + 1)
  pipe.close()


def test_state_resumes_exactly():
  wd = worker_data()
  whole = pipeline.Pipeline(wd, 4, range(3), prefetch=8)
  expected = whole(12)
  first = pipeline.Pipeline(wd, 4, range(3), prefetch=8)
  head = first(7)
  state = first.get_state()
  first.close()
  # A fresh pipeline (a new process) from the saved state.
  second = pipeline.Pipeline(wd, 4, range(3), prefetch=8, state=state)
  tail = second(5)
  np.testing.assert_array_equal(np.concatenate([head, tail], axis=1), expected)
  whole.close()
  second.close()


def test_a_process_reads_only_its_workers():
  wd = worker_data()
  pipe = pipeline.Pipeline(wd, 2, workers=[2], prefetch=0)
  want, _ = wd.train_batches(wd.init_positions(), num_steps=4, batch_size=2)
  np.testing.assert_array_equal(pipe(4), want[2:3])
  mesh = replicas.make_mesh(4, 2)
  assert replicas.local_workers(mesh, 4) == [0, 1, 2, 3]  # one process holds all


def test_host_wait_is_measured():
  pipe = pipeline.Pipeline(worker_data(), 4, range(3), prefetch=0)
  pipe(3)
  wait = pipe.take_wait()
  assert wait > 0 and pipe.take_wait() == 0.0
