"""DiLoCo in PyTorch the way a simulator user runs it: one process per worker.

The peer of the project's DiLoCo on a CPU (EXO Gym's way of simulating it, written
here from the DiLoCo paper, not from that code): K processes on one machine, each
pinned to one thread (``torch.set_num_threads(1)``), joined by a gloo process group
on the loopback. Each process holds one worker:

  inner (H steps):  θ_k ← AdamW step of ``torch_reference.Trainer`` on its batch B
  sync:             Δ = (1/K) Σ_k (θ_global − θ_k)          # all_reduce, per tensor
                    θ_global ← Nesterov SGD(θ_global, Δ; α, β)  # torch.optim.SGD
                    θ_k ← θ_global

with the model, the inner AdamW (fused), the clipping and the schedule of
``benchmarks/torch_reference.py`` (the JAX reference's twin, parameter count
checked), and DiLoCo's outer step as in ``autoloco_jax/outer`` (lr ``α``,
momentum ``β``, Nesterov; Douillard et al. 2023, arXiv 2311.08105, Algorithm 1).
Every worker starts from the same weights and reads its own random bytes.

Process 0 is the throughput benchmark's child (``benchmarks/unit_server.py``):
for each timed unit it broadcasts ``(steps, round_h)`` to the others, and all K
train ``steps`` steps in rounds of H; the unit ends after the last round's
all-reduce. torch is not a dependency; ``benchmarks/throughput/pytorch.py``
starts this child when torch is installed::

  python -m benchmarks.throughput --rows=reference,diloco,pytorch_diloco --rows_only --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks import torch_reference


class Worker:
  """One DiLoCo worker: its model and inner AdamW (``torch_reference.Trainer``
  on the per-worker batch), the global weights and the outer Nesterov SGD."""

  def __init__(self, spec: dict, rank: int):
    self.trainer = torch_reference.Trainer(dict(spec, global_batch=spec["batch"]))
    generator = torch.Generator().manual_seed(spec["seed"] * 1000 + rank + 1)
    shape = self.trainer.tokens_SxNxL1.shape
    self.trainer.tokens_SxNxL1 = torch.randint(
        0, spec["model"]["vocab_size"], shape, generator=generator
    )
    self.params = list(self.trainer.model.parameters())
    self.global_params = [p.detach().clone() for p in self.params]
    self.outer = torch.optim.SGD(
        self.global_params, lr=spec["alpha"], momentum=spec["beta"], nesterov=True
    )
    self.h, self.world = spec["h"], spec["num_workers"]

  @torch.no_grad()
  def sync(self) -> None:
    """The averaged pseudo-gradient, one all-reduce per tensor, then the outer step."""
    for g, p in zip(self.global_params, self.params):
      g.grad = g - p
      dist.all_reduce(g.grad)
      g.grad /= self.world
    self.outer.step()
    for g, p in zip(self.global_params, self.params):
      p.copy_(g)

  def unit(self, steps: int, round_h: int = 0) -> float:
    """``steps`` inner steps in rounds of ``round_h`` (default H), a sync after each."""
    loss_sum, done = torch.zeros(()), 0
    while done < steps:
      h = min(round_h or self.h, steps - done)
      for _ in range(h):
        loss_sum += self.trainer.train_step()
      self.sync()
      done += h
    return loss_sum.item()


def _join(spec: dict, rank: int, port: int) -> Worker:
  torch.set_num_threads(1)
  torch.set_num_interop_threads(1)
  dist.init_process_group(
      "gloo",
      init_method=f"tcp://127.0.0.1:{port}",
      rank=rank,
      world_size=spec["num_workers"],
  )
  worker = Worker(spec, rank)
  worker.unit(2, 1)  # warm-up: two steps and two syncs, on every rank together
  return worker


def _follow(rank: int, spec: dict, port: int) -> None:
  """Ranks 1..K-1: run each unit process 0 broadcasts, until ``steps < 0``."""
  worker = _join(spec, rank, port)
  command = torch.zeros(2, dtype=torch.int64)
  while True:
    dist.broadcast(command, 0)
    if command[0] < 0:
      break
    worker.unit(int(command[0]), int(command[1]))
  dist.destroy_process_group()


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def main() -> None:
  """Process 0: start the other K-1, warm up with them, then serve timed units."""
  from benchmarks import unit_server

  out = unit_server.channel()
  parser = argparse.ArgumentParser()
  parser.add_argument("--spec", required=True, help="JSON: model, inner, K, B, H, α, β")
  spec = json.loads(parser.parse_args().spec)
  os.environ["OMP_NUM_THREADS"] = "1"  # inherited by the spawned workers
  port = _free_port()
  context = mp.get_context("spawn")
  others = [
      context.Process(target=_follow, args=(rank, spec, port), daemon=True)
      for rank in range(1, spec["num_workers"])
  ]
  for p in others:
    p.start()
  t = time.perf_counter()
  worker = _join(spec, 0, port)
  warm = time.perf_counter() - t
  count = torch_reference.param_count(worker.trainer.model)
  if count != spec["expect_params"]:
    raise SystemExit(
        f"torch model has {count:,} parameters, the JAX model {spec['expect_params']:,}"
    )

  def unit(steps: int, round_h: int) -> None:
    dist.broadcast(torch.tensor([steps, round_h], dtype=torch.int64), 0)
    worker.unit(steps, round_h)

  ready = dict(
      torch=torch.__version__,
      processes=spec["num_workers"],
      threads_per_process=torch.get_num_threads(),
      num_params=count,
      warm_up_seconds=dict(pytorch_diloco=warm),
      rows=["pytorch_diloco"],
  )
  try:
    unit_server.serve(dict(pytorch_diloco=unit), ready, out)
  finally:
    dist.broadcast(torch.tensor([-1, 0], dtype=torch.int64), 0)
    for p in others:
      p.join(timeout=30)
    dist.destroy_process_group()


if __name__ == "__main__":
  main()
