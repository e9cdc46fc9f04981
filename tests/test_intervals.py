"""Specification of the interval controllers (autoloco_jax/algorithms/diloco/intervals.py).

One shared suite runs over every controller in ``CONTROLLERS``; a new
controller gets all of it by adding one entry (a test checks none is missing).
"""

import doctest
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from autoloco_jax.algorithms.diloco import intervals
from autoloco_jax.algorithms.interval import Interval
from autoloco_jax.runtime import signals

# agreement's settings: config.interval's defaults (configs/common.py).
AGREEMENT = dict(target=0.5, grow=1.25, shrink=0.7, ema=0.5, hysteresis=0.15)

# name -> factory() with small bounds, as at CPU scale.
CONTROLLERS = {
    'fixed': lambda: intervals.fixed(16),
    'lr_quadratic': lambda: intervals.lr_quadratic(c=0.01, h_min=2, h_max=200),
    'loss_ratio': lambda: intervals.loss_ratio(h0=32, h_min=2, h_max=64),
    'agreement': lambda: intervals.agreement(h0=16, h_min=2, h_max=200, **AGREEMENT),
    'schedule': lambda: intervals.schedule((16, 4, 32, 8)),
}
NAMES = sorted(CONTROLLERS)


def stats(*, rnd=0, step=0, h=16, lr=1e-3, loss=3.0, rho=0.5, k=4):
  return signals.sync_stats(
      round=rnd,
      step=step,
      h=h,
      lr_sum=lr * h,
      lr=lr,
      loss_mean=loss,
      loss_start=loss * 1.02,
      loss_end=loss * 0.98,
      delta_sq_norm=rho,
      worker_sq_norm=1.0,
      num_workers=k,
  )


