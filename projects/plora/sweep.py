"""PLoRA experiment: a LoRA sweep packed by the planner vs run one job after another.

  python -m projects.plora.sweep --config projects/plora/config.py --workdir runs/plora
  python -m projects.plora.sweep --render_only

1. Pretrains a small base transformer (this codebase's model and inner AdamW)
   on the Shakespeare training plays, or loads it from the workdir.
2. Fine-tunes the sweep's LoRA configs on held-out text (the head of each
   validation play; the tails are the eval set), each job with its own data
   stream, (a) one after another, (b) packed as the planner says, (c) as one
   group padded to the largest rank, (d) in groups of equal rank.
3. Measures the cost model the planner uses, the factored vs merged LoRA
   forward, and XLA's memory analysis against the planner's memory model.
4. Writes every number to ``docs_dir/plora.json`` and renders its tables to
   ``docs_dir/plora.md`` (:mod:`projects.plora.report`); ``--render_only``
   renders the tables again from the JSON.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import platform
import sys
import time
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import traverse_util
from ml_collections import config_flags

from autoloco_jax.data import corpus as data_lib, sources
from autoloco_jax.model import transformer as model_lib
from autoloco_jax.runtime import inner, replicas, rounds
from projects import plora
from projects.plora import lora, report

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Path to projects/plora/config.py (with an optional :size).",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string(
    "workdir", "runs/plora", "Where the pretrained base is cached."
)
_DOCS = flags.DEFINE_string("docs_dir", "docs", "Where plora.json and plora.md go.")
_RENDER_ONLY = flags.DEFINE_bool(
    "render_only", False, "Only render plora.md again from docs_dir/plora.json."
)

COMMAND = "python -m projects.plora.sweep"


def log(msg: str) -> None:
  print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", flush=True)


# ----------------------------------------------------------------------------
# Data.


def finetune_rows(docs: list[bytes], fraction: float, seq_len: int):
  """Each held-out play cut at a line end near ``fraction``: heads train, tails eval."""
  heads, tails = [], []
  for doc in docs:
    cut = doc.rfind(b"\n", 0, int(len(doc) * fraction)) + 1 or int(len(doc) * fraction)
    heads.append(doc[:cut])
    tails.append(doc[cut:])
  return data_lib.pack(heads, seq_len), data_lib.pack(tails, seq_len)


# ----------------------------------------------------------------------------
# The base model.


def _base_key(cfg) -> str:
  fields = dict(
      model=cfg.model.to_dict(),
      seq=cfg.data.seq_len,
      pre=cfg.pretrain.to_dict(),
      inner=cfg.inner.to_dict(),
      seed=cfg.seed,
  )
  return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:10]


def pretrain(cfg, init, apply, data) -> tuple[dict, dict]:
  """AdamW on the training plays with the project's inner loop (one worker),
  staged through the round driver (``rounds.run_steps``)."""
  steps, batch = cfg.pretrain.steps, cfg.pretrain.batch_size
  schedule = inner.schedule(cfg.inner, steps)
  tx = inner.optimizer(cfg.inner, schedule)
  run = inner.make_inner_loop(functools.partial(model_lib.loss_fn, apply), tx, schedule)
  loop = jax.jit(run, donate_argnums=(0, 1, 2))
  mesh = replicas.make_mesh(1, 1)
  chunk = rounds.chunk_size(cfg.pretrain.chunk_steps, steps)
  params_K = replicas.stack_workers(init(jax.random.key(cfg.seed)), 1)
  positions = data.init_positions()

  def read(n):
    nonlocal positions
    tokens_1xnxBxL1, positions = data.train_batches(positions, n, batch)
    return tokens_1xnxBxL1

  def step(state, tokens_1xCxBxL1, n):
    """One chunk: ``state = (params_K, opt_K, acc, done)``; the loss is the chunk's."""
    params_K, opt_K, acc, done = state
    params_K, opt_K, acc = loop(
        params_K, opt_K, inner.reset(acc), tokens_1xCxBxL1, n, np.int32(done)
    )
    done += int(n)
    log(f"pretrain step {done}/{steps}: train loss {float(acc.loss_last_K[0]):.3f}")
    return params_K, opt_K, acc, done

  t0 = time.perf_counter()
  state = (params_K, jax.vmap(tx.init)(params_K), inner.RoundAcc.zeros(1), 0)
  params_K, _, acc, _ = rounds.run_steps(step, state, read, steps, chunk, mesh)
  params = jax.tree.map(lambda x: np.asarray(x[0]), params_K)
  return params, dict(
      steps=steps,
      batch_size=batch,
      seconds=time.perf_counter() - t0,
      final_train_loss=float(acc.loss_last_K[0]),
  )


