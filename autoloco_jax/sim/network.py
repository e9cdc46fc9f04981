"""The network of a simulated run: per-link bandwidth and latency, and how long
the collectives take on it (algorithms.md §6).

A :class:`Network` holds ``K × K`` link matrices, built from scalars, per-worker
values (a link runs at its slower end) or full matrices, or chosen by name
(:data:`NETWORKS`: ``ideal``, ``homogeneous``, ``hetero``).
:func:`allreduce_time` and :func:`exchange_time` give the seconds of a ring
all-reduce and of a pairwise exchange on it; ``clock.SimClock`` uses them.

Reference: Patarasuk & Yuan, Bandwidth optimal all-reduce algorithms for
clusters of workstations, JPDC 2009.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

# ----------------------------------------------------------------------------
# The network: per-link bandwidth and latency.

#: Bytes per second in one Gbit/s.
GBIT = 1e9 / 8


class Network(NamedTuple):
  """Links between K workers (symmetric ``K × K`` matrices, float64).

  Attributes:
    bandwidth_KxK: bytes per second of each link (``inf`` on the diagonal).
    latency_KxK: seconds per message on each link (0 on the diagonal).
    name: the setting's name, for logs.
  """

  bandwidth_KxK: np.ndarray
  latency_KxK: np.ndarray
  name: str = "custom"

  @property
  def num_workers(self) -> int:
    return self.bandwidth_KxK.shape[0]


def _links(value, num_workers: int, what: str, combine) -> np.ndarray:
  """A scalar, a per-worker list (combined pairwise) or a ``K × K`` matrix."""
  v = np.asarray(value, np.float64)
  k = num_workers
  if v.shape == (1,):  # a one-element tuple from a config is a scalar
    v = v[0]
  if v.ndim == 0:
    m = np.full((k, k), float(v))
  elif v.shape == (k,):
    m = combine(v[:, None], v[None, :])
  elif v.shape == (k, k):
    if not np.allclose(v, v.T):
      raise ValueError(f"{what} matrix must be symmetric")
    m = v.copy()
  else:
    raise ValueError(
        f"{what} must be a scalar, {k} per-worker values or a {k}x{k} "
        f"matrix; got shape {v.shape}"
    )
  return m


def make_network(
    num_workers: int, bandwidth_gbps: Any, latency_ms: Any, name: str = "custom"
) -> Network:
  """Builds the link matrices from scalars, per-worker lists or matrices.

  A per-worker bandwidth is each worker's access link: the link between ``i``
  and ``j`` runs at ``min(b_i, b_j)``. A per-worker latency likewise gives
  ``max(l_i, l_j)`` (the slower end).

  Args:
    num_workers: K.
    bandwidth_gbps: Gbit/s, > 0 (``inf`` allowed).
    latency_ms: milliseconds, >= 0.

  Raises:
    ValueError: a wrong shape, a non-positive bandwidth or a negative latency.
  """
  if num_workers < 1:
    raise ValueError(f"num_workers must be >= 1, got {num_workers}")
  bw = _links(bandwidth_gbps, num_workers, "bandwidth_gbps", np.minimum)
  lat = _links(latency_ms, num_workers, "latency_ms", np.maximum)
  if not np.all(bw > 0):
    raise ValueError(f"bandwidths must be > 0 Gbit/s, got {bandwidth_gbps!r}")
  if not np.all(lat >= 0) or not np.all(np.isfinite(lat)):
    raise ValueError(f"latencies must be finite and >= 0 ms, got {latency_ms!r}")
  bw = bw * GBIT
  lat = lat * 1e-3
  np.fill_diagonal(bw, np.inf)
  np.fill_diagonal(lat, 0.0)
  return Network(bw, lat, name)


def two_sites(
    num_workers: int,
    fast_gbps: float = 10.0,
    slow_gbps: float = 1.0,
    intra_ms: float = 1.0,
    inter_ms: float = 50.0,
    name: str = "hetero",
) -> Network:
  """Workers ``[0, K/2)`` at one site on ``fast_gbps`` links, ``[K/2, K)`` at
  another on ``slow_gbps``; ``intra_ms`` latency within a site, ``inter_ms``
  between them. A link runs at its slower end."""
  k = num_workers
  site = np.arange(k) >= k // 2 if k > 1 else np.zeros(1, bool)
  per_worker = np.where(site, slow_gbps, fast_gbps)
  latency = np.where(site[:, None] == site[None, :], intra_ms, inter_ms)
  return make_network(k, per_worker, latency, name)


#: Named settings, ``name -> (K -> Network)``, chosen by ``config.network.name``.
NETWORKS: dict[str, Callable[[int], Network]] = {
    # No communication cost: simulated time is compute only.
    "ideal": lambda k: make_network(k, np.inf, 0.0, "ideal"),
    # One cluster: 10 Gbit/s everywhere, 1 ms per message.
    "homogeneous": lambda k: make_network(k, 10.0, 1.0, "homogeneous"),
    # Two sites: half the workers on 10 Gbit/s, half on 1 Gbit/s; 1 ms within a
    # site, 50 ms between the sites.
    "hetero": lambda k: two_sites(k),
}


def network_from_config(network_cfg: Any, num_workers: int) -> Network:
  """The named setting of ``config.network``, with ``bandwidth_gbps`` and
  ``latency_ms`` overriding it when given (non-empty)."""
  name = network_cfg.name
  if name not in NETWORKS:
    raise ValueError(f"unknown network {name!r}; choose one of {sorted(NETWORKS)}")
  net = NETWORKS[name](num_workers)
  bw, lat = network_cfg.bandwidth_gbps, network_cfg.latency_ms
  if _given(bw) or _given(lat):
    net = make_network(
        num_workers,
        bw if _given(bw) else net.bandwidth_KxK / GBIT,
        lat if _given(lat) else net.latency_KxK * 1e3,
        name=name + "+custom",
    )
  return net


def _given(value: Any) -> bool:
  return value is not None and np.size(value) > 0


# ----------------------------------------------------------------------------
# Times of the collective operations.


def _ring_stage(
    network: Network, ring: Sequence[int] | None, chunk_bytes: Callable[[int], float]
) -> tuple[int, float]:
  """``(k, seconds)`` of one lock-step ring stage: every worker of ``ring`` (default
  all, in order) sends ``chunk_bytes(k)`` to its successor; the slowest link sets
  the pace. One worker has no stage (0 s)."""
  order = np.arange(network.num_workers) if ring is None else np.asarray(ring)
  k = len(order)
  if k <= 1:
    return k, 0.0
  src, dst = order, np.roll(order, -1)
  stage = np.max(
      network.latency_KxK[src, dst] + chunk_bytes(k) / network.bandwidth_KxK[src, dst]
  )
  return k, float(stage)


def allreduce_time(
    network: Network, num_bytes: float, ring: Sequence[int] | None = None
) -> float:
  """Seconds of a ring all-reduce of ``num_bytes`` (per worker) over all K.

  Reduce-scatter then all-gather: ``2 (K−1)`` lock-step stages, in each every
  worker sends a chunk of ``num_bytes / K`` to its ring successor. A stage ends
  when its slowest link has delivered, so

  .. math:: T = 2 (K − 1) \\max_{(i, j) \\in \\text{ring}}
      \\left(ℓ_{ij} + \\frac{\\text{bytes}/K}{b_{ij}}\\right).

  ``ring`` is the worker order (default ``0, 1, …, K−1``); a subset of the
  workers (those present in a round with faults) all-reduces among itself.
  """
  k, stage = _ring_stage(network, ring, lambda k: num_bytes / k)
  return 2 * (k - 1) * stage


def allgather_time(
    network: Network, num_bytes: float, ring: Sequence[int] | None = None
) -> float:
  """Seconds of a ring all-gather of a ``num_bytes`` payload per worker.

  ``K − 1`` lock-step stages; in each every worker forwards one whole payload
  to its ring successor (payloads that cannot be summed on the way: encoded
  with per-block scales or indices, ``codecs.Codec.dense`` False), so

  .. math:: T = (K − 1) \\max_{(i, j) \\in \\text{ring}}
      \\left(ℓ_{ij} + \\frac{\\text{bytes}}{b_{ij}}\\right).

  ``ring`` as in :func:`allreduce_time`.
  """
  k, stage = _ring_stage(network, ring, lambda k: num_bytes)
  return float((k - 1) * stage)


def exchange_time(
    network: Network, worker: int, peers: Sequence[int], num_bytes: float
) -> float:
  """Seconds for ``worker`` to swap ``num_bytes`` with each of ``peers``.

  One exchange over the pair's link costs ``ℓ + bytes / b``. With several
  peers (gossip on a ring, torus, groups) the messages share the worker's link,
  so their transfer times add while the latencies overlap:
  ``max_j ℓ_kj + Σ_j bytes / b_kj``.
  """
  peers = np.asarray(peers, np.int64)
  if peers.size == 0:
    return 0.0
  lat = network.latency_KxK[worker, peers]
  bw = network.bandwidth_KxK[worker, peers]
  return float(np.max(lat) + np.sum(num_bytes / bw))
