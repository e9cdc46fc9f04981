"""Compiles a config's round functions ahead of time from abstract shapes.

  python -m benchmarks.aot --config configs/autoloco.py:gpu
  XLA_FLAGS=--xla_force_host_platform_device_count=64 python -m benchmarks.aot \
      --config configs/diloco.py:1b --config.num_workers=4 --config.num_devices=64 \
      --config.mesh.fsdp=16 --out docs/mesh/aot_1b.json      # about 3 minutes
  python -m benchmarks.aot --table docs/mesh/aot_1b.json    # docs/mesh.md's table

Nothing is allocated and no data is read: the parameters, the run state and a
chunk of tokens are `jax.ShapeDtypeStruct`s with the shardings the trainer
would give them (``config.mesh``'s model axes included: a worker's arrays split
over ``fsdp`` devices), and `jit(...).lower(...).compile()` runs XLA on them; a
CPU machine with as many simulated devices as a pod slice compiles the slice's
program. A shape or sharding error in a config (the `gpu` size, say)
therefore fails here, on a CPU machine, not on a rented accelerator. Reports, per device, XLA's memory
analysis (arguments, outputs, temporaries) and the FLOPs of one inner step.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from jax.sharding import NamedSharding
from ml_collections import config_flags

from autoloco_jax.data import corpus
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.run import assembly
from autoloco_jax.runtime import replicas, rounds


def memory_analysis(compiled) -> dict:
  """XLA's memory analysis of a compiled program, per device, in bytes."""
  m = compiled.memory_analysis()
  return dict(
      argument_bytes=m.argument_size_in_bytes,
      output_bytes=m.output_size_in_bytes,
      temp_bytes=m.temp_size_in_bytes,
      alias_bytes=m.alias_size_in_bytes,
  )


def _flops(compiled) -> float:
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost.get("flops", float("nan"))) if cost else float("nan")


def saved_activation_bytes(config: Any, vocab_size: int = corpus.VOCAB_SIZE) -> dict:
  """Bytes one device keeps from the forward pass for the backward pass of one
  inner step: the residuals of the gradient of K vmapped workers' losses (K =
  ``config.num_workers`` on one device), the arguments themselves not counted.
  Returns ``bytes`` and ``score_bytes``, the share in [..., L, L] arrays (the
  attention scores and their mask, which a fused attention kernel never keeps).

  This is what ``model.remat`` changes; XLA:CPU's ``temp_bytes`` does not show
  it, as its scheduler runs the recomputation early and keeps both (measured:
  docs/device.md). Read off JAX's jaxpr (``saved_residuals``), so it holds for
  any backend whose compiler keeps the residuals that JAX asks it to.
  """
  from jax._src.ad_checkpoint import saved_residuals  # public: print_saved_residuals

  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = vocab_size
    model_cfg.seq_len = config.data.seq_len
  init, apply = model_lib.make(model_cfg)
  k, b, l = config.num_workers, config.data.batch_size, config.data.seq_len
  params = jax.eval_shape(init, jax.random.key(0))
  params_K = jax.tree.map(lambda x: jax.ShapeDtypeStruct((k, *x.shape), x.dtype), params)
  tokens_KxBxL1 = jax.ShapeDtypeStruct((k, b, l + 1), corpus.token_dtype(vocab_size))
  loss_K = jax.vmap(functools.partial(model_lib.loss_fn, apply))
  residuals = saved_residuals(lambda p, t: loss_K(p, t).sum(), params_K, tokens_KxBxL1)
  kept = [
      aval for aval, source in residuals if not source.startswith("from the argument")
  ]
  size = lambda aval: int(np.prod(aval.shape)) * aval.dtype.itemsize
  return dict(
      bytes=sum(map(size, kept)),
      score_bytes=sum(size(a) for a in kept if tuple(a.shape[-2:]) == (l, l)),
  )


