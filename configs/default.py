"""The README's main job: AutoLoCo, K=4 workers, on the embedded Shakespeare plays.

Run (2 CPU cores, about 3 minutes plus the one-off dataset build):
  python -m experiments.run --config configs/default.py --workdir runs/default
Expected: eval loss about 2.04 nats/byte (2.94 bits/byte), well below the 3.33-nat
byte-unigram entropy of the validation plays, after 600 inner steps in 13 syncs
while H grows from 25 to 100 (DiLoCo at H=25, configs/diloco.py: 1.98 nats in 24
syncs).
"""

from configs import autoloco


def get_config(size: str = "cpu"):
  return autoloco.get_config(size)
