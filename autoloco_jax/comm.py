"""Communication accounting (algorithms.md §6).

Bytes are counted per worker, as sent on the wire. A ring all-reduce of ``P``
parameters of ``b`` bytes among ``K`` workers (reduce-scatter then all-gather)
has every worker send ``2 (K−1)/K · P b`` bytes in ``2 (K−1)`` messages.

Reference: Patarasuk & Yuan, Bandwidth optimal all-reduce algorithms for
clusters of workstations, JPDC 2009.
"""

from __future__ import annotations

from typing import NamedTuple


class Traffic(NamedTuple):
  """What one worker sends: bytes and messages."""
  bytes: float
  messages: int

  def __add__(self, other: "Traffic") -> "Traffic":
    return Traffic(self.bytes + other.bytes, self.messages + other.messages)

  def __mul__(self, n: int) -> "Traffic":
    return Traffic(self.bytes * n, self.messages * n)


def ring_allreduce(num_params: int, num_workers: int, bytes_per_param: int = 4) -> Traffic:
  """Per-worker traffic of one ring all-reduce; zero for a single worker."""
  if num_workers < 1 or num_params < 0 or bytes_per_param < 1:
    raise ValueError(
        f"bad all-reduce size: num_params={num_params}, num_workers={num_workers}, "
        f"bytes_per_param={bytes_per_param}")
  k = num_workers
  return Traffic(2 * (k - 1) / k * num_params * bytes_per_param, 2 * (k - 1))