def compile_config(config: Any, vocab_size: int = corpus.VOCAB_SIZE) -> dict:
  """Lowers and compiles ``config``'s inner loop and sync on abstract inputs,
  on the run's ``replica × fsdp × tensor`` mesh (``config.mesh``).

  Returns the mesh, parameter count, the run state's bytes in all and on one
  device (its shards: ``assembly.state_bytes_per_device``), each program's
  memory analysis, the compile times and the inner loop's FLOPs for one step.
  """
  mesh = assembly.make_mesh(config)
  built = assembly.build(config, mesh, vocab_size)
  state = assembly.abstract_state(config, built)
  algo = built.algo
  chunk = rounds.chunk_size(config.chunk_steps, algo.max_round_steps)
  k, b, l = config.num_workers, config.data.batch_size, config.data.seq_len
  dtype = corpus.token_dtype(vocab_size)
  tokens = jax.ShapeDtypeStruct(
      (k, chunk, b, l + 1), dtype, sharding=NamedSharding(mesh, replicas.tokens_spec(mesh))
  )
  present = jax.ShapeDtypeStruct(
      (k,), jnp.float32, sharding=NamedSharding(mesh, replicas.WORKERS)
  )
  t0 = time.perf_counter()
  inner = algo.inner.lower(state, tokens, np.int32(1)).compile()
  t1 = time.perf_counter()
  sync = algo.sync.lower(state, present).compile()
  t2 = time.perf_counter()
  num_params = model_lib.param_count(jax.eval_shape(built.init, jax.random.key(0)))
  state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
  # What one device keeps for the backward pass: its row's K / R workers'
  # activations, their batch split over fsdp.
  row = config.copy_and_resolve_references()
  row.num_workers = k // replicas.replica_rows(mesh)
  kept = saved_activation_bytes(row, vocab_size)["bytes"] // mesh.shape.get(replicas.FSDP, 1)
  return dict(
      algorithm=algo.name,
      num_workers=k,
      devices=int(mesh.devices.size),
      mesh={axis: mesh.shape.get(axis, 1) for axis in replicas.AXES},
      num_params=num_params,
      chunk=chunk,
      tokens_per_step=k * b * l,
      state_bytes_total=int(state_bytes),
      state_bytes_per_device=assembly.state_bytes_per_device(state),
      activations_kept_bytes_per_device=int(kept),
      compile_seconds=dict(inner=round(t1 - t0, 2), sync=round(t2 - t1, 2)),
      # XLA counts a while loop's body once: the inner loop's FLOPs are one step's.
      inner=dict(memory_analysis(inner), flops_per_step=_flops(inner)),
      sync=dict(memory_analysis(sync), flops=_flops(sync)),
      model_flops_per_step=model_lib.flops_per_token(built.model_cfg, num_params) * k * b * l,
  )


def table(results: list[dict]) -> str:
  """The markdown table of ``compile_config`` results (``--table``), one row
  each: the mesh, the state per device and XLA's arguments per device, the
  activations one device keeps, and the compile times."""
  gib = lambda b: f"{b / 2**30:.3g} GiB" if b >= 2**30 else f"{b / 2**20:.3g} MiB"
  lines = [
      "| params | K | mesh (replica × fsdp × tensor) | state per device | XLA arguments per device, inner / sync | activations kept per device | compile s, inner / sync |",
      "| ---: | ---: | --- | ---: | ---: | ---: | ---: |",
  ]
  for r in results:
    m = r["mesh"]
    lines.append(
        f"| {r['num_params'] / 1e6:,.1f}M | {r['num_workers']} | "
        f"{m['replica']} × {m['fsdp']} × {m['tensor']} | {gib(r['state_bytes_per_device'])} | "
        f"{gib(r['inner']['argument_bytes'])} / {gib(r['sync']['argument_bytes'])} | "
        f"{gib(r['activations_kept_bytes_per_device'])} | "
        f"{r['compile_seconds']['inner']} / {r['compile_seconds']['sync']} |"
    )
  return "\n".join(lines)


def main(argv):
  del argv
  if flags.FLAGS.table:
    results = []
    for path in flags.FLAGS.table:
      with open(path) as f:
        results.append(json.load(f))
    print(table(results))
    return
  result = compile_config(flags.FLAGS.config)
  text = json.dumps(result, indent=2)
  print(text)
  if flags.FLAGS.out:
    with open(flags.FLAGS.out, "w") as f:
      f.write(text + "\n")


if __name__ == "__main__":
  from experiments import cli

  # Flags only when run as a program, so other modules can import this one.
  config_flags.DEFINE_config_file("config", "configs/autoloco.py:gpu", "Run config.")
  flags.DEFINE_string("out", "", "Also write the JSON here.")
  flags.DEFINE_list("table", [], "Print the markdown table of these JSON results instead.")
  cli.run(main)
