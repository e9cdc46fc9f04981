"""The blocked causal attention's quality: ``model.attention=einsum_blocked``
against the default ``einsum`` at the study size (issue 43, item 3).

Run (2 CPU cores, about 20 minutes; start it twice to use both cores, the runs
are locked):
  python -m experiments.sweep --study configs/studies/attention.py \
      --report_dir docs/studies/attention
Quick pipeline check (under a minute): add ``--quick``.

DiLoCo at the ``study`` size (K = 4, 600 inner steps, H = 20, outer (0.7, 0.9)),
the whole validation split at the end, on 8 seeds that no choice used (the
option has no hyperparameter: there is nothing to tune). The two paths compute
the same function in another summation order, so the claim is "equal quality":
the paired difference of the final whole-split bits/byte, blocked minus einsum,
has a 95% t-interval inside ``TOLERANCE``, stated before the runs: the
evidence study's 0.01 bits/byte (``evidence.TOLERANCE``). Its cells' slope-based
tolerances are tighter, 0.0053-0.0165 (docs/results.md §1); the measured
interval lies inside the tightest of them too.
Measured (8 seeds, 2026-12-04): blocked minus einsum -0.0001 bits/byte, 95% CI
[-0.0019, +0.0017]: equal quality (docs/studies/attention/results.md,
docs/performance.md §7).
"""

from configs.studies import base

#: "Equal quality" for a numerics-only change, in bits/byte.
TOLERANCE = 0.01
SEEDS = tuple(range(300, 308))


def get_config(mode: str = "full"):
  quick = mode == "quick"
  s = base.new_study("attention", "Blocked causal attention against einsum", quick)
  if not quick:
    s.seeds = SEEDS
  for path in ("einsum", "einsum_blocked"):
    base.add_run(
        s,
        path,
        base.run_config("diloco", quick, model__attention=path),
        reference="einsum" if path != "einsum" else "",
    )
  s.comparisons = (("einsum_blocked", "einsum"),)
  s.tolerance = TOLERANCE
  return s
