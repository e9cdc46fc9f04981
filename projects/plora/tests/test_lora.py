"""LoRA adapters: the factored forward equals the merged model, padding is exact.

Specifications: a fresh adapter leaves the model unchanged; the factored form
``x W + s (x A) B`` equals ``x (W + s A B)``; a rank-4 adapter padded to rank 16
and to extra layers is the lone rank-4 adapter in its outputs, its gradients
and its AdamW trajectory (weight decay included), and its padding stays
exactly zero; bad input is a clear error.
"""

import types

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from autoloco_jax.model import transformer
from autoloco_jax.runtime import inner
from projects.plora import lora
from tests.helpers import assert_trees_close, host_params

MODEL = dict(
    vocab_size=32,
    d_model=32,
    num_layers=1,
    num_heads=2,
    mlp_dim=64,
    seq_len=8,
    tie_embeddings=False,
    dtype="float32",
)
OPT = dict(
    lr=0.05,
    warmup_steps=1,
    min_lr_ratio=0.1,
    weight_decay=0.1,
    b1=0.9,
    b2=0.95,
    eps=1e-8,
    clip_norm=1.0,
)


@pytest.fixture(scope="module")
def base():
  init, apply = transformer.make(MODEL)
  return apply, host_params(init)


def tokens(shape=(2, 9), seed=1):
  return jnp.asarray(np.random.default_rng(seed).integers(0, 32, shape), jnp.int32)


def perturbed(adapter, seed=3):
  """Random non-zero factors everywhere, padding included (the mask must hide it)."""
  rng = np.random.default_rng(seed)
  return adapter._replace(
      factors=jax.tree.map(
          lambda x: jnp.asarray(0.1 * rng.standard_normal(x.shape), jnp.float32),
          adapter.factors,
      )
  )


def test_targets_resolve_aliases_in_canonical_order():
  assert lora.resolve_targets(["mlp", "qkv"]) == ("qkv", "up", "down")
  assert lora.resolve_targets("down+attn") == ("qkv", "out", "down")
  assert lora.resolve_targets(["all"]) == lora.LAYERS


def test_layers_found_in_the_projects_transformer():
  init, _ = transformer.make(dict(MODEL, num_layers=2))
  params = jax.eval_shape(init, jax.random.key(0))
  assert lora.dense_layers(params, "attn") == {
      "block_0/attn/qkv": (32, 96),
      "block_0/attn/out": (32, 32),
      "block_1/attn/qkv": (32, 96),
      "block_1/attn/out": (32, 32),
  }
  assert set(lora.dense_layers(params, "mlp")) == {
      "block_0/mlp/up",
      "block_0/mlp/down",
      "block_1/mlp/up",
      "block_1/mlp/down",
  }


def test_fresh_adapter_leaves_the_model_unchanged(base):
  apply, params = base
  adapter = lora.init(1, params, 4, 8.0, "all")
  x = tokens()[:, :-1]
  adapted = jax.jit(lambda a, x: lora.lora_apply(apply, params, a, x))
  np.testing.assert_array_equal(adapted(adapter, x), jax.jit(apply)(params, x))
  assert float(adapter.scale) == 2.0
  assert lora.num_params(adapter) == 4 * (32 + 96 + 32 + 32 + 32 + 64 + 64 + 32)


@pytest.mark.parametrize("targets", ["qkv", "out+up", "all"])
def test_merged_adapter_gives_the_same_outputs_as_base_plus_adapter(base, targets):
  apply, params = base
  adapter = perturbed(
      lora.init(2, params, 4, 16.0, targets, pad_rank=8, pad_targets="all")
  )
  x = tokens()[:, :-1]
  run = jax.jit(
      lambda a, x, mode: lora.lora_apply(apply, params, a, x, mode=mode), static_argnums=2
  )
  factored = run(adapter, x, "factored")
  merged = jax.jit(apply)(lora.merge(params, adapter), x)
  np.testing.assert_allclose(factored, merged, atol=2e-5)
  np.testing.assert_allclose(run(adapter, x, "merged"), merged, atol=1e-6)
  # And the adapter does change the model.
  assert np.abs(factored - jax.jit(apply)(params, x)).max() > 1e-3
  # merge touches only the adapted kernels.
  merged_params = lora.merge(params, adapter)
  changed = {
      p
      for p in lora.dense_layers(params, "all")
      if not np.array_equal(_kernel(merged_params, p), _kernel(params, p))
  }
  assert changed == set(lora.dense_layers(params, targets))


def _kernel(params, path):
  for k in path.split("/"):
    params = params[k]
  return params["kernel"]


def test_padded_init_is_the_lone_adapter(base):
  _, params = base
  lone = lora.init(5, params, 4, 8.0, "qkv")
  padded = lora.init(5, params, 4, 8.0, "qkv", pad_rank=16, pad_targets="all")
  assert padded.factors["block_0/attn/qkv"]["a"].shape == (32, 16)
  assert set(padded.factors) == set(lora.dense_layers(params, "all"))
  compact = lora.compact(padded)
  chex.assert_trees_all_equal(compact, lone)
  # Padding is zero (A's extra columns, every untargeted layer).
  np.testing.assert_array_equal(padded.factors["block_0/attn/qkv"]["a"][:, 4:], 0)
  np.testing.assert_array_equal(padded.factors["block_0/mlp/up"]["a"], 0)
  assert lora.rank_of(padded) == 4
  # pad() of the lone adapter is the padded init.
  chex.assert_trees_all_equal(
      lora.pad(lone, 16, lora.dense_layers(params, "all")), padded
  )


