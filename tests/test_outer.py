"""Specification of the outer optimizers (autoloco_jax/outer/).

One shared suite runs over every transform in ``TRANSFORMS``; a new outer
transform gets all of it by adding one entry.
"""

import doctest
import functools
import pkgutil

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoloco_jax import outer

ALPHA, BETA = 0.7, 0.9

# name -> factory(learning_rate, momentum): DiLoCo and every correction mode.
# (reference='peak' changes only what the caller passes as reference_lr_sum;
# test_peak_reference_is_the_same_transform covers it.)
TRANSFORMS = {
    'diloco': lambda lr, mu: outer.diloco(lr, mu),
    'none': lambda lr, mu: outer.autoloco(lr, mu, correction='none'),
    'momentum': lambda lr, mu: outer.autoloco(lr, mu, correction='momentum'),
    'lr': lambda lr, mu: outer.autoloco(lr, mu, correction='lr'),
    'both': lambda lr, mu: outer.autoloco(lr, mu, correction='both'),
    'table': lambda lr, mu: outer.autoloco(
        lr, mu, correction='table', table=table_for(mu)
    ),
    # The momentum buffer treated when r_t changes (test_momentum_on_change.py).
    'restart': lambda lr, mu: outer.autoloco(
        lr, mu, correction='momentum', on_change='restart'
    ),
    'rescale': lambda lr, mu: outer.autoloco(
        lr, mu, correction='momentum', on_change='rescale'
    ),
}


def table_for(mu):
  """Measured-pair points around the reference ``(1, 1, mu)``: shorter rounds a
  smaller step and more momentum, longer ones a larger step and less."""
  try:
    mu = float(mu)
  except (TypeError, ValueError):  # a bad momentum: the transform must name it
    mu = 0.5
  return ((0.5, 0.8, min(mu + 0.05, 0.99)), (1.0, 1.0, mu), (3.0, 1.4, 0.6 * mu))
NAMES = sorted(TRANSFORMS)


def random_tree(key, scale=1.0):
  k1, k2, k3 = jax.random.split(key, 3)
  return {
      'w': scale * jax.random.normal(k1, (4, 3)),
      'b': scale * jax.random.normal(k2, (3,)),
      'nested': (scale * jax.random.normal(k3, (2, 2, 2)), jnp.zeros(())),
  }


@functools.lru_cache(maxsize=None)
def cached(name, lr=ALPHA, mu=BETA):
  """``(tx, jit(tx.update))``, built once per session so tests share compiles."""
  tx = TRANSFORMS[name](lr, mu) if name != 'sgd' else optax.sgd(lr, mu, nesterov=True)
  return tx, jax.jit(tx.update)


def run(tx, deltas, params, update=None, **sums):
  """Applies ``tx`` to a sequence of pseudo-gradients; returns final params, state."""
  state = tx.init(params)
  update = update or tx.update
  for delta in deltas:
    updates, state = update(delta, state, params, **sums)
    params = optax.apply_updates(params, updates)
  return params, state


def deltas_for(n, seed=0):
  return [random_tree(jax.random.PRNGKey(seed * 1000 + i), 0.1) for i in range(n)]


PARAMS = random_tree(jax.random.PRNGKey(42))
DELTAS = deltas_for(25)


@functools.lru_cache(maxsize=None)
def sgd_reference(momentum, use_jit):
  tx, update = cached('sgd', ALPHA, momentum)
  return run(tx, DELTAS, PARAMS, update if use_jit else None)[0]


# --- the shared suite ---------------------------------------------------------

SUMS_AT_RATIO_ONE = {
    'omitted': {},
    'equal_array': dict(
        inner_lr_sum=jnp.float32(3.5e-3), reference_lr_sum=jnp.float32(3.5e-3)
    ),
    # Summed in different orders: a few ulps apart, snapped to r = 1.
    'within_snap': dict(
        inner_lr_sum=np.float32(0.01),
        reference_lr_sum=np.nextafter(np.float32(0.01), np.float32(1)),
    ),
}


@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize('sums', sorted(SUMS_AT_RATIO_ONE))
def test_ratio_one_is_nesterov_sgd_bit_for_bit(name, sums):
  """25 jitted steps: the same bits as optax's Nesterov SGD, with or without
  momentum, whether the sums are omitted, equal, or equal up to summation order."""
  for momentum in ((0.0, BETA) if sums == 'omitted' else (BETA,)):
    tx, update = cached(name, ALPHA, momentum)
    got, state = run(tx, DELTAS, PARAMS, update, **SUMS_AT_RATIO_ONE[sums])
    chex.assert_trees_all_equal(got, sgd_reference(momentum, True))
    assert float(state.ratio) == 1.0
    assert float(state.alpha) == np.float32(ALPHA)
    assert float(state.beta) == np.float32(momentum)


