"""Model FLOPs utilization: the model's training FLOP/s per device against the
peak of the device's kind.

.. math:: \\mathrm{MFU} = \\frac{F \\cdot \\text{tokens/s}}{D \\cdot P}

``F`` is the training FLOPs per token (``model.flops_per_token``: ``6N`` plus
attention), ``D`` the devices the run holds and ``P`` one device's peak dense
bfloat16 FLOP/s, from the vendors' datasheets (:data:`PEAK_FLOPS`), or
``config.peak_flops`` where given. A device kind not listed (a CPU) has no
stated peak: MFU is ``None`` there unless the config gives one. The model FLOPs
count what the model needs, not what remat recomputes (PaLM's definition,
arXiv 2204.02311, appendix B).
"""

from __future__ import annotations

#: Peak dense bfloat16 FLOP/s of one device, by the start of its ``device_kind``
#: (the longest match wins: an H100 PCIe is not an SXM H100).
PEAK_FLOPS = {
    "NVIDIA H100": 989e12,
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H200": 989e12,
    "NVIDIA A100": 312e12,
    "NVIDIA L4": 121e12,
    "TPU v4": 275e12,
    "TPU v5 lite": 197e12,
    "TPU v5e": 197e12,
    "TPU v5p": 459e12,
    "TPU v6 lite": 918e12,
    "TPU v6e": 918e12,
}


def peak_flops(device_kind: str, stated: float | None = None) -> float | None:
  """One device's peak FLOP/s: ``stated`` where given, else the longest key of
  :data:`PEAK_FLOPS` that ``device_kind`` starts with, else None."""
  if stated:
    return float(stated)
  keys = [k for k in PEAK_FLOPS if device_kind.startswith(k)]
  return PEAK_FLOPS[max(keys, key=len)] if keys else None


def peak_of(mesh, config) -> float | None:
  """:func:`peak_flops` of a run's devices (the mesh's first device's kind) and
  config (``peak_flops``)."""
  return peak_flops(mesh.devices.flat[0].device_kind, config.get("peak_flops"))


def mfu(model_flops_per_sec: float, devices: int, peak: float | None) -> float | None:
  """``model_flops_per_sec / (devices · peak)``, None without a peak."""
  if not peak or devices < 1:
    return None
  return float(model_flops_per_sec) / (devices * peak)
