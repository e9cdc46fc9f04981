"""Streaming DiLoCo: 4 fragments synced in turn, overlapped, in 4-bit floats.

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/streaming.py --workdir runs/streaming
Sizes: ``:tiny`` (seconds), ``:study``, ``:cpu`` (default), ``:gpu`` (not run here).

DiLoCo (K = 4, outer Nesterov 0.7 / 0.9) with the three parts of Streaming
DiLoCo (Douillard et al. 2025, arXiv 2501.18512; autoloco_jax/streaming.py):
* P = 4 strided fragments (blocks p, p + 4, ...; the embedding with block 0,
  the final norm with the last block): every H/4 inner steps one fragment
  syncs, each fragment every H steps;
* its exchange is in flight for tau = 5 inner steps (fewer when H/4 is
  smaller: tau = min(5, H/4 - 1)) and merges on arrival as
  0.5 local + 0.5 global;
* pseudo-gradients are sent as float4 e2m1 with a float32 scale per 128
  values (0.53 bytes per value), accumulated in float32.
The clock charges each sync a ring all-gather of the fragment's encoded bytes
(the scaled payloads cannot be summed on the way) and records the peak
bandwidth a link needs to hide it behind tau steps.

Under the protocol (tuning seeds apart, 5 fresh seeds, paired intervals against a
tuned DiLoCo) see docs/results.md §2. A first look, one seed each, untuned
(``network.step_time=0.075``, ``network.name=hetero``):
* ``:study`` (600 steps, H = 20, P = 4, tau = 4): eval loss 2.072 nats/token in
  120 fragment syncs, 20.4 MB sent per worker, simulated 45.0 s (all of it
  compute: every exchange hidden), peak bandwidth 1.2 MB/s; plain DiLoCo on
  the same settings: 2.106 nats, 30 syncs, 76.8 MB, 54.6 s, 34.1 MB/s.
* ``:tiny`` (40 steps, H = 10, tau = 1): 3.116 nats against DiLoCo's 3.213.
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
