"""The report: the issue's targets evaluated from the result dict
(``docs/benchmarks.json``), and the specs of the generated blocks of
``docs/benchmarks.md`` (rendered by ``benchmarks/render.py``; the prose around
them is the page's own, written once)."""

from __future__ import annotations

from benchmarks.render import Lines, Table
from benchmarks.throughput.child import DEVICE_COUNT
from benchmarks.throughput.measure import row_devices
from benchmarks.throughput.timing import median

TARGET_RATIO, TARGET_NAIVE, TARGET_MFU = 0.95, 3.0, 0.5
TARGET_TORCH = 0.9  # reference and every algorithm against PyTorch eager
TARGET_SAME_DEVICES = 0.98  # every <algorithm>@N against reference@N
#: The reference against eager PyTorch, and the project's DiLoCo against the
#: simulator-style PyTorch DiLoCo (issue 43).
TARGET_PEER = 1.0
SAME_DEVICES = "/ reference on the same devices tokens/s"


def _algorithms(rows: dict) -> list[str]:
  """The algorithm rows of a block, in table order."""
  return [n for n in rows if not n.startswith(("reference", "pytorch")) and n != "naive"]


def versus_pytorch(rows: dict) -> dict:
  """``{row: per-repeat tokens/s(row) / tokens/s(pytorch)}`` for the reference
  and every algorithm row: both ratios of a repeat are against the reference
  units around them, so their quotient pairs units of one repeat."""
  torch_row = rows.get("pytorch")
  if not torch_row:
    return {}
  out = {"reference": [1 / b for b in torch_row["ratios"]]}
  for name in _algorithms(rows) + (["naive"] if "naive" in rows else []):
    out[name] = [a / b for a, b in zip(rows[name]["ratios"], torch_row["ratios"])]
  return out


def versus_peer(rows: dict) -> dict:
  """``{diloco row: median per-repeat tokens/s(row) / tokens/s(pytorch_diloco)}``
  within one block (both bracketed by the same reference units)."""
  peer = rows.get("pytorch_diloco")
  if not peer:
    return {}
  return {
      name: median(a / b for a, b in zip(rows[name]["ratios"], peer["ratios"]))
      for name in rows
      if name.split("@")[0] == "diloco" and "ratios" in rows[name]
  }


def _target(value, goal: float) -> dict:
  met = None if value is None else value >= goal
  return dict(value=value, target=goal, met=met)


def targets(result: dict) -> dict:
  """The issue's targets, evaluated (reported, never asserted); a target whose
  number this result lacks has ``value`` None."""
  rows = {r["name"]: r for r in result["main"]["rows"]}
  out = {}
  naive = rows.get("naive")
  for name in ("diloco", "autoloco"):
    if name not in rows:
      continue
    r = rows[name]
    out[f"{name} / reference tokens/s"] = _target(r["ratio"], TARGET_RATIO)
    if naive:
      value = median(a / b for a, b in zip(r["ratios"], naive["ratios"]))
      out[f"{name} / naive loop tokens/s"] = _target(value, TARGET_NAIVE)
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
      out[f"{name} MFU / measured matmul peak"] = _target(v, TARGET_MFU)
  for name, ratios in versus_pytorch(rows).items():
    if name != "naive":
      goal = TARGET_PEER if name == "reference" else TARGET_TORCH
      out[f"{name} / pytorch tokens/s"] = _target(median(ratios), goal)
  sharded = {r["name"]: r for r in (result.get("sharded") or {}).get("rows", [])}
  for block in (rows, sharded):
    for name, value in versus_peer(block).items():
      out[f"{name} / pytorch_diloco tokens/s"] = _target(value, TARGET_PEER)
  for name in _algorithms(sharded):
    value = _equal(sharded[name], sharded)
    out[f"{name} {SAME_DEVICES}"] = _target(value, TARGET_SAME_DEVICES)
  return out


def _equal(row: dict, block_rows: dict) -> float | None:
  """The row's ratio to the reference on its own devices, or None where its
  reference ran on other devices (results from before ``reference@N``)."""
  if "ratio" not in row:
    return None
  reference = row.get("reference") or next(iter(block_rows))
  return row["ratio"] if row_devices(reference) == row_devices(row["name"]) else None


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
    "pytorch_diloco": "PyTorch DiLoCo, a process per worker, gloo all-reduce",
}


