"""Communication accounting and a simulated wall clock (algorithms.md §6).

Bytes are counted per worker, as sent on the wire. A ring all-reduce of ``P``
parameters of ``b`` bytes among ``K`` workers (reduce-scatter then all-gather)
has every worker send ``2 (K−1)/K · P b`` bytes in ``2 (K−1)`` messages and runs
at the pace of its slowest link. A pairwise exchange sends ``P b`` bytes in one
message over the pair's link and blocks only the pair.

Time is simulated, not measured: :class:`SimClock` keeps one clock per worker
and advances it by compute (a measured step time times per-worker speed
factors) and by the collectives of each round on a ``network.Network`` of
per-link bandwidths and latencies (``network.py``). One call per round,
``clock.advance_round(algo, round_index, steps)``, returns the metrics a trainer
logs next to the loss, for every algorithm.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from autoloco_jax.runtime.contract import PATTERNS, RoundComm, speed_factors
from autoloco_jax.sim.network import (
    NETWORKS,
    Network,
    allgather_time,
    allreduce_time,
    exchange_time,
    network_from_config,
)


class Traffic(NamedTuple):
  """What one worker sends: bytes and messages."""

  bytes: float
  messages: int

  def __add__(self, other: "Traffic") -> "Traffic":
    return Traffic(self.bytes + other.bytes, self.messages + other.messages)

  def __mul__(self, n: int) -> "Traffic":
    return Traffic(self.bytes * n, self.messages * n)


def ring_allreduce(
    num_params: int, num_workers: int, bytes_per_param: float = 4
) -> Traffic:
  """Per-worker traffic of one ring all-reduce; zero for a single worker.

  ``bytes_per_param`` may be fractional (a 4-bit format: 0.5); with
  ``num_params=1`` it is the payload's bytes.
  """
  if num_workers < 1 or num_params < 0 or not bytes_per_param > 0:
    raise ValueError(
        f"bad all-reduce size: num_params={num_params}, num_workers={num_workers}, "
        f"bytes_per_param={bytes_per_param}"
    )
  k = num_workers
  return Traffic(2 * (k - 1) / k * num_params * bytes_per_param, 2 * (k - 1))


def ring_allgather(num_bytes: float, num_workers: int) -> Traffic:
  """Per-worker traffic of one ring all-gather of a ``num_bytes`` payload per
  worker: every worker forwards the ``K − 1`` others' payloads once,
  ``(K − 1) · num_bytes`` bytes in ``K − 1`` messages (the collective of codecs
  whose payloads cannot be summed without decoding, ``codecs.Codec.dense`` False).
  """
  if num_workers < 1 or not num_bytes >= 0:
    raise ValueError(
        f"bad all-gather size: num_bytes={num_bytes}, num_workers={num_workers}"
    )
  k = num_workers
  return Traffic(float((k - 1) * num_bytes), k - 1)


class SimClock:
  """A simulated wall clock per worker, advanced round by round.

  Each worker ``k`` has a time ``t_k``. Compute advances it by
  ``steps · step_time · speed_k``. An all-reduce is a barrier: it starts when
  the last worker arrives and ends for everyone ``allreduce_time`` later. A
  gossip exchange blocks only the workers involved: worker ``k`` starts when it
  and all its peers are ready and ends ``exchange_time`` later; workers with
  other peers do not wait for it. An overlapped exchange (``send``, then
  ``arrive`` a round later) starts when the last worker has sent, runs in
  parallel with the next round's compute, and stalls a worker at ``arrive``
  only if it has not ended by then; the stall counts as communication time.
  The clock also counts what every worker sends (bytes, messages) and how its
  time splits into compute, communication and waiting.

  Args:
    network: the links (``network.Network``).
    num_params: P, parameters per model (and per gradient).
    bytes_per_param: b, bytes per parameter on the wire (may be fractional).
    step_time: seconds of one inner step of one worker at speed 1 (measured,
      e.g. with :func:`measure_step_time`, or configured).
    speed_K: per-worker compute-time multipliers (default all 1).
    overlap_backward: the share ``o`` of a step a collective may hide behind
      (the backward pass, ``2/3`` in the streaming DiLoCo paper's simulation,
      arXiv 2501.18512): an all-reduce or an overlapped send starts
      ``o · step_time · speed_k`` before worker ``k`` ends its last step, so
      it ends at ``max(max_k t_k, max_k (t_k − o · dt · f_k) + T)``. 0 (the
      default): it starts when the last worker arrives.
  """

  def __init__(
      self,
      network: Network,
      num_params: int,
      bytes_per_param: float = 4,
      step_time: float = 0.0,
      speed_K: np.ndarray | None = None,
      overlap_backward: float = 0.0,
  ):
    k = network.num_workers
    if num_params < 0 or not bytes_per_param > 0:
      raise ValueError(
          f"bad model size: num_params={num_params}, "
          f"bytes_per_param={bytes_per_param}"
      )
    if not (np.isfinite(step_time) and step_time >= 0):
      raise ValueError(f"step_time must be finite and >= 0, got {step_time!r}")
    self.network = network
    self.num_workers = k
    self.model_bytes = float(num_params * bytes_per_param)
    self.step_time = float(step_time)
    self.speed_K = np.ones(k) if speed_K is None else np.asarray(speed_K, np.float64)
    if self.speed_K.shape != (k,) or not np.all(self.speed_K > 0):
      raise ValueError(f"speed_K must be {k} values > 0, got {self.speed_K!r}")
    if not 0.0 <= overlap_backward <= 1.0:
      raise ValueError(f"overlap_backward must be in [0, 1], got {overlap_backward!r}")
    self.overlap_backward = float(overlap_backward)
    self.time_K = np.zeros(k)
    self.compute_K = np.zeros(k)
    self.comm_K = np.zeros(k)
    self.bytes_K = np.zeros(k)
    self.messages_K = np.zeros(k, np.int64)
    self.syncs = 0
    self.peak_bandwidth = 0.0
    self.in_flight_until: float | None = None
    self._last_dt = self.step_time
    self._allreduce = allreduce_time(network, self.model_bytes)
    self._allreduce_traffic = ring_allreduce(num_params, k, bytes_per_param)

  # -- primitives ------------------------------------------------------------

  def compute(self, steps_K: np.ndarray, step_time: float | None = None) -> None:
    """Every worker takes its ``steps_K[k]`` inner steps at its own speed."""
    dt = self.step_time if step_time is None else float(step_time)
    self._last_dt = dt
    work = np.asarray(steps_K, np.float64) * dt * self.speed_K
    self.time_K += work
    self.compute_K += work

  def _collective(
      self,
      payload_bytes: float | None,
      dense: bool,
      present_K: np.ndarray | None,
  ) -> tuple[np.ndarray, float, Traffic]:
    """Members, duration and per-member traffic of one all-reduce (``dense``)
    or all-gather of ``payload_bytes`` (None: the model, the cached ring)."""
    everyone = present_K is None or np.all(present_K)
    members = np.arange(self.num_workers) if everyone else np.flatnonzero(present_K)
    if payload_bytes is None and dense:
      if everyone:
        return members, self._allreduce, self._allreduce_traffic
      duration = allreduce_time(self.network, self.model_bytes, ring=members)
      return members, duration, ring_allreduce(int(self.model_bytes), len(members), 1)
    payload = self.model_bytes if payload_bytes is None else float(payload_bytes)
    ring = None if everyone else members
    if dense:
      duration = allreduce_time(self.network, payload, ring=ring)
      traffic = ring_allreduce(1, len(members), payload) if payload else Traffic(0.0, 0)
    else:
      duration = allgather_time(self.network, payload, ring=ring)
      traffic = ring_allgather(payload, len(members))
    return members, duration, traffic

  def _count(self, members: np.ndarray, traffic: Traffic) -> None:
    self.bytes_K[members] += traffic.bytes
    self.messages_K[members] += traffic.messages
    self.syncs += 1

  def allreduce(
      self,
      present_K: np.ndarray | None = None,
      payload_bytes: float | None = None,
      dense: bool = True,
  ) -> None:
    """One ring all-reduce of the parameters: a barrier, then the ring.

    With ``present_K`` (0/1 per worker) only the present workers take part;
    the others rejoin at its end, as DiLoCo's dropped workers restart from the
    new global parameters. ``payload_bytes`` (default: the model) is one
    worker's message; ``dense=False`` makes the collective a ring all-gather
    of the payloads (codecs with scales or indices).
    """
    members, duration, traffic = self._collective(payload_bytes, dense, present_K)
    arrived = self.time_K[members].max()
    if self.overlap_backward:
      end = max(arrived, self._start(members) + duration)
      self.comm_K[members] += end - arrived
    else:
      end = arrived + duration
      self.comm_K[members] += duration
    self.time_K[:] = end
    self._count(members, traffic)

  def _start(self, members: np.ndarray) -> float:
    """When a collective among ``members`` may start: the last of them to
    reach the backward pass it hides behind (``overlap_backward``)."""
    hide_K = self.overlap_backward * self._last_dt * self.speed_K[members]
    return float(np.max(self.time_K[members] - hide_K))

  def send(self, payload_bytes: float | None = None, dense: bool = True) -> None:
    """Starts an overlapped collective when the last worker has sent; it ends
    ``duration`` later while the workers compute (see :meth:`arrive`)."""
    if self.in_flight_until is not None:
      raise ValueError("a send while the previous exchange is still in flight")
    members, duration, traffic = self._collective(payload_bytes, dense, None)
    start = self._start(members) if self.overlap_backward else self.time_K.max()
    self.in_flight_until = float(start + duration)
    self._count(members, traffic)

  def arrive(self) -> None:
    """Every worker waits for the exchange in flight; the stall (if any) is
    exposed communication time."""
    if self.in_flight_until is None:
      raise ValueError("an arrive without an exchange in flight")
    stall_K = np.maximum(self.in_flight_until - self.time_K, 0.0)
    self.time_K += stall_K
    self.comm_K += stall_K
    self.in_flight_until = None

  def gossip(self, neighbors_DxK: np.ndarray, payload_bytes: float | None = None) -> None:
    """Each worker swaps its message with the peers of its column: one
    ``payload_bytes`` message per peer (default: the model)."""
    nbr = np.asarray(neighbors_DxK, np.int64).reshape(-1, self.num_workers)
    payload = self.model_bytes if payload_bytes is None else float(payload_bytes)
    ready = self.time_K.copy()
    for k in range(self.num_workers):
      peers = nbr[:, k]
      start = max(ready[k], ready[peers].max()) if peers.size else ready[k]
      duration = exchange_time(self.network, k, peers, payload)
      self.time_K[k] = start + duration
      self.comm_K[k] += duration
    self.bytes_K += nbr.shape[0] * payload
    self.messages_K += nbr.shape[0]
    self.syncs += 1

  # -- rounds ------------------------------------------------------------------

  def advance(
      self,
      pattern: RoundComm,
      step_time: float | None = None,
      present_K: np.ndarray | None = None,
  ) -> dict:
    """Advances the clock by one round; returns the metrics to log with it.

    ``present_K`` (0/1 per worker, worker faults): absent workers neither
    compute nor send; only all-reduce patterns support it.

    Besides :meth:`metrics` and the round's ``sim_round_time`` and
    ``round_bytes_per_worker``, the record has ``peak_bandwidth``: the bytes
    per second one worker's link must carry for this round's exchange to take
    no longer than the compute it may hide behind,
    ``exchange bytes per worker / (max(window, 1) · step_time)`` (``window``:
    ``τ`` for an overlapped ``send``, else 1 step; DDP: one gradient
    all-reduce per step). 0 for a round that sends nothing; ``inf`` when the
    step time is 0. ``peak_bandwidth_max`` is its maximum so far.
    """
    if pattern.kind not in PATTERNS:
      raise ValueError(
          f"unknown round pattern {pattern.kind!r}; choose one of {PATTERNS}"
      )
    steps_K = np.broadcast_to(np.asarray(pattern.steps_K), (self.num_workers,))
    if present_K is not None:
      present_K = np.asarray(present_K) > 0
      if not present_K.any():
        raise ValueError("at least one worker must be present")
      if pattern.kind in ("gossip", "send", "arrive") and not present_K.all():
        raise ValueError(f"absent workers are not supported in {pattern.kind} rounds")
      steps_K = steps_K * present_K
    before_time = self.time_K.max()
    before_bytes = self.bytes_K.mean()
    exchanges = 1
    if pattern.kind == "allreduce_every_step":
      exchanges = max(int(steps_K.max()), 1)
      for _ in range(int(steps_K.max())):
        self.compute(np.minimum(steps_K, 1), step_time)
        steps_K = steps_K - 1
        self.allreduce(present_K)
    else:
      self.compute(steps_K, step_time)
      if pattern.kind == "allreduce":
        self.allreduce(present_K, pattern.payload_bytes, pattern.dense)
      elif pattern.kind == "gossip":
        self.gossip(pattern.neighbors_DxK, pattern.payload_bytes)
      elif pattern.kind == "send":
        self.send(pattern.payload_bytes, pattern.dense)
      elif pattern.kind == "arrive":
        self.arrive()
    round_bytes = float(self.bytes_K.mean() - before_bytes)
    dt = self.step_time if step_time is None else float(step_time)
    window = max(int(pattern.window), 1) * dt
    exchange_bytes = round_bytes / exchanges
    if exchange_bytes <= 0:
      peak = 0.0
    else:
      peak = exchange_bytes / window if window > 0 else float("inf")
    self.peak_bandwidth = max(self.peak_bandwidth, peak)
    metrics = self.metrics()
    metrics.update(
        sim_round_time=metrics["sim_time"] - before_time,
        round_bytes_per_worker=round_bytes,
        peak_bandwidth=peak,
    )
    return metrics

  def advance_round(
      self,
      algo: Any,
      round_index: int,
      steps: int,
      step_time: float | None = None,
      present_K: np.ndarray | None = None,
  ) -> dict:
    """:meth:`advance` with the round ``algo`` (an ``Algorithm``) just ran:
    ``round_index`` counts the syncs before it (0 for the first round), ``steps``
    is its number of inner steps, ``present_K`` the workers present (faults)."""
    return self.advance(algo.comm_pattern(round_index, steps), step_time, present_K)

  _STATE = ("time_K", "compute_K", "comm_K", "bytes_K", "messages_K")

  def state_dict(self) -> dict:
    """The clock's state as JSON-able lists (for a checkpoint's host state);
    includes ``step_time`` so a resumed run keeps the measured value, and an
    exchange still in flight (``in_flight_until``) so it arrives on time."""
    out = {name: getattr(self, name).tolist() for name in self._STATE}
    out.update(
        syncs=self.syncs,
        step_time=self.step_time,
        peak_bandwidth=self.peak_bandwidth,
        in_flight_until=self.in_flight_until,
    )
    return out

  def load_state_dict(self, saved: dict) -> "SimClock":
    """Restores :meth:`state_dict` (in place; returns ``self``). States saved
    before ``peak_bandwidth`` and ``in_flight_until`` existed load with 0 and
    nothing in flight."""
    for name in self._STATE:
      value = np.asarray(saved[name], getattr(self, name).dtype)
      if value.shape != (self.num_workers,):
        raise ValueError(
            f"saved clock has {value.shape} for {name}, "
            f"expected {self.num_workers} workers"
        )
      setattr(self, name, value)
    self.syncs = int(saved["syncs"])
    self.step_time = float(saved["step_time"])
    self.peak_bandwidth = float(saved.get("peak_bandwidth", 0.0))
    in_flight = saved.get("in_flight_until")
    self.in_flight_until = None if in_flight is None else float(in_flight)
    return self

  def metrics(self) -> dict:
    """Cumulative measurements (means over workers unless named otherwise).

    ``sim_time``: when the last worker finished (the run's simulated wall
    clock); ``sim_compute_time``, ``sim_comm_time``, ``sim_wait_time``: how a
    worker's time splits (in a transfer it cannot hide; waiting for a peer);
    ``sim_blocked_time``: the two together, the time a worker is not
    computing, ``mean_k(t_k − compute_k)``; ``bytes_per_worker``, ``messages_per_worker``: sent
    on the wire; ``syncs``: communication events (DDP: one per step; an
    overlapped exchange counts once, at its send); ``peak_bandwidth_max``: the
    largest round ``peak_bandwidth`` so far (:meth:`advance`).
    """
    wait_K = self.time_K - self.compute_K - self.comm_K
    return dict(
        sim_time=float(self.time_K.max()),
        sim_time_min=float(self.time_K.min()),
        sim_compute_time=float(self.compute_K.mean()),
        sim_comm_time=float(self.comm_K.mean()),
        sim_wait_time=float(np.maximum(wait_K, 0.0).mean()),
        sim_blocked_time=float((self.time_K - self.compute_K).mean()),
        bytes_per_worker=float(self.bytes_K.mean()),
        messages_per_worker=float(self.messages_K.mean()),
        syncs=int(self.syncs),
        peak_bandwidth_max=float(self.peak_bandwidth),
    )


def clock_from_config(config: Any, num_params: int, step_time: float) -> SimClock:
  """The clock of ``config.network`` for a model of ``num_params`` parameters."""
  k = config.num_workers
  return SimClock(
      network_from_config(config.network, k),
      num_params,
      config.comm.bytes_per_param,
      step_time=step_time,
      speed_K=speed_factors(config.network, k),
      overlap_backward=config.network.get("overlap_backward", 0.0),
  )


def also_clocks(config: Any, num_params: int, step_time: float) -> dict[str, SimClock]:
  """Clocks of the named settings in ``config.network.also``, timed alongside
  the main one: the same rounds, step time and speed factors on other links, so
  one run gives its simulated time on several networks (training itself does
  not depend on the network).

  Raises:
    ValueError: an unknown name.
  """
  names = tuple(config.network.also)
  k = config.num_workers
  speeds = speed_factors(config.network, k)
  clocks = {}
  for name in names:
    if name not in NETWORKS:
      raise ValueError(
          f"unknown network {name!r} in network.also; choose from " f"{sorted(NETWORKS)}"
      )
    clocks[name] = SimClock(
        NETWORKS[name](k),
        num_params,
        config.comm.bytes_per_param,
        step_time=step_time,
        speed_K=speeds,
        overlap_backward=config.network.get("overlap_backward", 0.0),
    )
  return clocks
