r"""Time to a target loss on a grid of two-site networks, from a study's finished
runs: GASLoC's claim G3 and NoLoCo's N2 (issue 40), and the bytes, peak
bandwidth and idle time of claim N3 on the same networks (idle: the time a
worker is not computing, in a transfer it cannot hide or waiting for a peer,
the clock's ``sim_blocked_time``).

  python -m experiments.time_to_target \
      --study configs/studies/gossip_g2.py:report,shakespeare \
      --out docs/studies/gossip_g2/shakespeare/time

(``--reference``: the label every speed-up is over; default the study's own,
DiLoCo at ``H_ref`` in G2. ``--bandwidths``, ``--latencies``: the grid.)

Training does not depend on the network: a run's rounds (their ``H``, and what
each one sends, the gossip pairs included) are the same on any links. So a
finished run's simulated clock on another network is the planner's replay of
its rounds (``autoloco_jax/sim/planner.replay``), exact: it reproduces the
times the run logged on its own networks (``tests/test_studies_quick.py``), and
no run is trained again for a network.

The networks are two sites of ``K/2`` workers (``sim/network.two_sites``): one
site on 10 Gbit/s links, the other on ``b`` Gbit/s (every link between the
sites runs at ``b``), 1 ms within a site and ``ℓ`` between them, over a grid of
``b`` and ``ℓ``; ``b = 1``, ``ℓ = 50`` ms is the runs' own ``hetero``.

Time to target. Seed ``s``'s target is the reference run's last training-time
eval on that seed, ``L_s`` (the spread sample every run evaluates at its evals:
one eval set for every curve). A run's time to it, ``T_{m,s}``, is the first
simulated time its eval curve reaches ``L_s``, linear between evals; a run
that never does has none. The speed-up over the reference is paired by seed,

.. math::

  S_{m,s} = T_{\mathrm{ref},s} / T_{m,s},

reported as the geometric mean with the Student-t 95% interval of
``mean(log S)`` (``seed_stats.paired_interval``, the rule of every table),
over the seeds on which both reach the target. Where a run misses it on some
seed the row says how many reached, and gives no interval.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Sequence

import numpy as np
from absl import app, flags
from ml_collections import config_flags

from autoloco_jax.model import transformer
from autoloco_jax.sim import network as network_lib, planner
from experiments import cli, sweep
from experiments.runlog import load_run
from experiments.seed_stats import paired_interval, ref_targets, time_to_loss

#: The grid of the issue: inter-site bandwidth (Gbit/s) and latency (ms).
BANDWIDTHS = (0.1, 0.3, 1.0, 3.0, 10.0)
LATENCIES = (10.0, 50.0, 200.0)
#: The network the loss-against-time plot is drawn on (the runs' ``hetero``).
SHOWN = (1.0, 50.0)


def net_name(gbps: float, ms: float) -> str:
  return f"{gbps:g}gbps_{ms:g}ms"


def networks(
    k: int, bandwidths: Sequence[float], latencies: Sequence[float]
) -> dict[str, network_lib.Network]:
  """The two-site networks of the grid, by :func:`net_name`."""
  return {
      net_name(b, l): network_lib.two_sites(k, slow_gbps=b, inter_ms=l, name=net_name(b, l))
      for l in latencies
      for b in bandwidths
  }


def replayed(config: Any, metrics_path: str, eval_steps: Sequence[int], nets: dict) -> dict:
  """On each network: the simulated time at each of ``eval_steps`` and the
  run's end (``time``, ``idle`` seconds per worker, ``bytes`` per worker, peak
  ``gbps``), from the run's rounds (its logged ``H`` sequence) replayed."""
  params = planner.abstract_params(config.model)
  num_params = transformer.param_count(params)
  algo = planner.build(config, params)
  hs = planner.h_sequence(metrics_path)
  wanted = set(int(s) for s in eval_steps)
  out = {}
  for name, net in nets.items():
    clock = planner.clock_on(config, net, num_params, config.network.step_time)
    at = {}
    for step in planner.replay(algo, clock, config.total_steps, hs[0], hs):
      if step in wanted:
        at[step] = clock.metrics()["sim_time"]
    missing = wanted - set(at)
    if missing:
      raise ValueError(f"{metrics_path}: evals at steps {sorted(missing)} end no round")
    end = clock.metrics()
    out[name] = dict(
        eval_times=[at[int(s)] for s in eval_steps],
        time=end["sim_time"],
        idle=end["sim_blocked_time"],
        bytes=end["bytes_per_worker"],
        gbps=end["peak_bandwidth_max"] / network_lib.GBIT,
    )
  return out


