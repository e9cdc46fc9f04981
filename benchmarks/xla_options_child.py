"""The child of ``benchmarks/xla_options.py``: one variant's process.

It builds the throughput benchmark's reference step with the variant's model
setting (its XLA flags and environment were set by the parent before JAX
started), trains the probe, then serves the parent over
``benchmarks/unit_server.py``: units of the step, timed by the parent between
units of the default's child, and ``curve`` calls (the bf16 loss check).
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from autoloco_jax.data import corpus as data_lib
from autoloco_jax.model import transformer as model_lib
from benchmarks import unit_server
from benchmarks.throughput.peak import machine
from benchmarks.throughput.workload import (
    Workload,
    algorithm_config,
    build_model,
    make_workload,
    synthetic_data,
)
from benchmarks.throughput.runners import ReferenceRunner
from benchmarks.throughput.timing import warm_up


@dataclasses.dataclass(frozen=True)
class Variant:
  """One way to run the same training step."""

  name: str
  note: str
  xla_flags: tuple = ()  # added to the default's XLA_FLAGS
  env: tuple = ()  # (NAME, value) environment variables
  devices: int = 1  # > 1: the global batch split data-parallel over simulated devices
  dtype: str = ""  # model.dtype ('' = the config's, float32)
  attention: str = ""  # '' = transformer.py's own path; a key of ATTENTION


def library_attention(q_BxHxLxK, k_BxHxLxK, v_BxHxLxK):
  """``transformer.py``'s non-CPU path: ``jax.nn.dot_product_attention`` on
  ``[B, L, H, K]`` views of the heads-major inputs."""
  to_blhk = lambda t: t.transpose(0, 2, 1, 3)
  o_BxLxHxK = jax.nn.dot_product_attention(
      to_blhk(q_BxHxLxK), to_blhk(k_BxHxLxK), to_blhk(v_BxHxLxK), is_causal=True
  )
  return to_blhk(o_BxLxHxK)


#: Replacements of ``model.causal_attention``, patched in the child only.
ATTENTION = {
    "library": library_attention,
    "blocked": model_lib.blocked_causal_attention,
}


def variant_workload(quick: bool) -> Workload:
  return make_workload(
      quick=quick,
      num_workers=4,
      h=0,
      repeats=0,
      sweep_repeats=0,
      scale_workers=[],
      scale_widths=[],
      scale_steps=1,
  )


def step_config(workload: Workload, variant: Variant):
  """The reference row's config (the ``diloco`` config at the plan's size, as
  ``measure.measure_rows`` builds it) with the variant's model dtype."""
  config = algorithm_config(workload, "diloco")
  if variant.dtype:
    config.model.dtype = variant.dtype
  return config


def reference(config, steps: int, devices: int = 1, data=None) -> ReferenceRunner:
  """The reference row of the throughput benchmark for ``config``, in rounds of
  at most ``steps`` steps, on ``data`` (default: its synthetic bytes), on
  ``devices`` devices."""
  data = data or synthetic_data(config)
  runner = ReferenceRunner(config, build_model(config), data, devices)
  runner.h = min(runner.h, steps)
  return runner


def probe(runner: ReferenceRunner, steps: int, path: str) -> dict:
  """The warm-up (it compiles): ``steps`` steps from the initialisation; saves
  the parameters reached to ``path`` (``.npz``, leaves in tree order)."""
  warm_up(runner)  # one step, compile seconds recorded
  if steps > 1:
    runner.round(steps - 1)
  leaves = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(runner.carry.params))]
  np.savez(path, *leaves)
  return dict(
      params=path,
      loss_sum=float(runner.carry.loss_sum),
      compile_seconds=runner.compile_seconds,
  )


def loss_curve(workload: Workload, variant: Variant, steps: int, points: int) -> dict:
  """``steps`` steps of the reference on the embedded Shakespeare data (the
  schedule over ``steps``), evaluated ``points`` times on ``config.eval``'s
  validation batches (and at step 0)."""
  config = step_config(workload, variant)
  config.total_steps = steps
  config.inner.warmup_steps = max(steps // 20, 1)
  data = data_lib.build(config.data, config.num_workers, config.seed)
  every = max(steps // max(points, 1), 1)
  runner = reference(config, every, data=data)
  model = build_model(config)
  eval_NxBxL1 = data.eval_batches(config.eval.batch_size, config.eval.num_batches)

  @jax.jit
  def evaluate(params, tokens_NxBxL1):
    return jnp.mean(lax.map(functools.partial(model.loss_fn, params), tokens_NxBxL1))

  curve = [dict(step=0, eval_loss=float(evaluate(runner.carry.params, eval_NxBxL1)))]
  done, loss_sum, t0 = 0, 0.0, time.perf_counter()
  while done < steps:
    h = min(every, steps - done)
    runner.round(h)
    done += h
    train_loss = (float(runner.carry.loss_sum) - loss_sum) / h
    loss_sum = float(runner.carry.loss_sum)
    eval_loss = float(evaluate(runner.carry.params, eval_NxBxL1))
    curve.append(dict(step=done, train_loss=train_loss, eval_loss=eval_loss))
  return dict(
      dtype=config.model.dtype,
      steps=steps,
      curve=curve,
      final_eval_loss=curve[-1]["eval_loss"],
      seconds=time.perf_counter() - t0,
  )


def serve(spec: dict) -> None:
  """Serves the parent (``benchmarks/unit_server.py``): ``ready`` after the
  probe, then units of the reference step and ``curve`` calls."""
  out = unit_server.channel()
  fields = spec["variant"]
  variant = Variant(
      **dict(
          fields,
          xla_flags=tuple(fields["xla_flags"]),
          env=tuple(tuple(pair) for pair in fields["env"]),
      )
  )
  if variant.attention:
    model_lib.causal_attention = ATTENTION[variant.attention]
  workload, steps = variant_workload(spec["quick"]), spec["steps"]
  t0 = time.perf_counter()
  runner = reference(step_config(workload, variant), steps, variant.devices)
  result = probe(runner, steps, spec["params_path"])
  ready = dict(
      setup_seconds=time.perf_counter() - t0,
      tokens_per_step=runner.tokens_per_step,
      flops_per_token=runner.flops_per_token,
      devices=len(runner.mesh.devices.flat),
      machine=machine(),
      **result,
  )
  curve = lambda steps, points: loss_curve(workload, variant, steps, points)
  unit_server.serve({"step": runner.unit}, ready, out, calls={"curve": curve})