def _layout(block: dict, name: str) -> str:
  base, devices = name.split("@")[0], row_devices(name)
  if base == "pytorch_diloco":
    d = block["pytorch"]["diloco"]
    return f"K={d['processes']} processes, {d['threads_per_process']} torch thread each"
  if base.startswith("pytorch"):
    return f"1 process, {block['pytorch']['threads']} torch threads"
  if base == "reference":
    return "1 device" if devices == 1 else f"data-parallel, {devices} devices"
  if base == "naive":
    return "1 device"
  K = block["num_workers"]
  return (
      f"K={K}, vmap, 1 device" if devices == 1 else f"K={K}, shard_map, {devices} devices"
  )


def _torch_process(block: dict, name: str) -> str:
  info = block["pytorch"]["diloco"] if name == "pytorch_diloco" else block["pytorch"]
  return f"child (PyTorch {info['torch']})"


def _table_rows(block: dict, child: bool, nominal: float) -> list[dict]:
  """The block's rows with the cells the throughput table derives."""
  out, process = [], f"child ({block['devices']} simulated devices)" if child else "main"
  by_name = {r["name"]: r for r in block["rows"]}
  for r in block["rows"]:
    c = block["compiles"].get(r["name"], {})
    torch = r["name"].startswith("pytorch")
    out.append(
        dict(
            r,
            what=_WHAT.get(r["name"].split("@")[0], r["name"]),
            layout=_layout(block, r["name"]),
            process=_torch_process(block, r["name"]) if torch else process,
            mfu_nominal=r["model_flops_per_sec"] / nominal if nominal else None,
            compiles="/".join(str(c[k]) for k in ("inner", "sync") if k in c) or "-",
        )
    )
    if "ratio" in r:
      # Results from before reference@N: the @N rows against one device.
      reference = r.get("reference") or next(iter(by_name))
      before = r["ratio"] if row_devices(reference) == 1 else None
      out[-1].update(
          reference=reference,
          ratio_equal_devices=_equal(r, by_name),
          ratio_vs_one_device=r.get("ratio_vs_one_device", before),
      )
  for name, why in block.get("skipped", {}).items():
    out.append(dict(name=name, what=f"skipped: {why}", process=process))
  return out


def _shown(hs: list) -> str:
  if len(hs) <= 12:
    return ", ".join(map(str, hs))
  return ", ".join(map(str, hs[:4])) + ", ..., " + ", ".join(map(str, hs[-4:]))


def _budget(result: dict) -> dict:
  """The reference step's time against its FLOPs at the MLP matmul's rate, and
  one naive worker step: the numbers the page's notes on MFU and on the naive
  loop read."""
  main, sm = result["main"], result.get("shape_matmul") or {}
  rows = {r["name"]: r for r in main["rows"]}
  tokens = main["num_workers"] * main["batch_per_worker"] * main["seq_len"]
  out = {}
  if "global_flops_per_sec" in sm:
    step_s = tokens / rows["reference"]["tokens_per_sec"]
    gemm_s = tokens * main["flops_per_token"] / sm["global_flops_per_sec"]
    out.update(step_ms=1e3 * step_s, gemm_ms=1e3 * gemm_s, gemm_share=gemm_s / step_s)
  if "naive" in rows:
    per = main["num_workers"] * main["steps_per_unit"]
    out["naive_step_ms"] = 1e3 * median(rows["naive"]["seconds"]) / per
  return out


def _hot(hp: dict) -> dict:
  """The hot-path bullets' derived cells."""
  st, sv = hp["staging"], hp["scan_vs_while"]
  verdict = (
      "no measurable difference: keep the while_loop, which also skips a short "
      "round's padding"
      if abs(sv["ratio"] - 1) < 0.03
      else ("scan is faster here" if sv["ratio"] > 1 else "while_loop is faster here")
  )
  au = hp.get("autoloco_staging") or {}
  return dict(
      donated=", ".join(f"`{k}`: {v}" for k, v in hp["donated"].items()),
      warnings=hp["donation_warnings"] or "none",
      scan_ratios=", ".join(f"{x:.3f}" for x in sv["ratios"]),
      scan_verdict=verdict,
      staging_ms=1e3 * st["seconds"]["int32"],
      staging_uint8_ms=1e3 * st["seconds"]["uint8"],
      staging_share=st["seconds"]["int32"] / st["diloco_round_seconds"],
      staging_kib=st["buffer_bytes_int32"] / 2**10,
      autoloco_ms=1e3 * au["seconds"]["int32"] if au else None,
      autoloco_kib=au["buffer_bytes_int32"] / 2**10 if au else None,
  )


