"""Study d: iid against non_iid worker shards, DiLoCo and AutoLoCo.

Run (2 CPU cores, about 10 minutes; the iid runs are study a's):
  python -m experiments.sweep --study configs/studies/heterogeneity.py \
      --report_dir docs/studies/heterogeneity
Quick pipeline check (under a minute): add ``--quick``.

non_iid gives each worker its own plays (data.partition). The claims ask
whether AutoLoCo's sync saving at equal loss holds in both settings.
Measured (3 seeds): DiLoCo iid 2.112, non_iid 2.104 (30 syncs); AutoLoCo iid
2.081, non_iid 2.080 (19 syncs).
"""

from configs.studies import base


def get_config(mode: str = "full"):
  quick = mode == "quick"
  s = base.new_study("heterogeneity", "Data heterogeneity: iid vs non_iid shards", quick)
  h = base.h_ref(quick)
  for partition in ("iid", "non_iid"):
    ref = f"diloco_{partition}"
    base.add_run(
        s, ref, base.run_config("diloco", quick, interval__h=h, data__partition=partition)
    )
    base.add_run(
        s,
        f"autoloco_{partition}",
        base.run_config("autoloco", quick, data__partition=partition),
        reference=ref,
    )
    s.claims[f"fewer_syncs_{partition}"] = dict(
        reference=ref, candidate=f"autoloco_{partition}", min_saving=0.27
    )
  return s
