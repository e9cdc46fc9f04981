r"""Interval controllers: how many inner steps the next round runs.

At each sync the trainer gathers scalar statistics of the round that just ended
into a ``signals.SyncStats`` (cheap: scalars only, no communication beyond them)
and asks a controller for the next interval ``H_{t+1} ∈ [h_min, h_max]``.

Every controller is an :class:`IntervalController`, a ``NamedTuple`` of two pure
functions in the optax style (``init(h0=None) -> state``, ``state.h`` the first
``H``; ``next_h(state, stats) -> (H, state)``, ``H`` an int32 scalar) and its
bounds. Both are jittable with static configuration, so the trainer runs the
controller inside its jitted sync and feeds ``H`` to a ``lax.while_loop``
without recompiling. Open-loop controllers also carry ``open_loop``, their
sequence of intervals. Their arguments are checked, and their float rules
rounded to an interval, by ``bounds.py``.

Controllers (see ``docs/algorithms.md``, section 3b):

* :func:`fixed` — DiLoCo's constant ``H``.
* :func:`lr_quadratic` — Quadratic Synchronization Rule (Gu et al., ICLR 2024):
  ``H ∝ 1/η²``.
* :func:`loss_ratio` — AdaComm (Wang & Joshi, 2019): ``H ∝ sqrt(L_t/L_0)``.
* :func:`agreement` — ours: grow ``H`` while the workers' pseudo-gradients
  agree, shrink it when they do not.
* :func:`schedule` — an open-loop sequence of intervals (a replay control).

:data:`CONTROLLERS` maps names to factories; :func:`make` builds one by name,
:func:`from_interval` the one ``config.interval`` names (``interval.Interval``).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from autoloco_jax import ranges
from autoloco_jax.algorithms.diloco import bounds, budget
from autoloco_jax.algorithms.interval import Interval
from autoloco_jax.runtime.signals import normalized_agreement, SyncStats


class IntervalController(NamedTuple):
  """An interval controller: two pure functions and the bounds they respect.

  Attributes:
    init: ``init(h0=None) -> state``; ``state.h`` is the first ``H``.
    next_h: ``next_h(state, stats) -> (H, state)``, ``H`` an
      int32 scalar in ``[h_min, h_max]``.
    h_min: smallest interval the controller returns (Python int).
    h_max: largest interval the controller returns (Python int); a trainer
      can size its buffers by it.
    open_loop: ``open_loop(t) -> H``, the interval the ``t``-th call of
      ``next_h`` returns (``t = 1, 2, ...``; ``open_loop(0)`` is ``init().h``),
      for open-loop controllers (``fixed``, ``schedule``), whose ``next_h`` is
      this same function of its round count: the host calls it with a Python
      int to know the next ``H`` without reading the device
      (``int(open_loop(t))``). ``None`` for adaptive controllers, whose ``H``
      only the sync knows.
  """

  init: Callable[..., Any]
  next_h: Callable[[Any, SyncStats], tuple[jax.Array, Any]]
  h_min: int
  h_max: int
  open_loop: Callable[[Any], jax.Array] | None = None


# --- controllers --------------------------------------------------------------


class FixedState(NamedTuple):
  """State of :func:`fixed`.

  Attributes:
    h: the (constant) ``H`` (int32 scalar).
  """

  h: jax.Array


def fixed(h: int) -> IntervalController:
  r"""DiLoCo's constant interval: ``H_t = h`` for every round.

  Args:
    h: the interval (int >= 1). Its bounds are ``h_min = h_max = h``.

  Returns:
    An :class:`IntervalController`.

  Examples:
    >>> from autoloco_jax.algorithms.diloco import intervals
    >>> ctrl = intervals.fixed(50)
    >>> state = ctrl.init()
    >>> int(state.h)
    50

  References:
    Douillard et al., `DiLoCo: Distributed Low-Communication Training of
    Language Models <https://arxiv.org/abs/2311.08105>`_, 2023.
  """
  h = bounds.check_int('h', h)

  def init_fn(h0=None):
    return FixedState(h=bounds.initial_interval(h0, h, h, h))

  def open_loop(t):
    del t
    return jnp.full((), h, jnp.int32)

  def next_fn(state, stats):
    del state, stats
    h_next = open_loop(None)
    return h_next, FixedState(h=h_next)

  return IntervalController(init_fn, next_fn, h, h, open_loop=open_loop)


class LrQuadraticState(NamedTuple):
  """State of :func:`lr_quadratic`.

  Attributes:
    h: the last ``H`` returned (int32 scalar).
  """

  h: jax.Array


def lr_quadratic(c: float, h_min: int, h_max: int) -> IntervalController:
  r"""Quadratic Synchronization Rule: intervals grow as ``1/η²``.

  .. math::

    H_{t+1} = \mathrm{clip}\Big(\big\lfloor (c / η_\mathrm{now})^2 \big\rfloor,
                                H_\min, H_\max\Big)

  with ``η_now = stats.lr``, the inner learning rate at the sync. While the
  learning rate is high, ``H = h_min``; as the schedule decays, rounds
  lengthen. Gu et al. motivate it by the implicit regularisation of local
  steps: the drift that helps generalisation scales like ``η² H``, so keeping
  ``η² H`` constant keeps that effect as the lr decays. A non-positive
  ``η`` gives ``h_max`` (the limit); a non-finite one keeps the current ``H``.
  The floor allows a relative 1e-6 of float32 error, so ``(0.01/0.001)²`` is
  100, not 99.

  Args:
    c: growth coefficient (> 0; same units as ``η``). ``H`` leaves ``h_min``
      once ``η < c / sqrt(h_min)``.
    h_min: the paper's ``H_base``, the smallest interval (int >= 1).
    h_max: the largest interval (int >= h_min).

  Returns:
    An :class:`IntervalController`; ``init(h0=None)`` defaults to ``h_min``.

  Examples:
    >>> from autoloco_jax.algorithms.diloco import intervals
    >>> from autoloco_jax.runtime import signals
    >>> ctrl = intervals.lr_quadratic(c=0.01, h_min=4, h_max=512)
    >>> state = ctrl.init()
    >>> stats = signals.sync_stats(
    ...     round=0, step=4, h=4, lr_sum=4e-3, lr=1e-3, loss_mean=3.0,
    ...     loss_start=3.1, loss_end=2.9, delta_sq_norm=1.0,
    ...     worker_sq_norm=2.0, num_workers=4)
    >>> h, state = ctrl.next_h(state, stats)
    >>> int(h)  # floor((0.01 / 0.001)²)
    100

  References:
    Gu, Lyu, Arora, Zhang, Huang, `A Quadratic Synchronization Rule for
    Distributed Deep Learning <https://arxiv.org/abs/2310.14423>`_, ICLR 2024.
  """
  c = bounds.check_float('c', c, ranges.POSITIVE)
  h_min, h_max = bounds.check_bounds(h_min, h_max)

  def init_fn(h0=None):
    return LrQuadraticState(h=bounds.initial_interval(h0, h_min, h_min, h_max))

  def next_fn(state, stats):
    lr = jnp.asarray(stats.lr, jnp.float32)
    safe_lr = jnp.where(lr > 0, lr, 1.0)
    h = jnp.where(lr > 0, jnp.square(c / safe_lr), jnp.inf)
    new = bounds.to_interval(h, h_min, h_max, bounds.floor)
    h_next = jnp.where(jnp.isfinite(lr), new, state.h)
    return h_next, LrQuadraticState(h=h_next)

  return IntervalController(init_fn, next_fn, h_min, h_max)


class LossRatioState(NamedTuple):
  """State of :func:`loss_ratio`.

  Attributes:
    h: the last ``H`` returned (int32 scalar).
    loss0: ``L_0``, the first round's mean loss (float32; 0 until set).
    has_loss0: whether ``loss0`` has been set (bool scalar).
  """

  h: jax.Array
  loss0: jax.Array
  has_loss0: jax.Array


def loss_ratio(h0: int, h_min: int, h_max: int) -> IntervalController:
  r"""AdaComm's loss-ratio rule: intervals shrink as the loss falls.

  .. math::

    H_{t+1} = \mathrm{clip}\Big(\Big\lceil H_0 \sqrt{L_t / L_0}\,\Big\rceil,
                                H_\min, H_\max\Big)

  ``L_t`` is ``stats.loss_mean``, the loss averaged over the round's steps and
  workers; ``L_0`` is the same statistic for the first round the controller
  sees, stored in the state on that call, so the round after it runs ``H_0``.
  Rounds with a non-finite or non-positive loss keep the current ``H``. The
  derivation, and why these choices: ``docs/algorithms.md`` §3b.

  Args:
    h0: ``H_0``, the interval at loss ratio 1 (``h_min <= h0 <= h_max``).
    h_min: smallest interval (int >= 1).
    h_max: largest interval.

  Returns:
    An :class:`IntervalController`; ``init(h0=None)`` defaults to ``h0``.

  Examples:
    >>> from autoloco_jax.algorithms.diloco import intervals
    >>> from autoloco_jax.runtime import signals
    >>> ctrl = intervals.loss_ratio(h0=64, h_min=4, h_max=64)
    >>> state = ctrl.init()
    >>> mk = lambda loss: signals.sync_stats(
    ...     round=0, step=0, h=64, lr_sum=1.0, lr=1e-3, loss_mean=loss,
    ...     loss_start=loss, loss_end=loss, delta_sq_norm=1.0,
    ...     worker_sq_norm=1.0, num_workers=4)
    >>> h, state = ctrl.next_h(state, mk(4.0))  # sets L_0 = 4
    >>> h, state = ctrl.next_h(state, mk(1.0))
    >>> int(h)  # ceil(64 · sqrt(1/4))
    32

  References:
    Wang, Joshi, `Adaptive Communication Strategies to Achieve the Best
    Error-Runtime Trade-off in Local-Update SGD
    <https://arxiv.org/abs/1810.08313>`_, SysML 2019.
  """
  h_min, h_max = bounds.check_bounds(h_min, h_max)
  h_ref = bounds.check_h0(h0, h_min, h_max)

  def init_fn(h0=None):
    return LossRatioState(
        h=bounds.initial_interval(h0, h_ref, h_min, h_max),
        loss0=jnp.zeros((), jnp.float32),
        has_loss0=jnp.zeros((), bool),
    )

  def next_fn(state, stats):
    loss = jnp.asarray(stats.loss_mean, jnp.float32)
    valid = jnp.isfinite(loss) & (loss > 0)
    set_now = valid & ~state.has_loss0
    loss0 = jnp.where(set_now, loss, state.loss0)
    has_loss0 = state.has_loss0 | set_now
    ratio = loss / jnp.where(has_loss0, loss0, 1.0)
    new = bounds.to_interval(h_ref * jnp.sqrt(ratio), h_min, h_max, bounds.ceil)
    h_next = jnp.where(valid & has_loss0, new, state.h)
    return h_next, LossRatioState(h=h_next, loss0=loss0, has_loss0=has_loss0)

  return IntervalController(init_fn, next_fn, h_min, h_max)


class AgreementState(NamedTuple):
  """State of :func:`agreement`.

  Attributes:
    h: the last ``H`` returned, ``round(h_float)`` (int32 scalar).
    h_float: the unrounded ``H``, kept as a float so small multiplicative steps
      accumulate (float32 scalar, within ``[h_min, h_max]``).
    smoothed: the EMA of the normalised agreement ``a_t`` (float32 scalar).
    count: rounds observed with a finite agreement (int32 scalar).
  """

  h: jax.Array
  h_float: jax.Array
  smoothed: jax.Array
  count: jax.Array


def agreement(
    h0: int,
    h_min: int,
    h_max: int,
    *,
    target: float,
    grow: float,
    shrink: float,
    ema: float,
    hysteresis: float,
) -> IntervalController:
  r"""Grow ``H`` while the workers agree, shrink it when they do not.

  Reads the normalised agreement ``a_t = (ρ_t − 1/K)/(1 − 1/K)`` (the shared
  fraction of a worker's move, see :func:`normalized_agreement`), smooths it,
  and moves ``H`` multiplicatively outside a dead band around ``target``:

  .. math::

    \begin{align*}
      \bar a_t &= λ \, \bar a_{t-1} + (1 - λ)\, a_t
                \quad (\bar a_0 = a_0), \\
      h_{t+1} &= \mathrm{clip}\big(h_t \cdot
        \begin{cases}
          g & \bar a_t > a^* + δ \\
          s & \bar a_t < a^* - δ \\
          1 & \text{otherwise}
        \end{cases}, H_\min, H_\max\big), \\
      H_{t+1} &= \mathrm{round}(h_{t+1}).
    \end{align*}

  When the workers' moves agree, averaging keeps most of what they did and a
  sync buys little, so rounds can be longer; when they have drifted apart
  (``a_t ≈ 0``, i.e. ``ρ_t ≈ 1/K``), much of each move cancels in the average
  and the workers should meet sooner. The band ``[a* − δ, a* + δ]`` and the
  EMA keep ``H`` from flipping up and down on a noisy or constant signal;
  ``h`` is clipped to the bounds, so it never winds up beyond them.

  The settings have no defaults here: ``config.interval`` holds them
  (``configs/common.py``), and ``docs/algorithms.md`` §3b says why. With
  ``K = 1`` ``a_t = 1``, so ``H`` grows to ``h_max``. A round with a
  non-finite ``ρ`` leaves the state unchanged.

  Args:
    h0: the first interval (``h_min <= h0 <= h_max``).
    h_min: smallest interval (int >= 1).
    h_max: largest interval.
    target: ``a*``, the agreement to hold, in (0, 1).
    grow: ``g > 1``, factor applied while ``ā > a* + δ``.
    shrink: ``s`` in (0, 1), factor applied while ``ā < a* − δ``.
    ema: ``λ`` in [0, 1), EMA decay; 0 uses the raw ``a_t``.
    hysteresis: ``δ >= 0``, half-width of the dead band; below
      ``min(target, 1 − target)`` so that both thresholds lie in (0, 1).

  Returns:
    An :class:`IntervalController`; ``init(h0=None)`` defaults to ``h0``.

  Examples:
    >>> from autoloco_jax.algorithms.diloco import intervals
    >>> from autoloco_jax.runtime import signals
    >>> ctrl = intervals.agreement(h0=16, h_min=4, h_max=256, target=0.5,
    ...     grow=1.25, shrink=0.7, ema=0.5, hysteresis=0.15)
    >>> state = ctrl.init()
    >>> stats = signals.sync_stats(
    ...     round=0, step=16, h=16, lr_sum=0.01, lr=1e-3,
    ...     loss_mean=3.0, loss_start=3.1, loss_end=2.9,
    ...     delta_sq_norm=0.95, worker_sq_norm=1.0, num_workers=4)
    >>> h, state = ctrl.next_h(state, stats)  # workers agree: grow
    >>> int(h)
    20
  """
  h_min, h_max = bounds.check_bounds(h_min, h_max)
  h_first = bounds.check_h0(h0, h_min, h_max)
  # The arguments' ranges are those of config.interval's fields (ranges.FIELDS).
  valid = lambda name, value: bounds.check_float(
      name, value, ranges.FIELDS[f'interval.{name}']
  )
  target, grow, shrink = (
      valid('target', target),
      valid('grow', grow),
      valid('shrink', shrink),
  )
  ema, hysteresis = valid('ema', ema), valid('hysteresis', hysteresis)
  if hysteresis >= min(target, 1.0 - target):
    raise ValueError(
        f'hysteresis must be < min(target, 1 - target) = '
        f'{min(target, 1.0 - target)} so both thresholds lie in (0, 1), '
        f'got {hysteresis}.'
    )

  def init_fn(h0=None):
    h_init = bounds.initial_interval(h0, h_first, h_min, h_max)
    return AgreementState(
        h=h_init,
        h_float=h_init.astype(jnp.float32),
        smoothed=jnp.zeros((), jnp.float32),
        count=jnp.zeros((), jnp.int32),
    )

  def next_fn(state, stats):
    a = normalized_agreement(stats.agreement, stats.num_workers)
    valid = jnp.isfinite(a)
    smoothed = jnp.where(state.count == 0, a, ema * state.smoothed + (1.0 - ema) * a)
    factor = jnp.where(
        smoothed > target + hysteresis,
        grow,
        jnp.where(smoothed < target - hysteresis, shrink, 1.0),
    )
    h = jnp.clip(state.h_float * factor, float(h_min), float(h_max))
    h_next = bounds.to_interval(h, h_min, h_max, jnp.round)
    new_state = AgreementState(
        h=h_next,
        h_float=h.astype(jnp.float32),
        smoothed=smoothed.astype(jnp.float32),
        count=state.count + 1,
    )
    new_state = jax.tree.map(lambda n, o: jnp.where(valid, n, o), new_state, state)
    return new_state.h, new_state

  return IntervalController(init_fn, next_fn, h_min, h_max)


class ScheduleState(NamedTuple):
  """State of :func:`schedule`.

  Attributes:
    h: the last ``H`` returned (int32 scalar).
    count: rounds seen so far (int32 scalar).
  """

  h: jax.Array
  count: jax.Array


def schedule(hs: Sequence[int]) -> IntervalController:
  r"""An open-loop sequence of intervals: ``H_t = hs[min(t, len(hs) - 1)]``.

  The rounds' statistics are ignored: this replays a sequence fixed in advance
  (for instance an adaptive run's own ``H`` sequence, to test whether closing the
  loop matters) with the same machinery as an adaptive controller. Round ``t`` is
  counted by the controller's own state, so a resumed run goes on where it was.

  Args:
    hs: the intervals of rounds 0, 1, ... (ints >= 1); the last one repeats.

  Returns:
    An :class:`IntervalController` with ``h_min = min(hs)``, ``h_max = max(hs)``.

  Examples:
    >>> from autoloco_jax.algorithms.diloco import intervals
    >>> ctrl = intervals.schedule([40, 30, 20])
    >>> state = ctrl.init()
    >>> int(state.h)
    40
    >>> h, state = ctrl.next_h(state, None)
    >>> h, state = ctrl.next_h(state, None)
    >>> h, state = ctrl.next_h(state, None)
    >>> int(h)  # the last value repeats
    20
  """
  if isinstance(hs, (str, bytes)) or not hasattr(hs, '__len__') or not len(hs):
    raise ValueError(f'schedule needs a non-empty sequence of ints >= 1, got {hs!r}.')
  values = tuple(bounds.check_int(f'hs[{i}]', h) for i, h in enumerate(hs))
  h_min, h_max = min(values), max(values)

  def init_fn(h0=None):
    return ScheduleState(
        h=bounds.initial_interval(h0, values[0], h_min, h_max),
        count=jnp.zeros((), jnp.int32),
    )

  def open_loop(t):
    return jnp.asarray(values, jnp.int32)[jnp.minimum(t, len(values) - 1)]

  def next_fn(state, stats):
    del stats
    count = state.count + 1
    h_next = open_loop(count)
    return h_next, ScheduleState(h=h_next, count=count)

  return IntervalController(init_fn, next_fn, h_min, h_max, open_loop=open_loop)


CONTROLLERS: dict[str, Callable[..., IntervalController]] = {
    'fixed': fixed,
    'lr_quadratic': lr_quadratic,
    'loss_ratio': loss_ratio,
    'agreement': agreement,
    'schedule': schedule,
}


def make(name: str, **kwargs: Any) -> IntervalController:
  """Builds the controller registered as ``name`` with ``kwargs``.

  Args:
    name: a key of :data:`CONTROLLERS`.
    **kwargs: the factory's arguments.

  Returns:
    An :class:`IntervalController`.

  Raises:
    ValueError: for an unknown name (the message lists the known ones), or
      bad arguments.

  Examples:
    >>> from autoloco_jax.algorithms.diloco import intervals
    >>> ctrl = intervals.make('lr_quadratic', c=0.02, h_min=8, h_max=256)
    >>> ctrl.h_max
    256
  """
  if name not in CONTROLLERS:
    raise ValueError(
        f'unknown interval controller {name!r}; known: {sorted(CONTROLLERS)}.'
    )
  return CONTROLLERS[name](**kwargs)


def from_interval(
    interval: Interval, peak_lr: float, total_steps: int
) -> IntervalController:
  """The controller ``config.interval`` names, from its typed group.

  ``interval.h`` is ``H`` for ``fixed`` and ``H_0`` otherwise; the bounds are
  ``h_min`` and ``h_max`` (0 = ``h``); ``c`` (``lr_quadratic``; 0 =
  ``sqrt(h) · η_peak``, so that ``H = h`` at the peak inner lr ``peak_lr`` and
  grows as ``(η_peak / η)^2 · h`` while the schedule decays); ``target, grow,
  shrink, ema, hysteresis`` (``agreement``); ``schedule`` (``schedule``: the
  rounds' intervals, replayed open loop); ``syncs, shape, ratio, split``
  (``budget``: ``syncs`` rounds over the run's ``total_steps`` placed by
  ``budget.py``, then replayed as a ``schedule``).
  """
  name, h, h_min, h_max = interval.controller, interval.h, interval.h_min, interval.upper
  if name == 'fixed':
    return make(name, h=h)
  if name == 'schedule':
    return make(name, hs=tuple(int(x) for x in interval.schedule))
  if name == 'budget':
    hs = budget.schedule(
        total_steps, interval.syncs, interval.shape, interval.ratio, interval.split
    )
    return make('schedule', hs=hs)
  if name == 'lr_quadratic':
    c = interval.c or (h**0.5) * peak_lr
    return make(name, c=c, h_min=h_min, h_max=h_max)
  if name == 'loss_ratio':
    return make(name, h0=h, h_min=h_min, h_max=h_max)
  if name == 'agreement':
    settings = ('target', 'grow', 'shrink', 'ema', 'hysteresis')
    return make(
        name,
        h0=h,
        h_min=h_min,
        h_max=h_max,
        **{key: getattr(interval, key) for key in settings},
    )
  return make(name)  # raises the registry's error for unknown names
