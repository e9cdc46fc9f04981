r"""Planning a run past one machine: the simulated clock of training, at any size.

The planner replays what each algorithm sends, round by round, on the same
``clock.SimClock`` the trainer advances: the algorithm is built from a config
(``registry.make``), its parameters exist only as shapes
(``jax.eval_shape``), so a 100B-parameter model costs nothing to plan, and each
round's ``comm_pattern`` (payload bytes from ``codecs``, fragments from
``streaming``, gossip tables from ``topology``) is the one training uses. A
run's logged ``sim_time`` and :func:`simulate` on the same settings and ``H``
sequence are therefore equal (``tests/test_plan.py``).

For a run of ``T`` inner steps and a step time ``t`` (per site, at speed 1),

.. math::

  \mathrm{CU} = \frac{\overline{\text{compute}}}{\text{wall clock}}, \qquad
  t = \frac{F \cdot B L}{R \cdot \mathrm{MFU}},

with ``F`` the training FLOPs per token (``model.flops_per_token``), ``B L``
tokens per site per step and ``R`` a site's peak FLOP/s. The bandwidth a method
needs for a utilization ``u`` is the smallest multiple of the configured links
with ``CU >= u`` (bisection in log space; CU grows with bandwidth).

References:
  Douillard et al., Streaming DiLoCo with overlapping communication, 2025,
  arXiv 2501.18512 (Table 4: bandwidth for a compute utilization).
  Charles et al., Scaling Laws for DiLoCo, 2025, arXiv 2503.09799 (App. A).
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any, Iterator, Sequence

import jax
import numpy as np

from autoloco_jax.algorithms import registry
from autoloco_jax.model import transformer
from autoloco_jax.runtime import contract, replicas
from autoloco_jax.sim import clock as clock_lib, network as network_lib

#: Method name -> config overrides (dotted field -> value) applied to the base
#: config. Streaming methods take ``stream.fragments`` from the plan.
METHODS: dict[str, dict[str, Any]] = {
    "ddp": {"algorithm": "ddp"},
    "diloco": {"algorithm": "diloco"},
    "diloco-fp4": {"algorithm": "diloco", "compress.codec": "fp4"},
    "streaming": {"algorithm": "diloco", "stream.tau": 1},
    "streaming-fp4": {"algorithm": "diloco", "stream.tau": 1, "compress.codec": "fp4"},
    "autoloco": {"algorithm": "autoloco"},
    "noloco": {"algorithm": "noloco"},
    "gasloc": {"algorithm": "gasloc"},
    "gossip_adamw": {"algorithm": "gossip_adamw"},
}

#: Compute utilizations whose bandwidth the planner reports.
UTILIZATIONS = (0.5, 0.75, 0.9, 0.95, 0.99)


def model_for_size(base_model: Any, num_params: float, num_layers: int, vocab: int = 0):
  """A model config of ``num_layers`` blocks and about ``num_params``
  parameters: ``d_model`` (a multiple of 128, heads of 128) solves
  ``2 V d + L (12 d^2 + 2 d) + d = N`` with ``mlp_dim = 4 d``
  (``model._param_count_formula``, an untied head)."""
  v = int(vocab or base_model.vocab_size)
  a, b, c = 12.0 * num_layers, 2.0 * v + 2.0 * num_layers + 1.0, -float(num_params)
  d = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
  d = max(128, int(round(d / 128)) * 128)
  cfg = dict(base_model)
  cfg.update(
      d_model=d,
      num_layers=int(num_layers),
      num_heads=d // 128,
      mlp_dim=4 * d,
      vocab_size=v,
      tie_embeddings=False,
  )
  return cfg


def abstract_params(model_cfg: Any) -> Any:
  """The parameters' shapes (``jax.ShapeDtypeStruct``s): nothing allocated."""
  init, _ = transformer.make(model_cfg)
  return jax.eval_shape(init, jax.random.key(0))


