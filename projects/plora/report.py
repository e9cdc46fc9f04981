"""``plora.md``: the tables of a PLoRA sweep, rendered from its ``plora.json``.

Every number on the page comes from the JSON the sweep wrote
(:mod:`projects.plora.sweep`); ``python -m projects.plora.sweep --render_only``
renders the page again from it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence

RUNS = (
    ("sequential", "one after another"),
    ("packed", "packed (planner)"),
    ("one_group", "one group, padded"),
    ("by_rank", "groups of equal rank"),
)

# Fixed text: why packing gains little on a small CPU (the numbers are in the tables).
WHY = (
    "On a CPU one small job already uses most of the compute there is, so packing can "
    "only recover idle cores and per-step overheads (loop, optimizer, small-op "
    "dispatch); the makespan gain comes mostly from compiling one program per group "
    "instead of one per job. On a GPU a small LoRA job leaves most of the chip idle and "
    "a frozen 7B-70B base is read from memory once per step for all packed jobs: that is "
    "where PLoRA's reference gains (Yan et al. 2025: up to 12.8x throughput, 7.52x "
    "makespan) come from."
)

MIB = 2**20


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
  """A markdown table: one header row, then one row per sequence of cells."""
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(str(x) for x in row) + " |" for row in rows]
  return lines + [""]


def _setup(out: dict) -> list[str]:
  b, m = out["base"], out["meta"]
  return table(
      ("setup", "value"),
      (
          (
              "machine",
              f"{m['machine']}, JAX {m['jax']} on {m['backend']} x{m['devices']}",
          ),
          (
              "load average, start / end",
              f"{m['load_start'][0]:.1f} / {m['load_end'][0]:.1f}",
          ),
          ("whole experiment s", f"{m['wall_s']:.0f}"),
          ("base", f"{b['params']:,} parameters ({b['model']})"),
          ("base pretraining", f"{b['steps']} AdamW steps x {b['batch_size']} sequences"),
          ("base loaded from the cache", b["cached"]),
          ("sequence length (bytes)", out["seq_len"]),
          ("fine-tune share of each held-out play", f"{out['train_fraction']:.0%}"),
          (
              "fine-tune / eval sequences",
              f"{out['ft_train_sequences']} / {out['ft_eval_sequences']}",
          ),
          ("base eval loss (nats/byte)", f"{b['ft_eval_loss']:.4f}"),
          (
              "jobs x steps x sequences",
              f"{len(out['configs'])} x {out['steps']} x {out['batch_size']}",
          ),
          ("adapter weight decay", out["weight_decay"]),
      ),
  )


def _jobs(out: dict) -> list[str]:
  packed, seq = out["runs"]["packed"]["eval_loss"], out["runs"]["sequential"]["eval_loss"]
  params = out["equality"]["max_param_diff"]
  header = (
      "job",
      "rank",
      "alpha",
      "lr",
      "targets",
      "eval loss packed",
      "eval loss alone",
  )
  rows = [
      (c["name"], c["rank"], f"{c['alpha']:g}", f"{c['lr']:g}", "+".join(c["targets"]))
      + (f"{packed[c['name']]:.5f}", f"{seq[c['name']]:.5f}")
      + (f"{abs(packed[c['name']] - seq[c['name']]):.1e}", f"{params[c['name']]:.1e}")
      for c in out["configs"]
  ]
  return table(header + ("abs diff", "max param diff"), rows)


def _runs(out: dict) -> list[str]:
  header = ("run", "groups", "compile s", "train s", "train CPU s", "wall s", "tokens/s")
  header += ("tokens/CPU s", "planner estimate s", "load avg")
  rows = []
  for key, label in RUNS:
    x = out["runs"].get(key)
    if x is None:
      continue
    label += f" (the {x['same_as']} run)" if x.get("same_as") else ""
    times = (x["compile_s"], x["train_s"], x["train_cpu_s"], x["wall_s"])
    rows.append(
        (label, len(x["groups"]))
        + tuple(f"{t:.1f}" for t in times)
        + (f"{x['tokens_per_s']:.0f}", f"{x['tokens_per_cpu_s']:.0f}")
        + (f"{x['est_makespan_s']:.1f}", f"{x['load_before'][0]:.1f}")
    )
  return table(header, rows)


def _ratios(out: dict) -> list[str]:
  r, eq = out["ratios"], out["equality"]
  plan = "; ".join(
      f"[{', '.join(g['configs'])}] R={g['rank']}"
      for g in out["runs"]["packed"]["groups"]
  )
  return table(
      ("packed vs one after another", "value"),
      (
          (
              "training throughput, tokens/s (compilation excluded)",
              f"{r['throughput']:.2f}x",
          ),
          ("training throughput, tokens/CPU s", f"{r['throughput_cpu']:.2f}x"),
          ("makespan (compilation included)", f"{r['makespan']:.2f}x"),
          ("makespan, planner's estimate", f"{r['estimated_makespan']:.2f}x"),
          ("largest final training loss difference", f"{eq['max_final_loss_diff']:.1e}"),
          ("largest eval loss difference", f"{eq['max_eval_loss_diff']:.1e}"),
          ("largest parameter difference", f"{max(eq['max_param_diff'].values()):.1e}"),
          ("planner's plan", plan),
      ),
  )


def _forward(out: dict) -> list[str]:
  header = ("slots", "rank", "factored ms/step", "merged ms/step", "merged / factored")
  rows = [
      (f["slots"], f["rank"], f"{f['factored_ms']:.1f}", f"{f['merged_ms']:.1f}")
      + (f"{f['merged_ms'] / f['factored_ms']:.2f}x",)
      + (f"{f['merged_cpu_ms'] / f['factored_cpu_ms']:.2f}x",)
      for f in out["forward"]
  ]
  return table(header + ("same, CPU time",), rows)


def _cost_model(out: dict) -> list[str]:
  cm = out["cost_model"]
  rows = [
      (n, f"{t * 1e3:.0f}", f"{t * 1e3 / n:.0f}")
      for n, t in zip(cm["slots"], cm["step_s"])
  ]
  rows += [
      (
          "padded-parameter slope, s per parameter per slot",
          f"{cm['per_param_s']:.2e}",
          "",
      ),
      ("compile s per group", f"{cm['compile_s']:.1f}", ""),
  ]
  return table(("slots per device", "step ms", "ms per slot"), rows)


def _memory(out: dict) -> list[str]:
  rows = []
  for row in out["calibration"]:
    xla = row.get("xla_argument_bytes", 0) + row.get("xla_temp_bytes", 0)
    rows.append(
        (row["slots"], row["rank"], f"{row['step_s'] * 1e3:.1f}")
        + (f"{row['analytic_bytes'] / MIB:.1f}", f"{row['model_bytes'] / MIB:.1f}")
        + (f"{xla / MIB:.1f}",)
    )
  return table(
      ("slots", "rank", "step ms", "analytic MiB", "planner MiB", "XLA MiB"), rows
  )


def render(out: dict) -> str:
  """The markdown page of one sweep's numbers."""
  m, rank = out["meta"], out["calibration"][0]["rank"]
  lines = [
      "# PLoRA: a packed LoRA sweep vs one job after another",
      "",
      f"Numbers from `{m['command']}` on {m['date']} (raw: `plora.json`; "
      "`python -m projects.plora.sweep --render_only` renders this page from it). "
      "The machine is shared, so timings are noisy.",
      "",
  ]
  lines += ["## Setup", ""] + _setup(out)
  lines += ["## Each job, packed and alone", ""] + _jobs(out)
  lines += ["## The runs", ""] + _runs(out) + _ratios(out) + [WHY, ""]
  lines += ["## Factored vs merged LoRA forward", ""] + _forward(out)
  lines += [f"## Cost model (rank {rank}, all layers; fastest round-robin round)", ""]
  lines += _cost_model(out)
  lines += [
      "## Memory per device",
      "",
      "Analytic: the planner's memory model; planner: the same with its activation "
      f"term scaled by {out['act_scale']:.2f} and "
      f"{out.get('extra_bytes', 0) / MIB:.1f} MiB added, fitted to XLA's memory "
      "analysis (arguments + temporaries) of the programs with the fewest and the most "
      "slots.",
      "",
  ] + _memory(out)
  for key, title in (("pad", "the configured budget"), ("demo", "a tighter budget")):
    lines += [f"## The plan under {title}", "", "```", out["plans"][key], "```", ""]
  return "\n".join(lines)


def write(out: dict, docs_dir: str, write_json: bool = True) -> None:
  """``plora.json`` (unless ``write_json`` is false) and ``plora.md`` in ``docs_dir``."""
  os.makedirs(docs_dir, exist_ok=True)
  if write_json:
    with open(os.path.join(docs_dir, "plora.json"), "w") as f:
      json.dump(out, f, indent=1, sort_keys=True)
  with open(os.path.join(docs_dir, "plora.md"), "w") as f:
    f.write(render(out))
