"""The report: the issue's targets evaluated, and ``docs/benchmarks.md`` rendered
from the result dict (``docs/benchmarks.json``)."""

from __future__ import annotations

import math

from autoloco_jax import distributed
from benchmarks.throughput.child import DEVICE_COUNT
from benchmarks.throughput.timing import median

TARGET_RATIO, TARGET_NAIVE, TARGET_MFU = 0.95, 3.0, 0.5
TARGET_TORCH = 0.9  # reference and every algorithm against PyTorch eager
TARGET_DEFAULT_PATH = 0.98  # every <algorithm>@N against the one-device reference
VS_MAIN = "/ reference (1 device, main process) tokens/s"


def _algorithms(rows: dict) -> list[str]:
  """The algorithm rows of a block, in table order."""
  return [
      n for n in rows if n not in ("reference", "naive") and not n.startswith("pytorch")
  ]


def versus_pytorch(rows: dict) -> dict:
  """``{row: median over repeats of tokens/s(row) / tokens/s(pytorch)}`` for the
  reference and every algorithm row: both ratios of a repeat are against the
  reference units around them, so their quotient pairs units of one repeat."""
  torch_row = rows.get("pytorch")
  if not torch_row:
    return {}
  out = {"reference": [1 / b for b in torch_row["ratios"]]}
  for name in _algorithms(rows) + (["naive"] if "naive" in rows else []):
    out[name] = [a / b for a, b in zip(rows[name]["ratios"], torch_row["ratios"])]
  return out


def targets(result: dict) -> dict:
  """The issue's targets, evaluated (reported, never asserted)."""
  rows = {r["name"]: r for r in result["main"]["rows"]}
  out = {}
  naive = rows.get("naive")
  for name in ("diloco", "autoloco"):
    if name not in rows:
      continue
    r = rows[name]
    out[f"{name} / reference tokens/s"] = dict(
        value=r["ratio"], target=TARGET_RATIO, met=r["ratio"] >= TARGET_RATIO
    )
    if naive:
      value = median(a / b for a, b in zip(r["ratios"], naive["ratios"]))
      out[f"{name} / naive loop tokens/s"] = dict(
          value=value, target=TARGET_NAIVE, met=value >= TARGET_NAIVE
      )
  compiles = dict(result["main"]["compiles"])
  compiles.update(result.get("sharded", {}).get("compiles", {}))
  out["compilations of each round function"] = dict(
      value=max(
          v for c in compiles.values() for k, v in c.items() if k in ("inner", "sync")
      ),
      target=1,
      met=all(c["once"] for c in compiles.values()),
  )
  for name in ("reference", "diloco", "autoloco"):
    if name in rows and "mfu_vs_measured_peak" in rows[name]:
      v = rows[name]["mfu_vs_measured_peak"]
      out[f"{name} MFU / measured matmul peak"] = dict(
          value=v, target=TARGET_MFU, met=v >= TARGET_MFU
      )
  for name, ratios in versus_pytorch(rows).items():
    if name == "naive":
      continue
    value = median(ratios)
    out[f"{name} / pytorch tokens/s"] = dict(
        value=value, target=TARGET_TORCH, met=value >= TARGET_TORCH
    )
  for r in (result.get("sharded") or {}).get("vs_main", {}).get("rows", []):
    out[f"{r['name']} {VS_MAIN}"] = dict(
        value=r["ratio"],
        target=TARGET_DEFAULT_PATH,
        met=r["ratio"] >= TARGET_DEFAULT_PATH,
    )
  return out


_WHAT = {
    "reference": "one model, AdamW, global batch K x B",
    "ddp": "DDP, gradients averaged every step",
    "diloco": "DiLoCo, outer Nesterov step per round",
    "autoloco": "AutoLoCo (corrected outer step, controller)",
    "noloco": "NoLoCo, pairwise gossip per round",
    "gasloc": "GASLoC, accelerated gossip per round",
    "naive": "Python loop over workers, 1 jitted step each",
    "pytorch": "PyTorch eager: the reference's model and AdamW",
    "pytorch_compile": "the same, train step under torch.compile",
}


def _g(x: float) -> str:
  return f"{x / 1e9:.1f}"


