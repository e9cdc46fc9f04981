r"""GASLoC's claims G1, G2 and G3 (issue 40), each read by the rule its study's
docstring fixed before the reports (``configs/studies/gossip_g1.py``,
``configs/studies/gossip_g2.py``), from their reports:

  python -m experiments.gasloc_claims --g1 docs/studies/gossip_g1 --g2 docs/studies/gossip_g2

writes ``claims.md`` in each folder, G2's with G3 (a claim not yet reported
says so).

G1 reads ``<g1>/report/summary.json``: per graph, GASLoC minus each baseline and
every method minus DDP, each a paired t 95% interval read by the rule of every
table (``seed_stats.verdict``: better, equal, worse, inconclusive). *Reproduced*
if on two graphs or more GASLoC is better than both step-size-tuned
decentralized baselines, ``gasloc_g0`` (gossip AdamW with its step tuned) and
NoLoCo; *not reproduced* if on no graph it is better than both and on two graphs
or more one of them is equal or better than GASLoC (GASLoC minus it reads equal
or worse); *inconclusive* otherwise. ``gossip`` (its step untuned) is shown
beside them and counts for nothing.

G2 reads ``<g2>/<corpus>/report/summary.json``: each method's Δ against DiLoCo's
tuned frontier at equal syncs (paired t 95%), its syncs saved at equal loss (the
union of the bootstrap and t intervals, ``syncs_saved.widest``) and its Δ
against DiLoCo at ``H_ref``. Each Δ reads by the rule of every table
(``seed_stats.verdict``); a method is *competitive* where its Δ reads better or
equal. Per corpus: *reproduced* if GASLoC is competitive and no other
decentralized method is; *half reproduced* if GASLoC and another are (GASLoC's
half holds, the contrast does not); *not reproduced* if GASLoC's Δ reads worse;
*inconclusive* otherwise. Over both corpora: the per-corpus verdict
where they agree, else *inconclusive*, naming each.

G3 reads ``<g2>/<corpus>/time/time_to_target.json`` (``experiments.time_to_target``
on G2's report runs): each method's speed-up over DiLoCo at ``H_ref`` (its pair
tuned) in simulated time to DiLoCo's final loss, paired by seed, on every
two-site network of the grid (the slower site at 0.1-10 Gbit/s, 10-200 ms
between the sites). Per corpus, the rule of claim N2: *reproduced* if on some
network GASLoC reaches the target on every seed with its speed-up's interval
above 1 (``time_to_target.faster_somewhere``); *not reproduced* if on every
network it misses on most seeds or its interval lies at or below 1
(``time_to_target.faster_nowhere``); *inconclusive* otherwise. Over both
corpora as G2. Beside it, read by the same rule as its own result, GASLoC given
twice the steps (``<g2>/<corpus>/longer_time``, the study's ``longer`` phase,
added after the Shakespeare report).
"""

from __future__ import annotations

import os
from typing import Any

from absl import app, flags

from configs.studies import evidence, gossip_g1, gossip_g2
from experiments import report_text, seed_stats, syncs_saved, time_to_target
from experiments.report import read_summary, write_markdown

#: The baselines G1's verdict counts: each decentralized method with its step tuned.
STEP_TUNED = ("gasloc_g0", "noloco")
#: Every baseline shown, in column order.
BASELINES = ("gasloc_g0", "noloco", "gossip")
#: G1's plot, beside its ``claims.md``.
G1_PLOT = "g1_differences.png"


def parse(label: str, cell: Any = gossip_g1) -> tuple[str, str] | None:
  """``(method, graph)`` of a decentralized cell's label
  (``gasloc_g0_ring_eta1p5_alpha0p5``); ``None`` for a reference's (DDP, DiLoCo)."""
  for method in sorted(cell.METHODS, key=len, reverse=True):
    for graph in cell.TOPOLOGIES:
      prefix = f"{method}_{graph}"
      if label == prefix or label.startswith(prefix + "_"):
        return method, graph
  return None


def reads(report: dict) -> dict[str, dict[str, dict]]:
  """``{graph: {baseline or "ddp": comparison}}``: GASLoC's comparisons against
  each baseline, and (under ``"<method>-ddp"``) every method's against DDP, each
  with its ``verdict`` by the rule of every table."""
  out: dict[str, dict[str, dict]] = {}
  for c in report["comparisons"]:
    candidate = parse(c["candidate"])
    reference = parse(c["reference"])
    graph = candidate[1]
    key = f"{candidate[0]}-ddp" if reference is None else reference[0]
    out.setdefault(graph, {})[key] = dict(
        c, verdict=seed_stats.verdict(c["loss"], c["tolerance"])
    )
  return out


