"""Compiles a config's round functions ahead of time from abstract shapes.

  python -m benchmarks.aot --config configs/autoloco.py:gpu

Nothing is allocated and no data is read: the parameters, the run state and a
chunk of tokens are `jax.ShapeDtypeStruct`s with the shardings the trainer
would give them, and `jit(...).lower(...).compile()` runs XLA on them. A shape
or sharding error in a config (the `gpu` size, say) therefore fails here, on a
CPU machine, not on a rented accelerator. Reports, per device, XLA's memory
analysis (arguments, outputs, temporaries) and the FLOPs of one inner step.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from jax.sharding import NamedSharding, PartitionSpec
from ml_collections import config_flags

from autoloco_jax.algorithms import registry
from autoloco_jax.data import corpus
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.runtime import replicas, rounds


def _abstract(tree: Any, specs: Any, mesh) -> Any:
  """``ShapeDtypeStruct``s of ``tree`` with the shardings ``specs`` name."""
  canonical = (lambda s: PartitionSpec()) if mesh.devices.size == 1 else (lambda s: s)
  shardings = jax.tree.map(
      lambda s: NamedSharding(mesh, canonical(s)),
      specs,
      is_leaf=lambda x: isinstance(x, PartitionSpec),
  )

  def one(sharding, subtree):
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), subtree
    )

  return jax.tree.map(
      one, shardings, tree, is_leaf=lambda x: isinstance(x, NamedSharding)
  )


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
  """Lowers and compiles ``config``'s inner loop and sync on abstract inputs.

  Returns the mesh size, parameter count, the run state's bytes per device,
  each program's memory analysis and the inner loop's FLOPs for one step.
  """
  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size = vocab_size
    model_cfg.seq_len = config.data.seq_len
  init, apply = model_lib.make(model_cfg)
  mesh = replicas.make_mesh(config.num_workers, config.num_devices)
  algo = registry.make(config, functools.partial(model_lib.loss_fn, apply), mesh)
  params = jax.eval_shape(init, jax.random.key(0))
  state_shapes = jax.eval_shape(algo.init_state, params)
  state = _abstract(state_shapes, state_shapes.specs(), mesh)
  chunk = rounds.chunk_size(config.chunk_steps, algo.max_round_steps)
  k, b, l = config.num_workers, config.data.batch_size, config.data.seq_len
  dtype = corpus.token_dtype(vocab_size)
  workers = NamedSharding(mesh, replicas.WORKERS)
  tokens = jax.ShapeDtypeStruct((k, chunk, b, l + 1), dtype, sharding=workers)
  present = jax.ShapeDtypeStruct((k,), jnp.float32, sharding=workers)
  inner = algo.inner.lower(state, tokens, np.int32(1)).compile()
  sync = algo.sync.lower(state, present).compile()
  num_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params))
  devices = int(mesh.devices.size)
  state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state_shapes))
  return dict(
      algorithm=algo.name,
      num_workers=k,
      devices=devices,
      num_params=num_params,
      chunk=chunk,
      tokens_per_step=k * b * l,
      state_bytes_total=int(state_bytes),
      # XLA counts a while loop's body once: the inner loop's FLOPs are one step's.
      inner=dict(memory_analysis(inner), flops_per_step=_flops(inner)),
      sync=dict(memory_analysis(sync), flops=_flops(sync)),
      model_flops_per_step=model_lib.flops_per_token(model_cfg, num_params) * k * b * l,
  )


def main(argv):
  del argv
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
  cli.run(main)
