"""PLoRA cost models: the memory and the time of a packed group.

A group's per-device memory is (:class:`MemoryModel`)

.. math::

  M = M_{base} + \\lceil n / D \\rceil \\, m(R, T), \\qquad
  m(R, T) = 4 b \\, p(R, T) + b \\, B L \\, (\\text{base activations} + R |T|)

with ``p(R, T) = R Σ_{t∈T} (d_in + d_out)`` padded adapter parameters (counted
four times: parameters, gradients, two Adam moments) and ``b`` bytes per value.
Its time is ``steps · t_step + t_compile`` with ``t_step(s, p)`` measured at a
few slot counts and interpolated (:class:`CostModel`, :func:`measure_cost_model`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Sequence

import jax
import numpy as np

from autoloco_jax.model import transformer as model_lib
from autoloco_jax.runtime import replicas
from projects.plora import lora
from projects.plora.jobs import LoraConfig
from projects.plora.packed import make_group, place_base

# ----------------------------------------------------------------------------
# Memory and cost models.


@dataclasses.dataclass(frozen=True)
class MemoryModel:
  """Bytes one device needs for a group (see the module docstring).

  Attributes:
    base_params: parameter count of the frozen base.
    layer_dims: ``{layer name: ((d_in, d_out), ...)}`` for each LoRA-targetable
      layer name, one entry per block (``lora.dense_layers``).
    batch_size, seq_len: ``B`` and ``L`` of every job.
    d_model, mlp_dim, num_heads, num_layers, vocab_size: the base's shape.
    bytes_per_value: 4 for float32.
    act_d, act_f, act_v: activations kept for the backward pass per token,
      in units of ``d_model`` per layer, ``mlp_dim`` per layer and ``vocab``
      (norm inputs and outputs, q/k/v, rotated q/k, attention output,
      projections, residuals: about 10 D; MLP pre- and post-GELU: 2 F; logits
      and softmax: 2 V), plus ``num_heads x L`` attention probabilities per
      layer.
    act_scale: multiplies the activation term; 1 is the analytic count above,
      :meth:`fit_activations` sets it from XLA's memory analysis of compiled
      groups (XLA:CPU keeps more temporaries than the count).
    extra_bytes: per-device bytes besides the base and the slots (staged
      tokens, XLA workspace); also fitted by :meth:`fit_activations`.
    overhead: multiplies the total (allocator slack).
  """

  base_params: int
  layer_dims: Mapping[str, tuple]
  batch_size: int
  seq_len: int
  d_model: int
  mlp_dim: int
  num_heads: int
  num_layers: int
  vocab_size: int
  bytes_per_value: int = 4
  act_d: float = 10.0
  act_f: float = 2.0
  act_v: float = 2.0
  act_scale: float = 1.0
  extra_bytes: float = 0.0
  overhead: float = 1.0

  @classmethod
  def for_model(
      cls, base_params: Any, model_cfg: Any, batch_size: int, seq_len: int, **kw
  ) -> "MemoryModel":
    """Builds the model from base params (arrays or ``jax.eval_shape`` structs)."""
    cfg = model_lib.ModelConfig.from_cfg(model_cfg)
    dims: dict[str, list] = {}
    for path, d in lora.dense_layers(base_params, lora.LAYERS).items():
      dims.setdefault(path.rsplit("/", 1)[-1], []).append(d)
    return cls(
        model_lib.param_count(base_params),
        {k: tuple(v) for k, v in dims.items()},
        batch_size,
        seq_len,
        cfg.d_model,
        cfg.mlp_dim,
        cfg.num_heads,
        cfg.num_layers,
        cfg.vocab_size,
        **kw,
    )

  def adapter_params(self, rank: int, targets: Iterable[str]) -> int:
    """``p(R, T) = R Σ_{layers of T} (d_in + d_out)``."""
    return rank * sum(
        i + o
        for t in lora.resolve_targets(targets)
        for i, o in self.layer_dims.get(t, ())
    )

  def base_bytes(self) -> float:
    """The frozen base weights, one copy per device."""
    return self.overhead * self.bytes_per_value * self.base_params

  def slot_bytes(self, rank: int, targets: Iterable[str]) -> float:
    """One adapter slot of a group of rank ``R`` and layers ``T``."""
    targets = lora.resolve_targets(targets)
    p = self.adapter_params(rank, targets)
    num_adapted = sum(len(self.layer_dims.get(t, ())) for t in targets)
    per_token = (
        self.num_layers
        * (
            self.act_d * self.d_model
            + self.act_f * self.mlp_dim
            + self.num_heads * self.seq_len
        )
        + self.act_v * self.vocab_size
        + rank * num_adapted
    )
    activations = self.act_scale * self.batch_size * self.seq_len * per_token
    values = 4 * p + rank * num_adapted + activations
    return self.overhead * self.bytes_per_value * values

  def group_bytes(
      self, slots_per_device: int, rank: int, targets: Iterable[str]
  ) -> float:
    return (
        self.base_bytes()
        + self.overhead * self.extra_bytes
        + slots_per_device * self.slot_bytes(rank, targets)
    )

  def fit_activations(self, measurements: Sequence[Mapping[str, Any]]) -> "MemoryModel":
    """This model fitted to XLA's memory analysis of compiled groups.

    ``measurements`` are :func:`time_groups` results of one rank and targets
    with different slot counts. XLA's bytes per device (arguments +
    temporaries) at the fewest and the most slots fix a line: its slope sets
    ``act_scale`` (the slot term matches the per-slot bytes), its intercept
    ``extra_bytes`` (at least 0). Returns ``self`` unchanged when fewer than
    two usable measurements.
    """
    rows = [m for m in measurements if "xla_temp_bytes" in m]
    rows = sorted(rows, key=lambda m: m["slots"])
    if len(rows) < 2 or rows[0]["slots"] == rows[-1]["slots"]:
      return self
    lo, hi = rows[0], rows[-1]
    if (lo["rank"], lo["targets"]) != (hi["rank"], hi["targets"]):
      raise ValueError("fit_activations needs measurements of one rank and targets")
    total = lambda m: m["xla_argument_bytes"] + m["xla_temp_bytes"]
    per_slot = (total(hi) - total(lo)) / (hi["slots"] - lo["slots"])
    unit = dataclasses.replace(self, act_scale=1.0, overhead=1.0)
    no_act = dataclasses.replace(unit, act_scale=0.0).slot_bytes(
        lo["rank"], lo["targets"]
    )
    act = unit.slot_bytes(lo["rank"], lo["targets"]) - no_act
    fitted = dataclasses.replace(
        self, act_scale=max((per_slot - no_act) / act, 0.0), extra_bytes=0.0, overhead=1.0
    )
    extra = total(lo) - fitted.group_bytes(lo["slots"], lo["rank"], lo["targets"])
    return dataclasses.replace(
        fitted, extra_bytes=max(extra, 0.0), overhead=self.overhead
    )


class CostModel(NamedTuple):
  """Measured seconds of a group: ``compile_s + steps * step_seconds(s, p)``.

  .. math::

    t_{step}(s, p) = \\mathrm{interp}_s(s) + s \\, c_p \\, (p - p_{ref})

  ``s`` is adapter slots per device and ``p`` a slot's padded adapter
  parameters (:meth:`MemoryModel.adapter_params`). The step time at the
  reference size ``p_ref`` is tabulated at measured slot counts and
  interpolated linearly between them (extrapolated from the last two beyond
  them): on a CPU the cost per slot is not constant in ``s`` (cache effects),
  so a single slope would misplace the best group size. Fit by
  :func:`measure_cost_model`; :meth:`linear` builds a simple one.

  Attributes:
    slots: measured slot counts, ascending.
    step_s: seconds per step at those slot counts, at ``ref_params``.
    ref_params: padded adapter parameters per slot of those measurements.
    per_param_s: ``c_p``, seconds per step per slot per extra parameter.
    compile_s: seconds to compile one group's program.
  """

  slots: tuple
  step_s: tuple
  ref_params: int
  per_param_s: float
  compile_s: float = 0.0

  @classmethod
  def linear(
      cls, fixed_s: float, per_slot_s: float, per_param_s: float, compile_s: float = 0.0
  ) -> "CostModel":
    """``t_step = fixed_s + s (per_slot_s + per_param_s p)``."""
    return cls(
        (1, 2),
        (fixed_s + per_slot_s, fixed_s + 2 * per_slot_s),
        0,
        per_param_s,
        compile_s,
    )

  def step_seconds(self, slots_per_device: int, params_per_slot: int) -> float:
    xs, ys, s = self.slots, self.step_s, slots_per_device
    if len(xs) == 1:
      base = ys[0] * s / xs[0]
    elif s <= xs[-1]:
      base = float(np.interp(s, xs, ys)) if s >= xs[0] else ys[0] * s / xs[0]
    else:
      base = ys[-1] + (s - xs[-1]) * (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return base + s * self.per_param_s * (params_per_slot - self.ref_params)

  def group_seconds(
      self, steps: int, slots_per_device: int, params_per_slot: int
  ) -> float:
    return self.compile_s + steps * self.step_seconds(slots_per_device, params_per_slot)


def time_groups(
    apply: Callable,
    base_params: Any,
    groups: Sequence[tuple[Sequence[LoraConfig], str]],
    *,
    opt_cfg: Any,
    batch_size: int,
    seq_len: int,
    steps: int = 5,
    rounds: int = 3,
    min_seconds: float = 0.2,
    vocab_size: int = 256,
) -> list[dict]:
  """Compile seconds and steady-state seconds per step of groups, on random tokens.

  ``groups`` are ``(configs, mode)`` pairs, each run on one device. All are
  compiled first, then timed round-robin for ``rounds`` rounds, each call
  lasting at least ``min_seconds``; a group's time is its fastest call. On a
  shared machine this keeps the comparison fair when the load drifts, and the
  minimum is the least disturbed measurement. Each result also holds the
  process CPU seconds per step of that call and XLA's memory analysis where
  the backend gives one (``xla_argument_bytes``, ``xla_temp_bytes``, ...).
  """
  rng = np.random.default_rng(0)
  entries = []
  for configs, mode in groups:
    mesh = replicas.make_mesh(len(configs), 1)
    group = make_group(apply, base_params, configs, opt_cfg, steps, mesh, mode=mode)
    base = place_base(base_params, mesh)
    tokens = replicas.put_workers(
        rng.integers(
            0, vocab_size, (group.num_slots, steps, batch_size, seq_len + 1)
        ).astype(np.int32),
        mesh,
    )
    state = group.init_state()
    t = time.perf_counter()
    compiled = group.train.lower(state, base, tokens, np.int32(steps)).compile()
    compile_s = time.perf_counter() - t
    state = jax.block_until_ready(compiled(state, base, tokens, np.int32(1)))
    out = {
        "slots": group.num_slots,
        "rank": group.rank,
        "targets": list(group.targets),
        "mode": mode,
        "compile_s": compile_s,
        "step_s": math.inf,
    }
    try:
      mem = compiled.memory_analysis()
      out.update(
          xla_argument_bytes=int(mem.argument_size_in_bytes),
          xla_output_bytes=int(mem.output_size_in_bytes),
          xla_temp_bytes=int(mem.temp_size_in_bytes),
      )
    except Exception:  # not every backend reports it
      pass
    entries.append(
        dict(
            compiled=compiled, state=state, base=base, tokens=tokens, calls=None, out=out
        )
    )

  def call(e, k):
    w, c = time.perf_counter(), time.process_time()
    for _ in range(k):
      e["state"] = e["compiled"](e["state"], e["base"], e["tokens"], np.int32(steps))
    jax.block_until_ready(e["state"])
    return (time.perf_counter() - w) / (k * steps), (time.process_time() - c) / (
        k * steps
    )

  for e in entries:  # size each call from a first one
    e["calls"] = max(1, math.ceil(min_seconds / (call(e, 1)[0] * steps)))
  for _ in range(rounds):
    for e in entries:
      wall, cpu = call(e, e["calls"])
      if wall < e["out"]["step_s"]:
        e["out"].update(step_s=wall, cpu_step_s=cpu)
  return [e["out"] for e in entries]


def time_group_step(
    apply: Callable,
    base_params: Any,
    configs: Sequence[LoraConfig],
    *,
    mode: str = "factored",
    **kwargs,
) -> dict:
  """:func:`time_groups` of one group."""
  return time_groups(apply, base_params, [(configs, mode)], **kwargs)[0]


def measure_cost_model(
    apply: Callable,
    base_params: Any,
    memory: MemoryModel,
    *,
    opt_cfg: Any,
    ranks: tuple[int, int],
    slots: int,
    targets: Iterable[str] = ("all",),
    steps: int = 5,
    rounds: int = 3,
    vocab_size: int = 256,
) -> tuple[CostModel, list]:
  """Fits :class:`CostModel` on one device from timed groups.

  Times groups of ``1, 2, 4, ..., slots`` slots at rank ``lo`` (the step-time
  table) and one of ``slots`` slots at rank ``hi`` (the parameter slope
  ``c_p = (t(slots, hi) - t(slots, lo)) / (slots (p_hi - p_lo))``, clamped at 0:
  timing noise can make a tiny slope negative). ``compile_s`` is the mean
  compile time. Returns ``(cost_model, measurements)``, the measurements in
  that order (the rank-``hi`` one last).
  """
  lo, hi = ranks
  if slots < 1 or hi <= lo:
    raise ValueError(f"need slots >= 1 and ranks lo < hi, got {slots}, {ranks}")
  targets = lora.resolve_targets(targets)
  counts = sorted({min(2**i, slots) for i in range(int(math.log2(slots)) + 2)})
  mk = lambda n, r: [
      LoraConfig(f"cal{i}", r, float(r), 1e-3, targets, i) for i in range(n)
  ]
  runs = time_groups(
      apply,
      base_params,
      [(mk(n, lo), "factored") for n in counts] + [(mk(slots, hi), "factored")],
      opt_cfg=opt_cfg,
      batch_size=memory.batch_size,
      seq_len=memory.seq_len,
      steps=steps,
      rounds=rounds,
      vocab_size=vocab_size,
  )
  p_lo, p_hi = memory.adapter_params(lo, targets), memory.adapter_params(hi, targets)
  per_param = max(
      (runs[-1]["step_s"] - runs[-2]["step_s"]) / (slots * (p_hi - p_lo)), 0.0
  )
  compile_s = float(np.mean([r["compile_s"] for r in runs]))
  cost = CostModel(
      tuple(counts), tuple(r["step_s"] for r in runs[:-1]), p_lo, per_param, compile_s
  )
  return cost, runs
