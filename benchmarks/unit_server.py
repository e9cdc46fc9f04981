"""Timed units in another process, driven one by one from this one.

The throughput benchmark times some rows in a child process (the shard_map rows
on simulated devices, the PyTorch rows) but brackets each of their units by a
unit of its own reference, in its own process, as it does for every row;
``benchmarks/xla_options.py`` runs each variant in a child and brackets it by
the default's child. The
child announces itself with one JSON line, then runs units on command:

  parent -> child (stdin):    ``unit NAME STEPS ROUND_H`` | ``call NAME JSON``
                              | ``quit``
  child -> parent (channel):  ``{"ready": ...}`` once, then ``{"done": NAME}``
                              after each unit, ``{"done": NAME, "result": ...}``
                              after each call (keyword arguments in JSON)

The channel is the child's original stdout; :func:`channel` points everything
else the child prints at its stderr (a log file), so a stray print cannot break
the protocol. No JAX and no torch here: both kinds of child import this.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Callable


def channel():
  """The child's protocol channel (its stdout); afterwards ``sys.stdout`` and
  file descriptor 1 write to stderr. Call before anything else prints."""
  out = os.fdopen(os.dup(1), "w", buffering=1)
  sys.stdout.flush()
  os.dup2(2, 1)
  sys.stdout = sys.stderr
  return out


def serve(
    units: dict[str, Callable[[int, int], None]],
    ready: dict,
    out,
    calls: dict[str, Callable[..., dict]] | None = None,
) -> None:
  """Child side: writes ``ready``, then runs ``units[NAME](steps, round_h)`` for
  each ``unit`` command and ``calls[NAME](**kwargs)`` for each ``call`` command
  on stdin, until ``quit`` or end of input."""
  out.write(json.dumps(dict(ready=ready), default=float) + "\n")
  for line in sys.stdin:
    words = line.split(maxsplit=2)
    if not words or words[0] == "quit":
      break
    if words[0] == "call":
      result = calls[words[1]](**json.loads(words[2]))
      out.write(json.dumps(dict(done=words[1], result=result), default=float) + "\n")
      continue
    name, steps, round_h = words[1], *map(int, words[2].split())
    units[name](steps, round_h)
    out.write(json.dumps(dict(done=name)) + "\n")


class ChildExited(RuntimeError):
  """The child did not answer a command (it exited or replied otherwise)."""


class Served:
  """Parent side: a child process started with ``args`` that serves units.

  ``ready()`` waits for its announcement (or its exit) and returns the payload,
  or ``{"error": ...}`` with the tail of its log (a temporary file, its stderr);
  ``unit`` runs one unit there and returns when it is done; ``close()`` ends it
  and deletes the log."""

  def __init__(self, args: list[str], env: dict, cwd: str):
    fd, self.log_path = tempfile.mkstemp(prefix="unit_server_", suffix=".log")
    self._log = os.fdopen(fd, "w")
    self.proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=self._log,
        text=True,
        bufsize=1,
    )
    self._ready = None

  def log(self) -> str:
    """Everything the child wrote to its stderr so far."""
    self._log.flush()
    with open(self.log_path) as f:
      return f.read()

  def _log_tail(self, chars: int = 3000) -> str:
    return self.log()[-chars:]

  def _reply(self) -> dict | None:
    line = self.proc.stdout.readline()
    return json.loads(line) if line.strip() else None

  def ready(self) -> dict:
    if self._ready is None:
      reply = self._reply()
      if reply is None or "ready" not in reply:
        code = self.proc.wait()
        self._ready = dict(error=f"child exited with {code}: {self._log_tail()}")
      else:
        self._ready = reply["ready"]
    return self._ready

  def _send(self, line: str) -> dict | None:
    """Writes one command; returns the reply (None if the child is gone)."""
    try:
      self.proc.stdin.write(line + "\n")
      self.proc.stdin.flush()
    except (BrokenPipeError, OSError):
      return None
    return self._reply()

  def unit(self, name: str, steps: int, round_h: int = 0) -> None:
    reply = self._send(f"unit {name} {steps} {round_h}")
    if reply != dict(done=name):
      raise ChildExited(
          f"child row {name} did not finish its unit ({reply}): {self._log_tail()}"
      )

  def call(self, name: str, **kwargs) -> dict:
    """Runs ``calls[name](**kwargs)`` in the child; returns its result."""
    reply = self._send(f"call {name} {json.dumps(kwargs)}")
    if not reply or reply.get("done") != name:
      raise ChildExited(f"child call {name} failed ({reply}): {self._log_tail()}")
    return reply["result"]

  def close(self) -> None:
    if self.proc.poll() is None:
      try:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
      except (BrokenPipeError, OSError):
        pass
      try:
        self.proc.wait(timeout=60)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
    if not self._log.closed:
      self._log.close()
      os.remove(self.log_path)
