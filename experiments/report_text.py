"""The report's markdown: the study's table, its claims and its paired comparisons,
each as a sentence."""

from __future__ import annotations

import math
from typing import Any

from experiments import per_document, syncs_saved


def _pm(ms: tuple[float, float], fmt: str = "{:.3f}") -> str:
  m, s = ms
  return f"{fmt.format(m)} ± {fmt.format(s)}"


def _describe(config: Any) -> str:
  """A run's algorithm and its knobs, e.g. ``autoloco, lr_quadratic 10..80, momentum``."""
  a = config.algorithm
  parts = [a, f"K={config.num_workers}"]
  if a == "autoloco":
    i = config.interval
    parts += [
        f"{i.controller} H0={i.h} [{i.h_min}..{i.h_max}]",
        f"correction {config.autoloco.correction}",
    ]
    if config.autoloco.get("ratio_schedule"):
      parts.append(f"r_t replayed ({len(config.autoloco.ratio_schedule)} rounds)")
    on_change = config.autoloco.get("on_change", "keep")
    if on_change != "keep":
      parts.append(f"momentum buffer {on_change}")
  elif a != "ddp":
    parts.append(f"H={config.interval.h}")
  if a in ("diloco", "autoloco"):
    parts.append(f"outer α={config.diloco.alpha:g} β={config.diloco.beta:g}")
  parts += _sync_knobs(config)
  if config.data.partition != "iid":
    parts.append(config.data.partition)
  return ", ".join(parts)


def _sync_knobs(config: Any) -> list[str]:
  """What a run sends, where it differs from full float32 syncs of the whole
  model: streaming's ``P``, ``τ``, mixing and eager updates, the codec with its
  density and value bits (top-k) or block size, and error feedback."""
  parts = []
  st = config.get("stream")
  if st is not None and st.fragments > 1:
    parts.append(f"stream P={st.fragments} ({st.unit}) τ={st.tau}")
    if st.tau >= 1:
      parts.append(f"mix {st.mix:g}")
    if st.eager:
      parts.append("eager")
  c = config.get("compress")
  if c is not None and c.codec != "identity":
    if c.codec == "topk":
      parts.append(f"top-k {c.density:.1%} at {c.value_bits} bits")
    elif c.codec in ("fp8", "fp4", "int8", "int4"):
      parts.append(f"{c.codec} block {c.block_size}")
    else:
      parts.append(c.codec)
    if c.ef_beta is not None and c.ef_beta >= 0:
      parts.append(f"error feedback {c.ef_beta:g}")
  return parts


def _saving(value: float, reference: float) -> str:
  """``+37%`` (fewer than the reference), or ``5.0x as many``."""
  if value <= reference:
    return f"{1 - value / reference:+.0%}"
  return f"{value / reference:.1f}x as many"


#: The table's legend, above it.
LEGEND = (
    "Loss: final eval bits/byte on the validation split; ± is the sample standard deviation "
    "over seeds; `Δ`, `saved` and `×` compare means with the run's reference. `syncs`: "
    "full-model syncs, the times every parameter was synchronized (a streaming run's "
    "`P` fragment syncs count as one; `experiments/runlog.py`). `peak MB/s` (where "
    "shown): the most bytes per second a worker's link must carry in any round for its "
    "exchange to hide behind the compute it may overlap (`SimClock.advance`). `sim s`: "
    "simulated wall-clock seconds on that network (fixed compute time per "
    "step), `× ref` its ratio to the reference's (below 1 is faster); "
    "`to ref loss ×`: simulated time until the run's training-time eval first "
    "reaches the reference's last training-time eval on the same seed (one eval "
    "set for both), over the reference's whole time (mean over seeds; `never` if "
    "a seed does not reach it, with how many do)."
)