def verdict(by_graph: dict[str, dict[str, dict]]) -> str:
  """The docstring's rule, from :func:`reads`."""
  def read(graph: str, baseline: str) -> str | None:
    c = by_graph[graph].get(baseline)
    return c and c["verdict"]

  beats_both = [g for g in by_graph if all(read(g, b) == "better" for b in STEP_TUNED)]
  matched = [
      g for g in by_graph if any(read(g, b) in ("equal", "worse") for b in STEP_TUNED)
  ]
  if len(beats_both) >= 2:
    return "reproduced"
  if not beats_both and len(matched) >= 2:
    return "not reproduced"
  return "inconclusive"


def _ci(c: dict | None) -> str:
  return "" if c is None else f"{report_text.interval(c['loss'])} {c['verdict']}"


def g1_claims(root: str) -> tuple[str, str]:
  """The markdown of G1 and its verdict (``"not reported"`` before the report);
  once reported, its plot beside it (``g1_differences.png``, :func:`plot_g1`)."""
  path = os.path.join(root, "report", "summary.json")
  head = [
      "# GASLoC's claim G1 (issue 40): one step per communication, by graph",
      "",
      "Written by `python -m experiments.gasloc_claims`; the rule is the G1 study's "
      "docstring's (`configs/studies/gossip_g1.py`), fixed before the report.",
      "",
  ]
  report = read_summary(path)
  if report is None:
    return "\n".join(head + ["Not reported yet.", ""]), "not reported"
  by_graph = reads(report)
  tolerance = report["comparisons"][0]["tolerance"]
  lines = head + [
      f"{len(report['seeds'])} fresh seeds ({report['seeds'][0]}-{report['seeds'][-1]}), "
      f"final eval of {report_text.eval_sizes(report)} tokens, "
      f"tolerance ±{tolerance} bits/byte. Each cell: the difference's mean, its "
      "paired t 95% interval and how it reads.",
      "",
      "| graph | GASLoC − `gasloc_g0` | GASLoC − NoLoCo | GASLoC − gossip AdamW (shared lr) |",
      "| --- | --- | --- | --- |",
  ]
  for graph, cs in by_graph.items():
    lines.append(f"| {graph} | " + " | ".join(_ci(cs.get(b)) for b in BASELINES) + " |")
  lines += [
      "",
      "Every method against DDP (its learning rate tuned), the line they are read against:",
      "",
      "| graph | " + " | ".join(f"{m} − DDP" for m in gossip_g1.METHODS) + " |",
      "| --- |" + " --- |" * len(gossip_g1.METHODS),
  ]
  for graph, cs in by_graph.items():
    lines.append(
        f"| {graph} | " + " | ".join(_ci(cs.get(f"{m}-ddp")) for m in gossip_g1.METHODS) + " |"
    )
  result = verdict(by_graph)
  fig = plot_g1(by_graph, tolerance)
  fig.savefig(os.path.join(root, G1_PLOT), dpi=110)
  import matplotlib.pyplot as plt  # after plot_g1 chose the Agg backend

  plt.close(fig)
  lines += ["", f"![G1: paired differences by graph]({G1_PLOT})", "", f"**G1: {result}.**", ""]
  return "\n".join(lines), result


def plot_g1(by_graph: dict[str, dict[str, dict]], tolerance: float):
  """Two panels, one group per graph: GASLoC minus each baseline, and every
  method minus DDP; each a paired mean with its 95% interval as an error bar,
  the tolerance band shaded around zero."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  panels = (
      ("GASLoC minus each baseline", BASELINES, lambda b: b),
      ("each method minus DDP (tuned lr)", gossip_g1.METHODS, lambda m: f"{m}-ddp"),
  )
  graphs = list(by_graph)
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for ax, (title, names, key) in zip(axes, panels):
    width = 0.8 / len(names)
    for i, name in enumerate(names):
      xs, means, errs = [], [], []
      for g, graph in enumerate(graphs):
        c = by_graph[graph].get(key(name))
        if c is None:
          continue
        loss = c["loss"]
        xs.append(g + (i - (len(names) - 1) / 2) * width)
        means.append(loss["mean"])
        errs.append((loss["mean"] - loss["low"], loss["high"] - loss["mean"]))
      ax.errorbar(xs, means, yerr=list(zip(*errs)) if errs else None, fmt="o",
                  capsize=3, label=name)
    ax.axhspan(-tolerance, tolerance, color="0.85", zorder=0)
    ax.axhline(0.0, color="0.4", lw=0.8)
    ax.set_xticks(range(len(graphs)), graphs)
    ax.set_ylabel("difference in final bits/byte (paired, 95%)")
    ax.set_title(title)
    ax.legend(fontsize=8)
  fig.tight_layout()
  return fig


#: The readings (``seed_stats.verdict``) that make a method competitive in G2.
COMPETITIVE = ("better", "equal")


def g2_corpus_verdict(reads: dict[str, str]) -> str:
  """One corpus's G2 verdict from each method's Δ against the frontier, read by
  the rule of every table (``seed_stats.verdict``)."""
  others = [r for m, r in reads.items() if m != "gasloc"]
  if reads.get("gasloc") in COMPETITIVE:
    return "half reproduced" if any(r in COMPETITIVE for r in others) else "reproduced"
  if reads.get("gasloc") == "worse":
    return "not reproduced"
  return "inconclusive"


def over_corpora(by_corpus: dict[str, str | None]) -> str:
  """A claim's verdict over both corpora: theirs where they agree (both
  reported), else *inconclusive*, naming each."""
  found = set(by_corpus.values())
  if None not in found and len(found) == 1:
    return found.pop()
  return "inconclusive (" + ", ".join(f"{c}: {v or 'not reported'}" for c, v in by_corpus.items()) + ")"


def sparsest(report: dict) -> str:
  """The label of the frontier's point with the fewest syncs."""
  return min(report["frontier"], key=lambda label: report["stats"][label]["syncs"][0])


