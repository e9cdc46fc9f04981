r"""The outer transforms: :func:`autoloco` (the corrected chain), :func:`diloco`
and :func:`replayed_ratios`.

.. code-block:: text

  lr_sum_correction       (Δ_t, S_t, S_ref,t) -> Δ_t; records r_t, α_t, β_t
  nesterov_momentum(β_t)  m_t = β_t s_t m_{t−1} + Δ_t;  u_t = Δ_t + β_t m_t
  scale(−α_t)             −α_t u_t

``s_t`` is the ``on_change`` rule's factor for the buffer (none for ``keep``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np
import optax

from autoloco_jax.outer import checks, momentum as momentum_lib
from autoloco_jax.outer.correction import (
    DEFAULT_SNAP_TOL,
    CorrectionState,
    lr_sum_correction,
)


class AutoLoCoState(NamedTuple):
  """State of :func:`autoloco` (and :func:`diloco`): the momentum link's buffer
  and the correction link's :class:`CorrectionState`, side by side in one flat
  tuple (the layout checkpoints have always held).

  Attributes:
    momentum: the Nesterov momentum buffer ``m_t``; a pytree shaped like the
      pseudo-gradients (and params), in their dtype.
    count: number of updates applied so far (scalar int32); indexes the outer
      learning-rate schedule when one is given.
    alpha: outer learning rate ``α_t`` applied by the last update (scalar
      float32; the uncorrected ``α`` before the first update).
    beta: momentum ``β_t`` applied by the last update (scalar float32; ``β``
      before the first update).
    ratio: ``r_t = S_t / S_ref,t`` applied by the last update (scalar float32;
      1 before the first update, when the sums are omitted, or when they were
      invalid under tracing).
  """

  momentum: optax.Params
  count: jax.Array
  alpha: jax.Array
  beta: jax.Array
  ratio: jax.Array

  @property
  def correction(self) -> CorrectionState:
    """The correction link's state."""
    return CorrectionState(self.count, self.alpha, self.beta, self.ratio)


@dataclasses.dataclass(frozen=True)
class AutoLoCoConfig:
  """The configuration an :func:`autoloco` transform was built with."""

  learning_rate: Any
  momentum: Any
  correction: str
  snap_tol: Any
  table: tuple
  on_change: str


class AutoLoCoTransformation(optax.GradientTransformationExtraArgs):
  """An ``optax.GradientTransformationExtraArgs`` that remembers its configuration.

  To optax it is the usual ``(init, update)`` pair; ``config`` (an
  :class:`AutoLoCoConfig`) is there for logging and introspection, e.g.
  ``tx.config.correction``.
  """

  @property
  def config(self) -> AutoLoCoConfig:
    # Absent only on copies made by NamedTuple methods such as ``_replace``.
    return self.__dict__.get('config')


def _corrected_nesterov(
    correct: optax.GradientTransformationExtraArgs, on_change: str, snap_tol: Any
) -> AutoLoCoTransformation:
  """The chain: ``correct``, then Nesterov momentum at its ``β_t`` (the buffer
  first treated by the ``on_change`` rule), then the scale by ``−α_t``.

  Like ``optax.inject_hyperparams``, except that the hyperparameters of the
  momentum and scale links come from the correction link's update (which reads
  the sums) rather than from schedules of the step count.
  """
  rule = momentum_lib.BUFFER_RULES[on_change]

  def init_fn(params):
    return AutoLoCoState(optax.tree.zeros_like(params), *correct.init(params))

  def update_fn(updates, state, params=None, **extra_args):
    updates, hyper = correct.update(updates, state.correction, params, **extra_args)
    scale = None if rule is None else rule(state.ratio, hyper.ratio, snap_tol)
    step = optax.chain(
        momentum_lib.nesterov_momentum(hyper.beta, scale),
        momentum_lib.scale(-hyper.alpha),
    )
    step_state = (optax.TraceState(trace=state.momentum), optax.EmptyState())
    updates, (trace, _) = step.update(updates, step_state, params)
    return updates, AutoLoCoState(trace.trace, *hyper)

  return AutoLoCoTransformation(init_fn, update_fn)


