"""The decentralized studies' tune phase: which coarse points go on to the tuning seeds."""

import types

import pytest

from configs.studies import gossip_phases


def _cell(prune_gap):
  cell = types.SimpleNamespace(GRIDS=dict(noloco=dict(alpha=(0.5, 1.0, 1.5), beta=(0.1,))))
  if prune_gap is not None:
    cell.PRUNE_GAP = prune_gap
  return cell


def _coarse(cell, scores):
  """A coarse summary: the noloco points on the ring with these seed-0 scores."""
  points = gossip_phases.points(cell, "noloco", quick=False)
  return dict(
      stats={
          gossip_phases.label("noloco", "ring", p): dict(final_eval_bpb=[s, 0.0])
          for p, s in zip(points, scores)
      }
  )


@pytest.mark.parametrize(
    "gap, scores, want_alphas",
    [
        # No gap: the TOP best, lowest first.
        (None, (2.80, 2.70, 2.75), [1.0, 1.5]),
        (None, (2.80, 2.70, 2.95), [1.0, 0.5]),
        # The runner-up within the gap goes on; one past it does not.
        (0.02, (2.80, 2.70, 2.719), [1.0, 1.5]),
        (0.02, (2.80, 2.70, 2.721), [1.0]),
        (0.02, (2.70, 2.75, 2.76), [0.5]),
    ],
)
def test_tune_keeps_the_top_points_less_those_past_the_prune_gap(gap, scores, want_alphas):
  cell = _cell(gap)
  kept = gossip_phases.to_tune(cell, _coarse(cell, scores), "noloco", "ring", quick=False)
  assert [p["alpha"] for p in kept] == want_alphas
  assert len(kept) <= gossip_phases.TOP

