"""The run's simulated clocks: the one of ``config.network`` and those of
``config.network.also``, advanced together round by round.

Each clock (``sim.clock.SimClock``) prices a round from what the algorithm says
it computes and sends (``Algorithm.comm_pattern``) and one inner step's time.
That step time is, in order of precedence: the checkpoint's (a resumed run keeps
the value it started with), ``config.network.step_time``, or one measured now
on this machine (:func:`rounds.measure_step_time` on a copy of the state, so a
run's simulated times move with the machine's load unless it is fixed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autoloco_jax.run.assembly import Run
from autoloco_jax.run.resume import HostState
from autoloco_jax.runtime import replicas, rounds, state as state_lib
from autoloco_jax.sim import clock as clock_lib


class Clocks:
  """The main clock and the named others, which time the same rounds.

  Args:
    main: the clock of ``config.network``.
    also: the clocks of ``config.network.also``, by name.
  """

  def __init__(self, main: clock_lib.SimClock, also: dict[str, clock_lib.SimClock]):
    self.main = main
    self.also = also

  def advance_round(
      self, algo: Any, round_index: int, h: int, present_K: np.ndarray | None
  ) -> dict:
    """Advances every clock by the round ``algo`` just ran; the main clock's
    record (syncs, bytes, messages, simulated time), with ``sim_time_{name}``
    of each other clock."""
    record = self.main.advance_round(algo, round_index, h, present_K=present_K)
    for name, other in self.also.items():
      record[f"sim_time_{name}"] = other.advance_round(
          algo, round_index, h, present_K=present_K
      )["sim_time"]
    return record

  def state_dicts(self) -> tuple[dict, dict]:
    """``(main, {name: other})`` as JSON-able dicts (``HostState.clock`` and
    ``HostState.also_clocks``)."""
    return self.main.state_dict(), {n: c.state_dict() for n, c in self.also.items()}

  def also_times(self) -> dict:
    """``sim_time_{name}`` of each other clock so far."""
    return {f"sim_time_{n}": c.metrics()["sim_time"] for n, c in self.also.items()}


def build(config: Any, run: Run, state: state_lib.TrainState, host: HostState) -> Clocks:
  """The clocks of a run: from the checkpoint's host state (``host.clock``,
  ``host.also_clocks``) on resume; else with ``network.step_time``, or one
  measured now on a copy of ``state``."""
  if host.clock:
    step_time = host.clock["step_time"]
  elif config.network.step_time:
    step_time = config.network.step_time
  else:
    step_time = _measure_step_time(config, run, state)
  clocks = Clocks(
      clock_lib.clock_from_config(config, run.num_params, step_time),
      clock_lib.also_clocks(config, run.num_params, step_time),
  )
  if host.clock:
    clocks.main.load_state_dict(host.clock)
    for name, other in clocks.also.items():
      other.load_state_dict(host.also_clocks[name])
  return clocks


def _measure_step_time(config: Any, run: Run, state: state_lib.TrainState) -> float:
  """One worker's inner step on this machine, timed on zero tokens of the
  staged shape."""
  B, L = config.data.batch_size, config.data.seq_len
  local = len(replicas.local_workers(run.mesh, config.num_workers))
  probe_tokens = rounds.stage(
      np.zeros((local, run.chunk, B, L + 1), run.data.dtype), run.chunk, run.mesh
  )
  return rounds.measure_step_time(
      run.algo.inner, state, probe_tokens, config.num_workers, min(2, run.chunk)
  )
