"""The evidence study's tables, from its phases' reports, for docs/results.md.

  python -m experiments.evidence_tables                  # docs/studies/evidence_v2
  python -m experiments.evidence_tables --dir runs/studies/evidence-v2-quick

Reads ``<dir>/<regime>_<corpus>/<phase>/summary.json`` (written by
``experiments/sweep.py`` for ``configs/studies/evidence.py``) and writes
``<dir>/tables.md``: per regime and corpus, the regime check, the tuned pairs,
every design's syncs saved at equal loss on the tuning seeds, and the fresh-seed
report with its intervals and seed count. Phases not yet run are listed as missing.
Beside ``<dir>``, the compression studies' reports, if written, give
``compression/tables.md`` (the 30-sync rows against DiLoCo) and
``compression_many/tables.md`` (issue 42's rows against DiLoCo at ``H_ref`` and
the frontier, then the issue's targets row by row; an interim report's if the
study has not finished).
"""

from __future__ import annotations

import os
import sys

from configs.studies import compression_many, evidence
from experiments import report_text
from experiments.report import read_summary


def _cmd(phase: str, regime: str, corpus: str) -> str:
  return (
      f"`python -m experiments.sweep --study "
      f"configs/studies/evidence.py:{phase},{regime},{corpus}`"
  )


def _ci(c: dict, fmt: str = "{:+.4f}") -> str:
  return report_text.interval(c["loss"], fmt)


def regime_section(summary: dict, regime: str, corpus: str) -> list[str]:
  (c,) = summary["comparisons"]
  hw = float(c["loss"]["half_width"])  # "inf" in the JSON for one seed
  moves = abs(c["loss"]["mean"]) > 3 * hw
  return [
      f"Regime check (DiLoCo with the paper's (0.7, 0.9), untuned, tuning seeds "
      f"{', '.join(map(str, summary['seeds']))}; {_cmd('regime', regime, corpus)}): "
      f"`{c['candidate']}` minus `{c['reference']}` = {_ci(c)} bits/byte; "
      f"{'more' if moves else 'less'} than 3 half-widths ({3 * hw:.4f}) from 0: "
      + (
          "**H matters here**."
          if moves
          else "**not resolved by this check**; the tuned frontier below decides."
      ),
      "",
  ]


def tune_section(summary: dict, regime: str, corpus: str, quick: bool) -> list[str]:
  stats = summary["stats"]
  hs = evidence.frontier_hs(bool(summary.get("quick", quick)))
  # The pairs this phase ran per H (the full grid's TOP or a pruned cell's fewer).
  kept = max(sum(label.startswith(f"diloco_h{h}_") for label in stats) for h in hs)
  lines = [
      f"Tuned DiLoCo (tuning seeds {', '.join(map(str, summary['seeds']))}: the best "
      f"{kept} pairs per H of the seed-0 grid {_cmd('coarse', regime, corpus)}, "
      f"then {_cmd('tune', regime, corpus)}):",
      "",
      "| H | tuned (α, β) | bits/byte (mean ± sd) | runner-up | its bits/byte |",
      "| ---: | --- | --- | --- | --- |",
  ]
  for h in hs:
    scored = sorted(
        (s["final_eval_bpb"], label)
        for label, s in stats.items()
        if label.startswith(f"diloco_h{h}_")
    )
    (best, bl), rest = scored[0], scored[1:]
    a, b = _pair(h, bl)
    cells = [str(h), f"({a:g}, {b:g})", f"{best[0]:.4f} ± {best[1]:.4f}"]
    if rest:
      a2, b2 = _pair(h, rest[0][1])
      cells += [f"({a2:g}, {b2:g})", f"{rest[0][0][0]:.4f} ± {rest[0][0][1]:.4f}"]
    else:
      cells += ["", ""]
    lines.append("| " + " | ".join(cells) + " |")
  return lines + [""]


def _pair(h: int, label: str) -> tuple[float, float]:
  """The ``(alpha, beta)`` of a tune run at ``H``, found among every grid's
  pairs by its label (a run's hyperparameters come from the study's grids,
  not from parsing its name)."""
  grids = set(evidence.QUICK_GRID) | {
      (a, b) for a in evidence.ALPHAS for betas in evidence.BETAS.values() for b in betas
  }
  return next(p for p in grids if evidence.diloco_label(h, *p) == label)


