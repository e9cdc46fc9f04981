"""PLoRA planner: packing a sweep's jobs into groups under a memory budget, and
running the groups one after another (:func:`run_plan`).

Groups run one after another, each on the whole mesh (``ceil(n / D)`` adapter
slots per device, idle slots filled with inert, fully masked adapters), with
the memory and time of :mod:`costs`. Since groups run back to back, the
makespan is the sum of group times and the order of the groups does not
change it: planning is choosing the partition. :func:`plan` sorts configs by
(rank desc, targets) and finds, by dynamic programming over cut points, the
partition into contiguous runs of that order with the least total time among
those whose every group fits the budget. It is exact over contiguous
partitions (O(N^2) candidate groups), which contain the optimum when all
configs share their targets: for a fixed list of group sizes, giving the
largest ranks to the same groups minimises the padding. With
``mixed_ranks='group'`` only equal-rank groups are allowed (no padding).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from projects.plora.costs import CostModel, MemoryModel
from projects.plora.jobs import LoraConfig, _check_configs, union_targets
from projects.plora.packed import GroupResult, run_group

MIXED_RANKS = ("pad", "group")
_MIB = 2.0**20

# ----------------------------------------------------------------------------
# Planner.


class PlannedGroup(NamedTuple):
  """One group of a plan: its jobs, padded shape, memory per device and time."""

  configs: tuple[LoraConfig, ...]
  rank: int
  targets: tuple[str, ...]
  slots_per_device: int
  memory_bytes: float
  step_s: float
  time_s: float


class Plan(NamedTuple):
  """Groups to run one after another, with estimates.

  Attributes:
    groups: the groups, longest first.
    makespan_s: estimated time of the whole sweep (sum of group times).
    sequential_s: estimated time of running every job alone, one after another.
    budget_bytes, num_devices, steps: the planning inputs.
  """

  groups: tuple[PlannedGroup, ...]
  makespan_s: float
  sequential_s: float
  budget_bytes: float
  num_devices: int
  steps: int

  def describe(self) -> str:
    """The plan as a printable table."""
    n = sum(len(g.configs) for g in self.groups)
    lines = [
        f"PLoRA plan: {n} configs in {len(self.groups)} group(s) on "
        f"{self.num_devices} device(s), {self.steps} steps, budget "
        f"{self.budget_bytes / _MIB:.1f} MiB/device",
        f"{'group':>5}  {'rank':>4}  {'slots/dev':>9}  {'memory/dev':>11}  "
        f"{'step':>8}  {'time':>8}  targets / configs",
    ]
    for i, g in enumerate(self.groups):
      lines.append(
          f"{i + 1:>5}  {g.rank:>4}  {g.slots_per_device:>9}  "
          f"{g.memory_bytes / _MIB:>7.1f} MiB  {g.step_s * 1e3:>6.1f}ms  "
          f"{g.time_s:>7.1f}s  {'+'.join(g.targets)}: "
          + ", ".join(c.name for c in g.configs)
      )
    ratio = self.sequential_s / self.makespan_s if self.makespan_s else float("nan")
    lines.append(
        f"estimated makespan {self.makespan_s:.1f}s; one after another "
        f"{self.sequential_s:.1f}s ({ratio:.2f}x)"
    )
    return "\n".join(lines)


def _group_estimate(
    configs, memory: MemoryModel, cost: CostModel, steps: int, num_devices: int
) -> PlannedGroup:
  rank = max(c.rank for c in configs)
  targets = union_targets(configs)
  slots = -(-len(configs) // num_devices)
  p = memory.adapter_params(rank, targets)
  step_s = cost.step_seconds(slots, p)
  return PlannedGroup(
      tuple(configs),
      rank,
      targets,
      slots,
      memory.group_bytes(slots, rank, targets),
      step_s,
      cost.group_seconds(steps, slots, p),
  )


def plan(
    configs: Sequence[LoraConfig],
    memory: MemoryModel,
    cost: CostModel,
    *,
    budget_bytes: float,
    steps: int,
    num_devices: int = 1,
    mixed_ranks: str = "pad",
) -> Plan:
  """Packs ``configs`` into groups that fit ``budget_bytes`` per device, least makespan.

  Args:
    configs: the jobs (unique names).
    memory: per-device memory model.
    cost: measured time model.
    budget_bytes: memory budget of one device.
    steps: training steps of every job.
    num_devices: devices each group's adapter axis is split over.
    mixed_ranks: ``'pad'`` (a group may mix ranks, padded to its largest) or
      ``'group'`` (only equal ranks share a group).

  Raises:
    ValueError: bad arguments, or a config that does not fit on a device even
      alone (the message names it and its memory).
  """
  configs = _check_configs(configs)
  if mixed_ranks not in MIXED_RANKS:
    raise ValueError(f"unknown mixed_ranks {mixed_ranks!r}; choose from {MIXED_RANKS}")
  if num_devices < 1 or steps < 1 or not budget_bytes > 0:
    raise ValueError(
        "num_devices and steps must be >= 1 and budget_bytes > 0, got "
        f"{num_devices}, {steps}, {budget_bytes}"
    )
  for c in configs:
    need = memory.group_bytes(1, c.rank, c.targets)
    if need > budget_bytes:
      raise ValueError(
          f"LoRA config {c.name!r} (rank {c.rank}, targets {'+'.join(c.targets)}) "
          f"cannot fit on any device: alone it needs {need / _MIB:.1f} MiB "
          f"(base {memory.base_bytes() / _MIB:.1f} MiB + adapter "
          f"{memory.slot_bytes(c.rank, c.targets) / _MIB:.1f} MiB), budget "
          f"{budget_bytes / _MIB:.1f} MiB per device"
      )

  order = sorted(configs, key=lambda c: (-c.rank, c.targets, c.name))
  n = len(order)
  # best[i]: least total time of the first i configs; cut[i]: start of the last group.
  best = [0.0] + [math.inf] * n
  cut = [0] * (n + 1)
  for i in range(1, n + 1):
    for j in range(i - 1, -1, -1):
      seg = order[j:i]
      if mixed_ranks == "group" and seg[0].rank != seg[-1].rank:
        break  # sorted by rank: extending further left only adds other ranks
      g = _group_estimate(seg, memory, cost, steps, num_devices)
      if g.memory_bytes > budget_bytes:
        # Extending left only adds slots, larger ranks and more targets.
        break
      total = best[j] + g.time_s
      # Ties go to fewer groups (larger j was tried first, so '<' keeps it).
      if total < best[i] - 1e-12:
        best[i], cut[i] = total, j
  groups, i = [], n
  while i > 0:
    groups.append(_group_estimate(order[cut[i] : i], memory, cost, steps, num_devices))
    i = cut[i]
  groups.sort(key=lambda g: -g.time_s)
  sequential = sum(
      cost.group_seconds(steps, 1, memory.adapter_params(c.rank, c.targets))
      for c in configs
  )
  return Plan(
      tuple(groups),
      float(sum(g.time_s for g in groups)),
      float(sequential),
      float(budget_bytes),
      num_devices,
      steps,
  )


def fixed_plan(
    groups: Sequence[Sequence[LoraConfig]],
    memory: MemoryModel,
    cost: CostModel,
    *,
    steps: int,
    num_devices: int = 1,
    budget_bytes: float = math.inf,
) -> Plan:
  """A plan of the given groups, in the given order, with the models' estimates."""
  planned = tuple(
      _group_estimate(_check_configs(g), memory, cost, steps, num_devices) for g in groups
  )
  _check_configs([c for g in planned for c in g.configs])
  sequential = sum(
      cost.group_seconds(steps, 1, memory.adapter_params(c.rank, c.targets))
      for g in planned
      for c in g.configs
  )
  return Plan(
      planned,
      float(sum(g.time_s for g in planned)),
      float(sequential),
      float(budget_bytes),
      num_devices,
      steps,
  )


