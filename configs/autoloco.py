"""AutoLoCo: DiLoCo with an adaptive interval and the corrected outer step.

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/autoloco.py --workdir runs/autoloco
Sizes: ``:tiny`` (seconds), ``:cpu`` (default), ``:study`` (the studies' runs),
``:gpu`` (TPU/GPU VM, not run here).

Components, chosen by the ablation study (configs/studies/ablations.py, 3 seeds,
docs/results.md):
* controller ``loss_ratio`` (AdaComm): H_{t+1} = ceil(H_0 sqrt(L_t / L_0)) clipped
  to [H_ref / 2, 4 H_ref], starting from H_0 = 2 H_ref: long rounds while the loss
  is high, shorter ones as it falls;
* outer correction ``momentum``: beta_t = beta ** r_t with r_t = S_t / S_ref,t (the
  round's accumulated inner lr over that of H_ref steps of the schedule from the
  same step); alpha unchanged.
Unverified (see the status note in docs/results.md: same-seed selection, untuned
DiLoCo baseline, flat frontier). Measured at the ``study`` size (600 steps, H_ref = 20, 3 seeds): 19 syncs against
DiLoCo's 30 (37% fewer) at a final eval loss 0.03 nats lower; at the ``cpu`` size
(one seed, H_ref = 25): 1.99 nats in 15 syncs against DiLoCo's 1.98 in 24. The corrections ``lr``
and ``both`` diverge (alpha_t grows with r_t); ``lr_quadratic`` saves 47% of the
syncs at a cost of 0.03 nats; ``agreement`` syncs as often as DiLoCo.
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "autoloco"
  c.autoloco.correction = "momentum"
  c.autoloco.reference = "schedule"
  h = c.interval.h
  c.autoloco.h_ref = h  # DiLoCo's H, for which (0.7, 0.9) are tuned
  c.interval.controller = "loss_ratio"
  c.interval.h = 2 * h  # H_0
  c.interval.h_min = max(h // 2, 1)
  c.interval.h_max = 4 * h
  return c