def load_runs(
    study: Any, root: str, bandwidths: Sequence[float], latencies: Sequence[float]
) -> dict[str, list[dict]]:
  """Every run of ``study`` (``runlog.load_run``), its eval curve given a
  ``sim_time_<network>`` column per network of the grid (at the run's own
  ``K``) and its end on each in ``replayed``. A label with a diverged run is left out (the report names
  it). Raises ``ValueError`` naming a run that is not finished."""
  runs: dict[str, list[dict]] = {}
  jobs = sweep.jobs(study, root)
  dropped = {label for label, _, _, workdir in jobs if sweep.diverged(workdir)}
  for label, seed, config, workdir in jobs:
    if label in dropped:
      continue
    if not sweep.is_finished(workdir):
      raise ValueError(f"{label} seed {seed}: {workdir} holds no finished run")
    run = load_run(workdir, seed)
    steps = run["eval"]["step"]
    nets = networks(config.num_workers, bandwidths, latencies)
    times = replayed(config, os.path.join(workdir, "metrics.jsonl"), steps, nets)
    for name, t in times.items():
      run["eval"][f"sim_time_{name}"] = t.pop("eval_times")
    run["replayed"] = times
    runs.setdefault(label, []).append(run)
  return runs


def speedups(runs: dict[str, list[dict]], reference: str, name: str) -> dict:
  """Per label on network ``name``: each seed's time to the reference's last
  eval on that seed and its speed-up over the reference (:func:`time_to_loss`),
  with the geometric mean and its paired interval where every seed reaches."""
  return speedups_in(runs, reference, f"sim_time_{name}")


def speedups_in(runs: dict[str, list[dict]], reference: str, key: str) -> dict:
  """:func:`speedups` along the eval curves' ``key``: a network's simulated
  time, or ``step`` (the inner steps to the target, on any network)."""
  ref = {r["seed"]: r for r in runs[reference]}
  targets = ref_targets(runs[reference])
  ref_t = {s: time_to_loss(r, key, targets[s]) for s, r in ref.items()}
  out = {}
  for label, label_runs in runs.items():
    times = {r["seed"]: time_to_loss(r, key, targets[r["seed"]]) for r in label_runs}
    reached = [s for s, t in times.items() if t is not None and t > 0]
    row = dict(times=times, reached=len(reached), seeds=len(times))
    if reached and len(reached) == len(times):
      ci = paired_interval([math.log(ref_t[s] / times[s]) for s in reached])
      row.update(
          speedup=math.exp(ci["mean"]),
          low=math.exp(ci["low"]) if math.isfinite(ci["low"]) else 0.0,
          high=math.exp(ci["high"]) if math.isfinite(ci["high"]) else math.inf,
      )
    out[label] = row
  return out


def network_costs(runs: dict[str, list[dict]], name: str) -> dict:
  """Per label on network ``name``: the means over seeds of the run's end."""
  return {
      label: {
          k: float(np.mean([r["replayed"][name][k] for r in label_runs]))
          for k in ("time", "idle", "bytes", "gbps")
      }
      for label, label_runs in runs.items()
  }


def default_reference(study: Any) -> str:
  """The label most of ``study``'s labels are read against
  (``study.reference``); a ``ValueError`` if it names none."""
  refs = [r for r in dict(study.reference).values() if r]
  if not refs:
    raise ValueError(f"{study.name} reads no label against a reference; give --reference")
  return max(sorted(set(refs)), key=refs.count)


