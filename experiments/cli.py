"""What every command line of the project shares: quiet by default, and bad input
reported as ``error: <message>`` with exit status 2.

* Library INFO lines (JAX's backend probing, orbax's saves, TFDS's reads, our
  own setup line) stay out of the console; progress bars and summaries are
  printed, not logged. ``-v 0`` (absl's ``--verbosity``) shows INFO again.
* A bad flag, config field or value, a missing file or an unreadable
  checkpoint prints ``error: <message>`` and exits with status 2; ``-v 1`` shows
  the traceback as well. A run stopped by a NaN exits with status 1.
"""

from __future__ import annotations

import sys
import traceback
from typing import Callable

from absl import app, flags, logging

#: Exceptions that mean "the input is wrong" (exit 2).
BAD_INPUT = (ValueError, KeyError, OSError)


def _verbose() -> bool:
  return flags.FLAGS["verbosity"].present and flags.FLAGS.verbosity >= 1


def _fail(error: BaseException, status: int) -> None:
  if _verbose():
    traceback.print_exception(error, file=sys.stderr)
  message = error.args[0] if isinstance(error, KeyError) and error.args else error
  # config_flags reports a config file it cannot load with the loader's details.
  message = " ".join(
      str(message)
      .replace(
          "Configuration is not available because of an " "earlier failure to load: ", ""
      )
      .split()
  )
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(status)


def _parse(argv: list[str]) -> list[str]:
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    message = str(e)
  except (AttributeError, KeyError) as e:  # config_flags: a field the config lacks
    field = str(e).strip("'\"")
    given = [a.split("=")[0] for a in argv if field and field in a]
    message = f"the config has no field {field!r}" + (f" ({given[0]})" if given else "")
  except (ValueError, TypeError) as e:  # config_flags: a value of the wrong type
    message = str(e)
  print(f"error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def run(main: Callable[[list[str]], None]) -> None:
  """``absl.app.run(main)`` with the project's quiet, friendly error handling."""

  def wrapped(argv):
    if not flags.FLAGS["verbosity"].present:
      logging.set_verbosity(logging.WARNING)
    from autoloco_jax.run import checkpoint

    try:
      main(argv)
    except app.UsageError as e:
      _fail(e, 2)
    except BAD_INPUT + (checkpoint.CheckpointError,) as e:
      _fail(e, 2)
    except FloatingPointError as e:
      _fail(e, 1)

  app.run(wrapped, flags_parser=_parse)
