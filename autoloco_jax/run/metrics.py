"""Where a run's measurements go: ``metrics.jsonl`` and TensorBoard."""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping

import numpy as np


def to_python(value: Any) -> Any:
  """Device or numpy scalars to plain Python numbers (JSON-safe)."""
  value = np.asarray(value)
  if value.ndim:
    return value.tolist()
  item = value.item()
  if isinstance(item, float) and not math.isfinite(item):
    return str(item)
  return item


class Writer:
  """Appends one JSON object per record to ``workdir/metrics.jsonl`` and mirrors
  numeric scalars to TensorBoard (``workdir/tb``) when enabled."""

  def __init__(self, workdir: str, tensorboard: bool = True):
    os.makedirs(workdir, exist_ok=True)
    self.path = os.path.join(workdir, "metrics.jsonl")
    self._file = open(self.path, "a", buffering=1)
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter

      self._tb = SummaryWriter(os.path.join(workdir, "tb"))

  def write(self, step: int, record: Mapping[str, Any]) -> None:
    record = {k: to_python(v) for k, v in record.items()}
    self._file.write(json.dumps(record) + "\n")
    if self._tb is not None:
      for key, value in record.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
          self._tb.add_scalar(key, value, step)

  def close(self) -> None:
    self._file.close()
    if self._tb is not None:
      self._tb.close()


def read(path: str) -> list[dict]:
  """All records of a ``metrics.jsonl`` file."""
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]
