"""The next ``H`` is decided in one place: what the host plans for open-loop
controllers (``algo.planned_h``) is what the sync returns, computed by the same
functions (``intervals``' ``plan``, ``streaming.StreamedSync.round_length``)."""

import numpy as np
import pytest

from autoloco_jax import intervals, replicas
from tests.helpers import config, run_rounds

K = 2

CASES = {
    "fixed": dict(),
    "schedule": dict(interval=dict(controller="schedule", schedule=(4, 6, 2, 8))),
    "fragments": dict(stream=dict(fragments=2)),
    "overlap": dict(stream=dict(tau=1), interval=dict(h=4)),
    "fragments-overlap-eager": dict(
        stream=dict(fragments=2, tau=1, eager=True), interval=dict(h=6)
    ),
    "schedule-fragments-overlap": dict(
        stream=dict(fragments=2, tau=1),
        interval=dict(controller="schedule", schedule=(6, 4, 8)),
    ),
    "compressed": dict(compress=dict(codec="int8")),
}


def _config(case):
  cfg = config("diloco", K=K, h=4)
  for group, fields in CASES[case].items():
    for key, value in fields.items():
      cfg[group][key] = value
  return cfg


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_host_plans_the_h_the_sync_returns(case):
  cfg = _config(case)
  mesh = replicas.make_mesh(K, 1)
  algo, _, _ = run_rounds(cfg, mesh, [1])
  assert algo.planned_h is not None
  # Drive rounds of the planned lengths: each sync's next_h is the plan.
  hs = [algo.first_h or int(cfg.interval.h)]
  for r in range(7):
    hs.append(algo.planned_h(r))
  _, _, metrics = run_rounds(cfg, mesh, hs[:-1])
  assert [int(m["next_h"]) for m in metrics] == hs[1:]
  assert len(set(hs)) >= (2 if "schedule" in case or "overlap" in case else 1)


def test_adaptive_controllers_plan_nothing():
  cfg = config("autoloco", K=K, h=4)
  cfg.interval.controller = "loss_ratio"
  cfg.interval.h_min, cfg.interval.h_max = 2, 8
  algo, _, _ = run_rounds(cfg, replicas.make_mesh(K, 1), [1])
  assert algo.planned_h is None


def test_a_plan_is_the_controllers_own_next_h():
  ctrl = intervals.schedule([5, 3, 7])
  state = ctrl.init()
  seen = []
  for t in range(1, 6):
    h, state = ctrl.next_h(state, None)
    seen.append(int(h))
    assert int(ctrl.plan(t)) == int(h)
  assert seen == [3, 7, 7, 7, 7] and int(ctrl.plan(0)) == 5
  assert int(intervals.fixed(9).plan(123)) == 9
  np.testing.assert_equal(intervals.loss_ratio(4, 2, 8).plan, None)
