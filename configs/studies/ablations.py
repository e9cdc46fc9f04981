"""Study b: AutoLoCo's outer correction and interval controller, one at a time.

Run (2 CPU cores, about 20 minutes):
  python -m experiments.sweep --study configs/studies/ablations.py \
      --report_dir docs/studies/ablations
Quick pipeline check (under a minute): add ``--quick``.

Corrections (with the ``lr_quadratic`` controller): none, momentum, lr, both.
Controllers (with the ``momentum`` correction): fixed (H = H_ref, where every
correction is the identity, r_t = 1: this is DiLoCo at H_ref), lr_quadratic,
loss_ratio (starting from 2 H_ref: AdaComm shortens rounds as the loss falls),
agreement. Every adaptive run is bounded to [H_ref/2, 4 H_ref]; one more caps
lr_quadratic at 2 H_ref. The winner became
configs/autoloco.py's default (docs/results.md says why).
Measured (3 seeds; DiLoCo 2.112 nats in 30 syncs): lr_quadratic with correction
none 2.158, momentum 2.140, lr 4.62, both 4.26 (16 syncs); lr_quadratic capped at
2 H_ref 2.109 (19); loss_ratio 2.081 (19); agreement 2.128 (33).
"""

from configs.studies import base


def get_config(mode: str = "full"):
  quick = mode == "quick"
  s = base.new_study("ablations", "AutoLoCo ablations: correction and controller", quick)
  h = base.h_ref(quick)
  ref = f"diloco_h{h}"
  # H_0 = H_ref unless said otherwise (configs/autoloco.py's default is 2 H_ref).
  bounds = dict(
      interval__h=h, interval__h_min=h // 2, interval__h_max=4 * h, autoloco__h_ref=h
  )
  base.add_run(s, ref, base.run_config("diloco", quick, interval__h=h))
  for correction in ("none", "momentum", "lr", "both"):
    base.add_run(
        s,
        f"lr_quadratic_{correction}",
        base.run_config(
            "autoloco",
            quick,
            interval__controller="lr_quadratic",
            autoloco__correction=correction,
            **bounds,
        ),
        reference=ref,
    )
  # The same with rounds capped at 2 H_ref: a milder saving, nearer the paper's 27%.
  base.add_run(
      s,
      "lr_quadratic_momentum_hmax2",
      base.run_config(
          "autoloco",
          quick,
          interval__controller="lr_quadratic",
          autoloco__correction="momentum",
          **dict(bounds, interval__h_max=2 * h),
      ),
      reference=ref,
  )
  base.add_run(
      s,
      "loss_ratio_momentum",
      base.run_config(
          "autoloco",
          quick,
          interval__controller="loss_ratio",
          autoloco__correction="momentum",
          **dict(bounds, interval__h=2 * h),
      ),
      reference=ref,
  )
  base.add_run(
      s,
      "agreement_momentum",
      base.run_config(
          "autoloco",
          quick,
          interval__controller="agreement",
          autoloco__correction="momentum",
          **bounds,
      ),
      reference=ref,
  )
  for label in s.labels[1:]:
    s.claims[label] = dict(reference=ref, candidate=label, min_saving=0.27)
  return s