def markdown(study: Any, result: dict) -> str:
  """The study's table (mean ± spread over seeds) and its claims, in markdown."""
  head = _table_head(result["networks"], _peak_column(result))
  lines = [
      f"Seeds: {', '.join(map(str, result['seeds']))}. {LEGEND}",
      "",
  ]
  if result.get("interim"):
    lines += [f"**Interim report**: {result['interim']}, each with every label.", ""]
  if result.get("diverged"):
    lines += ["**Diverged, left out of the table**: " + "; ".join(result["diverged"]), ""]
  lines += [
      "| " + " | ".join(head) + " |",
      "| --- | --- | " + " | ".join(["---:"] * (len(head) - 2)) + " |",
  ]
  for label in result["labels"]:
    lines.append("| " + " | ".join(_table_row(study, result, label)) + " |")
  for name, c in result["claims"].items():
    lines += ["", claim_sentence(name, c)]
  if result.get("comparisons"):
    lines += [
        "",
        "Paired comparisons (per seed: candidate minus reference, final eval "
        "bits/byte; 95% Student-t interval over the seeds):",
        "",
    ]
    lines += [f"* {comparison_sentence(c)}" for c in result["comparisons"]]
  if result.get("worker_comparisons"):
    lines += [
        "",
        "The same, on the model one worker holds (worker 0's own weights; a "
        "decentralized method's headline above is the average of every worker's "
        "weights, a model it never forms; DiLoCo's and DDP's workers hold the "
        "global model):",
        "",
    ]
    lines += [f"* {comparison_sentence(c)}" for c in result["worker_comparisons"]]
  if result.get("syncs_saved"):
    lines += ["", *syncs_saved_table(result)]
  if result.get("per_document"):
    lines += ["", *per_document.table(result["per_document"])]
  return "\n".join(lines) + "\n"


def interval(entry: dict, fmt: str = "{:+.4f}") -> str:
  """``mean [low, high]``; values may be JSON's ``"nan"`` strings (``report._finite``)."""
  mean, low, high = (float(entry[k]) for k in ("mean", "low", "high"))
  return f"{fmt.format(mean)} [{fmt.format(low)}, {fmt.format(high)}]"




def _t_ci(entry: dict, quantity: str, fmt: str) -> str:
  """The t-interval ``[low, high]`` of ``entry[quantity + "_t"]``; "-" for a
  summary written before t-intervals were recorded."""
  t = entry.get(f"{quantity}_t")
  if not t:
    return "-"
  low, high = float(t["low"]), float(t["high"])
  return f"[{fmt.format(low)}, {fmt.format(high)}]"


def _tolerance_text(report_tolerance: float, power: dict) -> str:
  """Which "equal quality" the verdicts read: the tolerance fixed before the
  report (the tuning seeds' frontier's loss for 10% fewer syncs, kept in
  ``power``), with the report seeds' own figure beside it; a summary without a
  fixed one reads the report seeds' figure."""
  own = f"{report_tolerance:.4f} bits/byte"
  if "tolerance" not in power:
    return f"Tolerance (the frontier's loss for 10% fewer syncs): {own}."
  return (
      f"Tolerance: ±{power['tolerance']:.4f} bits/byte, the tuning seeds' frontier's"
      f" loss for 10% fewer syncs, fixed before the report; the verdicts read it"
      f" (on these seeds' frontier, 10% fewer syncs costs {own})."
  )


