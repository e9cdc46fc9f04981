r"""Each study's page, generated from its committed reports and its claim
records; no verdict is typed:

  python -m experiments.study_page                       # every study
  python -m experiments.study_page --study configs/studies/schedule.py

writes ``docs/studies/<name>/README.md`` (the study's ``DOCS_DIR``): what it
asks (its module docstring's first paragraph), how to run, restore and record
it, the claims read from it (``configs/claims.py``), per cell each phase's
seeds, runs and best label, the report phase's paired comparisons (each
re-read by ``seed_stats.verdict``) and syncs saved (``syncs_saved.reading``),
and at most four of its committed plots.
"""

from __future__ import annotations

import glob
import importlib
import math
import os

from absl import app, flags

from configs import claims as records
from experiments import claims, engine, report_text, results_page, seed_stats
from experiments.runlog import read_summary

#: Every study, in the order of docs/results.md.
STUDIES = (
    "evidence", "schedule", "recipe", "compression_many", "compression", "noloco_n1", "gossip_g1",
    "gossip_g2", "ablations", "attention", "decentralized", "heterogeneity",
)
MAX_PLOTS = 4


def docs_dir(module) -> str:
  """Where a study reports: its ``DOCS_DIR``, else ``docs/studies/<name>``."""
  return getattr(module, "DOCS_DIR", os.path.join("docs", "studies", engine.module_name(module)))


def phases(module, cell: str) -> list[tuple[str, str]]:
  """``(phase, report folder)`` of a cell; a study without phases has one,
  its folder."""
  if not engine.is_phased(module):
    return [("", docs_dir(module))]
  c = engine.parse(module, cell)
  return [(p, engine.report_dir(module, c, p)) for p in engine.phases(module, c)]


def _best(summary: dict) -> str:
  """The label with the lowest mean final loss (bits/byte; the first studies'
  summaries hold nats, ``final_eval_loss``)."""
  stats = summary["stats"]
  key = "final_eval_bpb" if "final_eval_bpb" in next(iter(stats.values())) else "final_eval_loss"
  label = min(stats, key=lambda l: stats[l][key][0])
  m, s = stats[label][key]
  return f"`{label}` {m:.4f} ± {s:.4f}" + ("" if key == "final_eval_bpb" else " nats")


def phase_table(module, cell: str) -> list[str]:
  """One row per phase: seeds, runs, the lowest mean final bits/byte."""
  lines = ["| phase | seeds | labels | lowest mean final loss | report |", "| --- | --- | ---: | --- | --- |"]
  for phase, where in phases(module, cell):
    summary = read_summary(os.path.join(where, "summary.json"))
    if summary is None:
      lines.append(f"| {phase or 'report'} | not run | | | |")
      continue
    seeds = summary["seeds"]
    span = f"{len(seeds)} ({seeds[0]}-{seeds[-1]})" if len(seeds) > 1 else str(seeds[0])
    link = os.path.relpath(os.path.join(where, "results.md"), docs_dir(module))
    lines.append(
        f"| {phase or 'report'} | {span} | {len(summary['labels'])} | {_best(summary)} | [{link}]({link}) |"
    )
  return lines


def _interval(entry: dict) -> str:
  return f"{entry['mean']:+.4f} [{entry['low']:+.4f}, {entry['high']:+.4f}]"


def comparisons(summary: dict) -> list[str]:
  """The report's paired comparisons, each read again by the one verdict rule."""
  rows = summary.get("comparisons", []) + summary.get("worker_comparisons", [])
  if not rows:
    return []
  lines = [
      "| candidate | reference | model | Δ bits/byte [95%] | n | tolerance | reading |",
      "| --- | --- | --- | --- | ---: | ---: | --- |",
  ]
  for c in rows:
    loss = c["loss"]
    if math.isfinite(float(loss["half_width"])):
      cell, word = _interval(loss), seed_stats.verdict(loss, c["tolerance"])
    else:  # one seed: no interval, no reading
      cell, word = f"{float(loss['mean']):+.4f} (no interval)", "-"
    lines.append(
        f"| `{c['candidate']}` | `{c['reference']}` | {c.get('model', 'headline')} | "
        f"{cell} | {loss['n']} | ±{c['tolerance']:.4f} | {word} |"
    )
  return lines + [""]