def method_config(base: Any, name: str, fragments: int = 1) -> Any:
  """``base`` with method ``name``'s overrides (:data:`METHODS`), streaming
  and compression reset first so each method starts from the same run
  (every method but AutoLoCo on a fixed ``H``; a streamed fragment is encoded with ``bf16`` when ``comm.bytes_per_param``
  is 2, else ``identity``; whole models are sent at ``bytes_per_param``)."""
  if name not in METHODS:
    raise ValueError(f"unknown method {name!r}; choose from {sorted(METHODS)}")
  cfg = copy.deepcopy(base)
  with cfg.unlocked() if hasattr(cfg, "unlocked") else _null():
    cfg.stream.fragments, cfg.stream.tau = 1, 0
    cfg.compress.codec = "identity"
    if name != "autoloco":  # the others keep H fixed
      cfg.interval.controller = "fixed"
    if name.startswith("streaming"):
      cfg.stream.fragments = int(fragments)
      # A streamed payload is counted by its codec: the one of the clock's
      # precision (bf16 for 2 bytes per parameter), as a whole model is.
      if base.comm.bytes_per_param == 2:
        cfg.compress.codec = "bf16"
    for field, value in METHODS[name].items():
      node, *path = field.split(".")
      target = cfg
      for part in [node, *path][:-1]:
        target = target[part]
      target[field.split(".")[-1]] = value
  return cfg


class _null:
  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


def build(config: Any, params: Any) -> contract.Algorithm:
  """The algorithm of ``config``, with its shapes recorded from ``params``
  (abstract): what its ``comm_pattern`` needs. Nothing is compiled."""
  mesh = replicas.make_mesh(config.num_workers, 1)
  algo = registry.make(config, lambda p, t: 0.0, mesh)
  jax.eval_shape(algo.init_state, params)
  return algo


def h_sequence(metrics_path: str, scale: float = 1.0) -> list[int]:
  """The rounds' ``H`` of a measured run (``metrics.jsonl``), times ``scale``
  (e.g. the planned ``H_ref`` over the run's), at least 1."""
  hs = []
  with open(metrics_path) as f:
    for line in f:
      record = json.loads(line)
      if not record.get("summary") and "h" in record and "round" in record:
        hs.append(max(1, int(round(record["h"] * scale))))
  if not hs:
    raise ValueError(f"{metrics_path} has no round records with 'h'")
  return hs


def replay(
    algo: contract.Algorithm,
    clock: clock_lib.SimClock,
    total_steps: int,
    first_round_steps: int,
    hs: Sequence[int] | None = None,
    stop: int = 0,
) -> Iterator[int]:
  """Advances ``clock`` through the run's rounds as the trainer does
  (``run/stepper.Stepper.dispatch``), yielding the inner steps done after each
  round (read ``clock.metrics()`` there): round ``r`` takes ``min(n_r, T − s)``
  steps, ``n_0 = first_round_steps`` and ``n_{r+1} = algo.next_round_steps(r)``,
  or ``hs[r]`` (the last repeating) when given (a measured run, adaptive
  controllers). It ends after the first round that reaches ``stop`` steps
  (default: ``total_steps``)."""
  if hs is None and algo.next_round_steps is None:
    raise ValueError(
        f"{algo.name}: the controller is adaptive; give the H of a measured run "
        "(plan.h_from) or an open-loop controller (fixed, schedule)"
    )
  step, r, h = 0, 0, (hs[0] if hs else first_round_steps)
  stop = min(total_steps, stop) if stop else total_steps
  while step < stop:
    h = min(h, total_steps - step)
    clock.advance_round(algo, r, h)
    step += h
    yield step
    h = hs[min(r + 1, len(hs) - 1)] if hs else int(algo.next_round_steps(r))
    r += 1


def simulate(
    algo: contract.Algorithm,
    clock: clock_lib.SimClock,
    total_steps: int,
    first_round_steps: int,
    hs: Sequence[int] | None = None,
    horizon: int = 0,
) -> dict:
  """The run's clock at its end (:func:`replay`'s rounds).

  With ``horizon > 0`` it stops after the first round that reaches
  ``horizon`` steps and scales times and bytes by ``T / steps`` (rounds of a
  long run repeat; exact when ``horizon >= T``). Returns ``clock.metrics()``
  with ``steps_simulated`` and ``utilization`` (mean compute / wall clock).
  """
  step = 0
  for step in replay(algo, clock, total_steps, first_round_steps, hs, horizon):
    pass
  out = clock.metrics()
  scale = total_steps / step if step else 1.0
  for key in (
      "sim_time", "sim_compute_time", "sim_comm_time", "sim_wait_time", "sim_blocked_time"
  ):
    out[key] *= scale
  out["bytes_per_worker"] *= scale
  out["steps_simulated"] = step
  out["utilization"] = out["sim_compute_time"] / out["sim_time"] if out["sim_time"] else 1.0
  return out


