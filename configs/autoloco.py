"""AutoLoCo: DiLoCo with an adaptive interval and the corrected outer step.

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/autoloco.py --workdir runs/autoloco
Sizes: ``:tiny`` (seconds), ``:cpu`` (default), ``:gpu`` (TPU/GPU VM, not run here).

Components: outer correction ``both`` (beta_t = beta ** r_t, alpha_t = alpha (1 -
beta_t) / (1 - beta), r_t = S_t / S_ref,t with the schedule reference over H_ref),
and the ``lr_quadratic`` controller (H = (c / lr)^2 clipped to [h_min, h_max], with
c chosen so that H = H_ref at the peak inner lr): rounds lengthen as the inner lr
decays. The experiments issue compares controllers and corrections and picks the
default from measurements.
Expected (cpu): eval loss within about 0.02 nats of DiLoCo at H_ref = 25 (1.98
nats/byte) with fewer syncs (DiLoCo: 24).
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "autoloco"
  c.outer.correction = "both"
  c.outer.reference = "schedule"
  h = c.interval.h
  c.outer.h_ref = h                 # DiLoCo's H, for which (0.7, 0.9) are tuned
  c.interval.controller = "lr_quadratic"
  c.interval.h_min = max(h // 2, 1)
  c.interval.h_max = 4 * h
  return c
