"""The `gpu` size compiles ahead of time on CPU, from abstract shapes: a shape or
sharding error in that config fails here, not on a rented accelerator."""

import pytest

from benchmarks import aot
from configs import autoloco as autoloco_config
from configs import noloco as noloco_config


@pytest.mark.parametrize(
    "remat, most", [("none", None), ("full", 0.2), ("dots_saveable", 0.5)]
)
def test_remat_keeps_less_for_the_backward_pass(remat, most):
  """The activations kept for the backward pass: remat keeps a share of them."""
  config = autoloco_config.get_config("tiny")
  config.num_workers, config.data.seq_len = 2, 128
  baseline = aot.saved_activation_bytes(config)["bytes"]
  config.model.remat = remat
  kept = aot.saved_activation_bytes(config)["bytes"]
  if most is None:
    assert kept == baseline > 0
  else:
    assert 0 < kept < most * baseline


@pytest.mark.slow
@pytest.mark.parametrize(
    "module", [autoloco_config, noloco_config], ids=["autoloco", "noloco"]
)
def test_gpu_size_compiles_from_abstract_shapes(module):
  config = module.get_config("gpu")
  result = aot.compile_config(config)
  assert (
      result["devices"] == 4 and result["num_params"] > 80e6
  )  # the 12-layer, d=768 model
  per_device = result["model_flops_per_step"] / result["devices"]
  # XLA's count of one inner step on one device is the model's 6 N D estimate
  # plus attention, within 20%.
  assert 0.9 * per_device < result["inner"]["flops_per_step"] < 1.2 * per_device
  for program in ("inner", "sync"):
    assert result[program]["argument_bytes"] > 0 and result[program]["temp_bytes"] > 0
  # The state is donated: its buffers are reused for the outputs.
  assert result["inner"]["alias_bytes"] >= 0.99 * result["inner"]["output_bytes"]