def autoloco(
    learning_rate: Union[float, jax.Array, optax.Schedule],
    momentum: Union[float, jax.Array, optax.Schedule],
    correction: str = 'both',
    *,
    snap_tol: Union[float, jax.Array] = DEFAULT_SNAP_TOL,
    table: tuple = (),
    on_change: str = 'keep',
) -> AutoLoCoTransformation:
  r"""AutoLoCo's outer optimizer: Nesterov SGD corrected by accumulated inner lr.

  Each update receives the averaged pseudo-gradient ``Δ_t`` and, as keyword
  arguments, the accumulated inner learning rate of the round,
  ``S_t = Σ_{s in round t} η(s)``, and that of the reference interval the
  outer hyperparameters were tuned for, ``S_ref,t``. With ``r_t = S_t/S_ref,t``:

  .. math::

    \begin{align*}
      β_t &= β^{r_t}, \qquad α_t = α \, \frac{1 - β_t}{1 - β}, \\
      m_t &= β_t \, m_{t-1} + Δ_t, \\
      θ_{t+1} &= θ_t - α_t \, (Δ_t + β_t \, m_t).
    \end{align*}

  The returned updates are ``−α_t (Δ_t + β_t m_t)``, so
  ``optax.apply_updates(θ_t, updates)`` is ``θ_{t+1}``. Why these two
  corrections: ``β^{r}`` makes the momentum's memory a fixed amount of
  accumulated inner learning rate instead of a fixed number of rounds, and
  ``α_t/(1 − β_t) = α/(1 − β)`` keeps the total weight with which every
  pseudo-gradient is eventually applied (and so the steady-state step per unit
  of inner learning rate) at its DiLoCo value (``docs/algorithms.md``, 3a).

  The transform is a chain: :func:`lr_sum_correction` computes ``(α_t, β_t)``,
  :func:`nesterov_momentum` at ``β_t`` and a scale by ``−α_t`` follow (optax's
  ``sgd``, whose hyperparameters the correction sets each round).

  ``correction`` selects what is corrected, for ablations: ``'none'`` applies
  ``(α, β)`` (DiLoCo), ``'momentum'`` ``(α, β_t)``, ``'lr'``
  ``(α (1 − β^{r_t})/(1 − β), β)``, ``'both'`` ``(α_t, β_t)``. ``'table'``
  replaces the formulas by measured pairs: ``(α a(r_t), b(r_t))``, piecewise
  linear through ``table``'s ``(r_i, a_i, b_i)`` (:func:`corrected_hyperparams`),
  e.g. DiLoCo's outer pairs tuned at several fixed intervals.
  ``'per_progress'`` ``(α / r_t, β)`` and ``'momentum_per_progress'``
  ``(α / r_t, β^{r_t})`` read the paper's learning-rate correction the other
  way round: the pseudo-gradient is normalized by its round's inner progress,
  so the outer step per unit of accumulated inner lr stays constant (where
  ``'lr'`` raises ``α_t`` for long rounds).

  ``on_change`` treats the buffer ``m_{t−1}`` when the round's length changed,
  ``r_t ≠ r_{t−1}`` (``r_0 = 1``), before the update: ``'keep'`` leaves it (the
  formulas above); ``'restart'`` zeroes it when ``|r_t − r_{t−1}| > snap_tol ·
  r_{t−1}`` (a momentum restart; a schedule-summed ``S_ref,t`` makes ``r_t``
  drift a little every round, so with such sums it fires on nearly every round);
  ``'rescale'`` multiplies it by ``r_t / r_{t−1}``. A pseudo-gradient grows with
  its round's inner progress, ``Δ_t ≈ S_t g``, so the rescaled buffer holds the
  past rounds' directions at the scale of the current round,
  ``m_{t−1} ≈ S_t Σ_k β^k g_{t−1−k}``: old momentum decays when rounds get
  shorter and weighs more when they get longer.

  Whatever the mode, ``r_t = 1`` on every round (or omitted sums) gives the
  DiLoCo step bit for bit: the same float operations, in the same order, as
  ``optax.sgd(learning_rate, momentum, nesterov=True)``. Ratios within
  ``snap_tol`` of 1 count as 1, so a round of exactly ``H_ref`` steps is the
  DiLoCo step even if ``S_t`` and ``S_ref,t`` were summed in different orders.

  Sums must be finite and > 0. Python or NumPy values are checked eagerly
  (``ValueError``). JAX arrays are not checked (they may be traced): an invalid
  traced pair is applied as ``r_t = 1`` (the uncorrected step), so the update
  is never NaN because of the sums; the state's ``ratio`` then reads 1.

  Args:
    learning_rate: outer learning rate ``α`` (> 0), or an optax schedule of the
      outer step count.
    momentum: outer momentum ``β`` in ``[0, 1)``, or an optax schedule of the
      outer step count (:func:`momentum_schedule`), whose ``β(t)`` the
      correction then takes as its ``β``. With ``β = 0`` the corrected ``α_t``
      is ``α`` for every ``r_t > 0`` (the limit of the formula).
    correction: ``'none' | 'momentum' | 'lr' | 'both' | 'table' |
      'per_progress' | 'momentum_per_progress'``; the default
      is the formulas above (the trainer passes ``config.autoloco.correction``).
    snap_tol: ratios with ``|r_t − 1| ≤ snap_tol`` are applied as exactly 1.
    table: for ``correction='table'`` only: ``((r_i, a_i, b_i), ...)`` with
      increasing ``r_i > 0``, ``a_i > 0``, ``b_i`` in ``[0, 1)``, holding the
      reference point ``(1, 1, momentum)``.
    on_change: ``'keep' | 'restart' | 'rescale'``: the momentum buffer when
      ``r_t`` differs from the previous round's ratio.

  Returns:
    An :class:`AutoLoCoTransformation` (an ``optax.GradientTransformationExtraArgs``)
    with ``update(pseudo_grad, state, params=None, *, inner_lr_sum=None,
    reference_lr_sum=None, **extra_args)``; other extra args are ignored, so it
    composes with ``optax.chain`` and ``optax.inject_hyperparams`` (where
    ``learning_rate`` and ``momentum`` are injectable).

  Raises:
    ValueError: for a bad ``learning_rate``, ``momentum``, ``correction``,
      ``snap_tol``, ``table`` or ``on_change``; at ``update``, for concrete
      sums that are not > 0 or for only one of the two sums.

  Examples:
    >>> import jax.numpy as jnp
    >>> import optax
    >>> from autoloco_jax import outer
    >>> tx = outer.autoloco(learning_rate=0.7, momentum=0.9)
    >>> params = {'w': jnp.zeros(3)}
    >>> state = tx.init(params)
    >>> delta = {'w': jnp.ones(3)}  # θ_t − mean_k θ_{t,k}
    >>> # A round half as long (in inner lr) as the reference interval:
    >>> updates, state = tx.update(delta, state, params,
    ...                            inner_lr_sum=0.5, reference_lr_sum=1.0)
    >>> params = optax.apply_updates(params, updates)
    >>> print(f'{state.ratio:.2f} {state.beta:.4f} {state.alpha:.4f}')
    0.50 0.9487 0.3592

  References:
    Douillard et al., `DiLoCo: Distributed Low-Communication Training of
    Language Models <https://arxiv.org/abs/2311.08105>`_, 2023.

    AutoLoCo: Communication Efficient Distributed LLM Training via Adaptive
    Synchronization, arXiv preprint, September 2026 (our reading of its
    abstract).

    Sutskever et al., `On the importance of initialization and momentum in deep
    learning <http://proceedings.mlr.press/v28/sutskever13.pdf>`_, 2013.
  """
  checks.check_choice('on_change', on_change, momentum_lib.ON_CHANGE)
  correct = lr_sum_correction(  # checks the other arguments
      learning_rate, momentum, correction, snap_tol=snap_tol, table=table
  )
  table = checks.check_table(table, correction, momentum)  # as float triples
  tx = _corrected_nesterov(correct, on_change, snap_tol)
  tx.__dict__['config'] = AutoLoCoConfig(
      learning_rate=learning_rate,
      momentum=momentum,
      correction=correction,
      snap_tol=snap_tol,
      table=table,
      on_change=on_change,
  )
  return tx