def collect(study: Any, root: str, reference: str, bandwidths, latencies) -> dict:
  """The study's time-to-target result, JSON-able; ``reference`` "" is the
  study's own (:func:`default_reference`)."""
  reference = reference or default_reference(study)
  if reference not in study.runs:
    raise ValueError(f"no label {reference!r} in {study.name}; labels: {study.labels}")
  runs = load_runs(study, root, bandwidths, latencies)
  nets = [net_name(b, l) for l in latencies for b in bandwidths]
  return dict(
      study=study.name,
      reference=reference,
      bandwidths=list(bandwidths),
      latencies=list(latencies),
      seeds=list(study.seeds),
      eval_tokens=runs[reference][0]["summary"].get("final_eval_tokens"),
      speedups={n: speedups(runs, reference, n) for n in nets},
      steps=speedups_in(runs, reference, "step"),
      costs={n: network_costs(runs, n) for n in nets},
      runs=runs,
  )


def shown(result: dict) -> str:
  """The network the loss-against-time plot and the costs table show:
  :data:`SHOWN` where the grid has it, else the grid's first."""
  name = net_name(*SHOWN)
  return name if name in result["costs"] else next(iter(result["costs"]))






def cell(row: dict) -> str:
  """A speed-up row as a table cell: the geometric mean and its interval, or
  how many seeds reached the target."""
  if "speedup" not in row:
    return f"reached {row['reached']}/{row['seeds']}"
  if not math.isfinite(row["high"]):
    return f"{row['speedup']:.2f}× (one seed)"
  return f"{row['speedup']:.2f}× [{row['low']:.2f}, {row['high']:.2f}]"


def markdown(result: dict) -> str:
  """One table of speed-ups per latency (rows: labels, columns: bandwidth), and
  the N3 costs on the shown network."""
  ref, bws = result["reference"], result["bandwidths"]
  lines = [
      f"# Time to target: {result['study']}",
      "",
      f"Speed-up over `{ref}` in simulated time to its last eval on the same seed "
      f"(geometric mean, paired t 95% interval on log; {len(result['seeds'])} seeds). "
      "Two sites; columns: the slower site's bandwidth (Gbit/s).",
  ]
  labels = list(result["runs"])
  for ms in result["latencies"]:
    lines += ["", f"## Inter-site latency {ms:g} ms", ""]
    lines.append("| run | " + " | ".join(f"{b:g}" for b in bws) + " |")
    lines.append("| --- |" + " ---: |" * len(bws))
    for label in labels:
      cells = [cell(result["speedups"][net_name(b, ms)][label]) for b in bws]
      lines.append(f"| `{label}` | " + " | ".join(cells) + " |")
  lines += [
      "",
      "## In inner steps (on any network)",
      "",
      "The reference's steps to its last eval over each run's: fewer steps, more than 1.",
      "",
      "| run | speed-up in steps |",
      "| --- | ---: |",
  ]
  lines += [f"| `{label}` | {cell(row)} |" for label, row in result["steps"].items()]
  name = shown(result)
  lines += ["", f"## Bytes, peak bandwidth and idle time ({name}, means over seeds)", ""]
  lines.append("| run | MB per worker | peak Gbit/s | idle s per worker | time s | idle share |")
  lines.append("| --- | ---: | ---: | ---: | ---: | ---: |")
  for label, c in result["costs"][name].items():
    lines.append(
        f"| `{label}` | {c['bytes'] / 1e6:.1f} | {c['gbps']:.2f} | {c['idle']:.2f} | "
        f"{c['time']:.1f} | {c['idle'] / c['time']:.1%} |"
    )
  return "\n".join(lines) + "\n"


