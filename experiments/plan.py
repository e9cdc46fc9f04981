"""Plans a run past one machine: wall clock, compute utilization and bandwidth
per method, from the project's own simulated clock (``autoloco_jax/sim/planner.py``).

  python -m experiments.plan --config configs/diloco.py:tiny --config.network.step_time=0.05
  python -m experiments.plan --config configs/diloco.py --plan.params=1e10 \\
      --plan.layers=48 --plan.tokens=2e11 --plan.flops=1e15 --plan.bandwidth_gbps=1 --plan.h=100

Sites are ``config.num_workers``; links ``--plan.bandwidth_gbps`` and
``--plan.latency_ms`` (one value, or one per site: a link runs at its slower
end), else ``config.network``. The step time is ``network.step_time`` unless
``--plan.flops`` (peak FLOP/s per site) is given: then
``flops_per_token · batch tokens / (flops · mfu)``. AutoLoCo's ``H`` comes from
a measured run (``--plan.h_from=runs/x/metrics.jsonl``), a schedule
(``--plan.h_schedule=150,100``) or its controller, run open loop when it has a
plan. ``docs/planning.md`` has worked examples.

``GB/dev`` is the run state one device holds (a worker's parameters and AdamW
moments, the method's own state: DiLoCo's global copy and outer momentum...)
when each site's worker spans ``config.mesh.fsdp × config.mesh.tensor``
devices: the trainer's own placement (``runtime/layout.py``) on a mesh of that
shape, the number ``benchmarks/aot.py`` reports as ``state_bytes_per_device``
for the same config (``tests/test_mesh.py``). Activations are not in it.
"""

import json
import math

import ml_collections
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax.model import transformer
from autoloco_jax.run import assembly
from autoloco_jax.sim import planner
from experiments import cli

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "A training config (with an optional :size).", lock_config=False
)


def _plan_defaults() -> ml_collections.ConfigDict:
  p = ml_collections.ConfigDict()
  # Comma-separated methods of autoloco_jax.sim.planner.METHODS.
  p.methods = "ddp,diloco,diloco-fp4,streaming,streaming-fp4,autoloco,noloco,gasloc"
  # Target parameter count; 0 = the config's model.
  p.params = 0.0
  # Transformer blocks of the target model; 0 = the config's.
  p.layers = 0
  # Vocabulary of the target model; 0 = the config's.
  p.vocab = 0
  # Tokens D of the whole run; 0 = config.total_steps steps.
  p.tokens = 0.0
  # Tokens per site per step; 0 = data.batch_size * data.seq_len.
  p.batch_tokens = 0
  # Peak FLOP/s of one site; 0 = use network.step_time.
  p.flops = 0.0
  # Model FLOP utilization of a site's compute.
  p.mfu = 0.5
  # Inter-site Gbit/s and ms: "" = config.network; "1" or one per site "10,10,1,1".
  p.bandwidth_gbps = ""
  p.latency_ms = ""
  # H of every method (DiLoCo's; AutoLoCo's H_0 and H_ref); 0 = the config's.
  p.h = 0
  # Streaming: transformer blocks per fragment (P = layers / this).
  p.fragment_layers = 3
  # AutoLoCo: a measured run's metrics.jsonl, its H times h_scale.
  p.h_from = ""
  p.h_scale = 1.0
  # AutoLoCo: or its rounds' H given open loop, "150,150,100" (the last repeats).
  p.h_schedule = ""
  # Steps simulated before extrapolating to the whole run; 0 = all.
  p.horizon = 20000
  # Write the utilization-vs-bandwidth curves here (JSON; .png beside it).
  p.curves = ""
  return p


_PLAN = config_flags.DEFINE_config_dict("plan", _plan_defaults())
flags.mark_flags_as_required(["config"])


def _values(text: str) -> tuple:
  return tuple(float(x) for x in text.split(",")) if text else ()


