"""Tests for autoloco_jax.model.transformer: shapes, causality, RoPE, params, FLOPs, training."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from autoloco_jax.model import transformer


def _cfg(**overrides):
  cfg = ml_collections.ConfigDict(
      dict(
          vocab_size=32,
          d_model=32,
          num_layers=2,
          num_heads=4,
          mlp_dim=64,
          seq_len=16,
          tie_embeddings=False,
          dtype="float32",
      )
  )
  cfg.update(overrides)
  return cfg


def _tokens(shape, vocab, seed=0):
  return jax.random.randint(jax.random.PRNGKey(seed), shape, 0, vocab)


@pytest.fixture(scope="module")
def base():
  """(cfg, jitted apply, params, init) for the default tiny config.

  Shared so that init (whose threefry RNG is slow to compile on CPU) and
  apply are compiled once for the whole module.
  """
  cfg = _cfg()
  init, apply = transformer.make(cfg)
  return cfg, jax.jit(apply), init(jax.random.PRNGKey(0)), init


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_output_shape_and_dtype(base, dtype):
  cfg, _, params, _ = base
  # Params stay float32 whatever the activation dtype, and have the same
  # structure, so the float32 params are reused (saves compiling an init).
  assert all(x.dtype == jnp.float32 for x in jax.tree_util.tree_leaves(params))
  bf_params = jax.eval_shape(transformer.make(_cfg(dtype=dtype))[0], jax.random.PRNGKey(0))
  assert jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), bf_params) == (
      jax.tree_util.tree_map(lambda x: (x.shape, x.dtype), params)
  )
  apply = transformer.make(_cfg(dtype=dtype))[1]
  logits_BxLxV = jax.jit(apply)(params, _tokens((2, 16), cfg.vocab_size))
  assert logits_BxLxV.shape == (2, 16, cfg.vocab_size)
  assert logits_BxLxV.dtype == jnp.float32
  assert bool(jnp.all(jnp.isfinite(logits_BxLxV)))


def test_causal(base):
  cfg, apply, params, _ = base
  tokens_BxL = _tokens((2, 16), cfg.vocab_size)
  t = 9
  changed_BxL = tokens_BxL.at[:, t].set((tokens_BxL[:, t] + 1) % cfg.vocab_size)
  a_BxLxV = apply(params, tokens_BxL)
  b_BxLxV = apply(params, changed_BxL)
  np.testing.assert_allclose(a_BxLxV[:, :t], b_BxLxV[:, :t], atol=1e-6)
  # ...and the change is visible from position t on (the test is not vacuous).
  assert float(jnp.abs(a_BxLxV[:, t:] - b_BxLxV[:, t:]).max()) > 1e-4


def test_rope_relative_position():
  q_1x1x1xK = jax.random.normal(jax.random.PRNGKey(0), (1, 1, 1, 8))
  k_1x1x1xK = jax.random.normal(jax.random.PRNGKey(1), (1, 1, 1, 8))

  def rope(x, pos):
    return transformer.apply_rope(x, *transformer.rope_tables(np.array([pos]), 8))

  def score(m, n):
    return float(jnp.sum(rope(q_1x1x1xK, m) * rope(k_1x1x1xK, n)))

  # Same offset m - n, different absolute positions: same score.
  for m, n in [(5, 2), (40, 37), (1000, 997)]:
    np.testing.assert_allclose(score(m, n), score(3, 0), rtol=1e-4, atol=1e-4)
  # A different offset gives a different score; position 0 is the identity.
  assert abs(score(7, 0) - score(3, 0)) > 1e-3
  np.testing.assert_allclose(rope(q_1x1x1xK, 0), q_1x1x1xK, atol=1e-7)
  # Rotations preserve norms.
  np.testing.assert_allclose(
      jnp.linalg.norm(rope(q_1x1x1xK, 17)), jnp.linalg.norm(q_1x1x1xK), rtol=1e-5
  )


def test_tie_embeddings(base):
  _, _, p_untied, _ = base
  tied = _cfg(tie_embeddings=True)
  init, apply = transformer.make(tied)
  apply = jax.jit(apply)
  p_tied_shapes = jax.eval_shape(init, jax.random.PRNGKey(0))
  assert (
      transformer.param_count(p_untied) - transformer.param_count(p_tied_shapes)
      == tied.vocab_size * tied.d_model
  )
  assert "head" not in p_tied_shapes and "head" in p_untied
  # Tied params are the untied ones minus the head (saves compiling an init).
  p_tied = {k: v for k, v in p_untied.items() if k != "head"}
  assert jax.tree_util.tree_structure(p_tied) == jax.tree_util.tree_structure(
      p_tied_shapes
  )
  # The head uses the embedding: changing the embedding row of a token that is
  # absent from the input changes only that token's logits.
  tokens_BxL = jnp.zeros((1, 8), jnp.int32)
  j = 5
  p2 = jax.tree_util.tree_map(lambda x: x, p_tied)  # copies the dicts
  p2["embed"]["embedding"] = p2["embed"]["embedding"].at[j].add(1.0)
  a_BxLxV, b_BxLxV = apply(p_tied, tokens_BxL), apply(p2, tokens_BxL)
  diff_V = jnp.abs(a_BxLxV - b_BxLxV).max(axis=(0, 1))
  assert float(diff_V[j]) > 1e-3
  assert float(jnp.delete(diff_V, j).max()) < 1e-6


@pytest.mark.parametrize("tie", [False, True])
def test_param_count_formula(tie):
  cfg = _cfg(tie_embeddings=tie)
  # Shapes suffice to count: eval_shape avoids compiling init.
  params = jax.eval_shape(transformer.make(cfg)[0], jax.random.PRNGKey(0))
  v, d, f, n = 32, 32, 64, 2
  # embed + per block (qkv 3d^2, out d^2, up/down 2df, two norms 2d)
  # + final norm + (untied) head.
  expected = v * d + n * (4 * d * d + 2 * d * f + 2 * d) + d + (0 if tie else v * d)
  assert transformer.param_count(params) == expected


@pytest.mark.parametrize("tie", [False, True])
def test_flops_per_token(tie):
  cfg = _cfg(tie_embeddings=tie)
  # Shapes suffice to count: eval_shape avoids compiling init.
  params = jax.eval_shape(transformer.make(cfg)[0], jax.random.PRNGKey(0))
  v, d, f, n, l = 32, 32, 64, 2, 16
  non_embedding = n * (4 * d * d + 2 * d * f + 2 * d) + d
  expected = 6 * (non_embedding + v * d) + 12 * n * d * l
  assert transformer.flops_per_token(cfg) == pytest.approx(expected)
  assert transformer.flops_per_token(cfg, transformer.param_count(params)) == pytest.approx(expected)


def test_loss_at_init_is_log_vocab(base):
  cfg, apply, params, _ = base
  loss = jax.jit(lambda p, t: transformer.loss_fn(apply, p, t))(
      params, _tokens((8, 17), cfg.vocab_size)
  )
  assert loss.shape == ()
  assert abs(float(loss) - math.log(cfg.vocab_size)) < 0.1


def test_overfits_one_batch(base):
  cfg, apply, params, _ = base
  tokens_BxL1 = _tokens((4, 17), cfg.vocab_size, seed=1)
  opt = optax.adamw(1e-2, weight_decay=0.0)

  def step(carry, _):
    params, opt_state = carry
    loss, grads = jax.value_and_grad(lambda p: transformer.loss_fn(apply, p, tokens_BxL1))(
        params
    )
    updates, opt_state = opt.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), loss

  _, losses = jax.jit(lambda p: jax.lax.scan(step, (p, opt.init(p)), None, length=100))(
      params
  )
  assert float(losses[-1]) < 0.5 * float(losses[0]), losses[::10]


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("d_model", 30, "num_heads"),  # 30 % 4 != 0
        ("num_heads", 32, "RoPE"),  # head dim 1 is odd
        ("d_model", 0, "d_model"),
        ("vocab_size", -1, "vocab_size"),
        ("num_layers", 0, "num_layers"),
        ("num_heads", 0, "num_heads"),
        ("mlp_dim", 0, "mlp_dim"),
        ("seq_len", 0, "seq_len"),
        ("dtype", "float16", "dtype"),
        ("attention", "flash", "attention"),
        ("remat", "dots_saveable_typo", "remat"),
    ],
)
def test_validate_rejects(field, value, match):
  with pytest.raises(ValueError, match=match):
    transformer.validate(_cfg(**{field: value}))
  with pytest.raises(ValueError, match=match):
    transformer.make(_cfg(**{field: value}))


def test_validate_accepts_good_config():
  transformer.validate(_cfg())
  transformer.validate(_cfg(dtype="bfloat16", tie_embeddings=True))


def test_vmap_over_stacked_params(base):
  cfg, apply, p0, init = base
  p1 = init(jax.random.PRNGKey(1))
  stacked = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), p0, p1)
  tokens_BxL = _tokens((2, 16), cfg.vocab_size)
  out_WxBxLxV = jax.jit(jax.vmap(apply, in_axes=(0, None)))(stacked, tokens_BxL)
  np.testing.assert_allclose(out_WxBxLxV[0], apply(p0, tokens_BxL), atol=1e-5)
  np.testing.assert_allclose(out_WxBxLxV[1], apply(p1, tokens_BxL), atol=1e-5)
  assert float(jnp.abs(out_WxBxLxV[0] - out_WxBxLxV[1]).max()) > 1e-4


def test_causal_attention_matches_dot_product_attention():
  """The CPU attention path equals the library call used on other backends."""
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(2, 3, 16, 8)), jnp.float32) for _ in range(3))
  ours = transformer.causal_attention(q, k, v)
  ref = transformer.attend(q, k, v, "xla")
  np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=1e-5)


def _loss_and_grads(**overrides):
  init, apply = transformer.make(_cfg(**overrides))
  params = init(jax.random.PRNGKey(0))
  tokens = _tokens((2, 17), 32, seed=3)
  loss = lambda p: transformer.loss_fn(apply, p, tokens)
  return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(attention="xla"),
        dict(remat="full"),
        dict(remat="dots_saveable", attention="xla"),
        dict(attention="einsum_blocked"),
    ],
    ids=["xla_attention", "remat_full", "remat_dots_xla", "einsum_blocked"],
)
def test_attention_paths_and_remat_agree(overrides):
  """The loss and its gradient are the same (to float rounding) whichever
  attention path computes them and whatever remat recomputes."""
  loss, grads = _loss_and_grads(attention="einsum")
  other_loss, other_grads = _loss_and_grads(**overrides)
  np.testing.assert_allclose(other_loss, loss, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(other_grads), jax.tree.leaves(grads)):
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4)


def test_auto_attention_resolves_by_backend():
  f32, bf16 = transformer.validate(_cfg()), transformer.validate(_cfg(dtype="bfloat16"))
  assert transformer.attention_path(f32, "cpu") == "einsum"
  assert transformer.attention_path(bf16, "gpu") == "cudnn"
  assert transformer.attention_path(f32, "gpu") == "xla"
  assert transformer.attention_path(bf16, "tpu") == "xla"
  assert transformer.attention_path(transformer.validate(_cfg(attention="xla")), "cpu") == "xla"


@pytest.mark.parametrize("length, blocks", [(16, 2), (16, 4), (15, 2)])
def test_blocked_attention_is_causal_attention(length, blocks):
  """Query blocks that skip the keys after their end compute the causal
  attention; an ``L`` that the blocks do not divide runs it unblocked."""
  q, k, v = (
      jax.random.normal(key, (2, 3, length, 8))
      for key in jax.random.split(jax.random.key(0), 3)
  )
  want = transformer.causal_attention(q, k, v)
  got = transformer.blocked_causal_attention(q, k, v, blocks)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
  # A later key never reaches an earlier query: changing the last key and value
  # leaves every output but the last row's unchanged.
  k2, v2 = k.at[..., -1, :].add(1.0), v.at[..., -1, :].add(1.0)
  changed = transformer.blocked_causal_attention(q, k2, v2, blocks)
  np.testing.assert_array_equal(changed[..., :-1, :], got[..., :-1, :])
