"""A stand-in for ``trainer.train_and_evaluate`` that trains nothing: for tests of
the study layer (``configs/studies``, ``experiments/sweep.py``, the reports),
never for results.

:func:`train_and_evaluate` writes into ``workdir``, in milliseconds and without
JAX, the files a finished run leaves and the sweep and reports read:
``config.json`` (the config's JSON with a ``provenance`` naming this module),
``metrics.jsonl`` (a record per round with the keys the reports and
``planner.h_sequence`` read, the eval every ``eval.every_steps`` steps and at
the end, then the summary line) and ``final_eval.json`` (per-document token
counts and loss sums); it returns the summary, as the trainer does. Its
numbers are made up but consistent:

* rounds follow the interval controller: fixed ``H``, a ``schedule``, a sync
  ``budget`` (the trainer's ``budget.schedule``), DDP's every step; adaptive
  controllers are stood in for by rounds shortening geometrically from ``H_0``
  to ``h_min``. A streaming run of ``P`` fragments logs an event every
  ``H // P`` steps (``runlog.events_per_sync``);
* bytes per event: the parameters times the codec's share, a fragment's share
  and the exchange's fan-out; simulated time: compute plus, per event, a
  latency and the bytes over the link;
* the final bits/byte: a smooth function of the hyperparameters (steps, mean
  interval, the outer pair's distance from an optimum, steep enough that a
  grid's far points fall more than a pruning gap behind, inner lr,
  compression, shards), plus an offset hashed from the trajectory (configs
  never tie) and noise hashed from the seed (partly shared by the seed's runs,
  as its data order is), so selection rules have something to rank and paired
  intervals a spread that sizes a report (10-20 seeds).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from typing import Any

from autoloco_jax.algorithms.diloco import budget
from autoloco_jax.model import transformer
from autoloco_jax.run import config_check

#: Algorithms whose final eval is the replicas' mean (and replica 0 beside it).
DECENTRALIZED = ("noloco", "gasloc", "gossip_adamw")
#: (bytes/s of the slowest link, latency in s) of the networks ``sim/network.py`` names.
LINKS = dict(homogeneous=(1.25e9, 1e-3), hetero=(1.25e8, 50e-3), ideal=(math.inf, 0.0))
#: Each codec's bytes per float32 byte (``block`` is the scale's block size).
CODECS = dict(
    identity=lambda c: 1.0,
    bf16=lambda c: 0.5,
    fp4=lambda c: 0.125 + 1 / c.block_size,
    int8=lambda c: 0.25 + 1 / c.block_size,
    topk=lambda c: c.density * (c.value_bits + 16) / 32,
)
#: Each algorithm's outer step: (its config group, step size, momentum).
OUTER = dict(
    diloco=("diloco", "alpha", "beta"),
    autoloco=("diloco", "alpha", "beta"),
    noloco=("noloco", "alpha", "beta"),
    gasloc=("gasloc", "eta", "gamma"),
)
#: Peers a gossip worker sends to per round, by topology (``K`` workers).
FAN_OUT = dict(
    matching=lambda k: 1,
    ring=lambda k: 2,
    complete=lambda k: k - 1,
    exponential=lambda k: max(1, int(math.log2(k))),
)


def _codec(config: Any) -> float:
  """The share of float32 bytes the run's codec sends."""
  return CODECS[config.compress.get("codec", "identity")](config.compress)


def _unit(*parts: Any) -> float:
  """A number in [0, 1) hashed from ``parts``: deterministic, no RNG state."""
  digest = hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
  return int.from_bytes(digest[:8], "big") / 2.0**64