@pytest.mark.parametrize('name', NAMES)
def test_ratio_one_is_nesterov_sgd_bit_for_bit_eagerly(name):
  """Outside jit, with Python-float sums and momentum 0.5."""
  tx = TRANSFORMS[name](ALPHA, 0.5)
  got, _ = run(tx, DELTAS[:20], PARAMS, inner_lr_sum=0.0123, reference_lr_sum=0.0123)
  want, _ = run(optax.sgd(ALPHA, 0.5, nesterov=True), DELTAS[:20], PARAMS)
  chex.assert_trees_all_equal(got, want)


SCHEDULED_LR = optax.cosine_decay_schedule(ALPHA, decay_steps=20, alpha=0.1)


@functools.lru_cache(maxsize=None)
def scheduled_sgd_reference():
  ref = optax.sgd(SCHEDULED_LR, momentum=BETA, nesterov=True)
  return run(ref, DELTAS[:22], PARAMS, jax.jit(ref.update))[0]


@pytest.mark.parametrize('name', NAMES)
def test_schedule_learning_rate_is_nesterov_sgd_bit_for_bit(name):
  tx = TRANSFORMS[name](SCHEDULED_LR, BETA)
  got, state = run(tx, DELTAS[:22], PARAMS, jax.jit(tx.update))
  chex.assert_trees_all_equal(got, scheduled_sgd_reference())
  assert int(state.count) == 22
  np.testing.assert_allclose(state.alpha, SCHEDULED_LR(21), rtol=1e-6)


@pytest.mark.parametrize('name', NAMES)
def test_state_fields(name):
  params = random_tree(jax.random.PRNGKey(0))
  tx = TRANSFORMS[name](ALPHA, BETA)
  assert isinstance(tx, optax.GradientTransformationExtraArgs)
  state = tx.init(params)
  assert isinstance(state, outer.AutoLoCoState)
  assert jax.tree.structure(state.momentum) == jax.tree.structure(params)
  for m, p in zip(jax.tree.leaves(state.momentum), jax.tree.leaves(params)):
    assert m.shape == p.shape and m.dtype == p.dtype
    assert not np.any(m)
  for field, dtype in [
      ('count', jnp.int32),
      ('alpha', jnp.float32),
      ('beta', jnp.float32),
      ('ratio', jnp.float32),
  ]:
    value = getattr(state, field)
    assert value.shape == () and value.dtype == dtype, field
  _, state = tx.update(params, state, params, inner_lr_sum=0.5, reference_lr_sum=1.0)
  assert int(state.count) == 1
  for field in ('alpha', 'beta', 'ratio'):
    assert getattr(state, field).shape == ()
    assert getattr(state, field).dtype == jnp.float32


@pytest.mark.parametrize('name', NAMES)
def test_jit_matches_eager_at_any_ratio(name):
  params = random_tree(jax.random.PRNGKey(3))
  deltas = deltas_for(5, seed=3)
  sums = dict(inner_lr_sum=jnp.float32(0.3), reference_lr_sum=jnp.float32(0.7))
  tx, update = cached(name)
  eager, s1 = run(tx, deltas, params, **sums)
  jitted, s2 = run(tx, deltas, params, update, **sums)
  chex_close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  jax.tree.map(chex_close, eager, jitted)
  jax.tree.map(chex_close, s1, s2)


