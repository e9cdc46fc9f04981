"""GASLoC: K=4 workers, local AdamW steps, then one accelerated gossip step with
a random partner (any topology: matching, ring, torus, exponential, complete).

Run (2 CPU cores, about 3 minutes):
  python -m experiments.run --config configs/gasloc.py --workdir runs/gasloc
Heterogeneous network: add --config.network.name=hetero; slow workers taking
fewer local steps: --config.network.speed_factors="(1.,1.,2.,2.)". Sizes:
``:tiny``, ``:cpu`` (default), ``:gpu`` (TPU/GPU VM, not run here).

Parameters, with the mapping under which the complete graph is DiLoCo
(docs/algorithms.md §5): gasloc.eta = DiLoCo's alpha (0.7), gasloc.gamma =
DiLoCo's beta, gasloc.alpha (0 = 1/(degree+1): the pair average on a matching,
1/K on the complete graph). gasloc.mix_momentum=True
gossips the momentum term too; with topology=complete it is then DiLoCo exactly.
Expected (cpu, measured with network.name=hetero): eval loss of the replicas'
mean 1.97 nats/byte and of replica 0 1.98 (DiLoCo: 1.98), replica spread 1.1,
after 600 inner steps in 24 rounds of one pairwise exchange each (79 MB sent
per worker against DiLoCo's 118 MB; simulated 46.5 s against DiLoCo's 53 s at a
fixed step time of 75 ms).

Compressed messages (autoloco_jax/gossip.py): --config.compress.codec=int8 (or
bf16, fp8, fp4, int4, topk; --config.compress.block_size sets the values per
scale), and --config.compress.ef_beta=0.9 for error feedback. Each worker then
encodes its y_k less the common initial parameters and the Laplacian mixes the
decoded payloads; the clock counts the encoded bytes. Measured at ``:study``
(600 steps, H = 20, seed 0, network.name=hetero, network.step_time=0.075):
float32 2.097 nats/token (replicas' mean), 51.2 MB per worker, simulated 46.5 s;
int8 2.096, 13.2 MB (0.258x), 46.2 s, replica spread 0.63 against 0.56. One
seed: the loss difference is within seed noise.
"""

from configs import common


def get_config(size: str = "cpu"):
  c = common.base(size)
  c.algorithm = "gasloc"
  # config.gasloc (eta 0.7, gamma 0.5, alpha = 1/(degree+1)) and config.gossip
  # (random pairs from a pool of 16) keep common.base's defaults.
  return c