def replayed_ratios(tx: AutoLoCoTransformation, ratios: Any) -> AutoLoCoTransformation:
  r"""``tx`` with the ratio of its ``t``-th update replayed from ``ratios``.

  .. math::

    r_t = \mathrm{ratios}[\min(t, n - 1)], \qquad
    (α_t, β_t) = \mathrm{correction}(α, β, r_t),

  whatever ``inner_lr_sum`` and ``reference_lr_sum`` the caller passes: the
  wrapped update sees ``S_t = r_t`` and ``S_ref,t = 1``. ``t`` is the state's
  ``count`` (updates applied so far); past the end the last ratio holds. A
  control: one run's corrected outer steps, as it logged them, on another run's
  rounds (DiLoCo's fixed ``H_ref``, say, where the correction itself is the
  identity), which separates what the sequence of outer hyperparameters does
  from what the adaptive ``H`` does.

  Args:
    tx: an :func:`autoloco` transform.
    ratios: the ratios ``r_0, r_1, ...`` (finite, > 0; at least one).

  Returns:
    An :class:`AutoLoCoTransformation` with ``tx``'s state and ``config``.

  Raises:
    ValueError: for an empty sequence or a ratio that is not finite and > 0.

  Examples:
    >>> import jax.numpy as jnp
    >>> from autoloco_jax import outer
    >>> tx = outer.replayed_ratios(outer.autoloco(0.7, 0.9, 'momentum'), [2.0])
    >>> state = tx.init(jnp.zeros(1))
    >>> _, state = tx.update(jnp.ones(1), state, inner_lr_sum=5.0,
    ...                      reference_lr_sum=5.0)
    >>> print(f'{float(state.beta):.4f}')  # 0.9 ** 2, not 0.9 ** 1
    0.8100
  """
  r = np.asarray(ratios, np.float32).reshape(-1)
  if r.size == 0 or not np.all(np.isfinite(r) & (r > 0)):
    raise ValueError(f'ratios must be one or more finite numbers > 0, got {ratios!r}.')
  table = jnp.asarray(r)

  def update_fn(updates, state, params=None, **extra_args):
    extra_args.pop('inner_lr_sum', None)
    extra_args.pop('reference_lr_sum', None)
    r_t = table[jnp.minimum(state.count, r.size - 1)]
    return tx.update(
        updates,
        state,
        params,
        inner_lr_sum=r_t,
        reference_lr_sum=jnp.ones((), jnp.float32),
        **extra_args,
    )

  out = AutoLoCoTransformation(tx.init, update_fn)
  out.__dict__['config'] = tx.config
  return out