@pytest.mark.parametrize('name', NAMES)
def test_vmap_over_replicas_matches_a_loop(name):
  """A leading axis of pseudo-grads, states and (per-replica) sums."""
  tx, update = cached(name)
  n = 3
  params = random_tree(jax.random.PRNGKey(5))
  params_N = jax.tree.map(lambda x: jnp.stack([x] * n), params)
  state_N = jax.vmap(tx.init)(params_N)
  inner_N = jnp.array([0.2, 0.5, 1.0], jnp.float32)
  ref = jnp.float32(0.5)
  update_N = jax.jit(
      jax.vmap(
          lambda d, s, p, si: tx.update(d, s, p, inner_lr_sum=si, reference_lr_sum=ref)
      )
  )
  states = [tx.init(params) for _ in range(n)]
  for i in range(4):
    delta_N = random_tree(jax.random.PRNGKey(100 + i), 0.1)
    delta_N = jax.tree.map(lambda x: jnp.stack([x * (j + 1) for j in range(n)]), delta_N)
    updates_N, state_N = update_N(delta_N, state_N, params_N, inner_N)
    for j in range(n):
      d = jax.tree.map(lambda x: x[j], delta_N)
      u, states[j] = update(
          d, states[j], params, inner_lr_sum=inner_N[j], reference_lr_sum=ref
      )
      jax.tree.map(
          lambda a, b: np.testing.assert_allclose(a[j], b, rtol=1e-6, atol=1e-7),
          updates_N,
          u,
      )
  for j in range(n):
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a[j], b, rtol=1e-6, atol=1e-7),
        state_N,
        states[j],
    )


@pytest.mark.parametrize('name', NAMES)
def test_ignores_unrelated_extra_args_and_chains(name):
  tx = optax.chain(optax.clip_by_global_norm(1e6), TRANSFORMS[name](ALPHA, BETA))
  params = random_tree(jax.random.PRNGKey(0))
  state = tx.init(params)
  updates, _ = tx.update(
      params, state, params, inner_lr_sum=0.5, reference_lr_sum=1.0, something_else=3
  )
  assert jax.tree.structure(updates) == jax.tree.structure(params)


@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize(
    'kwargs, match',
    [
        (dict(learning_rate=0.0), 'learning_rate'),
        (dict(learning_rate=-1.0), 'learning_rate'),
        (dict(learning_rate=None), 'learning_rate'),
        (dict(learning_rate='0.7'), 'learning_rate'),
        (dict(momentum='0.9'), 'momentum'),
        (dict(learning_rate=float('nan')), 'learning_rate'),
        (dict(momentum=1.0), 'momentum'),
        (dict(momentum=-0.1), 'momentum'),
        (dict(momentum=None), 'momentum'),
    ],
)
def test_bad_hyperparameters_raise(name, kwargs, match):
  args = dict(learning_rate=ALPHA, momentum=BETA) | kwargs
  with pytest.raises(ValueError, match=match):
    TRANSFORMS[name](args['learning_rate'], args['momentum'])


@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize(
    'sums, match',
    [
        (dict(inner_lr_sum=0.0, reference_lr_sum=1.0), 'inner_lr_sum'),
        (dict(inner_lr_sum=-1.0, reference_lr_sum=1.0), 'inner_lr_sum'),
        (dict(inner_lr_sum=1.0, reference_lr_sum=0.0), 'reference_lr_sum'),
        (dict(inner_lr_sum=1.0, reference_lr_sum=np.float32(np.inf)), 'reference_lr_sum'),
        (dict(inner_lr_sum=1.0), 'together'),
        (dict(reference_lr_sum=1.0), 'together'),
    ],
)
def test_bad_sums_raise_eagerly(name, sums, match):
  tx = TRANSFORMS[name](ALPHA, BETA)
  params = random_tree(jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=match):
    tx.update(params, tx.init(params), params, **sums)


@pytest.mark.parametrize('name', NAMES)
def test_bad_traced_sums_apply_the_uncorrected_step(name):
  tx, update = cached(name)
  delta = DELTAS[0]
  want, _ = update(delta, tx.init(PARAMS), PARAMS)
  for inner, ref in [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0), (np.nan, 1.0), (1.0, np.inf)]:
    got, state = update(
        delta,
        tx.init(PARAMS),
        PARAMS,
        inner_lr_sum=jnp.float32(inner),
        reference_lr_sum=jnp.float32(ref),
    )
    chex.assert_trees_all_equal(got, want)
    assert float(state.ratio) == 1.0


def test_bad_mode_names_raise():
  with pytest.raises(ValueError, match='correction'):
    outer.autoloco(ALPHA, BETA, correction='everything')
  with pytest.raises(ValueError, match='snap_tol'):
    outer.autoloco(ALPHA, BETA, snap_tol=-1.0)
  with pytest.raises(ValueError, match='on_change'):
    outer.autoloco(ALPHA, BETA, on_change='reset')


