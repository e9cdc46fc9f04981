"""SparseLoCo: DiLoCo whose pseudo-gradients are sparse, 2-bit and error-fed.

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/sparseloco.py --workdir runs/sparseloco
Sizes: ``:tiny`` (seconds), ``:study``, ``:cpu`` (default), ``:gpu`` (not run here).

Sarfi, Thérien, Lidin, Belilovsky 2025 (arXiv 2508.15706), as we read it
(autoloco_jax/codecs.py, exchange.py): each worker keeps an error-feedback
residual e <- 0.95 e + Delta, sends the top 1/64 (1.6 %) of every chunk of
4096 values of e as ternary signs times a per-chunk scale (2 bits per value,
12 bits per index), and keeps what it did not send (e <- e - sent). The
average of the decoded payloads drives the outer step; the residual's decay
plays the role of outer momentum, so the outer optimizer is plain SGD
(beta = 0) with learning rate 1. The clock charges a ring all-gather of the
encoded payloads (indices and scales included).

Under the protocol (tuning seeds apart, 5 fresh seeds, paired intervals against a
tuned DiLoCo) see docs/results.md §2. A first look, one seed each, untuned
(``network.step_time=0.075``, ``network.name=hetero``):
``:study`` (600 steps, H = 20): eval loss 2.238 nats/token in 30 syncs, 1.1 MB
sent per worker (DiLoCo: 2.106 nats, 76.8 MB), simulated 49.5 s (DiLoCo 54.6 s),
peak bandwidth 0.51 MB/s. ``:tiny`` (40 steps, 4 syncs): 4.80 nats against
DiLoCo's 3.21, too few syncs for a 1.6 % top-k to move the model. Untuned:
the outer learning rate and ef_beta are SparseLoCo's defaults as we read them.
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "diloco"
  c.diloco.alpha = 1.0
  c.diloco.beta = 0.0
  c.compress.codec = "topk"
  c.compress.chunk_size = 4096
  c.compress.density = 1 / 64
  c.compress.value_bits = 2
  c.compress.ef_beta = 0.95
  return c