def _pct(x: float | None) -> str:
  return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.0f}%"


def _mb(x: float | None) -> str:
  return "n/a" if x is None else f"{x / 2**20:.0f}"


def _seconds(x: float) -> str:
  return f"{x:.1f}" if math.isfinite(x) else "-"


def _row_table(block: dict, child: bool, nominal: float) -> list[str]:
  lines = []
  K, D = block["num_workers"], block["devices"]
  for r in block["rows"]:
    base = r["name"].split("@")[0]
    process = f"child ({D} simulated devices)" if child else "main"
    if base in ("reference", "naive"):
      layout = "1 device"
    elif base.startswith("pytorch"):
      layout = f"1 process, {block['pytorch']['threads']} torch threads"
      process = f"child (PyTorch {block['pytorch']['torch']})"
    else:
      layout = f"K={K}, vmap, 1 device" if D == 1 else f"K={K}, shard_map, {D} devices"
    c = block["compiles"].get(r["name"], {})
    ratio = (
        "1 (by definition)"
        if r["name"] == "reference"
        else f"**{r['ratio']:.3f}** [{r['ratio_min']:.2f}, {r['ratio_max']:.2f}]"
    )
    compiles = "/".join(str(c[k]) for k in ("inner", "sync") if k in c) or "-"
    mfu_nominal = r["model_flops_per_sec"] / nominal if nominal else float("nan")
    lines.append(
        f"| `{r['name']}` | {_WHAT.get(base, base)} | {layout} | {process} | {r['h']} | "
        f"{r['tokens_per_sec']:.0f} | {ratio} | {_g(r['model_flops_per_sec'])} | "
        f"{_pct(r.get('mfu_vs_measured_peak'))} | {_pct(mfu_nominal)} | {compiles} | "
        f"{_seconds(r['compile_seconds'])} |"
    )
  for name, why in block.get("skipped", {}).items():
    lines.append(
        f"| `{name}` | skipped: {why} | | {'child' if child else 'main'} "
        "| | | | | | | | |"
    )
  return lines


def markdown(result: dict) -> str:
  """``docs/benchmarks.md`` from the result dict."""
  nominal = result["machine"]["nominal_peak_flops"]
  main = result["main"]
  L = (
      _machine_lines(result)
      + _config_lines(result)
      + [
          "## Throughput",
          "",
          "| row | what | layout | process | H | tokens/s | x reference | model GFLOP/s | "
          "MFU / measured peak | MFU / nominal | compiles inner/sync | compile s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|",
      ]
  )
  L += _row_table(main, False, nominal)
  sharded = result.get("sharded")
  if sharded and "rows" in sharded:
    L += _row_table(sharded, True, nominal)
  L.append("")
  if sharded and "rows" in sharded:
    L.append(
        f"Rows whose process is *child* come from a separate process started with "
        f"`XLA_FLAGS={DEVICE_COUNT}={sharded['devices']}` (simulated devices must be "
        "set before JAX starts); their ratios are against the `reference` row measured "
        "in that same child process (one device), and their MFU against the matmul peak "
        f"measured there (median {_g(sharded['matmul_peak_median'])} GFLOP/s). The "
        "simulated devices share the machine's cores, so these rows measure the "
        "shard_map code path (per-device blocks, collectives) on the same hardware; a "
        "ratio above 1 means the devices' programs, run concurrently, use the cores "
        "better than one program does."
    )
  elif sharded and "error" in sharded:
    L.append(f"shard_map rows: the child process failed: `{sharded['error'][-500:]}`")
  L += _pytorch_section(result)
  L += _default_path_section(result)
  L += [
      "",
      "## Targets (reported, never asserted)",
      "",
      "| target | measured | goal | met |",
      "|---|---|---|---|",
  ]
  for name, t in result["targets"].items():
    value = f"{t['value']:.3f}" if isinstance(t["value"], float) else str(t["value"])
    goal = f">= {t['target']}" if "compilations" not in name else f"== {t['target']}"
    L.append(f"| {name} | {value} | {goal} | {'yes' if t['met'] else '**no**'} |")
  L += ["", *_target_notes(result), ""]
  L += _compile_section(result)
  L += _scaling_section(result)
  L += _hot_path_section(result)
  return "\n".join(L) + "\n"