def test_peak_reference_is_the_same_transform():
  params, delta = PARAMS, DELTAS[0]
  sums = dict(inner_lr_sum=0.3, reference_lr_sum=outer.peak_reference_lr_sum(4e-4, 1000))
  peak = outer.autoloco(ALPHA, BETA)
  got, s1 = peak.update(delta, peak.init(params), params, **sums)
  want, s2 = cached('both')[0].update(delta, peak.init(params), params, **sums)
  chex.assert_trees_all_equal((got, s1), (want, s2))
  np.testing.assert_allclose(s1.ratio, 0.75, rtol=1e-6)


@pytest.mark.parametrize('mode, on_change', [('both', 'keep'), ('table', 'rescale')])
def test_the_transform_is_its_links_chained(mode, on_change):
  """``autoloco`` = the correction link, then Nesterov momentum at its ``β_t``
  (the buffer first scaled by the ``on_change`` factor), then ``−α_t``: the
  links composed by hand give the same bits, round after round."""
  table = table_for(BETA) if mode == 'table' else ()
  tx = outer.autoloco(ALPHA, BETA, mode, table=table, on_change=on_change)
  correct = outer.lr_sum_correction(ALPHA, BETA, mode, table=table)
  state, c_state = tx.init(PARAMS), correct.init(PARAMS)
  trace = optax.TraceState(trace=jax.tree.map(jnp.zeros_like, PARAMS))
  for r, delta in zip((1.0, 0.5, 2.0, 2.0, 0.8), DELTAS):
    sums = dict(inner_lr_sum=0.01 * r, reference_lr_sum=0.01)
    got, state = tx.update(delta, state, PARAMS, **sums)
    prev_ratio = c_state.ratio
    passed, c_state = correct.update(delta, c_state, PARAMS, **sums)
    chex.assert_trees_all_equal(passed, delta)  # the correction leaves Δ alone
    s = outer.buffer_scale(prev_ratio, c_state.ratio, on_change)
    u, trace = outer.nesterov_momentum(c_state.beta, s).update(delta, trace)
    want = jax.tree.map(lambda x: -c_state.alpha * x, u)
    chex.assert_trees_all_equal(got, want)
    chex.assert_trees_all_equal(state.momentum, trace.trace)
    chex.assert_trees_all_equal(state.correction, c_state)


def test_the_momentum_link_is_optax_trace_bit_for_bit():
  """With a Python float ``β`` and no buffer factor: ``optax.trace(β, nesterov=True)``."""
  link, ref = outer.nesterov_momentum(BETA), optax.trace(BETA, nesterov=True)
  s1, s2 = link.init(PARAMS), ref.init(PARAMS)
  for delta in DELTAS[:5]:
    u1, s1 = link.update(delta, s1)
    u2, s2 = ref.update(delta, s2)
    chex.assert_trees_all_equal((u1, s1), (u2, s2))


def test_config_is_kept_for_introspection():
  tx = outer.autoloco(ALPHA, BETA, correction='lr')
  assert tx.config.correction == 'lr'
  assert tx.config.learning_rate == ALPHA and tx.config.momentum == BETA
  assert outer.diloco(ALPHA, BETA).config.correction == 'none'


# --- the correction formulas --------------------------------------------------


def expected_hyperparams(mode, r, alpha=ALPHA, beta=BETA):
  beta_r = beta**r
  alpha_r = alpha * (1 - beta_r) / (1 - beta)
  rs, scales, betas = zip(*table_for(beta))
  return {
      'table': (alpha * np.interp(r, rs, scales), np.interp(r, rs, betas)),
      'none': (alpha, beta),
      'diloco': (alpha, beta),
      'momentum': (alpha, beta_r),
      'restart': (alpha, beta_r),
      'rescale': (alpha, beta_r),
      'lr': (alpha_r, beta),
      'both': (alpha_r, beta_r),
  }[mode]


# Hand-computed, β = 0.9, α = 0.7:
#   r = 0.5: β^r = sqrt(0.9) = 0.9486833, α(1 − β^r)/(1 − β) = 7 · 0.0513167 = 0.3592169
#   r = 2:   β^r = 0.81,                  α(1 − β^r)/(1 − β) = 7 · 0.19      = 1.33
HAND = {0.5: (0.9486833, 0.3592169), 2.0: (0.81, 1.33)}
# table_for(0.9) = ((0.5, 0.8, 0.95), (1, 1, 0.9), (3, 1.4, 0.54)):
#   r = 0.5: its first point, (0.7 · 0.8, 0.95) = (0.56, 0.95)
#   r = 2:   halfway from r = 1 to 3, (0.7 · 1.2, (0.9 + 0.54)/2) = (0.84, 0.72)
HAND_TABLE = {0.5: (0.56, 0.95), 2.0: (0.84, 0.72)}


