"""Study a: AutoLoCo against DiLoCo at H_ref and at larger fixed H.

Run (2 CPU cores, about 15 minutes; runs shared with the other studies are
trained once):
  python -m experiments.sweep --study configs/studies/autoloco_vs_diloco.py \
      --report_dir docs/studies/autoloco_vs_diloco
Quick pipeline check (under a minute): add ``--quick``.

Claim under test (AutoLoCo paper): at least 27% fewer syncs than DiLoCo at
H_ref with a final eval loss no worse (within the seed spread). Also: is
AutoLoCo's point below DiLoCo's frontier of fixed H at equal syncs? The result
is in docs/results.md.
Measured (3 seeds): DiLoCo H = 20 / 30 / 40 / 60: 2.112 / 2.129 / 2.129 / 2.136
nats in 30 / 20 / 15 / 10 syncs; AutoLoCo 2.081 in 19 syncs (37% fewer than H_ref,
0.048 nats below H = 30 on every seed).
"""

from configs.studies import base


def get_config(mode: str = "full"):
  quick = mode == "quick"
  s = base.new_study("autoloco_vs_diloco", "AutoLoCo vs DiLoCo", quick)
  h = base.h_ref(quick)
  for mult in (1, 1.5, 2, 3):
    hh = int(h * mult)
    base.add_run(
        s,
        f"diloco_h{hh}",
        base.run_config("diloco", quick, interval__h=hh),
        reference="" if mult == 1 else f"diloco_h{h}",
    )
  base.add_run(
      s, "autoloco", base.run_config("autoloco", quick), reference=f"diloco_h{h}"
  )
  s.frontier = tuple(label for label in s.labels if label.startswith("diloco"))
  s.claims.fewer_syncs = dict(
      reference=f"diloco_h{h}", candidate="autoloco", min_saving=0.27
  )
  # The same test for DiLoCo with longer fixed rounds: how demanding it is here.
  for label in s.frontier[1:]:
    s.claims[f"fixed_{label}"] = dict(
        reference=f"diloco_h{h}", candidate=label, min_saving=0.27
    )
  # Paired seeds against the fixed H with the nearest sync count.
  s.claims.vs_nearest_fixed = dict(
      reference=f"diloco_h{int(1.5 * h)}", candidate="autoloco", min_saving=0.0
  )
  return s