def load_or_pretrain(cfg, init, apply, data, workdir: str) -> tuple[dict, dict]:
  path = os.path.join(workdir, f"base_{_base_key(cfg)}.npz")
  if os.path.exists(path):
    with np.load(path) as f:
      flat = {tuple(k.split("/")): f[k] for k in f.files if k != "__info__"}
      info = json.loads(str(f["__info__"]))
    log(f"loaded the pretrained base from {path}")
    return traverse_util.unflatten_dict(flat), dict(info, cached=True)
  params, info = pretrain(cfg, init, apply, data)
  os.makedirs(workdir, exist_ok=True)
  flat = {"/".join(k): v for k, v in traverse_util.flatten_dict(params).items()}
  np.savez(path, __info__=json.dumps(info), **flat)
  return params, dict(info, cached=False)


# ----------------------------------------------------------------------------
# Runs.


def timed_run(name, plan, apply, base, streams, cfg, eval_tokens):
  # Every run pays for its own compilations, as separate jobs would.
  jax.clear_caches()
  plora.packed._programs.cache_clear()
  load0 = os.getloadavg()
  log(f"{name}: {len(plan.groups)} group(s)")
  run = plora.run_plan(
      plan,
      apply,
      base,
      streams,
      opt_cfg=cfg.lora,
      total_steps=cfg.lora.steps,
      batch_size=cfg.lora.batch_size,
      chunk_steps=cfg.lora.chunk_steps,
  )
  load1 = os.getloadavg()
  res = run.total
  evals = plora.evaluate_adapters(apply, base, res.adapters, eval_tokens)
  out = dict(
      groups=[
          dict(
              configs=[c.name for c in g.configs],
              rank=g.rank,
              targets=list(g.targets),
              compile_s=r.compile_s,
              train_s=r.train_s,
              train_cpu_s=r.train_cpu_s,
              wall_s=r.wall_s,
              est_time_s=g.time_s,
          )
          for g, r in zip(plan.groups, run.groups)
      ],
      compile_s=res.compile_s,
      train_s=res.train_s,
      train_cpu_s=res.train_cpu_s,
      wall_s=res.wall_s,
      tokens=res.tokens,
      tokens_per_s=res.tokens / res.train_s,
      tokens_per_cpu_s=res.tokens / res.train_cpu_s,
      est_makespan_s=plan.makespan_s,
      final_loss=res.final_loss,
      mean_loss=res.mean_loss,
      eval_loss=evals,
      load_before=list(load0),
      load_after=list(load1),
  )
  log(
      f"{name}: wall {res.wall_s:.1f}s (compile {res.compile_s:.1f}s, train "
      f"{res.train_s:.1f}s), {out['tokens_per_s']:.0f} tokens/s"
  )
  return out, res.adapters


def max_param_diff(a: dict, b: dict) -> dict:
  return {
      n: max(
          float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
          for x, y in zip(jax.tree.leaves(a[n]), jax.tree.leaves(b[n]))
      )
      for n in a
  }


# ----------------------------------------------------------------------------
# The experiment, step by step.


class Setup(NamedTuple):
  """What every measurement shares: the frozen base, the jobs and their data."""

  apply: Callable
  base: Any
  base_info: dict
  model_cfg: dict
  configs: list
  streams: dict
  eval_tokens: Any
  ft_sizes: tuple[int, int]


def prepare(cfg, workdir: str) -> Setup:
  """The base (pretrained or cached), the sweep's jobs and one data stream per job."""
  lc, seq_len = cfg.lora, cfg.data.seq_len
  data = data_lib.build(
      dict(cfg.data.to_dict(), batch_size=cfg.pretrain.batch_size), 1, cfg.seed
  )
  docs = sources.load_documents(cfg.data)
  ft_train, ft_eval = finetune_rows(docs.validation, lc.train_fraction, seq_len)
  model_cfg = dict(cfg.model.to_dict(), vocab_size=data.vocab_size, seq_len=seq_len)
  init, apply = model_lib.make(model_cfg)
  base, base_info = load_or_pretrain(cfg, init, apply, data, workdir)
  base = jax.tree.map(jnp.asarray, base)
  configs = [plora.LoraConfig(n, r, a, lr, t, s) for n, r, a, lr, t, s in lc.sweep]
  streams = {
      c.name: data_lib.WorkerData(
          ft_train, [np.arange(len(ft_train))], ft_eval, seed=c.seed
      )
      for c in configs
  }
  eval_tokens = next(iter(streams.values())).eval_batches(lc.batch_size, lc.eval_batches)
  sizes = (len(ft_train), len(ft_eval))
  return Setup(apply, base, base_info, model_cfg, configs, streams, eval_tokens, sizes)