def design_section(summary: dict, regime: str, corpus: str) -> list[str]:
  """The design phase: every design's syncs saved at equal loss and loss at
  equal syncs against the tuned frontier, with bootstrap intervals over the
  tuning seeds (choosing, not reporting: 3 seeds resolve only large effects)."""
  best, by_saving = evidence.choose(summary["syncs_saved"])
  rule = (
      "saves the most syncs at equal loss"
      if by_saving
      else "no saving is defined (the fitted frontier does not fall); lowest at equal syncs"
  )
  lines = [
      f"Designs on the tuning seeds ({_cmd('design', regime, corpus)}); the design "
      f"chosen for the report: `{best}` ({rule}).",
      "",
  ]
  return lines + report_text.syncs_saved_table(summary) + [""]


def _comparison_row(c: dict) -> str:
  """``| candidate | reference | Δ, 95% CI | verdict | syncs saved |`` of a
  ``seed_stats.compare`` result."""
  sv = c.get("syncs_saved")
  if sv:
    sv = {k: float(sv[k]) for k in ("mean", "low", "high")}
  saved = "" if not sv else f"{sv['mean']:+.0%} [{sv['low']:+.0%}, {sv['high']:+.0%}]"
  if sv and c["frontier_reaches"] < c["loss"]["n"]:
    saved += f" ({c['frontier_reaches']} of {c['loss']['n']} seeds)"
  ref = "tuned frontier" if c["reference"] == "frontier" else f"`{c['reference']}`"
  return f"| `{c['candidate']}` | {ref} | {_ci(c)} | {c['verdict']} | {saved} |"


def report_section(summary: dict, regime: str, corpus: str) -> list[str]:
  stats = summary["stats"]
  lines = [
      f"Report on fresh seeds {', '.join(map(str, summary['seeds']))} "
      f"({_cmd('report', regime, corpus)}):",
      "",
      "| run | bits/byte (mean ± sd) | syncs |",
      "| --- | --- | ---: |",
  ]
  for label in summary["labels"]:
    s = stats[label]
    lines.append(
        f"| `{label}` | {s['final_eval_bpb'][0]:.4f} ± {s['final_eval_bpb'][1]:.4f} | "
        f"{s['syncs'][0]:.1f} |"
    )
  lines += [
      "",
      "| candidate | reference | Δ bits/byte, 95% CI | verdict | syncs saved, 95% CI |",
      "| --- | --- | --- | --- | --- |",
  ]
  lines += [_comparison_row(c) for c in summary["comparisons"]]
  lines += ["", *report_text.syncs_saved_table(summary)]
  frontier = summary["frontier"]
  first, last = frontier[0], frontier[-1]
  for c in summary["comparisons"]:
    if (c["candidate"], c["reference"]) == (last, first):
      hw = float(c["loss"]["half_width"])
      d_syncs = stats[first]["syncs"][0] - stats[last]["syncs"][0]
      slope = c["loss"]["mean"] / d_syncs if d_syncs else float("nan")
      lines += [
          "",
          f"Frontier slope (tuned): `{last}` minus `{first}` = {_ci(c)} bits/byte over "
          f"{d_syncs:.0f} fewer syncs ({1e3 * slope:+.2f} millibits/byte per sync "
          f"saved); {'more' if c['loss']['mean'] > 3 * hw else 'less'} than 3 "
          f"half-widths ({3 * hw:.4f}): "
          + (
              "**H matters in this regime**."
              if c["loss"]["mean"] > 3 * hw
              else "**the tuned frontier is flat in this regime**."
          ),
      ]
  return lines + [""]


def plain_comparison_section(root: str) -> list[str]:
  """AutoLoCo against DiLoCo at ``H_ref`` in every reported cell, paired by seed:
  the syncs of each, the final bits/byte difference with its 95% t-interval, and
  on how many seeds AutoLoCo is lower. The comparison beside the frontier metric:
  does AutoLoCo both sync less and reach a resolved lower loss?"""
  lines = [
      "## AutoLoCo against DiLoCo at `H_ref`, paired by seed",
      "",
      "| cell | syncs (AutoLoCo / DiLoCo) | Δ bits/byte, 95% t-interval | seeds lower |",
      "| --- | --- | --- | --- |",
  ]
  for regime in evidence.REGIMES:
    for corpus in evidence.CORPORA:
      summary = read_summary(os.path.join(root, f"{regime}_{corpus}", "report", "summary.json"))
      if not summary:
        continue
      quick = bool(summary.get("quick"))
      ref = f"diloco_h{evidence.h_ref(quick)}"
      for c in summary["comparisons"]:
        if (c["candidate"], c["reference"]) != ("autoloco", ref):
          continue
        per_seed = c["loss"]["per_seed"]
        lower = sum(d < 0 for d in per_seed)
        ref_syncs = sum(c["reference_syncs"]) / len(c["reference_syncs"])
        lines.append(
            f"| {regime}/{corpus} | {c['syncs']:.1f} / {ref_syncs:.0f} | {_ci(c)} | "
            f"{lower}/{len(per_seed)} |"
        )
  return lines + [""]


