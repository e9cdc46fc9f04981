"""The evidence study: AutoLoCo against a tuned DiLoCo, choosing apart from reporting.

One study in five phases, run in order, for each regime (``base``, ``long``,
``many``) and corpus (``shakespeare``, ``python``): ``<phase>,<regime>,<corpus>``,
add ``,quick`` for the tiny pipeline check. ``experiments/evidence.sh <regime>
<corpus> [quick]`` runs them all, one sweep pinned to each core; by hand:

  python -m experiments.sweep --study configs/studies/evidence.py:regime,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:coarse,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:tune,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:design,base,shakespeare
  python -m experiments.sweep --study configs/studies/evidence.py:report,base,shakespeare

and the same with ``python`` for the Python corpus, ``many`` for the
many-rounds regime or ``long`` for 8 workers on non-iid shards (these two are
pruned by the base cell of their corpus: ``experiments/evidence.sh many python``
starts at ``coarse``).

Each phase writes its report to ``docs/studies/evidence_v2/<regime>_<corpus>/<phase>``
(quick: ``runs/studies/evidence-v2-quick/...``), which the next phase reads. Two
copies of one command share the work (the runs are locked), so on 2 cores start
each phase twice. The report phase's headline is the syncs the tuned frontier
needs to reach each design's loss, with paired bootstrap and t-intervals over
the fresh seeds (``experiments/syncs_saved.py``).

The phases, grids and designs, how each phase chooses its runs from the one
before, and where the ``many`` and ``long`` regimes are pruned: ``experiments/evidence.py``.
The results: ``docs/results.md`` §1.
"""

from experiments import evidence


def get_config(arg: str = "report,base,shakespeare"):
  return evidence.study(arg)