def base_eval_loss(s: Setup) -> float:
  """The frozen base's mean loss on the held-out tails."""
  loss = lambda p, t: jnp.mean(
      jax.lax.map(functools.partial(model_lib.loss_fn, s.apply, p), t)
  )
  value = float(jax.jit(loss)(s.base, s.eval_tokens))
  log(f"base eval loss on the held-out tails: {value:.4f}")
  return value


def calibrate(s: Setup, lc, seq_len: int):
  """The planner's cost model and memory model, measured on one device.

  Returns ``(memory, cost, calibration)``: the memory model fitted to XLA's
  memory analysis, the cost model, and one row per measured program.
  """
  memory = plora.MemoryModel.for_model(s.base, s.model_cfg, lc.batch_size, seq_len)
  ranks = sorted({c.rank for c in s.configs})
  log("calibrating the cost model")
  cost, calibration = plora.measure_cost_model(
      s.apply,
      s.base,
      memory,
      opt_cfg=lc,
      ranks=(ranks[0], ranks[-1]),
      slots=len(s.configs),
      targets=plora.union_targets(s.configs),
      steps=lc.calibrate_steps,
      rounds=lc.calibrate_rounds,
  )
  analytic, memory = memory, memory.fit_activations(calibration[:-1])
  for row in calibration:
    n, r, t = row["slots"], row["rank"], row["targets"]
    row["analytic_bytes"] = analytic.group_bytes(n, r, t)
    row["model_bytes"] = memory.group_bytes(n, r, t)
  log(f"cost model {cost}; activation scale fitted to XLA: {memory.act_scale:.2f}")
  return memory, cost, calibration


def time_forward(s: Setup, lc, seq_len: int) -> list[dict]:
  """Factored vs merged forward, timed round-robin, for one adapter and for all.

  The factored programs are the calibration's, already compiled.
  """
  rank, targets = min(c.rank for c in s.configs), plora.union_targets(s.configs)
  mk = lambda n: [
      plora.LoraConfig(f"cal{i}", rank, float(rank), 1e-3, targets, i) for i in range(n)
  ]
  timed = plora.time_groups(
      s.apply,
      s.base,
      [(mk(n), mode) for n in (1, len(s.configs)) for mode in lora.MODES],
      opt_cfg=lc,
      batch_size=lc.batch_size,
      seq_len=seq_len,
      steps=lc.calibrate_steps,
      rounds=lc.calibrate_rounds,
  )
  forward = [
      dict(
          slots=f["slots"],
          rank=f["rank"],
          factored_ms=f["step_s"] * 1e3,
          merged_ms=m["step_s"] * 1e3,
          factored_cpu_ms=f["cpu_step_s"] * 1e3,
          merged_cpu_ms=m["cpu_step_s"] * 1e3,
      )
      for f, m in zip(timed[::2], timed[1::2])
  ]
  log(f"forward {forward}")
  return forward


def make_plans(configs, memory, cost, lc) -> dict:
  """The planner's plans (``pad``, ``group``, ``demo``) and the fixed baselines."""
  kw = dict(
      budget_bytes=lc.budget_mib * 2**20, steps=lc.steps, num_devices=lc.num_devices
  )
  demo_kw = dict(kw, budget_bytes=lc.demo_budget_mib * 2**20)
  fixed = functools.partial(
      plora.fixed_plan,
      memory=memory,
      cost=cost,
      steps=lc.steps,
      num_devices=lc.num_devices,
  )
  ranks = sorted({c.rank for c in configs})
  plans = dict(
      pad=plora.plan(configs, memory, cost, mixed_ranks="pad", **kw),
      group=plora.plan(configs, memory, cost, mixed_ranks="group", **kw),
      demo=plora.plan(configs, memory, cost, mixed_ranks="pad", **demo_kw),
      sequential=plora.sequential_plan(configs, memory, cost, steps=lc.steps),
      one_group=fixed([configs]),
      by_rank=fixed([[c for c in configs if c.rank == r] for r in ranks]),
  )
  print(plans["pad"].describe(), flush=True)
  print(plans["demo"].describe(), flush=True)
  return plans


def run_all(s: Setup, plans: dict, cfg) -> tuple[dict, dict]:
  """Trains the sweep one after another, packed, as one padded group, by rank.

  A fixed packing the planner also chose is not run twice: its entry is the
  packed run's, marked ``same_as="packed"``.
  """
  run = lambda name, p: timed_run(name, p, s.apply, s.base, s.streams, cfg, s.eval_tokens)
  runs, adapters = {}, {}
  runs["sequential"], adapters["sequential"] = run(
      "one after another", plans["sequential"]
  )
  runs["packed"], adapters["packed"] = run("packed (planner)", plans["pad"])
  partition = lambda p: sorted(sorted(c.name for c in g.configs) for g in p.groups)
  for key in ("one_group", "by_rank"):
    if partition(plans[key]) == partition(plans["pad"]):
      runs[key] = dict(runs["packed"], same_as="packed")
    else:
      runs[key], adapters[key] = run(key, plans[key])
  return runs, adapters


