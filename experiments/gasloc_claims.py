r"""GASLoC's claim G1 (issue 40), read by the rule the G1 study's docstring fixed
before its report (``configs/studies/gossip_g1.py``), from that report:

  python -m experiments.gasloc_claims --dir docs/studies/gossip_g1

Reads ``<dir>/report/summary.json`` (the sweep's report) and writes
``<dir>/claims.md``: per graph, GASLoC's final bits/byte, GASLoC minus each
baseline and every method minus DDP, each a paired t 95% interval read by the
rule of every table (``seed_stats.verdict``: better, equal, worse,
inconclusive), and the claim's verdict.

The rule: *reproduced* if on two graphs or more GASLoC is better than both
step-size-tuned decentralized baselines, ``gasloc_g0`` (gossip AdamW with its
step tuned) and NoLoCo; *not reproduced* if on no graph it is better than both
and on two graphs or more one of them is equal or better than GASLoC (GASLoC
minus it reads equal or worse); *inconclusive* otherwise. ``gossip`` (its step
untuned) is shown beside them and counts for nothing.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from configs.studies import gossip_g1
from experiments import seed_stats

#: The baselines G1's verdict counts: each decentralized method with its step tuned.
STEP_TUNED = ("gasloc_g0", "noloco")
#: Every baseline shown, in column order.
BASELINES = ("gasloc_g0", "noloco", "gossip")


def parse(label: str) -> tuple[str, str] | None:
  """``(method, graph)`` of a G1 label (``gasloc_g0_ring_eta1p5_alpha0p5``);
  ``None`` for DDP's."""
  for method in sorted(gossip_g1.METHODS, key=len, reverse=True):
    for graph in gossip_g1.TOPOLOGIES:
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
  if c is None:
    return ""
  loss = c["loss"]
  return f"{loss['mean']:+.4f} [{loss['low']:+.4f}, {loss['high']:+.4f}] {c['verdict']}"


def claims(root: str) -> tuple[str, str]:
  """The markdown of G1 and its verdict (``"not reported"`` before the report)."""
  path = os.path.join(root, "report", "summary.json")
  head = [
      "# GASLoC's claim G1 (issue 40): one step per communication, by graph",
      "",
      "Written by `python -m experiments.gasloc_claims`; the rule is the G1 study's "
      "docstring's (`configs/studies/gossip_g1.py`), fixed before the report.",
      "",
  ]
  if not os.path.exists(path):
    return "\n".join(head + ["Not reported yet.", ""]), "not reported"
  with open(path) as f:
    report = json.load(f)
  by_graph = reads(report)
  sizes = {r["summary"]["final_eval_tokens"] for runs in report["runs"].values() for r in runs}
  tolerance = report["comparisons"][0]["tolerance"]
  lines = head + [
      f"{len(report['seeds'])} fresh seeds ({report['seeds'][0]}-{report['seeds'][-1]}), "
      f"final eval of {', '.join(f'{n:,}' for n in sorted(sizes))} tokens, "
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
  lines += ["", f"**G1: {result}.**", ""]
  return "\n".join(lines), result


_DIR = flags.DEFINE_string("dir", "docs/studies/gossip_g1", "The G1 study's report folder.")


def main(argv: list[str]) -> None:
  del argv
  text, _ = claims(_DIR.value)
  out = os.path.join(_DIR.value, "claims.md")
  with open(out, "w") as f:
    f.write(text)
  print(text)
  print(f"Wrote {out}")


if __name__ == "__main__":
  app.run(main)
