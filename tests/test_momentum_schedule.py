"""Outer-momentum schedules (``outer.momentum_schedule``, ``config.diloco.beta_end``):
a constant schedule is DiLoCo bit for bit, the schedule's values are its
formula's, each outer step applies ``β(t)`` at its count, and the config's fields
are read and checked where DiLoCo reads its own."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from autoloco_jax import outer
from autoloco_jax.algorithms import registry
from autoloco_jax.runtime import replicas
from tests.helpers import config, run_rounds, toy_loss


@pytest.mark.parametrize("shape", outer.MOMENTUM_SHAPES)
def test_a_constant_schedule_is_diloco_bit_for_bit(shape):
  params = {"w": jnp.linspace(-1.0, 1.0, 7), "b": jnp.ones((2, 3))}
  plain, sched = outer.diloco(0.7, 0.9), outer.diloco(
      0.7, outer.momentum_schedule(0.9, 0.9, rounds=3, shape=shape)
  )
  sgd = optax.sgd(0.7, momentum=0.9, nesterov=True)
  states = [tx.init(params) for tx in (plain, sched, sgd)]
  for t in range(5):
    delta = jax.tree.map(lambda p: jnp.sin(p * (t + 1)), params)
    outs = []
    for i, tx in enumerate((plain, sched, sgd)):
      u, states[i] = tx.update(delta, states[i], params)
      outs.append(u)
    chex.assert_trees_all_equal(outs[0], outs[1])
    chex.assert_trees_all_equal(outs[0], outs[2])


def test_schedule_values_follow_their_formulas():
  b0, b1, R = 0.5, 0.9, 4
  lin = outer.momentum_schedule(b0, b1, R, "linear")
  cos = outer.momentum_schedule(b0, b1, R, "cosine")
  for t in range(7):
    u = min(t, R) / R
    np.testing.assert_allclose(float(lin(t)), b0 + (b1 - b0) * u, atol=1e-6)
    want = b1 + (b0 - b1) * 0.5 * (1 + np.cos(np.pi * u))
    np.testing.assert_allclose(float(cos(t)), want, atol=1e-6)
  # A warmup down works the same way (beta_1 below beta_0).
  np.testing.assert_allclose(float(outer.momentum_schedule(0.9, 0.3, 2)(1)), 0.6, atol=1e-6)


def test_each_outer_step_applies_beta_at_its_count():
  """Nesterov with β_t = β(t): m_t = β_t m_{t−1} + Δ_t, update −α(Δ_t + β_t m_t)."""
  alpha, schedule = 0.7, outer.momentum_schedule(0.3, 0.9, rounds=3)
  tx = outer.diloco(alpha, schedule)
  state = tx.init(jnp.zeros(3))
  m = np.zeros(3)
  for t in range(5):
    delta = np.array([1.0, -2.0, 0.5]) * (t + 1)
    u, state = tx.update(jnp.asarray(delta, jnp.float32), state)
    beta = float(schedule(t))
    m = beta * m + delta
    np.testing.assert_allclose(np.asarray(u), -alpha * (delta + beta * m), rtol=1e-5)
    np.testing.assert_allclose(float(state.beta), beta, rtol=1e-6)


def test_the_correction_takes_the_scheduled_beta():
  """AutoLoCo's momentum correction on a schedule: β_t = β(t)^{r_t}."""
  schedule = outer.momentum_schedule(0.5, 0.9, rounds=2)
  tx = outer.autoloco(0.7, schedule, "momentum")
  state = tx.init(jnp.zeros(1))
  for t in range(3):
    _, state = tx.update(
        jnp.ones(1), state, inner_lr_sum=2.0, reference_lr_sum=1.0
    )
    np.testing.assert_allclose(float(state.beta), float(schedule(t)) ** 2, rtol=1e-5)


def _diloco_config(beta_end=None, shape="linear", rounds=0):
  c = config("diloco", K=4, h=3, lr=0.7, momentum=0.9, total=12)
  c.diloco.beta_end, c.diloco.beta_shape, c.diloco.beta_rounds = beta_end, shape, rounds
  return c


def test_config_fields_reach_the_outer_step():
  hp = registry.from_config(_diloco_config(0.5, "cosine"))
  assert (hp.beta, hp.beta_end, hp.beta_shape, hp.beta_rounds) == (0.9, 0.5, "cosine", 4)
  assert hp.outer_hyper() == {"alpha": 0.7, "beta": 0.9, "beta_end": 0.5}
  assert registry.from_config(_diloco_config()).outer_hyper() == {"alpha": 0.7, "beta": 0.9}
  assert registry.from_config(_diloco_config(0.5, rounds=2)).beta_rounds == 2


def test_a_run_with_beta_end_equal_to_beta_is_the_constant_run():
  mesh = replicas.make_mesh(4, 1)
  hs = [3, 3, 3]
  plain = run_rounds(_diloco_config(), mesh, hs)[1]
  same = run_rounds(_diloco_config(0.9), mesh, hs)[1]
  chex.assert_trees_all_equal(plain.params_K, same.params_K)
  moved = run_rounds(_diloco_config(0.3), mesh, hs)[1]
  assert not np.allclose(
      jax.tree.leaves(moved.params_K)[0], jax.tree.leaves(plain.params_K)[0]
  )


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(beta_end=1.0), r"diloco\.beta_end"),
        (dict(beta_end=0.5, shape="step"), r"beta_shape"),
        (dict(beta_end=0.5, rounds=-1), r"diloco\.beta_rounds"),
    ],
)
def test_bad_fields_are_refused_by_name(fields, match):
  with pytest.raises(ValueError, match=match):
    registry.make(_diloco_config(**fields), toy_loss, replicas.make_mesh(4, 1))


def test_a_table_takes_no_schedule():
  with pytest.raises(ValueError, match="constant momentum"):
    outer.autoloco(
        0.7,
        outer.momentum_schedule(0.5, 0.9, 2),
        "table",
        table=((0.5, 1.0, 0.8), (1.0, 1.0, 0.9)),
    )