@pytest.mark.parametrize('name', NAMES)
@pytest.mark.parametrize('r', sorted(HAND))
def test_corrections_against_hand_computed_numbers(name, r):
  beta_r, alpha_r = HAND[r]
  mode = name
  want_alpha, want_beta = {
      'diloco': (ALPHA, BETA),
      'none': (ALPHA, BETA),
      'momentum': (ALPHA, beta_r),
      'restart': (ALPHA, beta_r),
      'rescale': (ALPHA, beta_r),
      'lr': (alpha_r, BETA),
      'both': (alpha_r, beta_r),
      'table': HAND_TABLE[r],
  }[mode]
  np.testing.assert_allclose(
      expected_hyperparams(name, r), (want_alpha, want_beta), rtol=1e-6
  )
  tx = TRANSFORMS[name](ALPHA, BETA)
  params = jnp.zeros(2)
  state = tx.init(params)
  delta = jnp.array([1.0, -2.0])
  # Sums 0.01·r and 0.01: r is the ratio, not the sums' size.
  sums = dict(inner_lr_sum=0.01 * r, reference_lr_sum=0.01)
  u1, state = tx.update(delta, state, params, **sums)
  np.testing.assert_allclose(state.ratio, r, rtol=1e-6)
  np.testing.assert_allclose(
      (state.alpha, state.beta), (want_alpha, want_beta), rtol=1e-6
  )
  # m_1 = Δ; u_1 = −α_t (Δ + β_t Δ)
  np.testing.assert_allclose(u1, -want_alpha * (1 + want_beta) * delta, rtol=1e-6)
  u2, state = tx.update(delta, state, params, **sums)
  # (The same r twice: restart and rescale keep the buffer.)
  # m_2 = β_t Δ + Δ; u_2 = −α_t (Δ + β_t m_2)
  m2 = (1 + want_beta) * delta
  np.testing.assert_allclose(u2, -want_alpha * (delta + want_beta * m2), rtol=1e-6)
  np.testing.assert_allclose(state.momentum, m2, rtol=1e-6)


def test_zero_momentum_means_no_lr_correction():
  for r in (0.1, 0.5, 2.0, 10.0):
    alpha_t, beta_t = outer.corrected_hyperparams(ALPHA, 0.0, r, 'both')
    assert float(beta_t) == 0.0
    np.testing.assert_allclose(alpha_t, ALPHA, rtol=1e-7)


def test_momentum_memory_is_constant_per_unit_of_inner_lr():
  # After rounds totalling an accumulated inner lr of S_ref, whatever their
  # number, the momentum has decayed by exactly β: (β^r)^(1/r) = β.
  for r in (0.125, 0.25, 0.5, 2.0, 4.0):
    _, beta_t = outer.corrected_hyperparams(ALPHA, BETA, r, 'both')
    np.testing.assert_allclose(float(beta_t) ** (1 / r), BETA, rtol=1e-5)


def test_inject_hyperparams_forwards_the_sums():
  params = random_tree(jax.random.PRNGKey(0))
  delta = random_tree(jax.random.PRNGKey(1), 0.1)
  tx = optax.inject_hyperparams(outer.autoloco)(learning_rate=0.7, momentum=0.9)
  state = tx.init(params)
  update = jax.jit(tx.update)
  got, state = update(delta, state, params, inner_lr_sum=0.5, reference_lr_sum=1.0)
  want, _ = outer.autoloco(0.7, 0.9).update(
      delta,
      outer.autoloco(0.7, 0.9).init(params),
      params,
      inner_lr_sum=0.5,
      reference_lr_sum=1.0,
  )
  chex.assert_trees_all_close(got, want, rtol=1e-6, atol=0)
  np.testing.assert_allclose(state.inner_state.ratio, 0.5)
  np.testing.assert_allclose(state.inner_state.alpha, HAND[0.5][1], rtol=1e-6)
  # The hyperparameters are state: change them without rebuilding anything.
  state.hyperparams['learning_rate'] = jnp.float32(0.35)
  state.hyperparams['momentum'] = jnp.float32(0.0)
  _, state = update(delta, state, params, inner_lr_sum=0.5, reference_lr_sum=1.0)
  np.testing.assert_allclose(state.inner_state.alpha, 0.35, rtol=1e-6)
  assert float(state.inner_state.beta) == 0.0