def stack(seq):
  """A list of SyncStats -> one SyncStats of arrays with a leading round axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *seq)


def random_stats(seed, n=60):
  """Rounds of random statistics, extremes included (lr 0, huge lr, NaN loss,
  opposite moves ρ = 0, a single worker)."""
  rng = np.random.default_rng(seed)
  out = []
  for t in range(n):
    lr = float(10.0 ** rng.uniform(-7, 0))
    loss = float(rng.uniform(0.01, 10.0))
    rho = float(rng.uniform(0.0, 1.0))
    k = int(rng.integers(1, 9))
    if t % 11 == 3:
      lr = 0.0
    if t % 13 == 5:
      loss = float('nan')
    if t % 7 == 2:
      rho = 0.0
    out.append(stats(rnd=t, step=16 * t, lr=lr, loss=loss, rho=rho, k=k))
  return out


@functools.lru_cache(maxsize=None)
def cached(name):
  """``(controller, jit(next_h), jit(scan over rounds))``, compiled once."""
  ctrl = CONTROLLERS[name]()

  def scan(state, stats_T):
    return jax.lax.scan(lambda s, x: ctrl.next_h(s, x)[::-1], state, stats_T)

  return ctrl, jax.jit(ctrl.next_h), jax.jit(scan)


def run_eager(ctrl, seq, h0=None):
  state = ctrl.init(h0)
  hs = []
  for s in seq:
    h, state = ctrl.next_h(state, s)
    hs.append(int(h))
  return hs, state


def run_jit(name, seq, h0=None):
  ctrl, _, scan = cached(name)
  state, hs = scan(ctrl.init(h0), stack(seq))
  return [int(h) for h in hs], state


# --- the shared suite ---------------------------------------------------------


def test_every_registered_controller_is_in_the_suite():
  assert set(CONTROLLERS) == set(intervals.CONTROLLERS)


@pytest.mark.parametrize('name', NAMES)
def test_respects_bounds_under_random_stats(name):
  ctrl = CONTROLLERS[name]()
  assert isinstance(ctrl, intervals.IntervalController)
  state = ctrl.init()
  assert ctrl.h_min <= int(state.h) <= ctrl.h_max
  for seed in range(3):
    hs, _ = run_jit(name, random_stats(seed))
    assert all(ctrl.h_min <= h <= ctrl.h_max for h in hs), hs


@pytest.mark.parametrize('name', NAMES)
def test_returns_an_int32_scalar(name):
  ctrl, step, _ = cached(name)
  h, state = step(ctrl.init(), stats())
  assert h.shape == () and h.dtype == jnp.int32
  assert state.h.dtype == jnp.int32
  h2, state2 = step(state, stats(rnd=1))  # the state round-trips through jit
  assert jax.tree.structure(state2) == jax.tree.structure(state)


@pytest.mark.parametrize('name', NAMES)
def test_deterministic_and_jit_matches_eager(name):
  ctrl, step, _ = cached(name)
  seq = random_stats(7, n=15)
  eager, eager_state = run_eager(ctrl, seq)
  assert run_eager(ctrl, seq)[0] == eager
  scanned, scan_state = run_jit(name, seq)
  assert scanned == eager
  state, stepped = ctrl.init(), []
  for s in seq:
    h, state = step(state, s)
    stepped.append(int(h))
  assert stepped == eager
  chex.assert_trees_all_equal(scan_state, eager_state)


@pytest.mark.parametrize('name', NAMES)
def test_init_accepts_an_interval_within_bounds(name):
  ctrl = CONTROLLERS[name]()
  assert int(ctrl.init(ctrl.h_max).h) == ctrl.h_max
  assert int(jax.jit(ctrl.init)(jnp.int32(ctrl.h_max + 100)).h) == ctrl.h_max
  with pytest.raises(ValueError, match='h0'):
    ctrl.init(ctrl.h_max + 1)
  with pytest.raises(ValueError, match='h0'):
    ctrl.init(0)


@pytest.mark.parametrize(
    'name, kwargs, match',
    [
        ('fixed', dict(h=0), 'h '),
        ('fixed', dict(h=2.5), 'h '),
        ('lr_quadratic', dict(c=0.0, h_min=1, h_max=10), 'c '),
        ('lr_quadratic', dict(c=0.1, h_min=0, h_max=10), 'h_min'),
        ('lr_quadratic', dict(c=0.1, h_min=20, h_max=10), 'h_min must be <= h_max'),
        ('lr_quadratic', dict(c=0.1, h_min=1, h_max=True), 'h_max'),
        ('loss_ratio', dict(h0=100, h_min=1, h_max=10), 'h0'),
        ('loss_ratio', dict(h0=0, h_min=1, h_max=10), 'h0'),
        ('agreement', dict(h0=4, h_min=8, h_max=10), 'h0'),
        ('agreement', dict(h0=8, h_min=1, h_max=10, target=1.0), 'target'),
        ('agreement', dict(h0=8, h_min=1, h_max=10, grow=1.0), 'grow'),
        ('agreement', dict(h0=8, h_min=1, h_max=10, shrink=1.2), 'shrink'),
        ('agreement', dict(h0=8, h_min=1, h_max=10, ema=1.0), 'ema'),
        ('agreement', dict(h0=8, h_min=1, h_max=10, hysteresis=-0.1), 'hysteresis'),
        (
            'agreement',
            dict(h0=8, h_min=1, h_max=10, target=0.2, hysteresis=0.3),
            'hysteresis',
        ),
        ('schedule', dict(hs=()), 'non-empty'),
        ('schedule', dict(hs=[]), 'non-empty'),
        ('schedule', dict(hs=5), 'non-empty'),
        ('schedule', dict(hs='54'), 'non-empty'),
        ('schedule', dict(hs=(4, 0)), r'hs\[1\]'),
        ('schedule', dict(hs=(4, -3)), r'hs\[1\]'),
        ('schedule', dict(hs=(4, 2.5)), r'hs\[1\]'),
        ('schedule', dict(hs=(4.0,)), r'hs\[0\]'),
        ('schedule', dict(hs=(True, 4)), r'hs\[0\]'),
    ],
)
def test_bad_arguments_raise(name, kwargs, match):
  if name == 'agreement':  # its settings have no defaults: the config's, but one
    kwargs = dict(AGREEMENT, **kwargs)
  with pytest.raises(ValueError, match=match):
    intervals.make(name, **kwargs)


def test_unknown_name_lists_the_known_ones():
  with pytest.raises(
      ValueError, match="unknown interval controller 'adaptive'.*agreement"
  ):
    intervals.make('adaptive')


@pytest.mark.parametrize('name', NAMES)
def test_make_builds_each(name):
  kwargs = {
      'fixed': dict(h=8),
      'lr_quadratic': dict(c=0.01, h_min=2, h_max=64),
      'loss_ratio': dict(h0=8, h_min=2, h_max=64),
      'agreement': dict(h0=8, h_min=2, h_max=64, **AGREEMENT),
      'schedule': dict(hs=(8, 2, 64)),
  }[name]
  ctrl = intervals.make(name, **kwargs)
  assert ctrl.h_min <= int(ctrl.init().h) <= ctrl.h_max


# --- each controller's rule -----------------------------------------------------


def test_fixed_is_constant():
  hs, _ = run_jit('fixed', random_stats(1))
  assert set(hs) == {16}


def test_lr_quadratic_formula_and_growth_as_lr_decays():
  ctrl = CONTROLLERS['lr_quadratic']()
  assert int(ctrl.init().h) == 2  # H_base
  # floor((0.01 / 0.002)²) = 25; lr 0 -> h_max; huge lr -> h_min.
  for lr, want in [
      (2e-3, 25),
      (1e-3, 100),
      (0.0, 200),
      (10.0, 2),
      (7e-4, 200),
      (1.5e-3, 44),
  ]:
    h, _ = ctrl.next_h(ctrl.init(), stats(lr=lr))
    assert int(h) == want, (lr, int(h))
  # A cosine schedule from 4e-3 down to 4e-4: H never shrinks and ends longer.
  lrs = 4e-4 + 0.5 * (4e-3 - 4e-4) * (1 + np.cos(np.pi * np.arange(40) / 39))
  hs, _ = run_jit(
      'lr_quadratic', [stats(rnd=t, lr=float(lr)) for t, lr in enumerate(lrs)]
  )
  assert all(b >= a for a, b in zip(hs, hs[1:])), hs
  assert hs[0] == 6 and hs[-1] > 100  # floor(2.5²) = 6; floor(25²) = 625 -> 200


def test_loss_ratio_formula_and_shrink_as_loss_falls():
  ctrl = CONTROLLERS['loss_ratio']()
  state = ctrl.init()
  assert int(state.h) == 32
  h, state = ctrl.next_h(state, stats(loss=4.0))  # sets L_0 = 4
  assert int(h) == 32 and float(state.loss0) == 4.0
  h, state = ctrl.next_h(state, stats(loss=1.0))
  assert int(h) == 16  # ceil(32 · sqrt(1/4))
  h, state = ctrl.next_h(state, stats(loss=float('nan')))
  assert int(h) == 16  # a bad round holds H
  losses = 4.0 * np.exp(-np.arange(40) / 10.0)
  hs, _ = run_jit(
      'loss_ratio', [stats(rnd=t, loss=float(x)) for t, x in enumerate(losses)]
  )
  assert hs[0] == 32
  assert all(b <= a for a, b in zip(hs, hs[1:])), hs
  assert hs[-1] == int(np.ceil(32 * np.sqrt(losses[-1] / losses[0])))


def test_loss_ratio_first_valid_loss_is_the_reference():
  ctrl = CONTROLLERS['loss_ratio']()
  h, state = ctrl.next_h(ctrl.init(), stats(loss=float('nan')))
  assert int(h) == 32 and not bool(state.has_loss0)
  h, state = ctrl.next_h(state, stats(loss=2.0))
  assert float(state.loss0) == 2.0 and int(h) == 32


def test_normalized_agreement():
  np.testing.assert_allclose(signals.normalized_agreement(0.25, 4), 0.0, atol=1e-7)
  np.testing.assert_allclose(signals.normalized_agreement(1.0, 4), 1.0)
  assert float(signals.normalized_agreement(0.3, 1)) == 1.0
  assert float(jax.jit(signals.normalized_agreement)(0.3, jnp.int32(1))) == 1.0
  assert float(signals.agreement_ratio(0.0, 0.0)) == 1.0  # nobody moved
  # Shared part d plus independent noise: a ≈ ‖d‖² / (‖d‖² + σ²), for any K.
  rng = np.random.default_rng(0)
  dim = 20000
  for k in (2, 4, 8):
    d = rng.normal(size=dim)
    noise = 0.5 * rng.normal(size=(k, dim))  # σ² = 0.25 ‖d‖² in expectation
    delta_k = d + noise
    rho = signals.agreement_ratio(
        np.sum(delta_k.mean(0) ** 2), np.mean(np.sum(delta_k**2, axis=1))
    )
    np.testing.assert_allclose(signals.normalized_agreement(rho, k), 0.8, atol=0.02)


def test_sync_stats_derives_norm_and_agreement():
  s = signals.sync_stats(
      round=3,
      step=96,
      h=32,
      lr_sum=0.01,
      lr=3e-4,
      loss_mean=2.5,
      loss_start=2.6,
      loss_end=2.4,
      delta_sq_norm=4.0,
      worker_sq_norm=8.0,
      num_workers=4,
  )
  assert float(s.delta_norm) == 2.0 and float(s.agreement) == 0.5
  assert s.round.dtype == jnp.int32 and s.num_workers.dtype == jnp.int32
  assert s.lr.dtype == jnp.float32
  assert all(x.shape == () for x in s)


def agreement_run(rho, n=50, k=4, h0=16):
  return run_jit('agreement', [stats(rnd=t, rho=rho, k=k) for t in range(n)], h0=h0)


def test_agreement_shrinks_when_workers_disagree_and_grows_when_they_agree():
  ctrl = CONTROLLERS['agreement']()
  disagree, _ = agreement_run(rho=0.25 + 0.01)  # ρ ≈ 1/K
  assert disagree[0] < 16 and disagree[-1] == ctrl.h_min
  agree, _ = agreement_run(rho=0.99)
  assert agree[0] > 16 and agree[-1] == ctrl.h_max
  single, _ = agreement_run(rho=0.3, k=1)  # one worker: nothing to disagree with
  assert single[-1] == ctrl.h_max


def flips(hs):
  """How often the direction of change reverses (up then down, or down then up)."""
  moves = [np.sign(b - a) for a, b in zip(hs, hs[1:]) if b != a]
  return sum(1 for x, y in zip(moves, moves[1:]) if x != y)


@pytest.mark.parametrize('rho', [0.25, 0.4, 0.55, 0.625, 0.7, 0.85, 1.0])
def test_agreement_is_monotone_on_a_constant_signal(rho):
  hs, _ = agreement_run(rho=rho)
  assert flips(hs) == 0, hs


def test_agreement_holds_inside_the_band():
  # a = (ρ − 1/4)/(3/4); ρ = 0.625 -> a = 0.5 = target: H never moves.
  hs, _ = agreement_run(rho=0.625)
  assert set(hs) == {16}


@pytest.mark.parametrize('h_star', [8, 40, 150])
def test_agreement_settles_in_closed_loop(h_star):
  """Workers drift apart as rounds lengthen: a(H) = 1/(1 + H/H*), plus noise.

  The controller must find an interval near H* (where a = target = 0.5) and
  stay there: no up-down flips over the last 40 of 80 rounds.
  """
  ctrl, step, _ = cached('agreement')
  rng = np.random.default_rng(h_star)
  k = 4
  state, hs = ctrl.init(), []
  for t in range(80):
    h = int(state.h)
    a = 1.0 / (1.0 + h / h_star) + 0.05 * rng.normal()
    h_next, state = step(state, stats(rnd=t, h=h, rho=a * (1 - 1 / k) + 1 / k, k=k))
    hs.append(int(h_next))
  assert flips(hs[40:]) == 0, hs
  # Settled, the model's agreement a(H) sits in the controller's dead band,
  # target ± hysteresis, widened by what one grow or shrink step moves it: a
  # controller stuck at H_0 (a(16) = 0.9 for H* = 150) or pinned at a bound fails.
  a = lambda h: 1.0 / (1.0 + h / h_star)
  g = AGREEMENT
  step = max(a(h) - a(h * g['grow']) for h in range(2, 201))
  low, high = g['target'] - g['hysteresis'] - step, g['target'] + g['hysteresis'] + step
  assert all(low <= a(h) <= high for h in hs[40:]), (hs, low, high)


def test_agreement_ignores_a_non_finite_round():
  ctrl, step, _ = cached('agreement')
  _, state = step(ctrl.init(), stats(rho=0.99))
  h, state2 = step(state, stats(rho=float('nan')))
  assert int(h) == int(state.h)
  chex.assert_trees_all_equal(state2, state)


def test_schedule_replays_its_intervals_then_repeats_the_last():
  hs = (16, 4, 32, 8)
  ctrl = CONTROLLERS['schedule']()
  assert (ctrl.h_min, ctrl.h_max) == (4, 32)
  state = ctrl.init()
  assert int(state.h) == 16 and int(state.count) == 0
  # Round 0 runs init's H; each sync returns the next round's H, whatever the
  # statistics (random ones here, NaN losses included).
  got, _ = run_eager(ctrl, random_stats(3, n=7))
  assert [16] + got == [*hs, 8, 8, 8, 8]
  scanned, state = run_jit('schedule', random_stats(4, n=7))
  assert scanned == got
  assert int(state.count) == 7 and int(state.h) == 8


def test_schedule_bounds_are_the_extremes_of_its_intervals():
  ctrl = intervals.schedule([5, 3, 9, 4])
  assert (ctrl.h_min, ctrl.h_max) == (3, 9)
  single = intervals.schedule((7,))
  assert (single.h_min, single.h_max) == (7, 7)
  h, _ = single.next_h(single.init(), stats())
  assert int(h) == 7
  # numpy ints are ints.
  assert intervals.schedule(np.asarray([6, 2], np.int64)).h_max == 6


def test_schedule_state_round_trips_through_jit():
  ctrl = intervals.schedule((5, 3, 4))
  step = jax.jit(ctrl.next_h)
  state, hs = ctrl.init(), []
  for t in range(5):
    h, state = step(state, stats(rnd=t))
    assert h.dtype == jnp.int32 and state.count.dtype == jnp.int32
    assert int(state.h) == int(h)
    hs.append(int(h))
  assert hs == [3, 4, 4, 4, 4]
  assert int(state.count) == 5
  # A resumed run carries on from its stored state: a fresh controller of the
  # same schedule, fed the saved (host) state, returns what the old one would.
  saved = jax.device_get(intervals.ScheduleState(h=jnp.int32(3), count=jnp.int32(1)))
  h, resumed = jax.jit(intervals.schedule((5, 3, 4)).next_h)(saved, stats())
  assert int(h) == 4 and int(resumed.count) == 2


def test_schedule_from_config():
  from configs import common

  cfg = common.base('tiny')
  assert tuple(cfg.interval.schedule) == ()  # the field exists, empty by default
  cfg.interval.controller = 'schedule'
  cfg.interval.schedule = (5, 3, 4)
  from_config = lambda: intervals.from_interval(
      Interval.from_config(cfg), cfg.inner.lr, cfg.total_steps
  )
  ctrl = from_config()
  assert (ctrl.h_min, ctrl.h_max) == (3, 5)
  state = ctrl.init()
  hs = [int(state.h)]
  for t in range(4):
    h, state = ctrl.next_h(state, stats(rnd=t))
    hs.append(int(h))
  assert hs == [5, 3, 4, 4, 4]
  # The config's h_min and h_max play no part in the schedule's bounds.
  cfg.interval.h_min, cfg.interval.h_max = 1, 100
  ctrl = from_config()
  assert (ctrl.h_min, ctrl.h_max) == (3, 5)
  cfg.interval.schedule = ()
  with pytest.raises(ValueError, match='non-empty'):
    from_config()


def test_docstring_examples_run():
  result = doctest.testmod(intervals, optionflags=doctest.NORMALIZE_WHITESPACE)
  assert result.attempted > 0 and result.failed == 0


def test_the_interval_group_checks_its_fields_once_by_name():
  from configs import common

  cfg = common.base('tiny')
  group = Interval.from_config(cfg)
  assert (group.h, group.upper, group.schedule) == (cfg.interval.h, cfg.interval.h, ())
  cfg.interval.target = 1.0
  with pytest.raises(ValueError, match=r'config.interval.target must be in \(0.0, 1.0\)'):
    Interval.from_config(cfg)
  cfg = common.base('tiny')
  cfg.interval.h_min, cfg.interval.h_max = 8, 4
  with pytest.raises(ValueError, match=r'config.interval.h_max \(4\) must be >= '):
    Interval.from_config(cfg)
