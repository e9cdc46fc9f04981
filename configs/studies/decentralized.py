"""Study c: NoLoCo and GASLoC against DiLoCo and DDP, K = 4 and 8 workers.

Run (2 CPU cores, about 25 minutes):
  python -m experiments.sweep --study configs/studies/decentralized.py \
      --report_dir docs/studies/decentralized
Quick pipeline check (under a minute): add ``--quick``.

The global batch is the same for both K (32 sequences per inner step: 8 per
worker at K = 4, 4 at K = 8), so every run sees the same tokens. Every run is
timed on the homogeneous and the heterogeneous network (``network.also``):
training does not depend on the network, only the simulated clock does. The
table compares each run with DiLoCo at the same K.
Measured (3 seeds), simulated time on the two-site network relative to DiLoCo
(K = 4 / 8): GASLoC 0.62 / 0.28, NoLoCo 0.87 / 0.53, DDP 9.5 / 15.9; final loss
DiLoCo 2.112 / 2.162, NoLoCo 2.067 / 2.130, GASLoC 2.070 / 2.162, DDP 1.966 / 1.955.
"""

from configs.studies import base


def get_config(mode: str = "full"):
  quick = mode == "quick"
  s = base.new_study("decentralized", "Decentralized: NoLoCo, GASLoC, DiLoCo, DDP", quick)
  h = base.h_ref(quick)
  for k in (4, 8):
    batch = (4 if quick else 8) * 4 // k
    common = dict(num_workers=k, data__batch_size=batch)
    ref = f"diloco_k{k}"
    base.add_run(s, ref, base.run_config("diloco", quick, interval__h=h, **common))
    base.add_run(s, f"ddp_k{k}", base.run_config("ddp", quick, **common), reference=ref)
    base.add_run(
        s, f"noloco_k{k}", base.run_config("noloco", quick, **common), reference=ref
    )
    base.add_run(
        s,
        f"gasloc_k{k}",
        base.run_config("gasloc", quick, interval__h=h, **common),
        reference=ref,
    )
  return s