def _adamw_step(apply, params, tx):
  """One jitted AdamW step of an adapter's factors (mask and scale frozen)."""

  def loss(factors, mask, scale, tokens_BxL1):
    adapted = lambda a, x: lora.lora_apply(apply, params, a, x)
    return transformer.loss_fn(adapted, lora.Adapter(factors, mask, scale), tokens_BxL1)

  @jax.jit
  def step(factors, opt, mask, scale, tokens_BxL1):
    loss_value, grads = jax.value_and_grad(loss)(factors, mask, scale, tokens_BxL1)
    updates, opt = tx.update(grads, opt, factors)
    return optax.apply_updates(factors, updates), opt, loss_value, grads

  return step


def test_padding_masks_make_a_rank4_adapter_in_a_rank16_group_the_lone_one(base):
  """Outputs, gradients and 8 AdamW steps (weight decay 0.1) agree; padding stays 0."""
  apply, params = base
  lone = lora.init(7, params, 4, 8.0, "attn")
  padded = lora.init(7, params, 4, 8.0, "attn", pad_rank=16, pad_targets="all")
  opt_cfg = types.SimpleNamespace(**OPT)
  tx = inner.optimizer(opt_cfg, inner.schedule(opt_cfg, 8))
  step = _adamw_step(apply, params, tx)
  states = {
      "lone": (lone.factors, tx.init(lone.factors)),
      "padded": (padded.factors, tx.init(padded.factors)),
  }
  adapters = {"lone": lone, "padded": padded}
  for i in range(8):
    batch = tokens((4, 9), seed=10 + i)
    losses = {}
    for name, (factors, opt) in states.items():
      a = adapters[name]
      factors, opt, losses[name], grads = step(factors, opt, a.mask, a.scale, batch)
      states[name] = (factors, opt)
      if name == "padded":
        # Masked coordinates get exactly zero gradient.
        for path, g in grads.items():
          m = np.asarray(a.mask[path])
          np.testing.assert_array_equal(np.asarray(g["a"])[:, m == 0], 0)
          np.testing.assert_array_equal(np.asarray(g["b"])[m == 0, :], 0)
    np.testing.assert_allclose(losses["padded"], losses["lone"], rtol=1e-6)
  final = lora.Adapter(states["padded"][0], padded.mask, padded.scale)
  # AdamW with weight decay did not move the zero-masked coordinates.
  for path, m in padded.mask.items():
    m = np.asarray(m)
    np.testing.assert_array_equal(np.asarray(final.factors[path]["a"])[:, m == 0], 0)
    np.testing.assert_array_equal(np.asarray(final.factors[path]["b"])[m == 0, :], 0)
  trained_lone = lora.Adapter(states["lone"][0], lone.mask, lone.scale)
  assert_trees_close(lora.compact(final), trained_lone)
  # The trained adapter is no longer the identity: B moved away from zero.
  assert np.abs(np.asarray(trained_lone.factors["block_0/attn/qkv"]["b"])).max() > 1e-3


@pytest.mark.parametrize("rank", [0, -1, 2.5, True, None])
def test_bad_rank_is_an_error(base, rank):
  _, params = base
  with pytest.raises(ValueError, match="rank must be an integer >= 1"):
    lora.init(0, params, rank, 8.0, "attn")


def test_bad_input_errors(base):
  apply, params = base
  with pytest.raises(ValueError, match="unknown LoRA target layer 'ffn'"):
    lora.init(0, params, 4, 8.0, ["ffn"])
  with pytest.raises(ValueError, match="targets are empty"):
    lora.init(0, params, 4, 8.0, [])
  with pytest.raises(ValueError, match="pad_rank=2 is smaller"):
    lora.init(0, params, 4, 8.0, "attn", pad_rank=2)
  with pytest.raises(ValueError, match="alpha must be > 0"):
    lora.init(0, params, 4, 0.0, "attn")
  with pytest.raises(ValueError, match="must include the adapter's targets"):
    lora.init(0, params, 4, 8.0, "all", pad_targets="attn")
  with pytest.raises(ValueError, match="seed must be an integer >= 0"):
    lora.init(-1, params, 4, 8.0, "attn")
  with pytest.raises(ValueError, match="no dense layer named"):
    lora.dense_layers({"embed": {"embedding": jnp.zeros((4, 4))}}, "attn")
  adapter = lora.init(0, params, 4, 8.0, "attn")
  stray = adapter._replace(
      factors=dict(
          adapter.factors, **{"block_9/attn/qkv": adapter.factors["block_0/attn/qkv"]}
      ),
      mask=dict(adapter.mask, **{"block_9/attn/qkv": adapter.mask["block_0/attn/qkv"]}),
  )
  with pytest.raises(ValueError, match="block_9/attn/qkv"):
    lora.merge(params, stray)
  x = tokens()[:, :-1]
  with pytest.raises(ValueError, match="block_9/attn/qkv"):
    jax.eval_shape(lambda: lora.lora_apply(apply, params, stray, x))
  with pytest.raises(ValueError, match="unknown lora_apply mode 'fused'"):
    jax.eval_shape(lambda: lora.lora_apply(apply, params, adapter, x, mode="fused"))