def syncs_saved_table(result: dict) -> list[str]:
  """Each label's syncs saved at equal loss and loss at equal syncs against the
  pooled log-linear frontier (``experiments/syncs_saved.py``), with the eval's
  size and the seed count, and beside it the saving against the pooled
  monotone frontier and the one reading of the two (``report.collect``)."""
  entries = result["syncs_saved"]
  first = next(iter(entries.values()))
  runs = result["runs"][first["candidate"]]
  tokens = {r["summary"].get("final_eval_tokens") for r in runs}
  monotone, readings = result["syncs_saved_monotone"], result["syncs_saved_reading"]
  fit = next(iter(readings.values()))["fit"]
  lines = [
      f"Syncs saved at equal loss against the tuned frontier ({', '.join(first['frontier'])}:"
      f" pooled log-linear fit, slope {first['slope']:.4f} bits/byte per e-fold of syncs,"
      f" residual sd {first['residual_sd']:.4f}); 95% intervals over {first['n']}"
      f" seeds, paired bootstrap and (t) paired Student-t; final eval on {', '.join(map(str, sorted(tokens, key=str)))}"
      f" tokens. {_tolerance_text(first['tolerance'], result.get('power') or {})}"
      f" Monotone: the same against the pooled"
      f" monotone frontier (any non-increasing curve in log syncs, no extrapolation),"
      f" the union of its two intervals: syncs saved over the seeds whose loss it"
      f" reaches, the Δ over every seed."
      + _lack_of_fit_text(fit),
      "",
      "| run | syncs | syncs saved at equal loss | (t) | Δ loss at equal syncs | (t) "
      "| seeds with S* in range | monotone: syncs saved (seeds) | monotone: Δ loss at equal syncs "
      "| reading (syncs saved) |",
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
  ]
  for label, e in entries.items():
    syncs = sum(r["summary"]["syncs"] for r in result["runs"][label]) / e["n"]
    m = monotone[label]
    lines.append(
        f"| `{label}` | {syncs:.1f} | {interval(e['saved'], '{:+.1%}')} | "
        f"{_t_ci(e, 'saved', '{:+.1%}')} | {interval(e['delta'], '{:+.4f}')} | "
        f"{_t_ci(e, 'delta', '{:+.4f}')} | {e['needed_in_range']}/{e['n']} | "
        + (f"{interval(syncs_saved.widest(m), '{:+.1%}')}" if m["needed_in_range"] else "none reached")
        + f" ({m['needed_in_range']}) | {interval(syncs_saved.widest(m, 'delta'), '{:+.4f}')} | "
        + _reading_text(readings[label])
        + " |"
    )
  gains = [
      f"`{label}` {result['stats'][label]['late_gain'][0]:+.4f}"
      for label in first["frontier"]
      if "late_gain" in result["stats"].get(label, {})
  ]
  if gains:
    lines += [
        "",
        "Still to gain over the last 20% of steps (training-time eval, bits/byte, "
        "mean over seeds): " + ", ".join(gains) + ".",
    ]
  power = result.get("power") or {}
  if power:
    lines += [
        "",
        f"Seeds planned: {power['seeds']} (the tuning seeds' sd {power['sd']:.4f} "
        f"needs {power['needed']} for a half-width of {power['tolerance']:.4f}; "
        f"{power['seeds']} are expected to reach "
        + ("-" if power["half_width"] is None else f"{float(power['half_width']):.4f}")
        + "; each comparison above states its own n).",
    ]
  return lines


def _reading_text(r: dict) -> str:
  """A syncs-saved reading (``syncs_saved.reading``) in a table cell: its verdict,
  the model read, and on a flat stretch why no saving is read."""
  if r["saved"] is None:
    return f"**{r['verdict']}** (monotone: flat stretch, no saving read)"
  return f"**{r['verdict']}** ({'line' if r['model'] == 'loglinear' else 'monotone'})"


def _lack_of_fit_text(fit: dict) -> str:
  """The sentence on ``syncs_saved.lack_of_fit``'s test of the line."""
  if not math.isfinite(fit["p"]):
    return " The line's lack of fit is not testable here (too few sync counts or seeds)."
  verdict = (
      " (the line is rejected: the reading column reads the monotone frontier)."
      if fit["p"] < 0.05
      else " (no lack of fit shown)."
  )
  return (
      f" The line's lack of fit against free levels: F({fit['df1']}, {fit['df2']})"
      f" = {fit['F']:.2f}, p = {fit['p']:.4f}{verdict}"
  )


def _peak_column(result: dict) -> bool:
  """Whether the table has a peak-bandwidth column: a study that plots it
  (``cost_plots``), whose every label measured it."""
  return "peak_bandwidth" in result.get("cost_plots", ()) and all(
      "peak_bandwidth" in s for s in result["stats"].values()
  )


def _table_head(nets, peak: bool = False) -> list[str]:
  return (
      [
          "run",
          "what",
          "final eval bits/byte",
          "Δ vs ref",
          "syncs",
          "syncs saved",
          "MB/worker",
      ]
      + (["peak MB/s"] if peak else [])
      + [f"sim s ({n})" for n in nets]
      + [f"× ref ({n})" for n in nets]
      + [f"to ref loss × ({n})" for n in nets]
  )