def peak_of(s: dict) -> float:
  """A row's mean peak bandwidth; for runs trained before the clock logged it
  (shared with the evidence study), an unoverlapped exchange's bytes over one
  inner step (algorithms.md 6b), an exchange being one of the trainer's
  communication events."""
  if "peak_bandwidth" in s:
    return s["peak_bandwidth"][0]
  from configs.studies import base

  events = s.get("sync_events", s["syncs"])  # one exchange each (runlog.load_run)
  return s["bytes_per_worker"][0] / events[0] / base.STEP_TIME


def compression_section(
    summary: dict,
    ref: str = "diloco",
    command: str = "configs/studies/compression.py:report",
) -> list[str]:
  """Each row against ``ref`` (its label in ``summary``): loss interval, bytes and
  peak-bandwidth ratios, seed count; with a ``frontier`` comparison (a study
  with a DiLoCo frontier), the Δ against it at the row's syncs as well. The rows:
  ``ref`` and every label compared with it."""
  stats = summary["stats"]
  base_stats = stats[ref]
  by_cand = {c["candidate"]: c for c in summary["comparisons"] if c["reference"] == ref}
  front = {c["candidate"]: c for c in summary["comparisons"] if c["reference"] == "frontier"}
  head = ("| run | bits/byte (mean ± sd) | syncs | MB/worker | bytes ÷ | peak MB/s | peak ÷ "
          f"| sim s (hetero) | n | Δ vs `{ref}`, 95% CI | verdict |")
  if front:
    head += " Δ vs frontier at its syncs, 95% CI | verdict |"
  lines = [
      f"Fresh seeds {', '.join(map(str, summary['seeds']))} (`python -m "
      f"experiments.sweep --study {command}`); ratios are `{ref}`'s value over the "
      "row's (higher is less); syncs are full-model syncs (`experiments/runlog.py`):",
      "",
      head,
      "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
      + (" --- | --- |" if front else ""),
  ]
  for label in [l for l in summary["labels"] if l == ref or l in by_cand]:
    s = stats[label]
    peak = peak_of(s)
    c = by_cand.get(label)
    cells = [
        f"`{label}`",
        f"{s['final_eval_bpb'][0]:.4f} ± {s['final_eval_bpb'][1]:.4f}",
        f"{s['syncs'][0]:.0f}",
        f"{s['bytes_per_worker'][0] / 1e6:.2f}",
        f"{base_stats['bytes_per_worker'][0] / s['bytes_per_worker'][0]:.1f}×",
        f"{peak / 1e6:.3g}",
        f"{peak_of(base_stats) / peak:.1f}×" if peak else "",
        f"{s.get('sim_time@hetero', [float('nan')])[0]:.1f}",
        f"{len(s['seeds'])}",
        _ci(c) if c else "ref",
        c["verdict"] if c else "",
    ]
    if front:
      f = front.get(label)
      cells += [_ci(f), f["verdict"]] if f else ["", ""]
    lines.append("| " + " | ".join(cells) + " |")
  return lines + [""]


#: How each target kind reads in the table.
TARGET_WORDS = {"bytes": "fewer bytes", "peak": "lower peak bandwidth"}


def targets_section(summary: dict, ref: str, targets: dict) -> list[str]:
  """The issue's targets row by row: the cost ratio against ``ref`` a row must
  reach (``targets``: ``{"bytes" | "peak": (ratio, rows)}``), and whether its
  quality is equal to ``ref``'s or better by the comparison's verdict (the
  interval read against the cell's tolerance). A target is met when both are."""
  stats = summary["stats"]
  by_cand = {c["candidate"]: c for c in summary["comparisons"] if c["reference"] == ref}
  cost = {
      "bytes": lambda s: stats[ref]["bytes_per_worker"][0] / s["bytes_per_worker"][0],
      "peak": lambda s: peak_of(stats[ref]) / peak_of(s) if peak_of(s) else float("inf"),
  }
  lines = [
      f"Against the issue's targets (ratios are `{ref}`'s value over the row's; "
      "quality: the Δ's verdict above):",
      "",
      "| run | target | reached | cost | quality | target met |",
      "| --- | --- | ---: | --- | --- | --- |",
  ]
  for kind, (ratio, rows) in targets.items():
    for label in [r for r in rows if r in stats and r in by_cand]:
      got = cost[kind](stats[label])
      verdict = by_cand[label]["verdict"]
      cost_ok, quality_ok = got >= ratio, verdict in ("equal", "better")
      met = "yes" if cost_ok and quality_ok else (
          "no" if not cost_ok or verdict == "worse" else "not resolved")
      lines.append(
          f"| `{label}` | ≥ {ratio:g}× {TARGET_WORDS[kind]} | {got:.2f}× | "
          f"{'met' if cost_ok else 'missed'} | {verdict} | {met} |"
      )
  return lines + [""]


