"""Where one inner step's time goes on this machine, piece by piece.

  python -m benchmarks.step_profile --config configs/diloco.py:cpu --out docs/step_profile_cpu.json

The pieces of the project's inner step for ``K`` workers (``vmap``), each jitted
alone and run ``--steps`` times in a ``lax.fori_loop`` so that dispatch is
amortized, timed after a warm-up as the median of ``--repeats``:

* ``forward``: the loss of every worker on its batch;
* ``forward_backward``: the loss and its gradient (``value_and_grad``);
* ``optimizer``: clipping and AdamW on every worker's fixed gradient
  (``inner.optimizer``), and applying the update;
* ``pieces``: ``forward_backward`` then ``optimizer`` in one loop;
* ``project``: the project's inner step itself (``algo.inner`` of
  ``registry.make`` on one device: the ``while_loop`` with a traced step count,
  the round's statistics, donation);
* ``one_model``: ``forward_backward`` of one model on the ``K`` workers'
  batches stacked (``K·B`` rows), the same FLOPs without the replica ``vmap``.

``forward_backward_ops`` splits ``forward_backward``'s executed operations by the
model's part, direction and kind (:func:`op_breakdown`, a ``jax.profiler``
trace; no extra package); ``one_model_ops`` does the same for ``one_model``.
With torch installed, ``torch_ops`` profiles the eager PyTorch twin of the same
model at the same global batch (``benchmarks/torch_reference.py``, its own
process) and ``jax_vs_torch`` sets the two side by side in milliseconds per
step by kind of operation (:func:`side_by_side`).

Each row's ``share`` is its time over ``project``'s, measured in the same run;
``model_flops_per_sec`` divides the model's training FLOPs (``6·N`` per token
plus attention, ``transformer.flops_per_token``) by the ``forward_backward``
time, and ``matmul_peak`` is a 512³ float32 matmul's rate for scale
(``benchmarks.throughput.peak``). The ratios, not the absolute times, carry
from one machine to another (``docs/performance.md``).
"""

from __future__ import annotations

import collections
import functools
import glob
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax.algorithms import registry
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.runtime import inner, replicas, state as state_lib
from benchmarks.throughput.peak import machine, matmul_rate

_CONFIG = config_flags.DEFINE_config_file("config", "configs/diloco.py:cpu", "Run config.")
_STEPS = flags.DEFINE_integer("steps", 25, "Inner steps per timed call.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per piece (median).")
_OUT = flags.DEFINE_string("out", "", "Write the JSON here as well.")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The model's parts by the module path in an op's name (first match wins).
PARTS = (
    ("attention projections", r"/attn/(qkv|out)/"),
    ("attention scores, softmax, rotary", r"/attn/"),
    ("MLP", r"/mlp/"),
    ("layer norms", r"norm/"),
    ("embedding and logits", r"embed"),
    ("loss and the rest", r""),
)


def _time(fn: Callable, args: tuple, repeats: int) -> float:
  """Median seconds of ``fn(*args)`` after one untimed call (the compile)."""
  jax.block_until_ready(fn(*args))
  seconds = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    seconds.append(time.perf_counter() - t0)
  return statistics.median(seconds)


def _looped(body: Callable, steps: int) -> Callable:
  """``body(carry) -> carry`` run ``steps`` times in one jitted call."""
  return jax.jit(lambda carry: jax.lax.fori_loop(0, steps, lambda i, c: body(c), carry))


