r"""NoLoCo's claims N1, N2 and N3 (issue 40), each read by the rule the N1 study's
docstring fixed before its reports (``configs/studies/noloco_n1.py``), from the
reports of its worker counts:

  python -m experiments.noloco_claims --dir docs/studies/noloco_n1

Reads, for each ``K``, ``<dir>/k<K>/report/summary.json`` (the sweep's report),
``<dir>/k<K>/time/time_to_target.json`` (time to DiLoCo's loss) and
``<dir>/k<K>/time_to_noloco/time_to_target.json`` (time to NoLoCo's own), and
writes ``<dir>/claims.md``: one table per claim, each row's interval and seed
count, and the verdict. A worker count not yet reported is a row that says so;
a rule that needs every ``K`` reads *inconclusive* without it.

* N1: NoLoCo minus DiLoCo in final bits/byte (the report's paired t interval,
  read by ``seed_stats.verdict``, the rule of every table), as per-byte
  perplexity too, ``2^Δ − 1``.
* N2: NoLoCo's speed-up ``T_DiLoCo / T_NoLoCo`` to DiLoCo's final loss, per
  network of the grid; beside it, to NoLoCo's own final loss, where the table
  holds DiLoCo's speed-up ``s`` over NoLoCo and NoLoCo's is ``1/s`` (interval
  ``[1/high, 1/low]``); and NoLoCo's at twice the steps to DiLoCo's final loss
  (``<dir>/k<K>/longer_time``, the study's ``longer`` phase), read by the same
  rule as its own result.
* N3: bytes each worker sends over the run: NoLoCo's and DiLoCo's from the
  runs' clocks; DDP's from the same clock's accounting of its rounds, a ring
  all-reduce of the model every step, ``T · 2(K − 1)/K · 4P``; and the time a worker
  is blocked on the runs' own network (two sites, 1 Gbit/s, 50 ms).
"""

from __future__ import annotations

import os
from typing import Sequence

from absl import app, flags

from configs.studies import noloco_n1
from experiments import report, report_text, seed_stats, time_to_target

#: "Much less" communication (claim N3): at least this many times fewer bytes.
MUCH_LESS = 2.0
#: The network the runs logged (``hetero``): the blocked-time column's.
OWN_NETWORK = "1gbps_50ms"


def load(root: str, workers: Sequence[int] = noloco_n1.WORKERS) -> dict[int, dict]:
  """``{K: dict(report, time, time_own, longer)}``, each ``None`` where not yet
  written."""
  return {
      k: dict(
          report=report.read_summary(os.path.join(root, f"k{k}", "report", "summary.json")),
          time=report.read_summary(os.path.join(root, f"k{k}", "time", "time_to_target.json")),
          time_own=report.read_summary(os.path.join(root, f"k{k}", "time_to_noloco", "time_to_target.json")),
          longer=report.read_summary(os.path.join(root, f"k{k}", "longer_time", "time_to_target.json")),
      )
      for k in workers
  }


def n1_verdict(reads: dict[int, str | None]) -> str:
  """From each ``K``'s interval of NoLoCo minus DiLoCo, read by the rule of
  every table (``seed_stats.verdict``: better, equal, worse, inconclusive):
  *reproduced* if better at one ``K`` or more and worse at none; *not
  reproduced* if better at none and equal or worse at two or more; else
  *inconclusive*."""
  found = [r for r in reads.values() if r]
  if "better" in found and "worse" not in found:
    return "reproduced"
  if "better" not in found and sum(r in ("equal", "worse") for r in found) >= 2:
    return "not reproduced"
  return "inconclusive"


def n2_verdict(by_k: dict[int, dict | None]) -> str:
  """*reproduced* if NoLoCo is faster on some network at some ``K``
  (``time_to_target.faster_somewhere``); *not reproduced* if it is faster
  nowhere at every ``K``, each reported (``time_to_target.faster_nowhere``);
  else *inconclusive*."""
  reported = {k: rows for k, rows in by_k.items() if rows is not None}
  if any(time_to_target.faster_somewhere(rows) for rows in reported.values()):
    return "reproduced"
  nowhere = [time_to_target.faster_nowhere(rows) for rows in reported.values()]
  if len(reported) == len(by_k) and all(nowhere):
    return "not reproduced"
  return "inconclusive"


def n3_verdict(ratios: dict[int, float | None]) -> str:
  """*reproduced* if at least :data:`MUCH_LESS` times fewer bytes at every
  ``K``; *not reproduced* if fewer than that at every ``K``; else inconclusive."""
  found = [r for r in ratios.values() if r is not None]
  if len(found) == len(ratios) and all(r >= MUCH_LESS for r in found):
    return "reproduced"
  if len(found) == len(ratios) and all(r < MUCH_LESS for r in found):
    return "not reproduced"
  return "inconclusive"