def _table_row(study: Any, result: dict, label: str) -> list[str]:
  """The cells of ``label``'s row; the ones against its reference empty when it
  has none (the loss's ``ref`` when another label is compared to it)."""
  st, nets = result["stats"], result["networks"]
  s = st[label]
  ref = result["reference"].get(label)
  r = st.get(ref) if ref else None
  cells = [f"`{label}`", _describe(study.runs[label]), _pm(s["final_eval_bpb"])]
  if r:
    cells.append(f"{s['final_eval_bpb'][0] - r['final_eval_bpb'][0]:+.3f}")
  else:
    cells.append("ref" if label in result["reference"].values() else "")
  cells.append(f"{s['syncs'][0]:.1f}")
  cells.append(_saving(s["syncs"][0], r["syncs"][0]) if r else "")
  cells.append(f"{s['bytes_per_worker'][0] / 1e6:.1f}")
  if _peak_column(result):
    cells.append(f"{s['peak_bandwidth'][0] / 1e6:.1f}")
  cells += [f"{s[f'sim_time@{n}'][0]:.1f}" for n in nets]
  cells += [
      f"{s[f'sim_time@{n}'][0] / r[f'sim_time@{n}'][0]:.2f}" if r else "" for n in nets
  ]
  for n in nets:
    t = s.get(f"time_to_ref_loss@{n}")
    reached = s.get(f"time_to_ref_loss_reached@{n}")
    never = "never" if reached is None else f"never ({reached}/{len(s['seeds'])} reach)"
    cells.append(
        "" if not r else never if t is None else f"{t / r[f'sim_time@{n}'][0]:.2f}"
    )
  return cells


def claim_sentence(name: str, c: dict) -> str:
  verdict = "**holds**" if c["holds"] else "**does not hold**"
  fewer = (
      f"{c['sync_saving']:.0%} fewer"
      if c["sync_saving"] >= 0
      else f"{-c['sync_saving']:.0%} more"
  )
  paired = ""
  if c.get("paired_deltas") and len(c["paired_deltas"]) > 1:
    paired = ", per seed " + ", ".join(f"{d:+.3f}" for d in c["paired_deltas"])
  text = (
      f"Claim `{name}`: `{c['candidate']}` uses {fewer} syncs "
      f"than `{c['reference']}` (needed: {c['min_saving']:.0%} fewer) with a final loss "
      f"{c['loss_delta']:+.3f} bits from it{paired} (seed spread of the reference "
      f"{c['tolerance']:.3f}): {verdict}."
  )
  if c.get("frontier_loss_at_syncs") is not None:
    text += (
        f" Against fixed-H DiLoCo at the same syncs (interpolated loss "
        f"{c['frontier_loss_at_syncs']:.3f}) it is "
        f"{'below (better than)' if c['below_frontier'] else 'above (worse than)'} "
        "the frontier."
    )
  if c.get("below_whole_frontier"):
    text += (
        f" Its loss is below every fixed-H point (the best: "
        f"{c['frontier_best'][1]:.3f} in {c['frontier_best'][0]:.0f} syncs), so no fixed "
        "H in this study reaches it."
    )
  if c.get("saving_at_equal_loss") is not None:
    text += (
        f" Fixed-H DiLoCo needs {c['frontier_syncs_at_loss']:.1f} syncs for the "
        f"same loss: a saving of {c['saving_at_equal_loss']:.0%} at equal loss."
    )
  return text


def comparison_sentence(c: dict) -> str:
  """One line of the report: the interval and its plain verdict."""
  ci = c["loss"]
  ref = (
      "the tuned frontier at equal syncs"
      if c["reference"] == "frontier"
      else (f"`{c['reference']}`")
  )
  words = dict(
      better="**better** (the interval excludes 0)",
      worse="**worse** (the interval excludes 0)",
      equal=f"**equal quality** (inside ±{c['tolerance']:.4g}"
      + (", though the interval excludes 0" if ci["low"] > 0 or ci["high"] < 0 else "")
      + ")",
      inconclusive=f"**inconclusive** (neither excludes 0 nor inside ±{c['tolerance']:.4g})",
  )[c["verdict"]]
  text = (
      f"`{c['candidate']}` vs {ref}: {ci['mean']:+.4f} bits/byte, 95% CI "
      f"[{ci['low']:+.4f}, {ci['high']:+.4f}] (n = {ci['n']}): {words}."
  )
  sv = c.get("syncs_saved")
  if sv:
    what = (
        "fewer syncs than the frontier needs for its loss"
        if c["reference"] == ("frontier")
        else "fewer syncs"
    )
    text += (
        f" {sv['mean']:+.0%} {what} (CI [{sv['low']:+.0%}, {sv['high']:+.0%}]"
        + (
            f", on the {c['frontier_reaches']} of {ci['n']} seeds where the frontier "
            "reaches it)"
            if c["frontier_reaches"] < ci["n"]
            else ")"
        )
        + "."
    )
  return text