def test_inject_hyperparams_at_ratio_one_is_injected_nesterov_sgd():
  params = random_tree(jax.random.PRNGKey(0))
  deltas = deltas_for(20, seed=7)
  tx = optax.inject_hyperparams(outer.autoloco)(learning_rate=0.7, momentum=0.9)
  ref = optax.inject_hyperparams(optax.sgd)(
      learning_rate=0.7, momentum=0.9, nesterov=True
  )
  got, _ = run(tx, deltas, params, jax.jit(tx.update))
  want, _ = run(ref, deltas, params, jax.jit(ref.update))
  chex.assert_trees_all_equal(got, want)


# --- the invariant behind the lr correction --------------------------------------
#
# Nesterov steady state. Feed a constant pseudo-gradient Δ each round with a
# constant ratio r, so (α_t, β_t) are constant too:
#   m_n = β_t m_{n-1} + Δ          -> m* = Δ / (1 − β_t)
#   u_n = α_t (Δ + β_t m_n)        -> u* = α_t Δ (1 + β_t/(1 − β_t)) = α_t Δ / (1 − β_t).
# In mode 'both', α_t/(1 − β_t) = α (1 − β_t)/((1 − β)(1 − β_t)) = α/(1 − β), so
#   u* = α Δ / (1 − β).
# A round r times as long (in accumulated inner lr) moves the workers r times as
# far, Δ = r g0, so u*/r = α g0 / (1 − β): the outer step per unit of inner lr is
# the DiLoCo one, whatever r. In mode 'momentum' alone u*/r = α g0/(1 − β^r)
# (explodes for short rounds) and in 'lr' alone u*/r = α (1 − β^r) g0/(1 − β)²:
# neither keeps it, which is why the two corrections go together.
#
# The same algebra gives the total weight with which one pseudo-gradient is
# ever applied (an impulse Δ in round 0, nothing after): α_t(1 + β_t) in round 0,
# then α_t β_t^(n+1) in round n, summing to α_t / (1 − β_t) = α / (1 − β).

STEADY_ROUNDS = 4000  # β_t <= 0.9^0.1 ≈ 0.9895: β_t^4000 < 1e-18


def _make_steady_state(mode):
  tx = outer.autoloco(ALPHA, BETA, correction=mode)
  g0 = jnp.array([1.0, -0.5], jnp.float32)

  @jax.jit
  def steady(r):
    def body(state, _):
      u, state = tx.update(r * g0, state, inner_lr_sum=r, reference_lr_sum=1.0)
      return state, u

    _, us = jax.lax.scan(body, tx.init(g0), None, length=STEADY_ROUNDS)
    return us[-1] / r

  @jax.jit
  def impulse_total(r):
    def body(state, i):
      d = jnp.where(i == 0, 1.0, 0.0) * g0
      u, state = tx.update(d, state, inner_lr_sum=r, reference_lr_sum=1.0)
      return state, u

    _, us = jax.lax.scan(body, tx.init(g0), jnp.arange(STEADY_ROUNDS))
    return jnp.sum(us.astype(jnp.float32), axis=0)

  return steady, impulse_total


_BOTH_STEADY, _BOTH_IMPULSE = _make_steady_state('both')


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=0.1, max_value=10.0))
def test_both_keeps_steady_state_gain_per_unit_inner_lr(r):
  gain = -ALPHA / (1 - BETA) * np.array([1.0, -0.5])
  np.testing.assert_allclose(_BOTH_STEADY(jnp.float32(r)), gain, rtol=1e-4)
  np.testing.assert_allclose(_BOTH_IMPULSE(jnp.float32(r)), gain, rtol=2e-3)


@pytest.mark.parametrize('mode', ['momentum', 'lr'])
def test_single_corrections_do_not_keep_the_gain(mode):
  steady, _ = _make_steady_state(mode)
  short, long = steady(jnp.float32(0.5)), steady(jnp.float32(2.0))
  assert not np.allclose(short, long, rtol=0.1)


