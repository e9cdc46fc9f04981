"""What K simulated workers on the replica axis cost against training one model.

Regenerate ``docs/benchmarks.md`` and ``docs/benchmarks.json`` (the raw
numbers); about 8 minutes on a quiet 2-core CPU::

  python -m benchmarks.throughput --out docs/benchmarks.json --md docs/benchmarks.md

Re-render the page from the committed JSON, measuring nothing::

  python -m benchmarks.render docs/benchmarks.md

CI mode (a one-layer toy model, one repeat, fast XLA compile settings: checks
structure, not speed; ``tests/test_benchmarks.py``)::

  python -m benchmarks.throughput --quick --out /tmp/b.json --md /tmp/b.md

Every speed claim is a ratio measured side by side: each row's timed unit is
bracketed by units of the reference on the same devices. The rows, the method
and what each number means: ``docs/benchmarks.md`` (its blocks are rendered
from the JSON by ``benchmarks/render.py``). Only some rows:
``--rows=reference,pytorch --rows_only`` times the JAX reference against
PyTorch and nothing else (JSON only).

The package, by responsibility:

* ``workload``: the sizes of a mode, configs, model, synthetic data and its reader;
* ``runners``: the rows (``Runner`` subclasses) and the ``scan`` variant of the
  inner loop;
* ``timing``: timed units side by side, compile seconds and counts, memory;
* ``peak``: the machine, its nominal peak and measured matmul rates;
* ``measure``: the throughput rows, the hot-path checks, the scaling sweeps;
* ``child``: the process that measures the shard_map rows on simulated devices;
* ``pytorch``: the PyTorch rows' child process;
* ``report``: the targets, and the specs of ``docs/benchmarks.md``'s generated
  blocks (``benchmarks/render.py`` renders them; the page's prose is its own);
* ``__main__``: the command-line flags and the run (flags are defined only there,
  so importing the package defines none).
"""
