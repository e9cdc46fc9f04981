"""The next ``H`` is decided in one place: what the host plans for open-loop
controllers (``algo.next_round_steps``) is what the sync returns, computed by the same
functions (``intervals``' ``open_loop``, ``streaming.StreamingSync.round_length``)."""

import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.algorithms.diloco import intervals
from autoloco_jax.runtime import replicas, rounds as rounds_lib, state as state_lib
from tests.helpers import config, tokens, toy_loss, toy_params

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

#: The seven rounds' lengths, worked out by hand from the rules in
#: ``docs/algorithms.md``: a fixed H; a schedule whose last entry repeats; P
#: fragments, a slot of H/P steps; overlap τ, a first full slot, then τ after each
#: send and the slot less τ after each arrival (the slot of the interval in force).
EXPECTED = {
    "fixed": [4] * 7,
    "schedule": [4, 6, 2, 8, 8, 8, 8],
    "fragments": [2] * 7,
    "overlap": [4, 1, 3, 1, 3, 1, 3],
    "fragments-overlap-eager": [3, 1, 2, 1, 2, 1, 2],
    "schedule-fragments-overlap": [3, 1, 1, 1, 3, 1, 3],
    "compressed": [4] * 7,
}


def _config(case):
  cfg = config("diloco", K=K, h=4)
  for group, fields in CASES[case].items():
    for key, value in fields.items():
      cfg[group][key] = value
  return cfg


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_host_plans_the_h_the_sync_returns(case):
  """Rounds of the planned lengths, one after another: each sync's ``next_h``
  is what the host planned for it."""
  cfg = _config(case)
  mesh = replicas.make_mesh(K, 1)
  algo = registry.make(cfg, toy_loss, mesh)
  assert algo.next_round_steps is not None
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  data, start = tokens(K, 64), 0
  h, seen = algo.first_round_steps, []

  def read(n):
    nonlocal start
    start += n
    return data[:, start - n : start]

  for r in range(7):
    state, metrics = rounds_lib.run_round(algo, state, read, h, algo.max_round_steps, mesh)
    planned = algo.next_round_steps(r)
    assert int(jax.device_get(metrics["next_h"])) == planned, (case, r)
    seen.append(h)
    h = planned
  assert seen == EXPECTED[case], seen


def test_adaptive_controllers_plan_nothing():
  cfg = config("autoloco", K=K, h=4)
  cfg.interval.controller = "loss_ratio"
  cfg.interval.h_min, cfg.interval.h_max = 2, 8
  algo = registry.make(cfg, toy_loss, replicas.make_mesh(K, 1))
  assert algo.next_round_steps is None


def test_an_open_loop_is_the_controllers_own_next_h():
  ctrl = intervals.schedule([5, 3, 7])
  state = ctrl.init()
  seen = []
  for t in range(1, 6):
    h, state = ctrl.next_h(state, None)
    seen.append(int(h))
    assert int(ctrl.open_loop(t)) == int(h)
  assert seen == [3, 7, 7, 7, 7] and int(ctrl.open_loop(0)) == 5
  assert int(intervals.fixed(9).open_loop(123)) == 9
  np.testing.assert_equal(intervals.loss_ratio(4, 2, 8).open_loop, None)