def write(result: dict, out_dir: str, dpi: int = 110) -> list[str]:
  """``time_to_target.md``, ``.json`` (without the curves) and the two plots."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from experiments.plots import plot_curves

  os.makedirs(out_dir, exist_ok=True)
  with open(os.path.join(out_dir, "time_to_target.md"), "w") as f:
    f.write(markdown(result))
  light = {k: v for k, v in result.items() if k != "runs"}
  with open(os.path.join(out_dir, "time_to_target.json"), "w") as f:
    json.dump(light, f, indent=1, default=str)
  name = shown(result)
  fig, ax = plt.subplots(figsize=(7, 4.5))
  plot_curves(result["runs"], f"sim_time_{name}", ax=ax, log_x=True, band="t95",
              title=f"{result['study']}: two sites, {name}")
  fig.savefig(os.path.join(out_dir, "loss_vs_time.png"), dpi=dpi)
  plt.close(fig)
  fig = plot_speedups(result)
  fig.savefig(os.path.join(out_dir, "speedup_vs_bandwidth.png"), dpi=dpi)
  plt.close(fig)
  return ["time_to_target.md", "time_to_target.json", "loss_vs_time.png",
          "speedup_vs_bandwidth.png"]


def plot_speedups(result: dict):
  """Speed-up to target against the slower site's bandwidth, a panel per
  latency, a line per label with its interval as error bars."""
  import matplotlib.pyplot as plt

  from experiments.plots import plain_log_x

  lats, bws = result["latencies"], result["bandwidths"]
  fig, axes = plt.subplots(1, len(lats), figsize=(5 * len(lats), 4), squeeze=False)
  for ax, ms in zip(axes[0], lats):
    for label in result["runs"]:
      rows = [result["speedups"][net_name(b, ms)][label] for b in bws]
      x = [b for b, r in zip(bws, rows) if "speedup" in r]
      y = [r["speedup"] for r in rows if "speedup" in r]
      lo = [r["speedup"] - r["low"] for r in rows if "speedup" in r]
      hi = [min(r["high"], 1e3) - r["speedup"] for r in rows if "speedup" in r]
      if x:
        ax.errorbar(x, y, yerr=[lo, hi], label=label, marker="o", capsize=3)
    ax.axhline(1.0, color="gray", lw=0.8)
    plain_log_x(ax)
    ax.set_xlabel("slower site's bandwidth, Gbit/s")
    ax.set_ylabel("speed-up to target (×)")
    ax.set_title(f"inter-site latency {ms:g} ms")
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=7)
  fig.suptitle(f"{result['study']}: speed-up over {result['reference']}", fontsize=10)
  fig.tight_layout()
  return fig


def _floats(text: str) -> tuple[float, ...]:
  return tuple(float(v) for v in text.split(",") if v)


_FLAGS: dict = {}


def define_flags() -> dict:
  return dict(
      study=config_flags.DEFINE_config_file("study", None, "A study (file.py:arg).",
                                            lock_config=True),
      root=flags.DEFINE_string("root", "runs/studies", "Where the study's runs are."),
      reference=flags.DEFINE_string(
          "reference", "", "The label every speed-up is over (default: the "
          "study's, the label most of its labels are read against)."),
      out=flags.DEFINE_string("out", "", "Where the tables and plots go."),
      bandwidths=flags.DEFINE_string("bandwidths", ",".join(map(str, BANDWIDTHS)),
                                     "The slower site's Gbit/s, comma-separated."),
      latencies=flags.DEFINE_string("latencies", ",".join(map(str, LATENCIES)),
                                    "Inter-site latencies in ms, comma-separated."),
  )


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  f = {name: holder.value for name, holder in _FLAGS.items()}
  if not f["out"]:
    raise ValueError("give --out, the folder for the tables and plots")
  result = collect(f["study"], f["root"], f["reference"], _floats(f["bandwidths"]),
                   _floats(f["latencies"]))
  names = write(result, f["out"], dpi=40 if f["study"].get("quick") else 110)
  print(markdown(result))
  print("Wrote " + ", ".join(os.path.join(f["out"], n) for n in names), flush=True)


if __name__ == "__main__":
  _FLAGS.update(define_flags())
  cli.run(main)