def report_section(module, cell: str) -> list[str]:
  """Each phase's paired comparisons and syncs saved, where it has them (the
  tuning phases choose by their ranking, in their own reports)."""
  out = []
  for phase, where in phases(module, cell):
    summary = read_summary(os.path.join(where, "summary.json"))
    if not summary or phase in ("coarse", "tune"):
      continue
    if not (summary.get("comparisons") or summary.get("syncs_saved")):
      continue
    seeds = summary["seeds"]
    out += [f"### {phase or 'Report'} ({len(seeds)} seeds, {seeds[0]}-{seeds[-1]})", ""]
    out += comparisons(summary)
    if summary.get("syncs_saved"):
      out += report_text.syncs_saved_table(summary) + [""]
  return out


def claims_section(module) -> list[str]:
  """The claims read from this study's reports, as docs/results.md shows them."""
  root = docs_dir(module) + "/"
  ids = tuple(
      c.id for c in records.CLAIMS
      if any(leaf.report.startswith(root) for leaf in claims.leaves(c))
  )
  if not ids:
    return []
  rs = results_page.readings()
  return ["## Claims", "", *results_page.table(ids, rs), "", *results_page.notes(ids), ""]


def plots(module) -> list[str]:
  """At most :data:`MAX_PLOTS` of the study's committed plots."""
  root = docs_dir(module)
  found = sorted(glob.glob(os.path.join(root, "**", "*.png"), recursive=True))[:MAX_PLOTS]
  return [f"![{os.path.relpath(p, root)}]({os.path.relpath(p, root)})" for p in found]


def page(name: str) -> str:
  """The markdown of study ``name``'s page."""
  module = importlib.import_module(f"configs.studies.{name}")
  doc = (module.__doc__ or "").strip().split("\n\n")
  path = f"configs/studies/{name}.py"
  lines = [
      f"# The `{name}` study",
      "",
      f"Generated by `python -m experiments.study_page --study {path}` from the committed "
      "reports and `configs/claims.py`; not edited by hand. The design, grids and "
      f"rules are the docstring of `{path}`; every claim's reading is in `docs/results.md`.",
      "",
      " ".join(doc[0].split()),
      "",
      "## Run, restore, record",
      "",
      "Finished runs are kept as records in `docs/runs` (`experiments/records.py`): "
      "restore them, then run (finished runs are skipped), then record the new ones:",
      "",
      f"    python -m experiments.archive --study {path} --restore",
  ]
  for cell in engine.cells(module):
    arg = f":{cell}" if cell else ""
    extra = " --phases all --copies 2" if engine.is_phased(module) else f" --report_dir {docs_dir(module)}"
    lines.append(f"    python -m experiments.sweep --study {path}{arg}{extra}")
  lines += [f"    python -m experiments.archive --study {path}", "", *claims_section(module)]
  for cell in engine.cells(module):
    lines += [f"## {cell.replace(',', '/') or 'Phases'}", "", *phase_table(module, cell), ""]
    lines += report_section(module, cell)
  shown = plots(module)
  if shown:
    lines += ["## Plots", "", *shown, ""]
  if os.path.exists(os.path.join(docs_dir(module), "history.md")):
    lines += ["Status notes kept from the sessions that ran it: [history.md](history.md) (not maintained)."]
  return "\n".join(lines).rstrip() + "\n"


def write(names=STUDIES) -> list[str]:
  """Writes each study's page; returns the paths."""
  out = []
  for name in names:
    module = importlib.import_module(f"configs.studies.{name}")
    path = os.path.join(docs_dir(module), "README.md")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write(page(name))
    out.append(path)
  return out


_STUDY = flags.DEFINE_multi_string("study", [], "Study files (default: every study).")


def main(argv: list[str]) -> None:
  del argv
  names = [os.path.splitext(os.path.basename(p))[0] for p in _STUDY.value] or STUDIES
  for path in write(names):
    print(f"Wrote {path}")


if __name__ == "__main__":
  app.run(main)
