"""The sync budget: exactly B rounds over T steps, placed by a shape."""

import numpy as np
import pytest

from autoloco_jax.algorithms.diloco import budget
from autoloco_jax.run import trainer
from configs import autoloco as autoloco_config
from tests import helpers


@pytest.mark.parametrize("shape", budget.SHAPES)
@pytest.mark.parametrize("total, syncs", [(600, 22), (3000, 110), (40, 40), (41, 1)])
def test_schedule_spends_the_budget(shape, total, syncs):
  hs = budget.schedule(total, syncs, shape, ratio=4.0, split=0.5)
  assert len(hs) == syncs and sum(hs) == total and min(hs) >= 1
  if shape != "constant":
    assert all(a >= b for a, b in zip(hs, hs[1:]))  # front-loaded: never grows


def test_shapes_by_hand():
  np.testing.assert_allclose(budget.weights("linear", 3, 3.0, 0.5), [3.0, 2.0, 1.0])
  np.testing.assert_allclose(budget.weights("exponential", 3, 4.0, 0.5), [4.0, 2.0, 1.0])
  np.testing.assert_allclose(budget.weights("two_phase", 4, 2.0, 0.25), [2, 1, 1, 1])
  # 600 steps in 30 constant rounds: a fixed H = 20; 3 linear rounds of 3:2:1
  # over 60 steps: 1 step each, then 57 shared 28.5 : 19 : 9.5, rounded by
  # largest remainders.
  assert budget.schedule(600, 30, "constant", 1.0, 0.5) == (20,) * 30
  assert budget.schedule(60, 3, "linear", 3.0, 0.5) == (30, 20, 10)


def test_bad_budgets_are_refused():
  with pytest.raises(ValueError, match="syncs"):
    budget.schedule(10, 11, "linear", 3.0, 0.5)
  with pytest.raises(ValueError, match="unknown budget shape"):
    budget.schedule(10, 2, "quadratic", 3.0, 0.5)
  with pytest.raises(ValueError, match="ratio"):
    budget.schedule(10, 2, "linear", ratio=0.0, split=0.5)


def test_a_run_with_a_budget_syncs_that_often(tmp_path):
  cfg = helpers.tiny(
      autoloco_config,
      **{
          "total_steps": 40,
          "interval.controller": "budget",
          "interval.syncs": 3,
          "interval.shape": "linear",
          "interval.ratio": 3.0,
      },
  )
  summary = trainer.train_and_evaluate(cfg, str(tmp_path))
  assert summary["syncs"] == 3
  assert [r["h"] for r in helpers.rounds(str(tmp_path))] == list(
      budget.schedule(40, 3, "linear", 3.0, 0.5)
  )