def labels(report: dict) -> tuple[str, str]:
  """``(noloco, diloco)``: the report's one comparison's candidate and reference."""
  (c,) = report["comparisons"]
  return c["candidate"], c["reference"]


#: The methods whose bytes N3 takes from the clock's accounting, not from runs:
#: DDP (one all-reduce every step) and GASLoC (on the study's graph, at its
#: ``H``), which the N1 study does not train.
PLANNED = ("ddp", "gasloc")


def planned_bytes(k: int, method: str) -> float:
  """Bytes each worker sends in ``method`` over the study's run at ``K`` (its
  coarse pass's model, steps, ``K``, graph and ``H``, which every phase shares):
  the clock's accounting of the method's rounds (``sim/planner``)."""
  from autoloco_jax.model import transformer
  from autoloco_jax.sim import clock as clock_lib, planner

  study = next(iter(noloco_n1.get_config(f"coarse,k{k}").runs.values()))
  config = planner.method_config(study, method)
  params = planner.abstract_params(config.model)
  clock = clock_lib.clock_from_config(config, transformer.param_count(params), 0.0)
  algo = planner.build(config, params)
  return planner.simulate(algo, clock, config.total_steps, config.interval.h)["bytes_per_worker"]


def _inverse(row: dict) -> dict:
  """NoLoCo's speed-up from DiLoCo's row over NoLoCo: ``1/s``, its interval swapped."""
  if "speedup" not in row:
    return row
  return dict(row, speedup=1 / row["speedup"], low=1 / row["high"], high=1 / row["low"])


def n1_section(data: dict[int, dict]) -> tuple[list[str], str]:
  lines = [
      "## N1: NoLoCo's final perplexity against tuned DiLoCo's",
      "",
      "| K | NoLoCo | DiLoCo | seeds | eval tokens | Δ bits/byte (NoLoCo − DiLoCo) | "
      "perplexity | reads |",
      "| ---: | --- | --- | ---: | ---: | --- | ---: | --- |",
  ]
  reads = {}
  for k, d in data.items():
    report = d["report"]
    if report is None:
      lines.append(f"| {k} | not reported | | | | | | |")
      reads[k] = None
      continue
    (c,) = report["comparisons"]
    loss = c["loss"]
    reads[k] = seed_stats.verdict(loss, c["tolerance"])
    ppl = 2 ** loss["mean"] - 1
    tokens = report_text.eval_sizes(report)
    lines.append(
        f"| {k} | `{c['candidate']}` | `{c['reference']}` | {loss['n']} | {tokens} | "
        f"{report_text.interval(loss)} | {ppl:+.1%} | {reads[k]} (tolerance ±{c['tolerance']}) |"
    )
  verdict = n1_verdict(reads)
  lines += ["", f"**N1: {verdict}.**", ""]
  return lines, verdict


def _time_rows(time: dict, label: str, invert: bool = False) -> dict[str, dict]:
  rows = {net: by_label[label] for net, by_label in time["speedups"].items()}
  return {net: _inverse(r) for net, r in rows.items()} if invert else rows


def _longer_label(time: dict, noloco: str) -> str:
  """NoLoCo's label at more steps: the tuned one's, ``_steps<T>``."""
  (label,) = [l for l in time["steps"] if l.startswith(noloco + "_steps")]
  return label


def _longer_rows(time: dict | None, noloco: str) -> dict[str, dict] | None:
  """NoLoCo's rows at more steps, by network."""
  return None if time is None else _time_rows(time, _longer_label(time, noloco))


def n2_section(data: dict[int, dict]) -> tuple[list[str], dict]:
  lines = [
      "## N2: NoLoCo's speed-up over DiLoCo in simulated time",
      "",
      "Rows: the two-site networks of the grid. Each cell: NoLoCo's geometric-mean "
      "speed-up with its paired t 95% interval, or how many seeds reached the target.",
      "",
  ]
  by_k, longer = {}, {}
  for k, d in data.items():
    if d["report"] is None or d["time"] is None:
      lines += [f"K = {k}: not reported.", ""]
      by_k[k] = longer[k] = None
      continue
    noloco, diloco = labels(d["report"])
    by_k[k] = _time_rows(d["time"], noloco)
    own = _time_rows(d["time_own"], diloco, invert=True) if d["time_own"] else {}
    longer[k] = _longer_rows(d["longer"], noloco)
    lines += [
        f"### K = {k} ({d['time']['eval_tokens']:,} eval tokens, "
        f"{len(d['time']['seeds'])} seeds)",
        "",
        "| slower site, inter-site latency | to DiLoCo's final loss | "
        "to NoLoCo's own final loss | twice the steps, to DiLoCo's final loss |",
        "| --- | ---: | ---: | ---: |",
    ]
    for net, row in by_k[k].items():
      gbps, ms = net.split("gbps_")
      cells = [time_to_target.cell(rows[net]) if rows and net in rows else "not run" for rows in (own, longer[k])]
      lines.append(f"| {gbps} Gbit/s, {ms} | {time_to_target.cell(row)} | {' | '.join(cells)} |")
    lines.append("")
    if d["longer"]:
      steps = d["longer"]["steps"][_longer_label(d["longer"], noloco)]
      lines += [
          f"At twice the steps, in inner steps to DiLoCo's final loss (DiLoCo's "
          f"steps over NoLoCo's; below 1: NoLoCo needs more): {time_to_target.cell(steps)}.",
          "",
      ]
  verdict = n2_verdict(by_k)
  lines += [
      f"**N2, by the rule (equal steps): {verdict}.** The last column (the `longer` "
      "phase, added after K = 8 reported) gives NoLoCo twice the steps while DiLoCo "
      "keeps its steps and its `H`: not a like-for-like comparison, so it is a "
      "measurement, not a verdict.",
      "",
  ]
  return lines, dict(equal_steps=verdict)


