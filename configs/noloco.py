"""NoLoCo: K=4 workers and no all-reduce; every H steps each worker averages
with one random partner and takes NoLoCo's outer step.

Run (2 CPU cores, about 4 minutes):
  python -m experiments.run --config configs/noloco.py --workdir runs/noloco
Heterogeneous network: add --config.network.name=hetero. Compressed messages:
--config.compress.codec=int8, and --config.compress.ef_beta=0.9 for error feedback
(autoloco_jax/algorithms/gossip/compressed_exchange.py). Sizes: ``:tiny`` (seconds), ``:cpu`` (default),
``:gpu`` (TPU/GPU VM, not run here).

Public-code defaults (gensyn-ai/noloco): outer lr alpha 0.7, momentum beta 0.5,
gamma = alpha, groups of 2, H = 50, a tenth of DiLoCo's paper H (500). At our
scale DiLoCo runs H = 25, a tenth of which would sync every 2-3 steps, so we take
a fifth (5 on cpu, 2 on tiny) and keep 50 for gpu.
Expected (on the first 8 KB eval, not yet re-run on the
whole split; cpu, with network.name=hetero and network.step_time=0.075): eval loss of
the replicas' mean 1.95 nats/byte after 600 inner steps in 120 rounds of one
pairwise exchange each (DiLoCo: 1.98 in 24 syncs). The runs and the compressed
ones: docs/results.md (single-seed runs at the cpu size; §2, gossip methods; §3b).
"""

from configs import common

H = {"tiny": 2, "cpu": 5, "study": 4, "gpu": 50}


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "noloco"
  c.interval.h = H[size]
  # config.noloco and config.gossip keep common.base's (public-code) defaults.
  return c
