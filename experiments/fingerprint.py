"""Fingerprints of what a run computes, to check that a change of code changes no result.

  python -m experiments.fingerprint --out /tmp/before.json            # on the old tree
  python -m experiments.fingerprint --out /tmp/after.json --against /tmp/before.json

Runs every algorithm config at ``:tiny`` and ``configs/default.py`` at its own
size through the command line users run (``python -m experiments.run``), with
the simulated clock's step time fixed (``--config.network.step_time=0.01``: a
measured one moves with the machine's load), and keeps of each ``metrics.jsonl``
every field but the host's timings (``trainer.TIMING_FIELDS`` and the summary's
throughput and wall times). Its SHA-256 is the run's fingerprint; with
``--against`` the table says, per config, whether the two agree bit for bit.

Floating-point results depend on the processor (XLA's code differs between an
Intel and an AMD machine), so compare fingerprints taken on one machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile

from absl import app, flags

_OUT = flags.DEFINE_string("out", None, "Where the fingerprints' JSON goes.")
_AGAINST = flags.DEFINE_string("against", "", "Earlier fingerprints to compare with.")
_CONFIGS = flags.DEFINE_list(
    "configs",
    [
        "configs/default.py",
        "configs/default.py:tiny",
        "configs/autoloco.py:tiny",
        "configs/diloco.py:tiny",
        "configs/ddp.py:tiny",
        "configs/noloco.py:tiny",
        "configs/gasloc.py:tiny",
        "configs/streaming.py:tiny",
        "configs/sparseloco.py:tiny",
    ],
    "The configs to run.",
)

#: Fields measured on the host's clock: they differ between any two runs.
HOST_TIMED = (
    "wall_time",
    "data_wait_s",
    "host_wait_s",
    "tokens_per_sec",
    "model_flops_per_sec",
    "mfu",
    "final_eval_share",
    "final_eval_seconds",
)


def result_records(path: str) -> list[dict]:
  """The records of ``metrics.jsonl`` without their host timings."""
  with open(path) as f:
    records = [json.loads(line) for line in f]
  return [{k: v for k, v in r.items() if k not in HOST_TIMED} for r in records]


def fingerprint(config: str, workdir: str) -> dict:
  """Runs ``config`` in ``workdir``; its records' count, values and digest."""
  command = [
      sys.executable,
      "-m",
      "experiments.run",
      f"--config={config}",
      f"--workdir={workdir}",
      "--config.network.step_time=0.01",
      "--config.log.progress=False",
      "--config.log.tensorboard=False",
  ]
  done = subprocess.run(command, capture_output=True, text=True)
  if done.returncode:
    raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
  records = result_records(os.path.join(workdir, "metrics.jsonl"))
  text = json.dumps(records, sort_keys=True)
  return dict(
      records=len(records),
      values=sum(len(r) for r in records),
      sha256=hashlib.sha256(text.encode()).hexdigest(),
  )


def compare(now: dict, before: dict) -> str:
  """A markdown table: per config, both digests' agreement."""
  lines = ["| config | records / values | bit for bit |", "|---|---|---|"]
  for name in now:
    same = name in before and before[name]["sha256"] == now[name]["sha256"]
    size = f"{now[name]['records']} / {now[name]['values']:,}"
    lines.append(f"| `{name}` | {size} | {'yes' if same else '**no**'} |")
  return "\n".join(lines)


def main(argv):
  del argv
  out = {}
  with tempfile.TemporaryDirectory() as root:
    for i, config in enumerate(_CONFIGS.value):
      out[config] = fingerprint(config, os.path.join(root, str(i)))
      print(f"[fingerprint] {config}: {out[config]['sha256'][:16]}", flush=True)
  with open(_OUT.value, "w") as f:
    json.dump(out, f, indent=1)
  if _AGAINST.value:
    with open(_AGAINST.value) as f:
      before = json.load(f)
    print(compare(out, before))
    if any(before.get(k, {}).get("sha256") != v["sha256"] for k, v in out.items()):
      return 1
  return 0


if __name__ == "__main__":
  flags.mark_flag_as_required("out")
  app.run(main)
