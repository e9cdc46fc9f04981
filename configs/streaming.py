"""Streaming DiLoCo: 4 fragments synced in turn, overlapped, in 4-bit floats.

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/streaming.py --workdir runs/streaming
Sizes: ``:tiny`` (seconds), ``:study``, ``:cpu`` (default), ``:gpu`` (not run here).

DiLoCo (K = 4, outer Nesterov 0.7 / 0.9) with the three parts of Streaming
DiLoCo (Douillard et al. 2025, arXiv 2501.18512; autoloco_jax/algorithms/diloco/streaming.py):
P = 4 strided fragments, each synced every H steps, one every H/4; each
exchange in flight for tau = min(5, H/4 - 1) inner steps, merged on arrival as
0.5 local + 0.5 global; pseudo-gradients sent as float4 e2m1 with a float32
scale per 128 values. The clock charges a ring all-gather of the encoded bytes.
Expected (on the first 8 KB eval, not yet re-run on the
whole split; ``:study``, one seed, untuned, network.name=hetero,
network.step_time=0.075): eval loss 2.072 nats/token in 120 fragment syncs, 20.4
MB sent per worker (plain DiLoCo: 2.106 nats, 30 syncs, 76.8 MB). Under the
protocol (5 fresh seeds, against a tuned DiLoCo, 30 syncs): docs/results.md
§2.2; in the many-rounds regime (20 fresh seeds, 150 syncs): §2.1.
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "diloco"
  c.stream.fragments = 4
  c.stream.mode = "strided"
  c.stream.tau = min(5, max(c.interval.h // c.stream.fragments - 1, 0))
  c.stream.mix = 0.5
  c.compress.codec = "fp4"
  c.compress.block_size = 128
  return c
