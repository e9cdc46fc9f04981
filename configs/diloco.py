"""DiLoCo: K=4 workers, H fixed, outer Nesterov SGD (lr 0.7, momentum 0.9).

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/diloco.py --workdir runs/diloco
Sizes: ``configs/diloco.py:tiny`` (seconds), ``:cpu`` (default), ``:gpu`` (a
TPU/GPU VM: 12-layer d=768 model, H=500, 20k inner steps; not run here), ``:1b``
(a Llama-shaped 1.0B model in bfloat16 with full remat, for a pod slice whose
workers each span ``config.mesh.fsdp`` devices; compiled on a simulated
``replica 4 x fsdp 16`` slice in docs/mesh.md, not trained here).
Expected (cpu, one seed): 2.739 bits/byte (1.898 nats/byte) on the whole
validation split (583,520 tokens) after 600 inner steps in 24 syncs, against 3.1
nats for the byte-unigram baseline (docs/results.md, single-seed runs).
DiLoCo tuned at every fixed H, against AutoLoCo: docs/results.md §1.
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "diloco"
  return c
