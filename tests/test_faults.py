"""The injected NaN fault: it finds the parameters by name, whatever the algorithm."""

from typing import NamedTuple

import jax
import numpy as np
import pytest

from autoloco_jax.algorithms import registry
from autoloco_jax.runtime import replicas, rounds, state as state_lib
from autoloco_jax.sim import faults
from tests.helpers import config, tokens, toy_loss, toy_params

NAMES = sorted(registry.REGISTRY)


class Inner(NamedTuple):
  params: dict
  inner_opt: dict


class State(NamedTuple):
  params_K: object
  algo: Inner
  count: object


class Weights(NamedTuple):
  weights: object


class Params(NamedTuple):
  params_K: object


def _floats(tree):
  leaves = jax.tree.leaves(jax.device_get(tree))
  return [
      np.asarray(x) for x in leaves if np.issubdtype(np.asarray(x).dtype, np.floating)
  ]


@pytest.mark.parametrize("name", NAMES)
def test_a_poisoned_state_gives_a_nan_round_for_every_algorithm(name):
  cfg = config(name, K=2, h=2)
  mesh = replicas.make_mesh(2, 1)
  algo = registry.make(cfg, toy_loss, mesh)
  state = state_lib.place(algo.init_state(toy_params()), mesh)
  poisoned = faults.poison(state)
  # Counters and the round's accumulators are not parameters: untouched.
  np.testing.assert_equal(jax.device_get(poisoned.step), jax.device_get(state.step))
  np.testing.assert_equal(jax.device_get(poisoned.acc), jax.device_get(state.acc))
  data = tokens(2, 2)
  _, metrics = rounds.run_round(algo, poisoned, lambda n: data[:, :n], 2, 2, mesh)
  assert np.isnan(jax.device_get(metrics["loss_mean"])), name
  # The same round on the state as it was is finite: the NaN is the poison's.
  _, clean = rounds.run_round(
      algo,
      state_lib.place(algo.init_state(toy_params()), mesh),
      lambda n: data[:, :n],
      2,
      2,
      mesh,
  )
  assert np.isfinite(jax.device_get(clean["loss_mean"])), name


def test_poison_reaches_parameters_nested_anywhere_and_only_them():
  state = State(
      params_K=None,
      algo=Inner(
          params={"params": {"w": np.ones(3, np.float32)}},
          inner_opt={"params": np.ones(2, np.float32)},
      ),
      count=np.int32(4),
  )
  out = faults.poison(state)
  assert out.params_K is None
  assert np.isnan(np.asarray(out.algo.params["params"]["w"])).all()
  # A dict key named "params" inside an optimizer state is not a parameters field.
  np.testing.assert_array_equal(out.algo.inner_opt["params"], np.ones(2, np.float32))
  assert int(out.count) == 4


def test_a_state_without_parameters_fields_is_a_clear_error():
  with pytest.raises(ValueError, match="no floating-point field named params"):
    faults.poison(Weights(weights=np.ones(3, np.float32)))


def test_for_round_poisons_only_the_named_round_and_draws_no_drops_unless_asked():
  cfg = config("diloco", K=2).faults
  cfg.nan_at_round = 1
  clean = Params(params_K=np.ones(2, np.float32))
  same, present = faults.for_round(cfg, clean, 0, 2, seed=0)
  assert same is clean and present is None
  poisoned, present = faults.for_round(cfg, clean, 1, 2, seed=0)
  assert np.isnan(np.asarray(poisoned.params_K)).all() and present is None
  cfg.drop_schedule = "1:0"
  _, present = faults.for_round(cfg, clean, 1, 2, seed=0)
  np.testing.assert_array_equal(present, [0.0, 1.0])