def scaled_network(net: network_lib.Network, factor: float) -> network_lib.Network:
  """``net`` with every link's bandwidth times ``factor`` (latencies kept)."""
  return net._replace(bandwidth_KxK=net.bandwidth_KxK * factor)


def required_factor(
    utilization_at: Any, target: float, lo: float = 1e-6, hi: float = 1e6, rel: float = 1e-3
) -> float:
  """The smallest bandwidth factor ``m`` in ``[lo, hi]`` with
  ``utilization_at(m) >= target`` (bisection in ``log m``; utilization grows
  with bandwidth); ``inf`` when even ``hi`` falls short (latency bound)."""
  if utilization_at(hi) < target:
    return math.inf
  if utilization_at(lo) >= target:
    return lo
  while hi / lo > 1 + rel:
    mid = math.sqrt(lo * hi)
    lo, hi = (lo, mid) if utilization_at(mid) >= target else (mid, hi)
  return hi


def clock_on(config: Any, net: network_lib.Network, num_params: int, step_time: float):
  """``clock.clock_from_config``'s clock on the links ``net``."""
  return clock_lib.SimClock(
      net,
      num_params,
      config.comm.bytes_per_param,
      step_time=step_time,
      speed_K=contract.speed_factors(config.network, config.num_workers),
      overlap_backward=config.network.get("overlap_backward", 0.0),
  )


def plan_method(
    config: Any,
    params: Any,
    step_time: float,
    hs: Sequence[int] | None = None,
    horizon: int = 0,
    utilizations: Sequence[float] = UTILIZATIONS,
) -> dict:
  """One method's plan on ``config.network``: wall clock, utilization, bytes
  per site, peak bandwidth (Gbit/s), and the bandwidth (Gbit/s of the slowest
  configured link, all links scaled together) each utilization needs."""
  algo = build(config, params)
  num_params = transformer.param_count(params)
  net = network_lib.network_from_config(config.network, config.num_workers)
  def run(factor: float) -> dict:
    clock = clock_on(config, scaled_network(net, factor), num_params, step_time)
    return simulate(algo, clock, config.total_steps, algo.first_round_steps, hs, horizon)

  here = run(1.0)
  links = net.bandwidth_KxK[~np.eye(config.num_workers, dtype=bool)]
  slowest = float(links.min()) / network_lib.GBIT if links.size else math.inf
  needed = {
      u: slowest * required_factor(lambda m: run(m)["utilization"], u)
      for u in utilizations
  }
  return dict(
      wall_clock_s=here["sim_time"],
      utilization=here["utilization"],
      bytes_per_site=here["bytes_per_worker"],
      peak_gbps=here["peak_bandwidth_max"] / network_lib.GBIT,
      needed_gbps=needed,
      steps_simulated=here["steps_simulated"],
  )


def utilization_curve(
    config: Any,
    params: Any,
    step_time: float,
    bandwidths_gbps: Sequence[float],
    hs: Sequence[int] | None = None,
    horizon: int = 0,
) -> list[float]:
  """Compute utilization at each bandwidth (every link at that bandwidth,
  the configured latencies)."""
  algo = build(config, params)
  num_params = transformer.param_count(params)
  k = config.num_workers
  net = network_lib.network_from_config(config.network, k)
  out = []
  for bw in bandwidths_gbps:
    links = network_lib.make_network(k, bw, net.latency_KxK * 1e3)
    clock = clock_on(config, links, num_params, step_time)
    result = simulate(algo, clock, config.total_steps, algo.first_round_steps, hs, horizon)
    out.append(result["utilization"])
  return out
