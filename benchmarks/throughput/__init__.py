"""What K simulated workers on the replica axis cost against training one model.

Regenerate ``docs/benchmarks.md`` and ``docs/benchmarks.json`` (the raw
numbers); about 8 minutes on a quiet 2-core CPU::

  python -m benchmarks.throughput --out docs/benchmarks.json --md docs/benchmarks.md

CI mode (a one-layer toy model, one repeat, fast XLA compile settings: checks
structure, not speed; ``tests/test_benchmarks.py``)::

  python -m benchmarks.throughput --quick --out /tmp/b.json --md /tmp/b.md

Every speed claim is a ratio measured side by side in one process: each row's
timed unit (``H_ref`` inner steps, in that row's own rounds) is bracketed by a
unit of the reference before and after it, and its ratio
``tokens/s(row) / tokens/s(reference)`` uses the mean of the two brackets.
Repeats alternate the row order; medians are reported. Absolute tokens/s depend
on the load of the (shared) machine and are reported, never asserted.

Rows (a round: ``rounds.run_round``, the trainer's round driver: its ``H`` inner
steps staged in chunks, the jitted inner loop, the jitted sync; then the one host
read of the round's metrics):

* ``reference``: one model, the inner optimizer (``inner.optimizer``), global
  batch ``K × B``, ``H`` steps in a ``lax.while_loop`` with a traced count over
  the same staged ``K × C × B × (L+1)`` buffer (``rounds.run_steps``): the inner
  loop without the replica axis.
* ``ddp``, ``diloco``, ``autoloco``, and ``noloco``, ``gasloc`` when
  ``algorithms.make`` builds them: ``K`` workers vmapped on one device, each
  with its own config's ``H`` (``configs/<name>.py``).
* ``naive``: DiLoCo as a Python loop over workers, one jitted AdamW step per
  worker per inner step (batches staged by ``rounds.run_steps`` like every
  row's): what the replica axis replaces.
* ``pytorch``: the reference's model and inner optimizer in eager PyTorch
  (``benchmarks/torch_reference.py``), when torch is installed (optional, not a
  dependency; without it the report says so in one line). It runs in a child
  process of its own (torch's threads and JAX's never share a process) that
  serves one timed unit per command (``benchmarks/unit_server.py``), so each of
  its units is bracketed by this process's reference like every row;
  ``--torch_threads`` sets its threads (default: the usable cores),
  ``--torch_compile`` adds a ``pytorch_compile`` row.
* ``<row>@N`` for every algorithm row: the same on ``N`` devices through
  ``shard_map``, the default path on CPU (``experiments/run.py`` starts JAX
  with one host device per usable core: ``distributed.use_every_core``).
  Simulated CPU devices need ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
  before JAX starts, so on CPU these rows come from a child process of this
  script (``--child_devices=N``): measured there against a reference of that
  process, then served unit by unit and bracketed again by this process's
  one-device reference.

Only some rows: ``--rows=reference,pytorch --rows_only`` times the JAX
reference against PyTorch and nothing else (JSON only).

Also: compilations of the round functions over a run whose ``H`` changes
(``_cache_size()``, must be 1) and compile times; scaling with ``K`` at a fixed
per-worker batch and with model width (tokens/s, memory); the achievable matmul
peak measured in the same run and the CPU's nominal peak; hot-path checks
(donation, no device-to-host transfer inside a round, ``while_loop`` vs a
``scan`` over the staged chunk, the cost of staging).

The package, by responsibility:

* ``plan``: the sizes of a mode, configs, model, synthetic data and its reader;
* ``runners``: the rows (``Runner`` subclasses) and the ``scan`` variant of the
  inner loop;
* ``timing``: timed units side by side, compile seconds and counts, memory;
* ``peak``: the machine, its nominal peak and measured matmul rates;
* ``measure``: the throughput rows, the hot-path checks, the scaling sweeps;
* ``child``: the process that measures the shard_map rows on simulated devices;
* ``pytorch``: the PyTorch rows' child process;
* ``report``: the targets and the markdown report;
* ``__main__``: the command-line flags and the run (flags are defined only there,
  so importing the package defines none).
"""

from benchmarks.throughput.measure import hot_path, measure_rows, scaling
from benchmarks.throughput.peak import machine, matmul_rate, shape_matmul
from benchmarks.throughput.plan import Plan, make_plan
from benchmarks.throughput.report import markdown, targets
from benchmarks.throughput.timing import bracketed, summarize, timed

__all__ = [
    "Plan",
    "bracketed",
    "hot_path",
    "machine",
    "make_plan",
    "markdown",
    "matmul_rate",
    "measure_rows",
    "scaling",
    "shape_matmul",
    "summarize",
    "targets",
    "timed",
]
