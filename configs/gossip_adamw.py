"""Gossip AdamW: K=4 workers, local AdamW steps, then each averages with its
neighbours through W = I - w Lap (the D-PSGD form; the decentralized baseline of
the gossip methods).

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/gossip_adamw.py --workdir runs/gossip_adamw
One step per communication on a ring: --config.interval.h=1
--config.gossip.topology=ring; the gossip weight: --config.gossip_adamw.weight=0.25
(0 = 1/(degree+1)). Sizes: ``:tiny``, ``:cpu`` (default), ``:gpu`` (TPU/GPU VM,
not run here). The update and its equivalence tests: docs/algorithms.md §5.3.
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "gossip_adamw"
  # config.gossip_adamw and config.gossip keep common.base's defaults.
  return c