@pytest.mark.parametrize('mode', ['per_progress', 'momentum_per_progress'])
def test_per_progress_corrections_by_hand(mode):
  """``α_t = α / r_t`` (and ``β_t = β^{r_t}`` with the momentum correction):
  the first update of a round with ratio r is ``−(α/r)(1 + β_t) Δ``; r = 1 is
  DiLoCo's step bit for bit."""
  for r in (0.5, 1.0, 2.0, 4.0):
    tx = outer.autoloco(ALPHA, BETA, mode)
    state = tx.init(jnp.zeros(2))
    delta = jnp.array([1.0, -0.5])
    u, state = tx.update(delta, state, inner_lr_sum=r, reference_lr_sum=1.0)
    beta_t = BETA**r if mode == 'momentum_per_progress' else BETA
    np.testing.assert_allclose(float(state.alpha), ALPHA / r, rtol=1e-6)
    np.testing.assert_allclose(float(state.beta), beta_t, rtol=1e-6)
    np.testing.assert_allclose(u, -(ALPHA / r) * (1 + beta_t) * delta, rtol=1e-5)
  plain = outer.diloco(ALPHA, BETA)
  ones = jnp.array([1.0, -0.5])
  want, _ = plain.update(ones, plain.init(jnp.zeros(2)))
  got, _ = outer.autoloco(ALPHA, BETA, mode).update(
      ones, outer.autoloco(ALPHA, BETA, mode).init(jnp.zeros(2)),
      inner_lr_sum=3.0, reference_lr_sum=3.0,
  )
  chex.assert_trees_all_equal(got, want)


# --- reference sums -----------------------------------------------------------

SCHEDULE = optax.warmup_cosine_decay_schedule(
    init_value=1e-5, peak_value=4e-4, warmup_steps=20, decay_steps=300, end_value=4e-5
)


@pytest.mark.parametrize(
    'start, h_ref', [(0, 1), (0, 16), (13, 16), (250, 40), (290, 50)]
)
def test_reference_lr_sum_is_the_schedule_sum(start, h_ref):
  want = sum(float(SCHEDULE(s)) for s in range(start, start + h_ref))
  np.testing.assert_allclose(
      outer.reference_lr_sum(SCHEDULE, start, h_ref), want, rtol=1e-6
  )
  traced = jax.jit(outer.reference_lr_sum, static_argnums=(0, 2))
  np.testing.assert_allclose(traced(SCHEDULE, jnp.int32(start), h_ref), want, rtol=1e-6)


def test_round_of_h_ref_steps_has_ratio_exactly_one():
  """``S_t`` summed as the inner loop does (``S += η(s)`` in a while loop) and
  ``S_ref`` agree to the bit, so r == 1 even with snapping off."""
  h_ref = 24

  @jax.jit
  def inner_loop_sum(step0, n):
    def body(carry):
      i, acc = carry
      return i + 1, acc + SCHEDULE(step0 + i)

    return jax.lax.while_loop(
        lambda c: c[0] < n, body, (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.float32))
    )[1]

  ref = jax.jit(lambda s0: outer.reference_lr_sum(SCHEDULE, s0, h_ref))
  for step0 in (0, 7, 19, 100, 276):
    s_t, s_ref = inner_loop_sum(jnp.int32(step0), jnp.int32(h_ref)), ref(jnp.int32(step0))
    assert float(s_t) == float(s_ref)
    assert float(outer.lr_sum_ratio(s_t, s_ref, snap_tol=0.0)) == 1.0


def test_reference_lr_sum_constant_and_peak():
  np.testing.assert_allclose(outer.reference_lr_sum(2e-3, 5, 10), 2e-2, rtol=1e-6)
  np.testing.assert_allclose(outer.peak_reference_lr_sum(4e-4, 500), 0.2, rtol=1e-6)
  assert outer.peak_reference_lr_sum(4e-4, 500).dtype == jnp.float32


@pytest.mark.parametrize(
    'call, match',
    [
        (lambda: outer.reference_lr_sum(SCHEDULE, 0, 0), 'h_ref'),
        (lambda: outer.reference_lr_sum(SCHEDULE, 0, 2.5), 'h_ref'),
        (lambda: outer.reference_lr_sum(-1.0, 0, 4), 'schedule'),
        (lambda: outer.peak_reference_lr_sum(0.0, 4), 'peak_lr'),
        (lambda: outer.peak_reference_lr_sum(1e-3, 0), 'h_ref'),
    ],
)
def test_reference_sum_bad_arguments(call, match):
  with pytest.raises(ValueError, match=match):
    call()


def test_docstring_examples_run():
  """Every module of the package: the chain, the correction, the references."""
  modules = [outer.chain, outer.checks, outer.correction, outer.momentum, outer.reference]
  found = {m.name for m in pkgutil.iter_modules(outer.__path__)}
  assert found == {m.__name__.rsplit('.', 1)[1] for m in modules}
  attempted = {}
  for module in modules:
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, module.__name__
    attempted[module] = result.attempted
  assert all(attempted[m] > 0 for m in (outer.chain, outer.correction, outer.reference))