def sequential_plan(
    configs: Sequence[LoraConfig], memory: MemoryModel, cost: CostModel, *, steps: int
) -> Plan:
  """The baseline: every job alone on one device, one after another, in order."""
  return fixed_plan([[c] for c in _check_configs(configs)], memory, cost, steps=steps)


# ----------------------------------------------------------------------------
# Running a plan.


class SweepResult(NamedTuple):
  """A whole plan's results: ``total`` joins the groups' (dicts merged, times
  and tokens summed); ``groups`` holds each group's own, in plan order."""

  total: GroupResult
  groups: list


def _join(results: Sequence[GroupResult]) -> GroupResult:
  """One :class:`GroupResult` for many: per-config dicts merged, numbers summed."""

  def join(*values):
    if isinstance(values[0], dict):
      return {k: v for d in values for k, v in d.items()}
    return sum(values)

  return GroupResult(*(join(*field) for field in zip(*results)))


def run_plan(
    plan: Plan, apply: Callable, base_params: Any, streams: Mapping[str, Any], **kwargs
) -> SweepResult:
  """Runs the plan's groups one after another (kwargs as :func:`run_group`)."""
  results = []
  for g in plan.groups:
    results.append(
        run_group(
            apply,
            base_params,
            g.configs,
            streams,
            rank=g.rank,
            targets=g.targets,
            num_devices=plan.num_devices,
            **kwargs,
        )
    )
  return SweepResult(_join(results), results)
