"""PLoRA: many LoRA fine-tuning jobs trained concurrently on one frozen base model.

A LoRA hyperparameter sweep (rank, alpha, learning rate, target layers, seed)
is usually run one job after another, each job too small to keep the hardware
busy. PLoRA (Yan et al. 2025) packs several jobs into one program on a shared,
frozen base model and plans the packing under a memory budget.

Modules, each with its own part of the story:

* :mod:`lora`: LoRA adapters on a frozen Flax model as pure functions
  (init, padding to a group rank and layers, the factored forward, merge).
* :mod:`jobs`: a job's config (:class:`LoraConfig`) and the per-adapter
  optimizer (:func:`adapter_optimizer`).
* :mod:`packed`: a group of jobs as one jitted program over a leading adapter
  axis (:func:`make_group`), trained through the project's round driver
  (:func:`run_group`), and evaluation.
* :mod:`costs`: the memory (:class:`MemoryModel`) and time
  (:class:`CostModel`, :func:`measure_cost_model`) of a group.
* :mod:`planner`: the packing that fits the budget with the least makespan
  (:func:`plan`; :func:`fixed_plan`, :func:`sequential_plan` for baselines)
  and its run, group after group (:func:`run_plan`).

Use as ``from projects import plora`` and ``plora.plan(...)``,
``plora.run_plan(...)``; the adapters are ``plora.lora``. The experiment that
compares a packed sweep with one job after another is :mod:`projects.plora.sweep`
(its config ``projects/plora/config.py``, its tables :mod:`projects.plora.report`).

References:
  Yan et al., PLoRA: Efficient LoRA Hyperparameter Tuning for Large Models,
  2025. https://arxiv.org/abs/2508.02932
  Hu et al., LoRA, 2021. https://arxiv.org/abs/2106.09685
"""

# ``replicas`` is re-exported: callers build a group's mesh as ``plora.replicas.make_mesh``.
from autoloco_jax.runtime import replicas
from projects.plora import costs, jobs, lora, packed, planner
from projects.plora.costs import (
    CostModel,
    MemoryModel,
    measure_cost_model,
    time_group_step,
    time_groups,
)
from projects.plora.jobs import (
    OPT_FIELDS,
    LoraConfig,
    _check_configs,
    adapter_optimizer,
    union_targets,
)
from projects.plora.packed import (
    Group,
    GroupResult,
    GroupState,
    _programs,
    evaluate_adapters,
    make_group,
    place_base,
    run_group,
)
from projects.plora.planner import (
    MIXED_RANKS,
    Plan,
    PlannedGroup,
    SweepResult,
    _group_estimate,
    fixed_plan,
    plan,
    run_plan,
    sequential_plan,
)

__all__ = [
    "CostModel",
    "Group",
    "GroupResult",
    "GroupState",
    "LoraConfig",
    "MIXED_RANKS",
    "MemoryModel",
    "OPT_FIELDS",
    "Plan",
    "PlannedGroup",
    "SweepResult",
    "adapter_optimizer",
    "evaluate_adapters",
    "fixed_plan",
    "lora",
    "make_group",
    "measure_cost_model",
    "place_base",
    "plan",
    "run_group",
    "run_plan",
    "sequential_plan",
    "time_group_step",
    "time_groups",
    "union_targets",
]