def compare(runs: dict, adapters: dict) -> tuple[dict, dict]:
  """Packed vs one after another: ``(equality, ratios)``."""
  seq, packed = runs["sequential"], runs["packed"]
  diff = lambda key: {n: abs(packed[key][n] - seq[key][n]) for n in seq[key]}
  final_diff, eval_diff = diff("final_loss"), diff("eval_loss")
  equality = dict(
      final_loss_diff=final_diff,
      eval_loss_diff=eval_diff,
      max_final_loss_diff=max(final_diff.values()),
      max_eval_loss_diff=max(eval_diff.values()),
      max_param_diff=max_param_diff(adapters["packed"], adapters["sequential"]),
  )
  ratios = dict(
      throughput=packed["tokens_per_s"] / seq["tokens_per_s"],
      throughput_cpu=packed["tokens_per_cpu_s"] / seq["tokens_per_cpu_s"],
      makespan=seq["wall_s"] / packed["wall_s"],
      estimated_makespan=seq["est_makespan_s"] / packed["est_makespan_s"],
  )
  return equality, ratios


def run_meta(t_start: float, load_start) -> dict:
  """The command, the date and the machine of this run."""
  return dict(
      command=" ".join([COMMAND] + sys.argv[1:]),
      date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
      machine=f"{os.cpu_count()} CPU cores ({platform.machine()})",
      jax=jax.__version__,
      backend=jax.default_backend(),
      devices=jax.device_count(),
      load_start=list(load_start),
      load_end=list(os.getloadavg()),
      wall_s=time.time() - t_start,
  )


def setup_record(s: Setup, cfg, base_eval: float) -> dict:
  """The base, the data and the jobs, as ``plora.json`` records them."""
  m, lc = s.model_cfg, cfg.lora
  return dict(
      base=dict(
          s.base_info,
          params=model_lib.param_count(s.base),
          ft_eval_loss=base_eval,
          model=f"d_model {m['d_model']}, {m['num_layers']} layers, "
          f"{m['num_heads']} heads, mlp {m['mlp_dim']}",
      ),
      seq_len=cfg.data.seq_len,
      steps=lc.steps,
      batch_size=lc.batch_size,
      weight_decay=lc.weight_decay,
      train_fraction=lc.train_fraction,
      ft_train_sequences=s.ft_sizes[0],
      ft_eval_sequences=s.ft_sizes[1],
      configs=[
          dict(
              name=c.name,
              rank=c.rank,
              alpha=c.alpha,
              lr=c.lr,
              targets=list(c.targets),
              seed=c.seed,
          )
          for c in s.configs
      ],
  )


def sweep(cfg, workdir: str) -> dict:
  """Runs the whole experiment; returns what ``plora.json`` holds."""
  t_start, load_start = time.time(), os.getloadavg()
  lc, seq_len = cfg.lora, cfg.data.seq_len
  s = prepare(cfg, workdir)
  base_eval = base_eval_loss(s)
  memory, cost, calibration = calibrate(s, lc, seq_len)
  forward = time_forward(s, lc, seq_len)
  plans = make_plans(s.configs, memory, cost, lc)
  runs, adapters = run_all(s, plans, cfg)
  equality, ratios = compare(runs, adapters)
  return dict(
      setup_record(s, cfg, base_eval),
      meta=run_meta(t_start, load_start),
      cost_model=cost._asdict(),
      act_scale=memory.act_scale,
      extra_bytes=memory.extra_bytes,
      calibration=calibration,
      forward=forward,
      plans=dict(
          pad=plans["pad"].describe(),
          group=plans["group"].describe(),
          demo=plans["demo"].describe(),
          sequential_estimate_s=plans["sequential"].makespan_s,
      ),
      runs=runs,
      equality=equality,
      ratios=ratios,
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if _RENDER_ONLY.value:
    with open(os.path.join(_DOCS.value, "plora.json")) as f:
      report.write(json.load(f), _DOCS.value, write_json=False)
    return
  if _CONFIG.value is None:
    raise app.UsageError("--config is required")
  out = sweep(_CONFIG.value, _WORKDIR.value)
  report.write(out, _DOCS.value)
  r, eq = out["ratios"], out["equality"]
  log(
      f"throughput ratio {r['throughput']:.2f}x, makespan ratio {r['makespan']:.2f}x, "
      f"max eval-loss difference {eq['max_eval_loss_diff']:.1e}; "
      f"wrote {_DOCS.value}/plora.json and plora.md"
  )


if __name__ == "__main__":
  app.run(main)