def paired(report: dict, candidate: str, reference: str) -> dict:
  """``candidate`` minus ``reference`` in final bits/byte, paired by seed over
  the seeds both ran (``seed_stats.paired_interval``)."""
  ref = report["stats"][reference]
  by_seed = dict(zip(ref["seeds"], ref["loss_by_seed"]))
  cand = report["stats"][candidate]
  return seed_stats.paired_interval(
      [x - by_seed[s] for s, x in zip(cand["seeds"], cand["loss_by_seed"]) if s in by_seed]
  )


def g2_section(report: dict, corpus: str) -> tuple[list[str], str]:
  """One corpus's table and verdict; beside the rule's column, each method
  against DiLoCo at the frontier's fewest syncs (:func:`sparsest`)."""
  fewest = sparsest(report)
  fewest_syncs = report["stats"][fewest]["syncs"][0]
  against = {}
  for c in report["comparisons"]:
    method = parse(c["candidate"], gossip_g2)[0]
    if c["reference"] == "frontier":
      against.setdefault(method, {})["frontier"] = c
    elif parse(c["reference"], gossip_g2) is None:  # DiLoCo at H_ref, not a baseline
      against.setdefault(method, {})["href"] = c
  tolerance = next(iter(against.values()))["frontier"]["tolerance"]
  lines = [
      f"## {corpus}: {len(report['seeds'])} fresh seeds, tolerance ±{tolerance:.4f} bits/byte",
      "",
      "| method | Δ vs frontier at equal syncs | reads | competitive | "
      f"syncs saved (log-linear) | Δ vs DiLoCo at H_ref | Δ vs `{fewest}` ({fewest_syncs:g} syncs) |",
      "| --- | --- | --- | --- | --- | --- | --- |",
  ]
  reads = {}
  for method, cs in against.items():
    reads[method] = seed_stats.verdict(cs["frontier"]["loss"], tolerance)
    saved = report["syncs_saved"].get(cs["frontier"]["candidate"])
    saved_text = report_text.interval(syncs_saved.widest(saved), "{:+.1%}") if saved else ""
    href = report_text.interval(cs["href"]["loss"]) if "href" in cs else ""
    sparse = report_text.interval(paired(report, cs["frontier"]["candidate"], fewest))
    lines.append(
        f"| {method} | {report_text.interval(cs['frontier']['loss'])} | {reads[method]} | "
        f"{'yes' if reads[method] in COMPETITIVE else 'no'} | {saved_text} | {href} | {sparse} |"
    )
  verdict = g2_corpus_verdict(reads)
  lines += ["", f"G2 on {corpus}: **{verdict}**.", ""]
  return lines, verdict


def per_corpus(root: str, read) -> tuple[list[str], dict[str, Any]]:
  """Each corpus's section of a claim and its reading, from ``read(folder,
  corpus)`` (``(lines, reading)``, or ``None`` where not reported yet: the
  section says so and the reading is ``None``)."""
  lines, readings = [], {}
  for corpus in evidence.CORPORA:
    found = read(os.path.join(root, corpus), corpus)
    section, readings[corpus] = found or ([f"## {corpus}: not reported yet", ""], None)
    lines += section
  return lines, readings


def g2_claims(root: str) -> tuple[str, str]:
  """The markdown of G2 over its corpora and the verdict over both."""
  lines = [
      "# GASLoC's claim G2 (issue 40): many local steps, against DiLoCo's tuned frontier",
      "",
      "Written by `python -m experiments.gasloc_claims`; the rule is the G2 study's "
      "docstring's (`configs/studies/gossip_g2.py`), fixed before the reports.",
      "",
  ]
  def read(folder: str, corpus: str):
    report = read_summary(os.path.join(folder, "report", "summary.json"))
    return report and g2_section(report, corpus)

  sections, by_corpus = per_corpus(root, read)
  lines += sections
  verdict = over_corpora(by_corpus)
  lines += [f"**G2: {verdict}.**", ""]
  return "\n".join(lines), verdict


