"""The decentralized studies' phases: which coarse points go on to the tuning
seeds, and G1's DDP line with its learning rate tuned."""

import types

import pytest

from configs.studies import base, gossip_g1, gossip_phases
from experiments import engine


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


def test_a_widening_joins_the_grid_only_for_its_word_and_its_best_is_tuned():
  cell = _cell(None)
  cell.WIDENINGS = dict(python=dict(noloco=dict(alpha=(1.0,), beta=(0.0,))))
  plain = gossip_phases.points(cell, "noloco", quick=False, cell_words=("shakespeare",))
  wide = gossip_phases.points(cell, "noloco", quick=False, cell_words=("python",))
  assert plain == gossip_phases.points(cell, "noloco", quick=False)
  assert wide == plain + [dict(alpha=1.0, beta=0.0)]
  # Quick mode keeps its one point per method.
  assert gossip_phases.points(cell, "noloco", quick=True, cell_words=("python",)) == [
      dict(alpha=0.7, beta=0.5)
  ]
  coarse = dict(
      stats={
          gossip_phases.label("noloco", "ring", p): dict(final_eval_bpb=[s, 0.0])
          for p, s in zip(wide, (2.80, 2.70, 2.75, 2.60))
      }
  )
  kept = gossip_phases.to_tune(cell, coarse, "noloco", "ring", False, ("python",))
  assert kept[0] == dict(alpha=1.0, beta=0.0)
  # Without its word the widened point is not read, though its run is in the summary.
  kept = gossip_phases.to_tune(cell, coarse, "noloco", "ring", False, ("shakespeare",))
  assert dict(alpha=1.0, beta=0.0) not in kept


def test_g2_widens_python_only():
  from configs.studies import gossip_g2

  s_py = engine.build(gossip_g2, "coarse,python")
  s_sh = engine.build(gossip_g2, "coarse,shakespeare")
  assert len(s_py.runs) == len(s_sh.runs) + 7
  assert "noloco_matching_alpha1p0_beta0p0" in s_py.runs
  assert "noloco_matching_alpha1p0_beta0p0" not in s_sh.runs


def test_g1_tunes_ddps_learning_rate_on_the_coarse_pass_and_runs_its_best_later(monkeypatch):
  coarse = engine.build(gossip_g1, "coarse")
  lrs = {l: coarse.runs[l].inner.lr for l in coarse.labels if l.startswith("ddp")}
  shared = gossip_g1.run_config("ddp", dict(quick=False)).inner.lr
  assert lrs == {gossip_g1.ddp_label(x): x * shared for x in gossip_g1.DDP_LR_SCALES}
  # At the shared rate it is the same config (the same run) as before the tuning.
  assert coarse.runs["ddp"].to_json() == gossip_g1.run_config("ddp", dict(quick=False)).to_json()
  # Later phases run the coarse pass's lowest, read against it.
  scores = {"ddp": 2.70, "ddp_lr2p0x": 2.65, "ddp_lr3p0x": 2.68}
  summary = dict(stats={l: dict(final_eval_bpb=[v, 0.0]) for l, v in scores.items()})
  monkeypatch.setattr(engine.Cell, "read", lambda cell, phase: summary)
  opts = engine.parse(gossip_g1, "tune")
  assert gossip_g1.ddp_scale(opts) == 2.0
  s = base.new_study("t", "t", False)
  assert gossip_g1.add_references(s, opts) == "ddp_lr2p0x"
  assert s.labels == ("ddp_lr2p0x",) and s.runs["ddp_lr2p0x"].inner.lr == 2.0 * shared



def test_g1_report_reads_every_method_against_ddp_at_its_tuned_rate():
  """The full report, on the committed tune phase (DDP tuned to 2x the shared
  rate): every comparison names a run of the study (it read "ddp", the shared
  rate's label, which the report no longer runs)."""
  from experiments import engine, sweep

  report = engine.build(gossip_g1, "report")
  sweep.check_study(report)
  ddp = [l for l in report.labels if l.startswith("ddp")]
  assert len(ddp) == 1
  against_ddp = [c for c, r in report.comparisons if r == ddp[0]]
  assert len(against_ddp) == len(gossip_g1.METHODS) * len(gossip_g1.TOPOLOGIES)