def n3_section(
    data: dict[int, dict], planned: dict[str, dict[int, float]]
) -> tuple[list[str], dict]:
  """N3's table and verdicts; ``planned[method][k]``: :func:`planned_bytes`."""
  ddp, gasloc = planned["ddp"], planned["gasloc"]
  lines = [
      "## N3: bytes each worker sends, and the time it is blocked",
      "",
      f"Blocked: not computing, in a transfer it cannot hide or waiting for a peer, "
      f"on the runs' own network ({OWN_NETWORK}), mean over seeds. DDP's and "
      "GASLoC's bytes are the clock's accounting of their rounds at the same model, "
      "steps and `K` (GASLoC on the same graph at the same `H`; it is not trained here).",
      "",
      "| K | NoLoCo MB | GASLoC MB | DiLoCo MB | DDP MB | DiLoCo / NoLoCo | DDP / NoLoCo | "
      "blocked s: NoLoCo, DiLoCo (of run s) |",
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
  ]
  vs_diloco, vs_ddp = {}, {}
  for k, d in data.items():
    if d["report"] is None or d["time"] is None:
      lines.append(f"| {k} | not reported | | | | | | |")
      vs_diloco[k] = vs_ddp[k] = None
      continue
    noloco, diloco = labels(d["report"])
    costs = d["time"]["costs"][OWN_NETWORK]
    mb = {m: costs[m]["bytes"] / 1e6 for m in (noloco, diloco)}
    vs_diloco[k] = mb[diloco] / mb[noloco]
    vs_ddp[k] = ddp[k] / 1e6 / mb[noloco]
    blocked = ", ".join(f"{costs[m]['idle']:.1f} ({costs[m]['time']:.1f})" for m in (noloco, diloco))
    lines.append(
        f"| {k} | {mb[noloco]:.1f} | {gasloc[k] / 1e6:.1f} | {mb[diloco]:.1f} | {ddp[k] / 1e6:.0f} | "
        f"{vs_diloco[k]:.2f}× | {vs_ddp[k]:.1f}× | {blocked} |"
    )
  verdicts = dict(diloco=n3_verdict(vs_diloco), ddp=n3_verdict(vs_ddp))
  lines += [
      "",
      f"**N3, at least {MUCH_LESS:g}× fewer bytes: against DDP {verdicts['ddp']}; "
      f"against DiLoCo {verdicts['diloco']}.**",
      "",
  ]
  return lines, verdicts


def claims(
    root: str, planned: dict[str, dict[int, float]] | None = None
) -> tuple[str, dict]:
  """The markdown of the three claims and ``{claim: verdict}``."""
  data = load(root)
  if planned is None:
    planned = {m: {k: planned_bytes(k, m) for k in data} for m in PLANNED}
  head = [
      "# NoLoCo's claims N1-N3 (issue 40)",
      "",
      "Written by `python -m experiments.noloco_claims`; the rules are the N1 "
      "study's docstring's (`configs/studies/noloco_n1.py`), fixed before the reports.",
      "",
  ]
  n1, v1 = n1_section(data)
  n2, v2 = n2_section(data)
  n3, v3 = n3_section(data, planned)
  return "\n".join(head + n1 + n2 + n3), dict(N1=v1, N2=v2, N3=v3)


_DIR = flags.DEFINE_string("dir", "docs/studies/noloco_n1", "The N1 study's report folder.")


def main(argv: list[str]) -> None:
  del argv
  text, _ = claims(_DIR.value)
  report.write_markdown(os.path.join(_DIR.value, "claims.md"), text)


if __name__ == "__main__":
  app.run(main)
