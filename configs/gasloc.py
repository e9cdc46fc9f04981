"""GASLoC: K=4 workers, local AdamW steps, then one accelerated gossip step with
a random partner (any topology: matching, ring, torus, exponential, complete).

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/gasloc.py --workdir runs/gasloc
Heterogeneous network: add --config.network.name=hetero; slow workers taking
fewer local steps: --config.network.speed_factors="(1.,1.,2.,2.)"; compressed
messages: --config.compress.codec=int8, and --config.compress.ef_beta=0.9 for error
feedback (autoloco_jax/algorithms/gossip/compressed_exchange.py). Sizes: ``:tiny``, ``:cpu`` (default), ``:gpu``
(TPU/GPU VM, not run here).

On the complete graph with gasloc.mix_momentum=True it is DiLoCo exactly, with
gasloc.eta = DiLoCo's alpha (0.7), gasloc.gamma = DiLoCo's beta and gasloc.alpha
= 1/K (0 = 1/(degree+1): the pair average on a matching); docs/algorithms.md §5.
Expected (on the first 8 KB eval, not yet re-run on the
whole split; cpu, with network.name=hetero and network.step_time=0.075): eval loss of
the replicas' mean 1.97 nats/byte after 600 inner steps in 24 rounds of one
pairwise exchange each (DiLoCo: 1.98). The runs and the compressed ones:
docs/results.md (single-seed runs at the cpu size; §2, gossip methods; §3b).
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "gasloc"
  # config.gasloc and config.gossip keep common.base's defaults.
  return c