def _pytorch_section(result: dict) -> list[str]:
  """What the PyTorch rows are and every row against them, or the one line that
  says why there is none."""
  main = result["main"]
  info = main.get("pytorch")
  if not info:
    return []  # not asked for (--rows)
  if "skipped" in info:
    return ["", f"PyTorch row: none: {info['skipped']}."]
  rows = {r["name"]: r for r in main["rows"]}
  L = [
      "",
      "### Against PyTorch",
      "",
      "Rows `pytorch*` run `benchmarks/torch_reference.py` in a process of their own: "
      f"the reference's model ({info['num_params']:,} parameters, checked equal to "
      "`model.param_count` before timing) and inner optimizer (gradient clipping, "
      "`torch.optim.AdamW` with weight decay on matrices, the warmup + cosine schedule, "
      f"the same hyperparameters) in PyTorch {info['torch']}, float32, "
      f"`torch.set_num_threads({info['threads']})`, on the same global batch of random "
      "bytes. Each of its units is bracketed by the JAX reference's units in the main "
      "process, like every row; its model GFLOP/s and MFU use the same "
      "`model.flops_per_token` and the main process's measured matmul peak. torch's "
      "OpenMP threads meet at a barrier in every operation, so on cores shared with "
      "other processes (a thread descheduled at the barrier holds up the others) "
      "this row loses far more than the JAX rows do: read it from quiet cores. Each row "
      "against the `pytorch` row (the quotient of the two rows' ratios to the "
      "reference units around them, per repeat; median [min, max]):",
      "",
      "| row | tokens/s | x pytorch |",
      "|---|---|---|",
  ]
  for name, ratios in versus_pytorch(rows).items():
    L.append(
        f"| `{name}` | {rows[name]['tokens_per_sec']:.0f} | **{median(ratios):.3f}** "
        f"[{min(ratios):.2f}, {max(ratios):.2f}] |"
    )
  return L


def _default_path_section(result: dict) -> list[str]:
  """The ``@N`` rows against the main process's one-device reference."""
  sharded = result.get("sharded") or {}
  vs = sharded.get("vs_main")
  if not vs:
    return []
  main, m = result["main"], result["machine"]
  K, N = main["num_workers"], sharded["devices"]
  own = {r["name"]: r for r in sharded["rows"]}
  default = distributed.host_device_count(K, 0, m["cores"])
  L = [
      "",
      f"### The default path: {N} devices",
      "",
      "`experiments/run.py` starts JAX on CPU with one host device per usable core "
      "(`distributed.use_every_core`: `--xla_force_host_platform_device_count` set to "
      "the largest count no larger than the usable cores that divides K), so on this "
      f"{m['cores']}-core machine a run of K = {K} trains on {default} device(s): "
      + (
          f"the `@{N}` rows are the default path and the one-device rows the "
          "alternative. "
          if default == N
          else f"here the `@{N}` rows are not that count. "
      )
      + f"Each `@{N}` row's units are timed once more from the main process (the child "
      "serves them one at a time, `benchmarks/unit_server.py`) and bracketed by the "
      "main process's one-device reference:",
      "",
      "| row | tokens/s | x reference (1 device, main process) | x reference (1 device, "
      "its own process) |",
      "|---|---|---|---|",
  ]
  for r in vs["rows"]:
    L.append(
        f"| `{r['name']}` | {r['tokens_per_sec']:.0f} | **{r['ratio']:.3f}** "
        f"[{r['ratio_min']:.2f}, {r['ratio_max']:.2f}] | {own[r['name']]['ratio']:.3f} |"
    )
  return L


