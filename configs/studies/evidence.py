"""The evidence study: AutoLoCo against a tuned DiLoCo, choosing apart from reporting.

One study in five phases, run in order, for each regime (``base``, ``long``) and
corpus (``shakespeare``, ``python``): ``<phase>,<regime>,<corpus>``, add ``,quick``
for the tiny pipeline check. ``experiments/evidence.sh <regime> <corpus> [quick]``
runs them all, two sweeps at a time; by hand:

  python -m experiments.sweep --study configs/studies/evidence.py:regime,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:coarse,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:tune,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:design,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:report,base,shakespeare

Each phase writes its report to ``docs/studies/evidence/<regime>_<corpus>/<phase>``
(quick: ``runs/studies/evidence-quick/...``), which the next phase reads. Two copies
of one command share the work (the runs are locked), so on 2 cores start each phase
twice. ``design_added`` and ``report_added`` add to a finished cell, by hand.

The phases, grids and designs, and how each phase chooses its runs from the one
before: ``experiments/evidence.py``. The results: ``docs/results.md``.
"""

from experiments import evidence


def get_config(arg: str = "report,base,shakespeare"):
  return evidence.study(arg)