def g3_read(rows: dict[str, dict]) -> str:
  """G3's rule on one run's speed-up rows (``{network: row}``)."""
  if time_to_target.faster_somewhere(rows):
    return "reproduced"
  if time_to_target.faster_nowhere(rows):
    return "not reproduced"
  return "inconclusive"


def _longer_label(time: dict, label: str) -> str:
  (longer,) = [l for l in time["steps"] if l.startswith(label + "_steps")]
  return longer


def g3_section(time: dict, corpus: str, longer: dict | None = None) -> tuple[list[str], dict]:
  """One corpus's G3 table (every decentralized method's speed-up over the
  reference on each network; GASLoC given more steps where ``longer``, the
  ``longer`` phase's result, is there, as a measurement: DiLoCo was not given
  the same steps, so it gets no verdict) and GASLoC's reading by the rule:
  ``dict(equal_steps=...)``."""
  labels = {parse(l, gossip_g2)[0]: l for l in time["steps"] if parse(l, gossip_g2)}
  methods = [m for m in gossip_g2.METHODS if m in labels]
  more = _longer_label(longer, labels["gasloc"]) if longer else None
  columns = methods + ([f"gasloc, {gossip_g2.LONGER}× the steps"] if more else [])
  lines = [
      f"## {corpus}: {len(time['seeds'])} seeds, against `{time['reference']}`",
      "",
      "Each cell: the speed-up in simulated time to the reference's last eval on the "
      "same seed (geometric mean, paired t 95% interval), or how many seeds reached it.",
      "",
      "| slower site, inter-site latency | " + " | ".join(columns) + " |",
      "| --- |" + " ---: |" * len(columns),
  ]
  for net, by_label in time["speedups"].items():
    gbps, ms = net.split("gbps_")
    cells = [time_to_target.cell(by_label[labels[m]]) for m in methods]
    cells += [time_to_target.cell(longer["speedups"][net][more])] if more else []
    lines.append(f"| {gbps} Gbit/s, {ms} | " + " | ".join(cells) + " |")
  steps = [time_to_target.cell(time["steps"][labels[m]]) for m in methods]
  steps += [time_to_target.cell(longer["steps"][more])] if more else []
  lines.append("| in inner steps (any network) | " + " | ".join(steps) + " |")
  reads = dict(
      equal_steps=g3_read({n: rows[labels["gasloc"]] for n, rows in time["speedups"].items()}),
  )
  lines += ["", f"G3 on {corpus}: **{reads['equal_steps']}**."]
  if more:
    lines.append(
        f"The last column (the `longer` phase, added after the report) gives GASLoC "
        f"{gossip_g2.LONGER}× the steps while DiLoCo keeps its steps and its `H`: "
        "not a like-for-like comparison, so it is a measurement, not a verdict."
    )
  return lines + [""], reads


def g3_claims(root: str) -> tuple[str, str]:
  """The markdown of G3 over G2's corpora and the verdict over both (at equal
  steps; the steps-doubled phase beside it as a measurement)."""
  lines = [
      "# GASLoC's claim G3 (issue 40): heterogeneous bandwidth, time to DiLoCo's loss",
      "",
      "Written by `python -m experiments.gasloc_claims` from G2's runs replayed on "
      "two-site networks (`experiments.time_to_target`); the rule is fixed in its "
      "docstring before the reports.",
      "",
  ]
  def read(folder: str, corpus: str):
    time = read_summary(os.path.join(folder, "time", "time_to_target.json"))
    longer = read_summary(os.path.join(folder, "longer_time", "time_to_target.json"))
    return time and g3_section(time, corpus, longer)

  sections, by_corpus = per_corpus(root, read)
  lines += sections
  verdict = over_corpora({c: r and r["equal_steps"] for c, r in by_corpus.items()})
  lines += [f"**G3: {verdict}** (at equal steps).", ""]
  return "\n".join(lines), verdict


_G1 = flags.DEFINE_string("g1", "docs/studies/gossip_g1", "The G1 study's report folder.")
_G2 = flags.DEFINE_string("g2", "docs/studies/gossip_g2", "The G2 study's report folder.")


def main(argv: list[str]) -> None:
  del argv
  for root, readers in ((_G1.value, (g1_claims,)), (_G2.value, (g2_claims, g3_claims))):
    text = "\n".join(reader(root)[0] for reader in readers)
    write_markdown(os.path.join(root, "claims.md"), text)


if __name__ == "__main__":
  app.run(main)