def plot_compression(summary: dict, out_dir: str) -> str:
  """Final loss (mean ± sd over seeds) against bytes per worker and against peak
  bandwidth, one point per row, log x; writes ``loss_vs_bytes_and_peak.png``."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  stats = summary["stats"]
  fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
  for label in summary["labels"]:
    s = stats[label]
    y, dy = s["final_eval_bpb"]
    peak = peak_of(s)
    for ax, x in zip(axes, (s["bytes_per_worker"][0], peak)):
      ax.errorbar(x, y, yerr=dy, fmt="o", capsize=3, label=label)
      ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
  axes[0].set_xlabel("bytes sent per worker")
  axes[1].set_xlabel("peak bandwidth to hide an exchange (bytes/s)")
  axes[0].set_ylabel("final eval bits/byte (mean ± sd, fresh seeds)")
  for ax in axes:
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
  fig.tight_layout()
  path = os.path.join(out_dir, "loss_vs_bytes_and_peak.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def tables(root: str) -> str:
  quick = "quick" in os.path.basename(os.path.normpath(root))
  out = [
      "# Evidence study: tables",
      "",
      f"Written by `python -m experiments.evidence_tables --dir {root}` from the phase "
      "reports beside this file. Loss: final eval bits/byte. Δ: candidate minus "
      "reference, paired by seed; 95% Student-t interval. Syncs saved: against the "
      "pooled log-linear frontier, paired bootstrap 95% interval "
      "(`experiments/syncs_saved.py`).",
      "",
      *plain_comparison_section(root),
  ]
  for regime in evidence.REGIMES:
    for corpus in evidence.CORPORA:
      here = os.path.join(root, f"{regime}_{corpus}")
      phases = evidence.regime_phases(regime)
      got = {p: read_summary(os.path.join(here, p, "summary.json")) for p in phases}
      interim = None if got["report"] else read_summary(
          os.path.join(here, "report", "interim", "summary.json")
      )
      out += [f"## {regime} regime, {corpus}", ""]
      if got.get("regime"):
        out += regime_section(got["regime"], regime, corpus)
      if got["tune"]:
        out += tune_section(got["tune"], regime, corpus, quick)
      if got["design"]:
        out += design_section(got["design"], regime, corpus)
      if got["report"]:
        out += report_section(got["report"], regime, corpus)
      elif interim:
        out += [f"**Interim report**: {interim['interim']}, each with every label.", ""]
        out += report_section(interim, regime, corpus)
      missing = [p for p in phases if not got[p]]
      if missing:
        out += [f"Still to run: {', '.join(missing)}.", ""]
  return "\n".join(out)


def main(argv: list[str]) -> None:
  root = evidence.DOCS_DIR
  if "--dir" in argv:
    root = argv[argv.index("--dir") + 1]
  text = tables(root)
  path = os.path.join(root, "tables.md")
  os.makedirs(root, exist_ok=True)
  with open(path, "w") as f:
    f.write(text + "\n")
  print(text)
  # The compression study's report sits beside the evidence study's folder.
  comp = read_summary(
      os.path.join(os.path.dirname(root), "compression", "report", "summary.json")
  )
  if comp:
    text = "\n".join(
        ["# Compressed and streaming syncs: table", ""] + compression_section(comp)
    )
    with open(os.path.join(os.path.dirname(root), "compression", "tables.md"), "w") as f:
      f.write(text + "\n")
    print(text)
    plot_compression(comp, os.path.join(os.path.dirname(root), "compression"))
  # Issue 42's rows in the many-rounds cell, against DiLoCo at H_ref (its plots
  # are the study report's own, drawn through the frontier).
  many = os.path.join(os.path.dirname(root), "compression_many")
  done = read_summary(os.path.join(many, "report", "summary.json"))
  interim = None if done else read_summary(
      os.path.join(many, "report", "interim", "summary.json"))
  if done or interim:
    summary, ref = done or interim, f"diloco_h{evidence.h_ref(False)}"
    text = "\n".join(
        ["# Compressed and streaming syncs, many rounds: table", ""]
        + ([f"**Interim report**: {summary['interim']}, each with every label.", ""]
           if interim else [])
        + compression_section(summary, ref=ref,
                              command="configs/studies/compression_many.py:report")
        + targets_section(summary, ref, compression_many.TARGETS)
    )
    with open(os.path.join(many, "tables.md"), "w") as f:
      f.write(text + "\n")
    print(text)


if __name__ == "__main__":
  main(sys.argv[1:])
