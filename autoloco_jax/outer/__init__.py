r"""Outer optimizers for local-update training: DiLoCo and AutoLoCo's corrected step.

After a round of ``H_t`` inner steps the workers' pseudo-gradients are averaged,
``Δ_t = mean_k (θ_t − θ_{t,k})``, and an *outer* optimizer turns ``Δ_t`` into the
next global parameters. DiLoCo uses SGD with Nesterov momentum, tuned ``(α, β)``
for one fixed interval ``H_ref``. AutoLoCo changes the interval from round to
round, so each pseudo-gradient covers a different amount of inner progress; it
measures that progress by the accumulated inner learning rate
``S_t = Σ_{s in round t} η(s)`` and rescales the outer momentum and learning
rate by ``r_t = S_t / S_ref,t``.

The corrected step is a chain of small transforms, as optax builds ``sgd``
(``chain(trace(β, nesterov=True), scale_by_learning_rate(α))``):

.. code-block:: text

  lr_sum_correction      (Δ_t, S_t, S_ref,t) -> Δ_t, and records r_t, α_t, β_t
  nesterov_momentum(β_t)  m_t = β_t s_t m_{t−1} + Δ_t;  u_t = Δ_t + β_t m_t
  scale(−α_t)             −α_t u_t

where ``s_t`` is the ``on_change`` rule's factor for the buffer (1 to keep it).
Each correction mode and each ``on_change`` rule is a small function chosen by
name from a table, not a branch inside the update. The modules: ``correction``
(the correction link and its rules), ``momentum`` (the momentum and scale links,
the ``on_change`` rules), ``chain`` (the transforms composed of them),
``reference`` (the reference sums) and ``checks`` (the arguments' eager checks).

The package needs only JAX and optax, so other projects can take it as it is:

* :func:`autoloco` — the corrected outer step, an
  ``optax.GradientTransformationExtraArgs`` whose ``update`` reads the keyword
  arguments ``inner_lr_sum`` and ``reference_lr_sum``.
* :func:`lr_sum_correction` — the correction alone, a transform that passes the
  updates through and records the round's ``(r_t, α_t, β_t)``.
* :func:`nesterov_momentum` — the momentum link, ``optax.trace(β,
  nesterov=True)`` in the updates' dtype, with the buffer's factor ``s_t``.
* :func:`diloco` — the same transform with the correction off; bit for bit
  ``optax.sgd(α, momentum=β, nesterov=True)``.
* :func:`reference_lr_sum`, :func:`peak_reference_lr_sum` — the two ways of
  computing ``S_ref,t``.
* :func:`buffer_scale` — what ``on_change`` does to the momentum buffer when the
  round's length changes (restart or rescale).
* :func:`momentum_schedule` — an outer-momentum schedule ``β(t)`` (linear or
  cosine, over the run or a warmup), for the ``momentum`` argument of
  :func:`diloco` and :func:`autoloco`, which take a schedule as they take one
  for ``learning_rate``.
* :func:`replayed_ratios` — an :func:`autoloco` transform fed a recorded sequence
  of ratios ``r_t`` instead of the trainer's sums (a control).

References:
  Douillard et al., `DiLoCo: Distributed Low-Communication Training of Language
  Models <https://arxiv.org/abs/2311.08105>`_, 2023.

  AutoLoCo: Communication Efficient Distributed LLM Training via Adaptive
  Synchronization, arXiv preprint, September 2026. The full text was not
  available to us; the correction implemented here is our reading of its
  abstract, derived in ``docs/algorithms.md`` (section 3a).
"""

from autoloco_jax.outer.chain import (
    AutoLoCoConfig,
    AutoLoCoState,
    AutoLoCoTransformation,
    autoloco,
    diloco,
    replayed_ratios,
)
from autoloco_jax.outer.correction import (
    CORRECTIONS,
    DEFAULT_SNAP_TOL,
    CorrectionState,
    corrected_hyperparams,
    lr_sum_correction,
    lr_sum_ratio,
)
from autoloco_jax.outer.momentum import (
    MOMENTUM_SHAPES,
    ON_CHANGE,
    buffer_scale,
    momentum_schedule,
    nesterov_momentum,
)
from autoloco_jax.outer.reference import (
    REFERENCES,
    peak_reference_lr_sum,
    reference_lr_sum,
)