def diloco(
    learning_rate: Union[float, jax.Array, optax.Schedule],
    momentum: Union[float, jax.Array, optax.Schedule],
) -> AutoLoCoTransformation:
  r"""DiLoCo's outer optimizer: SGD with Nesterov momentum on the pseudo-gradient.

  .. math::

    m_t = β \, m_{t-1} + Δ_t, \qquad θ_{t+1} = θ_t - α \, (Δ_t + β \, m_t).

  This is :func:`autoloco` with ``correction='none'``: bit for bit
  ``optax.sgd(learning_rate, momentum=momentum, nesterov=True)``, with the same
  :class:`AutoLoCoState` (so ``alpha``, ``beta`` can be logged alike). It
  accepts and ignores ``inner_lr_sum``/``reference_lr_sum``, so a training loop
  can switch between the two without changing its call.

  Args:
    learning_rate: outer learning rate ``α`` (paper: 0.7), or a schedule.
    momentum: outer Nesterov momentum ``β`` in ``[0, 1)`` (paper: 0.9), or a
      schedule ``β(t)`` of the outer step count (:func:`momentum_schedule`); a
      constant is the step above bit for bit.

  Returns:
    An :class:`AutoLoCoTransformation`.

  Examples:
    >>> import jax.numpy as jnp
    >>> from autoloco_jax import outer
    >>> tx = outer.diloco(0.7, 0.9)
    >>> state = tx.init(jnp.zeros(2))
    >>> updates, state = tx.update(jnp.ones(2), state)
    >>> print([f'{u:.4f}' for u in updates])  # −0.7 · (1 + 0.9 · 1)
    ['-1.3300', '-1.3300']

  References:
    Douillard et al., `DiLoCo: Distributed Low-Communication Training of
    Language Models <https://arxiv.org/abs/2311.08105>`_, 2023.
  """
  return autoloco(learning_rate, momentum, correction='none')