def _machine_lines(result: dict) -> list[str]:
  """The title, the command, the machine, its load and its peaks."""
  m, main = result["machine"], result["main"]
  nominal = m["nominal_peak_flops"]
  return [
      "# Benchmarks: what the replica axis costs",
      "",
      "Generated by `benchmarks/throughput/` (raw numbers: the JSON written next to this "
      "file). Regenerate with:",
      "",
      "```bash",
      result["command"]
      if result["mode"] == "full"
      else "python -m benchmarks.throughput --out docs/benchmarks.json --md docs/benchmarks.md",
      "```",
      "",
      f"Mode: **{result['mode']}**; wall time {result['wall_seconds']:.0f} s.",
      "",
      "## Machine and load",
      "",
      f"- CPU: {m['cpu']} ({m['vendor']}), {m['cores']} cores visible, "
      f"{m['mhz']:.0f} MHz in /proc/cpuinfo; JAX {m['jax']} on `{m['backend']}` "
      f"({m['device_count']} device(s) in the main process), Python {m['python']}.",
      f"- Load at start: `{m['uptime']}`; 1/5/15-minute load at the end: "
      f"{', '.join(f'{x:.2f}' for x in result['load_avg_end'])}. The machine is shared: "
      "absolute tokens/s move with the load; the ratios are measured side by side and "
      "are the numbers to read.",
      f"- Nominal fp32 peak: {_g(nominal)} GFLOP/s = {m['nominal_formula']}.",
      f"- Measured matmul peak: the best of 3 jitted float32 n x n matmuls for n in "
      f"{', '.join(map(str, main['matmul_n']))}, once per repeat, paired with that repeat's "
      f"rows: median "
      f"{_g(main['matmul_peak_median'])} GFLOP/s, max {_g(main['matmul_peak_max'])} GFLOP/s "
      f"({_pct(main['matmul_peak_max'] / nominal if nominal else None)} of nominal).",
      *_shape_lines(result.get("shape_matmul")),
      "",
  ]


def _config_lines(result: dict) -> list[str]:
  """The model, the batch, and what a timed unit is."""
  main, plan = result["main"], result["plan"]
  model = main["model"]
  return [
      "## Configuration",
      "",
      f"- Model (`configs/*.py:{plan['size']}`): d_model {model['d_model']}, "
      f"{model['num_layers']} layers, {model['num_heads']} heads, mlp {model['mlp_dim']}, "
      f"L = {main['seq_len']}, vocab 256 (bytes), {main['num_params']:,} parameters, "
      f"{main['flops_per_token'] / 1e6:.2f} MFLOP per token (`model.flops_per_token`: "
      "6N + 12 n_layers d L).",
      f"- K = {main['num_workers']} workers, B = {main['batch_per_worker']} sequences per "
      f"worker per step: global batch {main['num_workers'] * main['batch_per_worker']} x "
      f"{main['seq_len']} tokens for every row. Data: random bytes in the trainer's own "
      "`WorkerData`, staged per chunk by the trainer's round driver (`rounds.run_round`, "
      "`rounds.run_steps`), as `train.py` does (speed does not depend on the text).",
      f"- A timed unit is {main['steps_per_unit']} inner steps run in the row's own full "
      "rounds (column H; each round: staging, inner loop, sync, the round's one host read). "
      f"DiLoCo's configured H is {main['config_h']}; rounds of at most "
      f"{main['steps_per_unit']} keep the run short and weigh the sync "
      f"{main['config_h'] / main['steps_per_unit']:.1f}x more than training does, so the "
      "ratios below are lower bounds for the configured H (NoLoCo's config H is smaller "
      "and kept). The staged buffer keeps each config's chunk size, as `train.py` sizes it. "
      f"Each unit is bracketed by a reference unit before and after it; {main['repeats']} "
      "repeats, order reversed on odd repeats; the ratio is tokens/s(row) / mean of the "
      "two bracketing reference units, median [min, max] over repeats.",
      "",
  ]


def _shape_lines(sm: dict | None) -> list[str]:
  if not sm:
    return []
  sq = sm["square_flops_per_sec"]
  line = lambda label, key, shape: (
      f"  - {label} `{shape}`: {_g(sm[key])} GFLOP/s "
      f"({_pct(sm[key] / sq)} of the square one)"
  )
  return [
      f"- The model's MLP matmul, measured right after a {sm['square_n']}^2 one "
      f"({_g(sq)} GFLOP/s), best of 5, 3 interleaved rounds:",
      line("one model, [K·B·L, d] x [d, F]", "global_flops_per_sec", sm["global_shape"]),
      line(
          "replica axis, K x [B·L, d] x [d, F] batched",
          "batched_flops_per_sec",
          sm["batched_shape"],
      ),
      line(
          "one naive worker step, [B·L, d] x [d, F]",
          "worker_flops_per_sec",
          sm["worker_shape"],
      ),
  ]