def round_steps(config: Any) -> list[int]:
  """The inner steps of each logged round (of each fragment slot when streaming),
  summing to ``total_steps``; the last round is cut short, as the trainer's."""
  iv, T = config.interval, config.total_steps
  fragments = config.stream.get("fragments", 1)
  if config.algorithm == "ddp" or iv.controller == "fixed":
    planned = [iv.h]
  elif iv.controller == "schedule":
    planned = list(iv.schedule)
  elif iv.controller == "budget":
    planned = list(budget.schedule(T, iv.syncs, iv.shape, iv.ratio, iv.split))
  else:  # adaptive: a stand-in for the controllers, geometric from H_0 to h_min
    h_max = iv.h_max or iv.h
    planned = [min(h_max, max(iv.h_min, round(iv.h * 0.8**r))) for r in range(T)]
  out, step = [], 0
  while step < T:
    h = planned[min(len(out), len(planned) - 1)]
    n = min(max(1, h // fragments), T - step)
    out.append(n)
    step += n
  return out


def num_params(config: Any) -> int:
  """The model's parameters (``transformer``'s formula, no arrays built)."""
  return transformer._param_count_formula(transformer.validate(config.model))


def event_bytes(config: Any) -> float:
  """Bytes one worker sends per communication event."""
  payload = num_params(config) * config.comm.bytes_per_param
  payload *= _codec(config)
  payload /= config.stream.get("fragments", 1)
  k = config.num_workers
  if config.algorithm in DECENTRALIZED:
    return payload * FAN_OUT[config.gossip.topology](k)
  return payload * 2 * (k - 1) / k  # the ring all-reduce


def final_bpb(config: Any, syncs: float) -> float:
  """The run's final whole-split bits/byte (module docstring)."""
  T = config.total_steps
  loss = 1.5 + 2.0 * math.sqrt(40 / T) + 0.04 * math.log2(T / max(syncs, 1.0))
  if config.algorithm in OUTER:
    name, step, momentum = OUTER[config.algorithm]
    group = config[name]
    # The momentum's squared distance from 0.7, averaged over a linear schedule.
    b0 = group[momentum] - 0.7
    b1 = b0 if group.get("beta_end") is None else group.beta_end - 0.7
    distance = (group[step] - 0.8) ** 2 + (b0 * b0 + b0 * b1 + b1 * b1) / 3
    loss += 0.1 * math.log1p(distance / 0.01)
  if config.algorithm == "gossip_adamw":
    loss += 0.1 * math.log1p((1 - config.gossip_adamw.weight) ** 2 / 0.01)
  loss += 0.02 * math.log(config.inner.lr / 0.003) ** 2
  loss += 0.05 * math.sqrt(1 - _codec(config)) + 0.02 * (
      config.data.partition == "non_iid"
  )
  trajectory = config_check.trajectory_fields(config)
  trajectory.pop("seed")
  noise = 0.01 * _unit(config.seed) + 0.02 * _unit(config.seed, trajectory)
  return loss + 0.002 * _unit(trajectory) + noise


def _documents(config: Any, bpb: float, nats_per_bit: float) -> dict:
  """Per-document tokens (the corpus's, equal for every run on it) and loss
  sums whose token-weighted mean is ``bpb`` exactly."""
  source = (config.data.source, config.data.path)
  tokens = [500 + int(1000 * _unit(source, d)) for d in range(6)]
  spread = [_unit(config.seed, config.algorithm, d) - 0.5 for d in range(6)]
  shift = sum(n * s for n, s in zip(tokens, spread)) / sum(tokens)
  per_doc = [bpb * (1 + 0.05 * (s - shift)) for s in spread]
  doc = lambda b: dict(
      tokens=tokens, loss_sum=[n * x * nats_per_bit for n, x in zip(tokens, b)]
  )
  if config.algorithm in DECENTRALIZED:
    return {"mean": doc(per_doc), "replica": doc([x + 0.003 for x in per_doc])}
  return {"": doc(per_doc)}


def train_and_evaluate(
    config: Any, workdir: str, allow_config_change: bool = False
) -> dict:
  """Writes a finished run of ``config`` into ``workdir`` (module docstring) and
  returns its summary; refuses a config the trainer refuses (``validate``)."""
  del allow_config_change
  start = time.perf_counter()
  config_check.validate(config)
  os.makedirs(workdir, exist_ok=True)
  stored = json.loads(config.to_json_best_effort())
  stored["provenance"] = dict(stand_in=__name__)
  with open(os.path.join(workdir, config_check.CONFIG_FILE), "w") as f:
    json.dump(stored, f)
  steps = round_steps(config)
  events = config.total_steps if config.algorithm == "ddp" else len(steps)
  bpb = final_bpb(config, events / config.stream.get("fragments", 1))
  bytes_per_token = 1.0 if config.data.tokenizer == "bytes" else 3.5
  nats_per_bit = math.log(2) * bytes_per_token
  records = _round_records(config, steps, bpb, nats_per_bit)
  documents = _documents(config, bpb, nats_per_bit)
  n_tokens = sum(documents.get("", documents.get("mean"))["tokens"])
  losses = {name: sum(d["loss_sum"]) / n_tokens for name, d in documents.items()}
  final = dict(
      final_eval_loss=losses.get("", losses.get("mean")),
      final_eval_bpb=bpb,
      **{f"final_eval_loss_{name}": v for name, v in losses.items() if name},
      final_eval_tokens=n_tokens,
      final_eval_bytes=n_tokens * bytes_per_token,
      final_eval_whole=True,
      final_eval_seconds=0.0,
  )
  with open(os.path.join(workdir, "final_eval.json"), "w") as f:
    json.dump(dict(final, documents=documents), f)
  last, wall = records[-1], max(time.perf_counter() - start, 1e-6)
  summary = dict(
      summary=True,
      algorithm=config.algorithm,
      **final,
      last_sample_eval_loss=last["eval_loss"],
      syncs=last["syncs"],
      bytes_per_worker=last["bytes_per_worker"],
      peak_bandwidth=event_bytes(config) / config.network.step_time,
      sim_time=last["sim_time"],
      network=config.network.name,
      tokens=last["tokens"],
      **{k: v for k, v in last.items() if k.startswith("sim_time_")},
      tokens_per_sec=last["tokens"] / wall,
      num_params=num_params(config),
      devices=1,
      wall_time=wall,
      final_eval_share=0.0,
      tokenizer=config.data.tokenizer,
      eval_bytes_per_token=bytes_per_token,
  )
  with open(os.path.join(workdir, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in records + [summary])
  return summary


def _round_records(
    config: Any, steps: list[int], bpb: float, nats_per_bit: float
) -> list[dict]:
  """``metrics.jsonl``'s round records, with the keys the reports read (the
  trainer logs more): the clocks, AutoLoCo's outer step, and the training-time
  eval (the spread sample: ``bpb + 0.01`` at the end)."""
  T, every = config.total_steps, config.eval.every_steps
  step_time, sent = config.network.step_time, event_bytes(config)
  per_step = config.num_workers * config.data.batch_size * config.data.seq_len
  ddp, auto = config.algorithm == "ddp", config.algorithm == "autoloco"
  nets = (config.network.name,) + tuple(config.network.get("also", ()))
  out, step, events, next_eval = [], 0, 0, every
  sim = dict.fromkeys(nets, 0.0)
  for r, n in enumerate(steps):
    step += n
    events += n if ddp else 1
    for net in nets:
      bandwidth, latency = LINKS[net]
      sim[net] += n * step_time + (n if ddp else 1) * (latency + sent / bandwidth)
    eval_bpb = bpb + 0.01 + 2.0 * (1 - step / T) ** 2
    record = dict(
        round=r + 1,
        step=step,
        h=n,
        syncs=events,
        bytes_per_worker=events * sent,
        sim_time=sim[nets[0]],
        tokens=step * per_step,
        **{f"sim_time_{net}": sim[net] for net in nets[1:]},
    )
    if auto:
      record.update(_outer_step(config, r, n))
    if step >= next_eval or step == T:
      next_eval = (step // every + 1) * every
      record.update(eval_loss=eval_bpb * nats_per_bit, eval_bpb=eval_bpb)
    out.append(record)
  return out


def _outer_step(config: Any, r: int, n: int) -> dict:
  """AutoLoCo's outer step in round ``r`` of ``n`` steps: ``r_t = n / H_ref``
  (or the replayed ``ratio_schedule``), ``beta^r_t`` under a momentum correction."""
  a, alpha, beta = config.autoloco, config.diloco.alpha, config.diloco.beta
  ratio, replayed = n / (a.h_ref or config.interval.h), tuple(a.ratio_schedule)
  if replayed:
    ratio = replayed[min(r, len(replayed) - 1)]
  if "momentum" in a.correction or a.correction == "both":
    beta = beta**ratio
  return dict(ratio=ratio, outer_lr=alpha, outer_momentum=beta)


def diloco_hab(label: str) -> tuple[int, float, float]:
  """``(H, alpha, beta)`` of an evidence label ``diloco_h20_a0p7_b0p9``: a
  test's check that a study's labels name its configs (the studies never
  parse them)."""
  h, a, b = label[len("diloco_h") :].split("_")
  return int(h), float(a[1:].replace("p", ".")), float(b[1:].replace("p", "."))
