"""Gradient accumulation (``inner.microbatches``, ``runtime/inner.accumulated``):
``m`` equal micro-batches give the whole batch's mean loss and gradient, a run
with them follows the run without to float tolerance, ``m = 1`` is the step of
before bit for bit (the same function), and a count that does not divide the
batch is refused by name."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from autoloco_jax.run import config_check, trainer
from autoloco_jax.runtime import inner
from configs import diloco


def _loss(params, tokens_BxL):
  """A mean over tokens, as the model's loss is."""
  return jnp.mean((tokens_BxL @ params["w"] - 1.0) ** 2)


def test_micro_batches_give_the_batch_mean_loss_and_gradient():
  params = {"w": jnp.arange(3.0) / 3}
  tokens = jax.random.normal(jax.random.key(0), (8, 4, 3))
  whole = jax.value_and_grad(_loss)(params, tokens)
  for m in (2, 4, 8):
    split = inner.accumulated(jax.value_and_grad(_loss), m)(params, tokens)
    np.testing.assert_allclose(split[0], whole[0], rtol=1e-6)
    np.testing.assert_allclose(split[1]["w"], whole[1]["w"], rtol=1e-5)


def test_one_micro_batch_is_the_step_itself():
  f = jax.value_and_grad(_loss)
  assert inner.accumulated(f, 1) is f


def test_a_count_that_does_not_divide_the_batch_is_refused():
  c = diloco.get_config("tiny")
  c.inner.microbatches = 3
  with pytest.raises(ValueError, match="microbatches=3 must divide config.data.batch_size"):
    config_check.validate(c)
  c.inner.microbatches = 0
  with pytest.raises(ValueError, match="config.inner.microbatches must be >= 1"):
    config_check.validate(c)


def test_the_field_keeps_every_runs_name():
  assert config_check.VALUES_BEFORE_THE_FIELD["inner.microbatches"] == 1


@pytest.mark.slow
def test_a_run_with_micro_batches_follows_the_run_without(tmp_path):
  """DiLoCo at ``tiny``, 2 workers, 12 steps: the same losses with 4
  micro-batches of 4 sequences as with one batch of 16, to float tolerance
  (the sums run in another order)."""
  out = {}
  for m in (1, 4):
    c = diloco.get_config("tiny")
    c.total_steps, c.interval.h, c.num_workers, c.num_devices = 12, 4, 2, 1
    c.eval.every_steps, c.eval.num_batches, c.eval.final_num_batches = 12, 1, 1
    c.log.progress = c.log.tensorboard = False
    c.inner.microbatches = m
    out[m] = trainer.train_and_evaluate(c, str(tmp_path / f"m{m}"))
  assert out[1]["tokens"] == out[4]["tokens"]
  np.testing.assert_allclose(out[4]["final_eval_bpb"], out[1]["final_eval_bpb"], rtol=2e-4)
