"""DDP: the synchronous baseline; gradients all-reduced every step over K=4 workers.

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/ddp.py --workdir runs/ddp
Sizes: ``:tiny``, ``:cpu`` (default), ``:gpu`` (TPU/GPU VM, not run here).
Expected (cpu): eval loss a little below DiLoCo's (DDP is the quality ceiling) at
600 syncs, one per inner step. Against the others under the study protocol:
docs/results.md §2 and §3b.
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "ddp"
  return c