def _scaling(sc: dict, nominal: float) -> dict:
  first = sc["by_workers"][0]["tokens_per_sec"] if sc["by_workers"] else None
  by_k = [dict(p, vs_k1=p["tokens_per_sec"] / first) for p in sc["by_workers"]]
  by_width = [
      dict(p, mfu_nominal=p["model_flops_per_sec"] / nominal if nominal else None)
      for p in sc["by_width"]
  ]
  method = sc["by_workers"][0]["memory"]["method"] if sc["by_workers"] else ""
  return dict(sc, by_workers=by_k, by_width=by_width, method=method)


def prepare(result: dict) -> dict:
  """The result with every derived cell of the page's blocks."""
  main, sharded = result["main"], result.get("sharded") or {}
  nominal = result["machine"]["nominal_peak_flops"]
  out = dict(result, targets=targets(result), budget=_budget(result))
  out["rows"] = _table_rows(main, False, nominal)
  if "rows" in sharded:
    child = _table_rows(sharded, True, nominal)
    out["rows"] += child
    out["equal_rows"] = [r for r in child if "@" in r["name"] and "ratio" in r]
    one = [r for r in child if r["name"] == "reference" and "ratio" in r]
    if one:  # reference@N against the one-device reference
      out["split_gain"] = median(1 / x for x in one[0]["ratios"])
  rows = {r["name"]: r for r in main["rows"]}
  out["pytorch_rows"] = [
      dict(
          name=name,
          tokens_per_sec=rows[name]["tokens_per_sec"],
          ratio=median(ratios),
          ratio_min=min(ratios),
          ratio_max=max(ratios),
      )
      for name, ratios in versus_pytorch(rows).items()
  ]
  out["target_rows"] = [
      dict(
          name=name,
          measured="-"
          if t["value"] is None
          else (
              f"{t['value']:.3f}" if isinstance(t["value"], float) else str(t["value"])
          ),
          goal=("== " if "compilations" in name else ">= ") + str(t["target"]),
          met={True: "yes", False: "**no**", None: "not measured"}[t["met"]],
      )
      for name, t in out["targets"].items()
  ]
  out["compile_rows"] = [
      dict(c, name=name, hs_shown=_shown(c["hs"]))
      for block in [main] + ([sharded] if "rows" in sharded else [])
      for name, c in block["compiles"].items()
  ]
  out["device_count_flag"] = DEVICE_COUNT
  if result.get("scaling"):
    out["scaling"] = _scaling(result["scaling"], nominal)
  if result.get("hot_path"):
    out["hot"] = _hot(result["hot_path"])
  return out


_MIB = ":/1048576:.0f}"
_RATIO = "**{ratio:.3f}** [{ratio_min:.2f}, {ratio_max:.2f}]"