def setup(config, p) -> tuple:
  """``(config, params, step_time)`` of the planned run: the target model's
  shapes, the network, the step budget and the step time."""
  if p.params:
    layers = p.layers or config.model.num_layers
    config.model.update(planner.model_for_size(config.model, p.params, layers, p.vocab))
  params = planner.abstract_params(config.model)
  if p.bandwidth_gbps:
    config.network.bandwidth_gbps = _values(p.bandwidth_gbps)
  if p.latency_ms:
    config.network.latency_ms = _values(p.latency_ms)
  if p.h:
    config.interval.h = config.autoloco.h_ref = p.h
    config.interval.h_min, config.interval.h_max = max(p.h // 2, 1), 4 * p.h
  batch = p.batch_tokens or config.data.batch_size * config.data.seq_len
  if p.tokens:
    config.total_steps = math.ceil(p.tokens / (batch * config.num_workers))
  step_time = config.network.step_time
  if p.flops:
    flops = transformer.flops_per_token(config.model, transformer.param_count(params))
    step_time = flops * batch / (p.flops * p.mfu)
  if not step_time > 0:
    raise ValueError("give --plan.flops or --config.network.step_time (> 0)")
  return config, params, step_time


def _given(values, unit: str) -> str:
  return f"{','.join(f'{v:g}' for v in values)} {unit}, " if len(values) else ""


def _row(name: str, r: dict) -> str:
  need = " ".join(f"{g:8.3g}" for g in r["needed_gbps"].values())
  return (
      f"{name:14s} {r['wall_clock_s'] / 3600:10.3g} {r['utilization']:6.3f} "
      f"{r['bytes_per_site'] / 1e12:10.3g} {r['peak_gbps']:9.3g} "
      f"{r['memory_per_device'] / 1e9:8.3g}  {need}"
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  p = _PLAN.value
  config, params, step_time = setup(_CONFIG.value, p)
  n = transformer.param_count(params)
  print(
      f"N = {n:.4g} parameters, {config.model.num_layers} layers, K = "
      f"{config.num_workers} sites, T = {config.total_steps} steps of "
      f"{step_time:.4g} s, network {config.network.name}, "
      f"{_given(config.network.bandwidth_gbps, 'Gbit/s')}"
      f"{_given(config.network.latency_ms, 'ms')}"
      f"{config.comm.bytes_per_param} bytes/param"
  )
  cus = " ".join(f"{u:8.0%}" for u in planner.UTILIZATIONS)
  print(f"{'method':14s} {'wall h':>10s} {'CU':>6s} {'TB/site':>10s} {'peak Gb/s':>9s} "
        f"{'GB/dev':>8s}  Gbit/s for CU {cus}")
  fragments = max(1, config.model.num_layers // p.fragment_layers)
  hs = planner.h_sequence(p.h_from, p.h_scale) if p.h_from else None
  if p.h_schedule:
    hs = [int(h) for h in p.h_schedule.split(",")]
  rows, curves = {}, {}
  for name in p.methods.split(","):
    cfg = planner.method_config(config, name, fragments)
    method_hs = hs if name == "autoloco" else None
    rows[name] = planner.plan_method(cfg, params, step_time, method_hs, p.horizon)
    algo = planner.build(cfg, params)
    rows[name]["memory_per_device"] = assembly.planned_state_bytes(cfg, algo, params)
    print(_row(name, rows[name]), flush=True)
    if p.curves:
      curves[name] = planner.utilization_curve(
          cfg, params, step_time, _grid(), method_hs, p.horizon
      )
  if p.curves:
    _write_curves(p.curves, n, config, step_time, curves)


def _grid() -> list:
  return [10 ** (-2 + 5 * i / 60) for i in range(61)]


def _write_curves(path: str, n: int, config, step_time: float, curves: dict) -> None:
  """The curves as JSON and a log-x plot beside them (``.png``)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  data = dict(
      num_params=n, sites=config.num_workers, step_time=step_time,
      latency_ms=tuple(config.network.latency_ms), bandwidth_gbps=_grid(),
      utilization=curves,
  )
  with open(path, "w") as f:
    json.dump(data, f, indent=1)
  fig, ax = plt.subplots(figsize=(6.4, 4))
  for name, ys in curves.items():
    ax.plot(_grid(), ys, label=name)
  ax.set_xscale("log")
  ax.set_xlabel("inter-site bandwidth, Gbit/s")
  ax.set_ylabel("compute utilization")
  ax.set_title(f"{n / 1e9:.0f}B parameters, {config.num_workers} sites, step {step_time:.2g} s")
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path.rsplit(".", 1)[0] + ".png", dpi=120)


if __name__ == "__main__":
  cli.run(main)