def _target_notes(result: dict) -> list[str]:
  """Why each missed target is missed, with the numbers of this run that say so."""
  main, t = result["main"], result["targets"]
  rows = {r["name"]: r for r in main["rows"]}
  nan = float("nan")
  sm = result.get("shape_matmul") or {}
  sc = result.get("scaling") or {}
  sharded = {
      r["name"].split("@")[0]: r for r in (result.get("sharded") or {}).get("rows", [])
  }
  notes = []
  missed = lambda tag: [k for k, v in t.items() if tag in k and not v["met"]]
  if missed(" / reference tokens/s"):
    shortfall = "; ".join(
        f"{k} {t[k]['value']:.3f}, short by " f"{TARGET_RATIO - t[k]['value']:.3f}"
        for k in missed(" / reference tokens/s")
    )
    trend = ", ".join(
        f"K={p['num_workers']}: {p['ratio']:.2f}" for p in sc.get("by_workers", [])
    )
    line = (
        f"- **Replica axis vs reference** ({shortfall}). Each layer's matmul becomes "
        "one batched matmul of K x [B·L, d] x [d, F] instead of one [K·B·L, d] x [d, F] "
        f"({_g(sm.get('batched_flops_per_sec', nan))} vs "
        f"{_g(sm.get('global_flops_per_sec', nan))} GFLOP/s here), and every elementwise "
        "pass and reduction gains a worker axis; the round adds the sync and the "
        "per-worker statistics. The spread of the repeats (the [min, max] column) is as "
        "wide as the shortfall on this shared machine. Ratio vs K at a fixed per-worker "
        f"batch (rounds of H = {sc.get('steps', '?')}): {trend}."
    )
    if sharded.get("diloco") and sharded.get("reference"):
      line += (
          " The same workers split over 2 simulated devices run at "
          f"{sharded['diloco']['ratio']:.2f}x that process's one-device reference: "
          "the two devices' programs run concurrently, which overlaps work that one "
          "program runs serially (not profiled further)."
      )
    notes.append(line)
  if missed("/ naive"):
    naive = rows["naive"]
    step_ms = (
        1e3 * median(naive["seconds"]) / (main["num_workers"] * main["steps_per_unit"])
    )
    values = ", ".join(
        f"{k.split(' /')[0]} {t[k]['value']:.2f}x" for k in missed("/ naive")
    )
    notes.append(
        f"- **Replica axis vs the naive per-worker loop** ({values}; goal {TARGET_NAIVE}x). "
        f"On this CPU one worker's jitted step ({main['batch_per_worker']} x "
        f"{main['seq_len']} tokens, about {step_ms:.0f} ms) is already big enough to run "
        f"its matmuls at {_g(sm.get('worker_flops_per_sec', nan))} GFLOP/s (the K-fold one: "
        f"{_g(sm.get('global_flops_per_sec', nan))}), and the Python loop adds only a "
        "dispatch of microseconds per worker-step; what the replica axis saves here is "
        "that gap, not a multiple. A several-fold gain needs per-worker steps too small "
        "to fill the device (an accelerator, or a much smaller model), where one "
        "vmapped step replaces K under-occupied ones."
    )
  if missed("MFU"):
    ref = rows["reference"]
    tokens = main["num_workers"] * main["batch_per_worker"] * main["seq_len"]
    step_s = tokens / ref["tokens_per_sec"]
    gemm_s = tokens * main["flops_per_token"] / sm.get("global_flops_per_sec", nan)
    values = ", ".join(
        f"{k.split(' MFU')[0]} {_pct(t[k]['value'])}" for k in missed("MFU")
    )
    notes.append(
        f"- **MFU** ({values} of the measured matmul peak; goal {_pct(TARGET_MFU)}). The "
        f"model's big matmuls are not the limit: its MLP matmul alone runs at "
        f"{_g(sm.get('global_flops_per_sec', nan))} GFLOP/s, at which the step's model FLOPs "
        f"would take {1e3 * gemm_s:.0f} ms of the reference's {1e3 * step_s:.0f} ms step "
        f"({_pct(gemm_s / step_s)}). The rest is work that runs far below the matmul rate "
        "at d_model = 128: attention's B·H small [L, K] x [K, L] matmuls and their "
        "softmax, RMSNorm and GELU passes and broadcasts, the AdamW update "
        "(`docs/perf_proposals.md` has a per-op profile). With that work at "
        f"{_pct(1 - gemm_s / step_s)} of the step, MFU is capped near "
        f"{_pct(gemm_s / step_s)} of the matmul rate until it gets cheaper; MFU rises with "
        "width (table below)."
    )
  if missed("/ pytorch"):
    values = ", ".join(
        f"{k.split(' /')[0]} {t[k]['value']:.2f}x" for k in missed("/ pytorch")
    )
    p = rows["pytorch"]
    notes.append(
        f"- **Against PyTorch** ({values}; goal {TARGET_TORCH}x). PyTorch eager ran "
        f"{p['tokens_per_sec']:.0f} tokens/s ({_pct(p.get('mfu_vs_measured_peak'))} of "
        "the measured matmul peak), the JAX reference "
        f"{rows['reference']['tokens_per_sec']:.0f}, side by side (table above). Not "
        "profiled further in this report."
    )
  if missed(VS_MAIN):
    values = ", ".join(f"{k.split(' /')[0]} {t[k]['value']:.3f}" for k in missed(VS_MAIN))
    notes.append(
        f"- **The default path** ({values}; goal {TARGET_DEFAULT_PATH}). These rows are "
        "what a CPU run of `experiments/run.py` executes (one device per core); below "
        "the goal, that default trains more slowly than one device would "
        "(section above)."
    )
  if not t.get("compilations of each round function", {}).get("met", True):
    notes.append(
        "- **Recompilation**: see the compilation table; a round function "
        "compiled more than once over the run."
    )
  if not notes:
    notes.append("All targets met.")
  return notes