TABLES = {
    "run": Lines(
        (
            "```bash",
            "{command}",
            "```",
            "",
            "Mode: **{mode}**; wall time {wall_seconds:.0f} s.",
        )
    ),
    "machine": Lines(
        (
            "- CPU: {machine[cpu]} ({machine[vendor]}), {machine[cores]} cores visible, "
            "{machine[mhz]:.0f} MHz in /proc/cpuinfo; JAX {machine[jax]} on "
            "`{machine[backend]}` ({machine[device_count]} device(s) in the main "
            "process), Python {machine[python]}.",
            "- Load at start: `{machine[uptime]}`; 1/5/15-minute load at the end: "
            "{load_avg_end[0]:.2f}, {load_avg_end[1]:.2f}, {load_avg_end[2]:.2f}.",
            "- Nominal fp32 peak: {machine[nominal_peak_flops]:/1e9:.1f} GFLOP/s = "
            "{machine[nominal_formula]}.",
            "- Measured matmul peak (best of 3 jitted n x n matmuls in the model's "
            "dtype ({main[model][dtype]}), n in "
            "{plan[matmul_n]}, once per repeat): median "
            "{main[matmul_peak_median]:/1e9:.1f} GFLOP/s, max "
            "{main[matmul_peak_max]:/1e9:.1f} GFLOP/s.",
            "- The model's MLP matmul, best of 5, 3 interleaved rounds, after a "
            "{shape_matmul[square_n]}^2 one "
            "({shape_matmul[square_flops_per_sec]:/1e9:.1f} GFLOP/s): one model "
            "`{shape_matmul[global_shape]}` {shape_matmul[global_flops_per_sec]:/1e9:.1f}"
            " GFLOP/s; replica axis, batched `{shape_matmul[batched_shape]}` "
            "{shape_matmul[batched_flops_per_sec]:/1e9:.1f}; one naive worker step "
            "`{shape_matmul[worker_shape]}` {shape_matmul[worker_flops_per_sec]:/1e9:.1f}.",
        )
    ),
    "config": Lines(
        (
            "- Model (`configs/*.py:{plan[size]}`): d_model {main[model][d_model]}, "
            "{main[model][num_layers]} layers, {main[model][num_heads]} heads, mlp "
            "{main[model][mlp_dim]}, L = {main[seq_len]}, vocab 256 (bytes), "
            "{main[num_params]:,} parameters, {main[flops_per_token]:/1e6:.2f} MFLOP "
            "per token.",
            "- K = {main[num_workers]} workers, B = {main[batch_per_worker]} sequences "
            "per worker per step, L = {main[seq_len]}, for every row.",
            "- A timed unit: {main[steps_per_unit]} inner steps in the row's own rounds "
            "(DiLoCo's configured H: {main[config_h]}); {main[repeats]} repeats.",
        )
    ),
    "throughput": Table(
        lambda r: r["rows"],
        (
            ("row", "`{name}`"),
            ("what", "{what}"),
            ("layout", "{layout}", ""),
            ("process", "{process}"),
            ("H", "{h}", ""),
            ("tokens/s", "{tokens_per_sec:.0f}", ""),
            ("against", "`{reference}`", "-"),
            ("x that reference", _RATIO, "1 (by definition)"),
            ("model GFLOP/s", "{model_flops_per_sec:/1e9:.1f}", ""),
            ("MFU / measured peak", "{mfu_vs_measured_peak:.0%}", "n/a"),
            ("MFU / nominal", "{mfu_nominal:.0%}", "n/a"),
            ("compiles inner/sync", "{compiles}", ""),
            ("compile s", "{compile_seconds:.1f}", "-"),
        ),
    ),
    "child": Lines(
        (
            "Child rows: `XLA_FLAGS={device_count_flag}={sharded[devices]}`; their "
            "MFU is against the matmul peak measured there (median "
            "{sharded[matmul_peak_median]:/1e9:.1f} GFLOP/s).",
            "shard_map rows: the child process failed: `{sharded[error]}`",
        )
    ),
    "pytorch": Lines(
        (
            "PyTorch row: none: {main[pytorch][skipped]}.",
            "PyTorch {main[pytorch][torch]}, `torch.set_num_threads"
            "({main[pytorch][threads]})`, {main[pytorch][num_params]:,} parameters "
            "(checked equal to `model.param_count`).",
        )
    ),
    "versus_pytorch": Table(
        lambda r: r["pytorch_rows"],
        (
            ("row", "`{name}`"),
            ("tokens/s", "{tokens_per_sec:.0f}"),
            ("x pytorch", _RATIO),
        ),
    ),
    "equal_devices": Table(
        lambda r: r.get("equal_rows"),
        (
            ("row", "`{name}`"),
            ("tokens/s", "{tokens_per_sec:.0f}"),
            ("reference", "`{reference}`"),
            ("its tokens/s", "{reference_tokens_per_sec:.0f}", "not recorded"),
            (
                "x reference, same devices",
                "**{ratio_equal_devices:.3f}**",
                "not measured",
            ),
            ("x one-device reference", "{ratio_vs_one_device:.3f}", "-"),
        ),
        empty="No shard_map rows in this result.",
    ),
    "split_gain": Lines(
        (
            "Splitting the reference itself over the {sharded[devices]} devices: "
            "`reference@{sharded[devices]}` runs at **{split_gain:.3f}x** the "
            "one-device `reference` of the same process.",
        )
    ),
    "targets": Table(
        lambda r: r["target_rows"],
        (
            ("target", "{name}"),
            ("measured", "{measured}"),
            ("goal", "{goal}"),
            ("met", "{met}"),
        ),
    ),
    "budget": Lines(
        (
            "- The reference step: {budget[step_ms]:.0f} ms; its model FLOPs at the "
            "MLP matmul's rate: {budget[gemm_ms]:.0f} ms ({budget[gemm_share]:.0%}).",
            "- One naive worker step: about {budget[naive_step_ms]:.0f} ms.",
        )
    ),
    "compiles": Table(
        lambda r: r["compile_rows"],
        (
            ("row", "`{name}`"),
            ("H of the rounds run", "{hs_shown}"),
            ("distinct H", "{distinct_h}"),
            ("inner", "{inner}", ""),
            ("sync", "{sync}"),
            ("compile s", "{compile_seconds:.1f}"),
        ),
    ),
    "scaling_k": Table(
        lambda r: r.get("scaling", {}).get("by_workers"),
        (
            ("K", "{num_workers}"),
            ("global batch", "{global_batch}"),
            ("tokens/s", "{tokens_per_sec:.0f}"),
            ("x reference", "{ratio:.3f}"),
            ("tokens/s vs K=1", "{vs_k1:.2f}"),
            ("state MiB", "{xla[state_bytes]" + _MIB, "n/a"),
            ("XLA inner MiB", "{xla[inner][peak_estimate]" + _MIB, "n/a"),
            ("RSS peak MiB", "{memory[peak_bytes]" + _MIB, "n/a"),
            ("RSS growth MiB", "{memory[growth_bytes]" + _MIB, "n/a"),
        ),
        title="Rounds of H = {scaling[steps]}; memory: {scaling[method]}.",
    ),
    "scaling_width": Table(
        lambda r: r.get("scaling", {}).get("by_width"),
        (
            ("d_model", "{d_model}"),
            ("params", "{num_params:,}"),
            ("MFLOP/token", "{flops_per_token:/1e6:.2f}"),
            ("tokens/s", "{tokens_per_sec:.0f}"),
            ("x reference", "{ratio:.3f}"),
            ("MFU / nominal", "{mfu_nominal:.0%}", "n/a"),
            ("state MiB", "{xla[state_bytes]" + _MIB, "n/a"),
            ("XLA inner MiB", "{xla[inner][peak_estimate]" + _MIB, "n/a"),
            ("RSS growth MiB", "{memory[growth_bytes]" + _MIB, "n/a"),
        ),
    ),
    "hot_path": Lines(
        (
            "- **Donation**: {hot[donated]}; donation warnings: {hot[warnings]}.",
            "- **Host round-trips inside a round**: "
            "{hot_path[device_to_host_inside_round]}.",
            "- **while_loop vs scan** (C = {hot_path[scan_vs_while][chunk]}): scan / "
            "while tokens/s = **{hot_path[scan_vs_while][ratio]:.3f}** "
            "({hot[scan_ratios]}): {hot[scan_verdict]}.",
            "- **Staging** (C = {hot_path[staging][chunk]}): {hot[staging_ms]:.1f} ms "
            "per DiLoCo round of H = {hot_path[staging][h]} ({hot[staging_share]:.0%} "
            "of the round's {hot_path[staging][diloco_round_seconds]:.2f} s), "
            "{hot[staging_kib]:.0f} KiB of int32; uint8 instead: "
            "{hot[staging_uint8_ms]:.1f} ms.",
            "- AutoLoCo's buffer, sized by its `h_max` (C = "
            "{hot_path[autoloco_staging][chunk]} for rounds of H = "
            "{hot_path[autoloco_staging][h]}): {hot[autoloco_ms]:.1f} ms per round, "
            "{hot[autoloco_kib]:.0f} KiB.",
        )
    ),
}