def pieces(config: Any, steps: int) -> tuple[dict[str, tuple[Callable, tuple]], dict]:
  """The jitted pieces and their arguments, and the shapes they run at."""
  K, B, L = config.num_workers, config.data.batch_size, config.data.seq_len
  model_cfg = config.model.copy_and_resolve_references()
  with model_cfg.unlocked():
    model_cfg.vocab_size, model_cfg.seq_len = 256, L
  init, apply = model_lib.make(model_cfg)
  loss_fn = functools.partial(model_lib.loss_fn, apply)
  params = init(jax.random.key(0))
  params_K = replicas.stack_workers(params, K)
  tx = inner.optimizer(config.inner, inner.schedule(config.inner, config.total_steps))
  opt_K = jax.vmap(tx.init)(params_K)
  tokens_KxBxL1 = jax.random.randint(jax.random.key(1), (K, B, L + 1), 0, 256)
  grad_K = jax.vmap(jax.grad(loss_fn))(params_K, tokens_KxBxL1)

  def forward(p_K):
    # The loss feeds the carry, or XLA would hoist it out of the loop.
    loss = jax.vmap(loss_fn)(p_K, tokens_KxBxL1).sum()
    return jax.tree.map(lambda p: p - 1e-9 * loss, p_K)

  def forward_backward(p_K):
    _, g_K = jax.vmap(jax.value_and_grad(loss_fn))(p_K, tokens_KxBxL1)
    return jax.tree.map(lambda p, g: p - 1e-9 * g, p_K, g_K)

  def optimizer(c):
    p_K, o_K = c
    updates_K, o_K = jax.vmap(tx.update)(grad_K, o_K, p_K)
    return optax.apply_updates(p_K, updates_K), o_K

  def both(c):
    p_K, o_K = c
    _, g_K = jax.vmap(jax.value_and_grad(loss_fn))(p_K, tokens_KxBxL1)
    updates_K, o_K = jax.vmap(tx.update)(g_K, o_K, p_K)
    return optax.apply_updates(p_K, updates_K), o_K

  stacked = tokens_KxBxL1.reshape(K * B, L + 1)

  def one_model(p):
    g = jax.grad(loss_fn)(p, stacked)
    return jax.tree.map(lambda a, b: a - 1e-9 * b, p, g)

  out = {
      "forward": (_looped(forward, steps), (params_K,)),
      "forward_backward": (_looped(forward_backward, steps), (params_K,)),
      "optimizer": (_looped(optimizer, steps), ((params_K, opt_K),)),
      "pieces": (_looped(both, steps), ((params_K, opt_K),)),
      "one_model": (_looped(one_model, steps), (params,)),
  }
  shapes = dict(
      num_workers=K, batch_size=B, seq_len=L, num_params=model_lib.param_count(params),
      flops_per_token=model_lib.flops_per_token(model_cfg, model_lib.param_count(params)),
  )
  return out, shapes


def op_breakdown(fn: Callable, args: tuple, calls: int = 2) -> list[dict]:
  """Each part of the model (:data:`PARTS`), forward and backward, as its share
  of the time XLA:CPU's executed operations took (``jax.profiler`` trace, summed
  over threads), split into matmuls (``dot``, XNNPACK fusions), layout copies
  and transposes, and the rest (elementwise and reductions). An operation is
  placed by the JAX name XLA kept in its metadata (``.../block_0/attn/...``)."""
  op_names = {
      m.group(1): m.group(2).split("closed_call/")[-1]
      for m in re.finditer(
          r'^\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{op_name="([^"]*)"',
          fn.lower(*args).compile().as_text(),
          re.M,
      )
  }
  jax.block_until_ready(fn(*args))
  with tempfile.TemporaryDirectory() as log_dir:
    with jax.profiler.trace(log_dir):
      for _ in range(calls):
        jax.block_until_ready(fn(*args))
    (path,) = glob.glob(f"{log_dir}/plugins/profile/*/*.trace.json.gz")
    with gzip.open(path) as f:
      events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
  micros = collections.Counter()
  for e in events:
    if e["name"] not in op_names:
      continue
    op = op_names[e["name"]]
    part = next(name for name, pattern in PARTS if re.search(pattern, op))
    direction = "backward" if "transpose(" in op else "forward"
    kind = (
        "matmul" if re.match(r"(dot|ynn_fusion)", e["name"])
        else "layout" if re.match(r"(copy|transpose)", e["name"]) else "other"
    )
    micros[(part, direction, kind)] += e["dur"]
  total = sum(micros.values())
  return [
      dict(part=part, direction=direction, kind=kind, share=us / total)
      for (part, direction, kind), us in sorted(micros.items(), key=lambda kv: -kv[1])
  ]


def project_inner(config: Any, steps: int) -> tuple[Callable, tuple]:
  """The project's own inner call (``algo.inner``) on one device: ``steps`` steps."""
  config = config.copy_and_resolve_references()
  with config.unlocked():
    config.num_devices = 1
    config.model.vocab_size, config.model.seq_len = 256, config.data.seq_len
  K, B, L = config.num_workers, config.data.batch_size, config.data.seq_len
  init, apply = model_lib.make(config.model)
  mesh = replicas.make_mesh(K, 1)
  algo = registry.make(config, functools.partial(model_lib.loss_fn, apply), mesh)
  state = state_lib.place(algo.init_state(init(jax.random.key(0))), mesh)
  tokens = jax.random.randint(jax.random.key(1), (K, steps, B, L + 1), 0, 256)
  box = [state]

  def call(tokens, n):
    box[0] = algo.inner(box[0], tokens, n)  # donates the state it is given
    return box[0].step

  return call, (tokens, jnp.int32(steps))


