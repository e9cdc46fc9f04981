"""The README's main job: DiLoCo, K=4 workers, on the embedded Shakespeare plays.

Run (2 CPU cores, under 5 minutes including the one-off dataset build):
  python -m experiments.run --config configs/default.py --workdir runs/default
Expected: eval loss about 1.9 nats/byte, well below the 3.1-nat byte-unigram
entropy, after 600 inner steps and 24 syncs.
"""

from configs import diloco


def get_config(size: str = "cpu"):
  return diloco.get_config(size)
