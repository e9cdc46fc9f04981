"""The outer momentum buffer when the round's length changes (``on_change``):
``restart`` zeroes it, ``rescale`` multiplies it by ``r_t / r_{t-1}``."""

import chex
import jax.numpy as jnp
import numpy as np
import pytest

from autoloco_jax import outer
from autoloco_jax.algorithms import registry
from autoloco_jax.run import config_check
from autoloco_jax.runtime import replicas
from experiments import sweep
from tests.helpers import config, run_rounds

ALPHA, BETA = 0.7, 0.9
D1, D2 = jnp.array([1.0, -2.0]), jnp.array([0.5, 4.0])


def two_steps(on_change, r1, r2):
  """The second update after rounds of ratios ``r1`` then ``r2`` (correction off,
  so only the buffer's treatment differs)."""
  tx = outer.autoloco(ALPHA, BETA, correction="none", on_change=on_change)
  state = tx.init(D1)
  _, state = tx.update(D1, state, inner_lr_sum=r1, reference_lr_sum=1.0)
  updates, state = tx.update(D2, state, inner_lr_sum=r2, reference_lr_sum=1.0)
  return np.asarray(updates), np.asarray(state.momentum)


def nesterov(m_prev):
  """``(update, m_t)`` of the second step from the (treated) buffer ``m_prev``."""
  m = D2 + BETA * m_prev
  return -ALPHA * (D2 + BETA * m), m


@pytest.mark.parametrize(
    "on_change, prev, r, want",
    [
        ("keep", 1.0, 2.0, 1.0),
        ("restart", 1.0, 2.0, 0.0),
        ("restart", 2.0, 2.0, 1.0),
        ("restart", 1.0, 1.0 + 1e-6, 1.0),  # inside snap_tol: no restart
        ("rescale", 1.0, 2.0, 2.0),
        ("rescale", 2.0, 0.5, 0.25),
        ("rescale", 1.5, 1.5, 1.0),
    ],
)
def test_buffer_scale_by_hand(on_change, prev, r, want):
  assert float(outer.buffer_scale(prev, r, on_change)) == pytest.approx(want, rel=1e-7)


@pytest.mark.parametrize(
    "on_change, factor", [("keep", 1.0), ("restart", 0.0), ("rescale", 2.0)]
)
def test_second_step_by_hand_after_the_round_doubles(on_change, factor):
  got_update, got_m = two_steps(on_change, 1.0, 2.0)
  want_update, want_m = nesterov(factor * np.asarray(D1))
  np.testing.assert_allclose(got_update, want_update, rtol=1e-6)
  np.testing.assert_allclose(got_m, want_m, rtol=1e-6)


@pytest.mark.parametrize("on_change", outer.ON_CHANGE)
def test_unchanged_ratio_keeps_the_buffer_bit_for_bit(on_change):
  got = two_steps(on_change, 1.5, 1.5)
  want = two_steps("keep", 1.5, 1.5)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)


def test_first_round_away_from_the_reference_counts_as_a_change():
  # r_0 = 1: a first round at r = 2 rescales (or restarts) the still-empty buffer,
  # so the first update is the same in every mode.
  for on_change in outer.ON_CHANGE:
    tx = outer.autoloco(ALPHA, BETA, correction="none", on_change=on_change)
    updates, state = tx.update(D1, tx.init(D1), inner_lr_sum=2.0, reference_lr_sum=1.0)
    np.testing.assert_allclose(np.asarray(updates), -ALPHA * (1 + BETA) * np.asarray(D1))
    assert tx.config.on_change == on_change


def autoloco_config(on_change):
  c = config("autoloco", K=2, h=4, lr=0.7, momentum=0.8)
  c.autoloco.h_ref = 4
  c.autoloco.correction = "momentum"
  c.autoloco.on_change = on_change
  return c


def test_the_trainer_applies_the_config_field():
  mesh = replicas.make_mesh(2, 1)
  hs = [4, 6, 6, 3]
  runs = {m: run_rounds(autoloco_config(m), mesh, hs)[1] for m in outer.ON_CHANGE}
  assert registry.from_config(autoloco_config("rescale")).on_change == "rescale"
  # Round 3 repeats round 2's H (nearly the same ratio; the schedule moves it a
  # little), rounds 2 and 4 change it: the three modes end in three places.
  for a, b in (("keep", "restart"), ("keep", "rescale"), ("restart", "rescale")):
    diff = np.abs(
        np.asarray(runs[a].algo.outer_opt.momentum["out"])
        - np.asarray(runs[b].algo.outer_opt.momentum["out"])
    ).max()
    assert diff > 1e-6, (a, b)


def test_rounds_at_h_ref_are_the_same_in_every_mode():
  mesh = replicas.make_mesh(2, 1)
  hs = [4, 4, 4]
  keep = run_rounds(autoloco_config("keep"), mesh, hs)[1]
  for on_change in ("restart", "rescale"):
    other = run_rounds(autoloco_config(on_change), mesh, hs)[1]
    chex.assert_trees_all_equal(other.params_K, keep.params_K)


def test_bad_field_is_refused():
  with pytest.raises(ValueError, match="on_change"):
    registry.from_config(autoloco_config("zero"))


def test_the_default_keeps_finished_runs_names():
  c = autoloco_config("keep")
  name = sweep.run_dir("runs", c)
  del c.autoloco["on_change"]
  assert sweep.run_dir("runs", c) == name
  assert config_check.VALUES_BEFORE_THE_FIELD["autoloco.on_change"] == "keep"
  c.autoloco.on_change = "rescale"
  assert sweep.run_dir("runs", c) != name