#: The JAX op breakdown's rows in the torch profile's kinds (``torch_reference.KINDS``).
def _torch_kind(op: dict) -> str:
  if op["part"] == "attention scores, softmax, rotary":
    return "attention scores and softmax (fused SDPA)"
  return {
      "matmul": "matmuls (projections, MLP, logits)",
      "layout": "layout copies",
  }.get(op["kind"], "elementwise, norms, loss")


def side_by_side(result: dict) -> list[dict]:
  """One model at the global batch, JAX (``one_model`` and the optimizer piece
  over K) against eager torch (``torch_ops``): milliseconds per step by kind."""
  rows = {r["name"]: r["ms_per_step"] for r in result["rows"]}
  jax_ms = collections.Counter()
  for op in result["one_model_ops"]:
    jax_ms[_torch_kind(op)] += op["share"] * rows["one_model"]
  jax_ms["clipping and AdamW"] = rows["optimizer"] / result["shapes"]["num_workers"]
  torch_ms = result["torch_ops"]["kinds_ms_per_step"]
  return [
      dict(kind=kind, jax_ms=jax_ms.get(kind, 0.0), torch_ms=torch_ms[kind])
      for kind in torch_ms
  ]


def torch_profile(config: Any, num_params: int, steps: int) -> dict:
  """``torch_reference``'s profile of ``steps`` steps of the same model at the
  global batch, in a process of its own; ``{"skipped": why}`` without torch."""
  from benchmarks.throughput import pytorch

  if not pytorch.torch_available():
    return dict(skipped=pytorch.NOT_INSTALLED)
  command = [
      sys.executable, "-m", "benchmarks.torch_reference", f"--profile={steps}",
      f"--spec={json.dumps(pytorch.spec(config, num_params))}",
  ]
  done = subprocess.run(command, capture_output=True, text=True, check=True, cwd=_ROOT)
  return json.loads(done.stdout)


def profile(config: Any, steps: int, repeats: int) -> dict:
  """Every piece's seconds per inner step, its share of ``project``'s, and the rates."""
  fns, shapes = pieces(config, steps)
  fns["project"] = project_inner(config, steps)
  per_step = {name: _time(fn, args, repeats) / steps for name, (fn, args) in fns.items()}
  tokens = shapes["num_workers"] * shapes["batch_size"] * shapes["seq_len"]
  rows = [
      dict(name=name, ms_per_step=1e3 * s, share=s / per_step["project"])
      for name, s in per_step.items()
  ]
  return dict(
      machine=machine(),
      shapes=shapes,
      steps=steps,
      repeats=repeats,
      rows=rows,
      forward_backward_ops=op_breakdown(*fns["forward_backward"]),
      one_model_ops=op_breakdown(*fns["one_model"]),
      torch_ops=torch_profile(config, shapes["num_params"], steps),
      tokens_per_sec=tokens / per_step["project"],
      model_flops_per_sec=shapes["flops_per_token"] * tokens / per_step["forward_backward"],
      matmul_peak=matmul_rate(512, dtype=np.float32),
  )


def main(argv):
  del argv
  result = profile(_CONFIG.value, _STEPS.value, _REPEATS.value)
  if "skipped" not in result["torch_ops"]:
    result["jax_vs_torch"] = side_by_side(result)
  result["command"] = "python -m benchmarks.step_profile " + " ".join(
      f"--{k}={v}" for k, v in (("steps", _STEPS.value), ("repeats", _REPEATS.value))
  )
  for row in result["rows"]:
    print(f"{row['name']:>18}: {row['ms_per_step']:8.2f} ms/step  {row['share']:.2f} of project")
  for op in result["forward_backward_ops"][:12]:
    print(f"{op['share']:6.3f}  {op['part']}, {op['direction']}, {op['kind']}")
  for row in result.get("jax_vs_torch", []):
    print(f"{row['jax_ms']:7.2f} JAX {row['torch_ms']:7.2f} torch ms/step  {row['kind']}")
  print(f"tokens/s {result['tokens_per_sec']:,.0f}; model FLOP/s in forward_backward "
        f"{result['model_flops_per_sec']:.3g}; f32 matmul peak {result['matmul_peak']}")
  if _OUT.value:
    with open(_OUT.value, "w") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  app.run(main)