def test_table_is_constant_beyond_its_ends_and_exact_at_its_points():
  table = table_for(BETA)
  for r, (want_a, want_b) in {
      0.1: (ALPHA * 0.8, 0.95),  # below the first point: the first point
      3.0: (ALPHA * 1.4, 0.6 * BETA),
      7.5: (ALPHA * 1.4, 0.6 * BETA),  # beyond the last: the last
  }.items():
    a, b = outer.corrected_hyperparams(ALPHA, BETA, r, 'table', table)
    np.testing.assert_allclose((a, b), (want_a, want_b), rtol=1e-6)


def test_a_one_point_table_is_the_uncorrected_step_bit_for_bit():
  one = outer.autoloco(ALPHA, BETA, correction='table', table=((1.0, 1.0, BETA),))
  none = outer.autoloco(ALPHA, BETA, correction='none')
  params = random_tree(jax.random.PRNGKey(0))
  s1, s2 = one.init(params), none.init(params)
  for i, r in enumerate((1.0, 0.5, 2.7, 1.3)):
    delta = random_tree(jax.random.PRNGKey(i + 1))
    sums = dict(inner_lr_sum=0.02 * r, reference_lr_sum=0.02)
    u1, s1 = one.update(delta, s1, params, **sums)
    u2, s2 = none.update(delta, s2, params, **sums)
    chex.assert_trees_all_equal(u1, u2)
    chex.assert_trees_all_equal(s1.momentum, s2.momentum)


@pytest.mark.parametrize(
    'kwargs, match',
    [
        (dict(correction='table'), 'table'),  # no table
        (dict(correction='momentum', table=((1.0, 1.0, BETA),)), 'table'),
        (dict(correction='table', table=((2.0, 1.0, BETA),)), 'reference point'),
        (dict(correction='table', table=((1.0, 1.0, 0.5),)), 'reference point'),
        (dict(correction='table', table=((1.0, 1.2, BETA),)), 'reference point'),
        (
            dict(correction='table', table=((1.0, 1.0, BETA), (1.0, 1.1, 0.8))),
            'increasing',
        ),
        (dict(correction='table', table=((0.0, 1.0, 0.8), (1.0, 1.0, BETA))), '> 0'),
        (dict(correction='table', table=((1.0, 1.0, BETA), (2.0, 1.0, 1.0))), 'beta'),
        (dict(correction='table', table=((1.0, 1.0, BETA), (2.0, 0.0, 0.8))), 'scale'),
        (dict(correction='table', table=((1.0, 1.0),)), 'triples'),
    ],
)
def test_bad_tables_raise(kwargs, match):
  with pytest.raises(ValueError, match=match):
    outer.autoloco(ALPHA, BETA, **kwargs)


# --- replayed_ratios -------------------------------------------------------------


def test_replayed_ratios_apply_the_recorded_ratio_of_each_update():
  """The t-th update of the replay equals the wrapped transform's update given
  S_t = ratios[t], S_ref = 1, whatever sums the caller passes; past the end the
  last ratio holds."""
  ratios = [2.2, 1.5, 0.9]
  base = outer.autoloco(0.7, 0.5, 'momentum')
  tx = outer.replayed_ratios(base, ratios)
  params = jnp.zeros(3)
  state, ref_state = tx.init(params), base.init(params)
  deltas = [jnp.array([1.0, -2.0, 0.5]) * (k + 1) for k in range(5)]
  for k, d in enumerate(deltas):
    u, state = jax.jit(tx.update)(d, state, inner_lr_sum=3.0, reference_lr_sum=3.0)
    r = ratios[min(k, len(ratios) - 1)]
    want, ref_state = jax.jit(base.update)(
        d, ref_state, inner_lr_sum=jnp.float32(r), reference_lr_sum=jnp.float32(1.0)
    )
    np.testing.assert_array_equal(u, want)
    assert float(state.ratio) == pytest.approx(r)
    assert float(state.beta) == pytest.approx(0.5**r, rel=1e-6)
  assert tx.config == base.config


@pytest.mark.parametrize('ratios', [[], [1.0, 0.0], [float('nan')], [-1.0]])
def test_replayed_ratios_refuse_bad_sequences(ratios):
  with pytest.raises(ValueError, match='ratios must be'):
    outer.replayed_ratios(outer.autoloco(0.7, 0.5, 'momentum'), ratios)