def _compile_section(result: dict) -> list[str]:
  L = [
      "## Compilation",
      "",
      "Each row's functions after its timed units and three more rounds of H = 2, 1, 3 "
      "(a run whose H changes every round: the timed rounds use the row's H, the warm-up "
      "round H = 1). `_cache_size()` counts compiled versions; compile seconds are JAX's "
      "trace + lowering + XLA compile events during the warm-up round.",
      "",
      "| row | H of the rounds run | distinct H | inner | sync | compile s |",
      "|---|---|---|---|---|---|",
  ]
  blocks = [result["main"]] + (
      [result["sharded"]] if "rows" in result.get("sharded", {}) else []
  )
  for block in blocks:
    for name, c in block["compiles"].items():
      hs = c["hs"]
      shown = (
          ", ".join(map(str, hs))
          if len(hs) <= 12
          else (", ".join(map(str, hs[:4])) + ", ..., " + ", ".join(map(str, hs[-4:])))
      )
      L.append(
          f"| `{name}` | {shown} | {c['distinct_h']} | {c.get('inner', '')} | "
          f"{c.get('sync', '-')} | {c['compile_seconds']:.1f} |"
      )
  return L + [""]


def _scaling_section(result: dict) -> list[str]:
  sc = result.get("scaling")
  if not sc:
    return []
  nominal = result["machine"]["nominal_peak_flops"]
  method = sc["by_workers"][0]["memory"]["method"] if sc["by_workers"] else ""
  L = [
      "## Scaling",
      "",
      f"DiLoCo on one device (vmap) against the reference at the same global batch, "
      f"units of one round of H = {sc['steps']} (so the sync weighs more than at the "
      "configured H), bracketed as above. Memory: the state (params, anchor, AdamW moments, outer "
      "momentum, all K copies), XLA's buffer estimate of the compiled inner loop "
      "(arguments + outputs - aliased + temporaries), and the process's resident-set "
      f"peak during one round ({method}; "
      "growth = peak minus the resident set before the round).",
      "",
      "### With K (fixed per-worker batch)",
      "",
      "| K | global batch | tokens/s | x reference | tokens/s vs K=1 | state MiB | "
      "XLA inner MiB | RSS peak MiB | RSS growth MiB |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  first = sc["by_workers"][0]["tokens_per_sec"] if sc["by_workers"] else float("nan")
  for p in sc["by_workers"]:
    L.append(
        f"| {p['num_workers']} | {p['global_batch']} | {p['tokens_per_sec']:.0f} | "
        f"{p['ratio']:.3f} | {p['tokens_per_sec'] / first:.2f} | "
        f"{_mb(p['xla'].get('state_bytes'))} | "
        f"{_mb(p['xla'].get('inner', {}).get('peak_estimate'))} | "
        f"{_mb(p['memory'].get('peak_bytes'))} | {_mb(p['memory'].get('growth_bytes'))} |"
    )
  L += [
      "",
      "### With width (K fixed)",
      "",
      "| d_model | params | MFLOP/token | tokens/s | x reference | MFU / nominal | "
      "state MiB | XLA inner MiB | RSS growth MiB |",
      "|---|---|---|---|---|---|---|---|---|",
  ]
  for p in sc["by_width"]:
    L.append(
        f"| {p['d_model']} | {p['num_params']:,} | {p['flops_per_token'] / 1e6:.2f} | "
        f"{p['tokens_per_sec']:.0f} | {p['ratio']:.3f} | "
        f"{_pct(p['model_flops_per_sec'] / nominal if nominal else None)} | "
        f"{_mb(p['xla'].get('state_bytes'))} | "
        f"{_mb(p['xla'].get('inner', {}).get('peak_estimate'))} | "
        f"{_mb(p['memory'].get('growth_bytes'))} |"
    )
  return L + [""]


def _hot_path_section(result: dict) -> list[str]:
  hp = result.get("hot_path")
  if not hp:
    return []
  st = hp["staging"]
  share = st["seconds"]["int32"] / st["diloco_round_seconds"]
  sv = hp["scan_vs_while"]
  L = [
      "## Hot path",
      "",
      f"- **Donation**: the state's buffers are consumed by every round function "
      f"({', '.join(f'`{k}`: {v}' for k, v in hp['donated'].items())}); "
      f"donation warnings: {hp['donation_warnings'] or 'none'}.",
      f"- **Host round-trips inside a round**: {hp['device_to_host_inside_round']}; the "
      "round statistics stay on device in `RoundAcc` until the sync; the one read is the "
      "sync's metrics.",
      f"- **while_loop vs scan**: the library's `lax.while_loop` with a traced count vs a "
      f"`lax.scan` over the staged chunk (C = {sv['chunk']}) with `lax.cond` skipping "
      f"unused slots, same step code, paired: scan / while tokens/s = **{sv['ratio']:.3f}** "
      f"({', '.join(f'{x:.3f}' for x in sv['ratios'])}). "
      + (
          "No measurable difference: keep the while_loop, which also skips a short "
          "round's padding."
          if abs(sv["ratio"] - 1) < 0.03
          else (
              "scan is faster here." if sv["ratio"] > 1 else "while_loop is faster here."
          )
      ),
      "- **Staging** (`rounds.stage`, as `train.py` stages: read, zero-pad to "
      f"C = {st['chunk']}, put): "
      f"{1e3 * st['seconds']['int32']:.1f} ms per DiLoCo round of H = {st['h']} "
      f"({_pct(share)} of the round's {st['diloco_round_seconds']:.2f} s); the buffer is "
      f"{st['buffer_bytes_int32'] / 2**10:.0f} KiB of int32. Staging uint8 instead (cast "
      f"on device) takes {1e3 * st['seconds']['uint8']:.1f} ms.",
  ]
  au = hp.get("autoloco_staging")
  if au:
    L.append(
        f"- AutoLoCo's buffer is sized by its `h_max` (C = {au['chunk']} for rounds of "
        f"H = {au['h']}): {1e3 * au['seconds']['int32']:.1f} ms of staging per round, "
        f"{au['buffer_bytes_int32'] / 2**10:.0f} KiB, most of it padding."
    )
  return L + [""]
