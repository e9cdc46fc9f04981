"""Fields every config shares, with a size preset.

Sizes: ``tiny`` (tests, seconds), ``cpu`` (2 CPU cores, a few minutes),
``study`` (the runs of configs/studies, about a minute each), ``gpu`` (one
TPU/GPU VM; documented, not run on the CPU machines).

This file is the one default of every field: the typed constructors
(``from_config`` in ``autoloco_jax/``) read the fields without defaults of their
own. The range of each numeric field lives in ``autoloco_jax/ranges.py``, read
by the check at start (``config_check.validate``) and by the constructors.
"""

import ml_collections

SIZES = {
    # name: (d_model, layers, heads, mlp, seq_len, batch/worker, total steps, H,
    # eval every)
    "tiny": (64, 2, 2, 256, 64, 4, 40, 10, 20),
    "cpu": (128, 4, 4, 512, 128, 8, 600, 25, 100),
    # studies (configs/studies): 60-odd runs of about a minute each on 2 cores
    "study": (128, 2, 4, 512, 64, 8, 600, 20, 50),
    "gpu": (768, 12, 12, 3072, 1024, 32, 20_000, 500, 1000),
    # Llama-shaped 1.0B (d 2048, 20 blocks, 16 heads of 128; GELU MLP 4d):
    # a worker spans devices (config.mesh.fsdp); compiled on a simulated pod
    # slice in docs/mesh.md (benchmarks/aot.py), not trained here.
    "1b": (2048, 20, 16, 8192, 2048, 16, 20_000, 500, 1000),
}
#: The sizes for accelerators: bfloat16 activations, a smaller learning rate.
ACCELERATOR_SIZES = ("gpu", "1b")


def base(size: str = "cpu") -> ml_collections.ConfigDict:
  """Every field, at the model, data and step budget of ``size``."""
  if size not in SIZES:
    raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
  d, layers, heads, mlp, seq, batch, steps, h, every = SIZES[size]
  c = ml_collections.ConfigDict()
  c.seed = 0
  # ddp | diloco | autoloco | noloco | gasloc | gossip_adamw (each has its own group below).
  c.algorithm = "diloco"
  # K simulated workers on the replica axis.
  c.num_workers = 4
  # Devices on the mesh; 0 = all JAX sees.
  c.num_devices = 0
  # Devices each worker spans (autoloco_jax/runtime/layout.py): its parameters,
  # optimizer and outer state and its batch split over fsdp, its heads, MLP
  # width and vocabulary over tensor; the replica axis takes the rest,
  # num_devices / (fsdp * tensor) devices, which must divide num_workers.
  c.mesh = ml_collections.ConfigDict(dict(fsdp=1, tensor=1))
  # T: the inner-step budget, the same for every method.
  c.total_steps = steps
  # Batches staged per inner call; 0 = min(64, H_max rounded up to a power of 2).
  c.chunk_steps = 0
  # One device's peak FLOP/s for the MFU the run logs (run/mfu.py); None = the
  # device kind's stated peak (none for a CPU: MFU is then null).
  c.peak_flops = ml_collections.config_dict.placeholder(float)
  c.model = _model(d, layers, heads, mlp, seq, size)
  c.data = _data(seq, batch)
  c.inner = _inner(size, steps)
  # Each algorithm's own hyperparameters, named with its paper's symbols.
  c.diloco = _diloco()
  c.autoloco = _autoloco()
  c.noloco = _noloco()
  c.gasloc = _gasloc()
  c.gossip_adamw = _gossip_adamw()
  c.gossip = _gossip()
  c.interval = _interval(h)
  c.eval = _eval(size, every)
  c.comm = ml_collections.ConfigDict()
  # Bytes per parameter of an uncompressed message (float32).
  c.comm.bytes_per_param = 4
  c.stream = _stream()
  c.compress = _compress()
  c.network = _network()
  c.checkpoint = _checkpoint(size)
  c.faults = _faults()
  c.log = _log()
  return c


def _model(
    d: int, layers: int, heads: int, mlp: int, seq: int, size: str
) -> ml_collections.ConfigDict:
  """The decoder-only transformer (autoloco_jax/model/transformer.py)."""
  m = ml_collections.ConfigDict()
  # Set from the data at run time.
  m.vocab_size = 256
  m.d_model = d
  m.num_layers = layers
  m.num_heads = heads
  m.mlp_dim = mlp
  # Set from data.seq_len at run time.
  m.seq_len = seq
  m.tie_embeddings = True
  # Activations and matmuls; the parameters and optimizer state stay float32
  # (the master weights). bfloat16 at the gpu size: docs/bf16_cpu.md.
  m.dtype = "bfloat16" if size in ACCELERATOR_SIZES else "float32"
  # auto | einsum | xla | cudnn (model.ATTENTION; auto: einsum on CPU, cuDNN's
  # fused kernel on GPU in bfloat16, else XLA's).
  m.attention = "auto"
  # What each block keeps for the backward pass (model.REMAT): none | full |
  # dots_saveable. Memory at the gpu size: docs/device.md.
  m.remat = "full" if size == "1b" else "none"
  return m


def _data(seq: int, batch: int) -> ml_collections.ConfigDict:
  """Where the text comes from, how it is tokenized and batched."""
  c = ml_collections.ConfigDict()
  # shakespeare (embedded) | tfds | files | parquet | jsonl | synthetic (random
  # bytes: speed checks, nothing to learn)
  c.source = "shakespeare"
  # TFDS catalog name when source=tfds, e.g. lm1b.
  c.name = ""
  # The text feature (tfds) or column (parquet, jsonl).
  c.text_key = "text"
  c.train_split = "train"
  c.eval_split = "validation"
  # File, folder or glob: source=files | parquet | jsonl.
  c.path = ""
  # parquet | jsonl: the validation shards; '' = hold out val_fraction.
  c.eval_path = ""
  # files, parquet, jsonl: the share held out for validation.
  c.val_fraction = 0.1
  # Datasets and caches; '' = ~/.cache/autoloco_jax/tfds.
  c.data_dir = ""
  # Cap on the training text read (0 = all).
  c.max_bytes = 0
  # bytes | sentencepiece (trained on the training split, cached) | a path to a
  # SentencePiece .model or a Hugging Face tokenizer.json.
  c.tokenizer = "bytes"
  # tokenizer=sentencepiece: the pieces to learn.
  c.vocab_size = 1024
  # L tokens per sequence.
  c.seq_len = seq
  # B sequences per worker per inner step.
  c.batch_size = batch
  # iid | non_iid worker shards.
  c.partition = "iid"
  return c


def _inner(size: str, steps: int) -> ml_collections.ConfigDict:
  """Each worker's AdamW, on a warmup-cosine learning-rate schedule."""
  c = ml_collections.ConfigDict()
  # Peak learning rate.
  c.lr = 4e-4 if size in ACCELERATOR_SIZES else 3e-3
  c.warmup_steps = max(steps // 20, 1)
  # The schedule's last learning rate, as a share of the peak.
  c.min_lr_ratio = 0.1
  c.weight_decay = 0.1
  c.b1 = 0.9
  c.b2 = 0.95
  c.eps = 1e-8
  # Global gradient-norm clip.
  c.clip_norm = 1.0
  # Each step's gradient accumulated over this many equal micro-batches of the
  # worker's batch (runtime/inner.accumulated): the same step at the activation
  # memory of batch_size / microbatches sequences. Must divide data.batch_size.
  c.microbatches = 1
  return c


def _diloco() -> ml_collections.ConfigDict:
  """DiLoCo (and AutoLoCo's reference): outer Nesterov SGD, paper defaults."""
  c = ml_collections.ConfigDict()
  # Outer learning rate.
  c.alpha = 0.7
  # Outer momentum (beta_0 of a schedule).
  c.beta = 0.9
  # A momentum schedule beta(t) from beta to beta_end (outer.momentum_schedule);
  # None = constant beta. A placeholder keeps the field's type (float).
  c.beta_end = ml_collections.config_dict.placeholder(float)
  # linear | cosine
  c.beta_shape = "linear"
  # Outer steps the schedule takes (then beta_end holds); 0 = the whole run's
  # rounds at the first interval (total_steps // h).
  c.beta_rounds = 0
  return c


def _autoloco() -> ml_collections.ConfigDict:
  """AutoLoCo's correction of DiLoCo's outer step (configs/autoloco.py sets its own)."""
  c = ml_collections.ConfigDict()
  # none | momentum | lr | both | table | per_progress | momentum_per_progress.
  c.correction = "none"
  # S_ref: schedule (H_ref steps of the schedule from the round's start) | peak
  # (H_ref * peak lr).
  c.reference = "schedule"
  # H_ref, the interval (alpha, beta) are tuned for; 0 = interval.h.
  c.h_ref = 0
  # correction=table: DiLoCo's ((H, alpha, beta), ...) tuned at fixed H,
  # interpolated at each round's H (one of them (H_ref, alpha, beta)).
  c.tuned = ()
  # The outer momentum buffer when a round's H differs from the last round's:
  # keep | restart (zero it) | rescale (by r_t / r_{t-1}).
  c.on_change = "keep"
  # Empty, or the ratios r_t the outer step applies round by round in place of
  # S_t / S_ref,t (a control replaying another run's corrected outer steps).
  c.ratio_schedule = ()
  return c


def _noloco() -> ml_collections.ConfigDict:
  """NoLoCo (public-code defaults):
  m <- beta m + alpha mean_G(theta - phi) + gamma (mean_G phi - phi)."""
  c = ml_collections.ConfigDict()
  c.alpha = 0.7
  c.beta = 0.5
  # None = alpha.
  c.gamma = ml_collections.FieldReference(None, field_type=float)
  return c


def _gasloc() -> ml_collections.ConfigDict:
  """GASLoC: y = start + eta (theta - start);
  theta' = y - alpha Lap(y) + gamma (y - y_prev)."""
  c = ml_collections.ConfigDict()
  # Scale of each worker's drift.
  c.eta = 0.7
  # Momentum on y_t - y_{t-1}.
  c.gamma = 0.5
  # Gossip step on the Laplacian; 0 = 1/(degree+1).
  c.alpha = 0.0
  # True: gossip the momentum term too (DiLoCo on the complete graph).
  c.mix_momentum = False
  return c


def _gossip_adamw() -> ml_collections.ConfigDict:
  """Gossip AdamW: theta' = W theta, W = I - weight Lap (gossip/gossip_adamw.py)."""
  c = ml_collections.ConfigDict()
  # Weight of each neighbour's difference; 0 = 1/(degree+1).
  c.weight = 0.0
  return c


def _gossip() -> ml_collections.ConfigDict:
  """Who talks to whom in the gossip algorithms (autoloco_jax/algorithms/gossip/topology.py)."""
  c = ml_collections.ConfigDict()
  # matching | groups | ring | torus | exponential | complete
  c.topology = "matching"
  # groups: workers per group (matching = 2).
  c.group_size = 2
  # Random partitions drawn from the seed; one per round.
  c.pool_size = 16
  return c


def _interval(h: int) -> ml_collections.ConfigDict:
  """The number of inner steps H of each round (autoloco_jax/algorithms/diloco/intervals.py)."""
  c = ml_collections.ConfigDict()
  # fixed | lr_quadratic | loss_ratio | agreement | schedule | budget
  c.controller = "fixed"
  # H (fixed) or H_0 (adaptive).
  c.h = h
  # Lower bound of the adaptive controllers.
  c.h_min = 1
  # Upper bound of the adaptive controllers; 0 = h.
  c.h_max = 0
  # lr_quadratic: H = (c / lr)^2; 0 = sqrt(h) * peak lr.
  c.c = 0.0
  # agreement: the workers' agreement to hold.
  c.target = 0.5
  # agreement: factor on H while the agreement is above target + hysteresis.
  c.grow = 1.25
  # agreement: factor on H while the agreement is below target - hysteresis.
  c.shrink = 0.7
  # agreement: EMA decay of the measured agreement; 0 = the raw value.
  c.ema = 0.5
  # agreement: half-width of the dead band around target.
  c.hysteresis = 0.15
  # schedule: the rounds' H, replayed open loop (the last repeats).
  c.schedule = ()
  # budget: the syncs the run may spend (autoloco_jax/algorithms/diloco/budget.py).
  c.syncs = 0
  # budget: constant | linear | exponential | two_phase
  c.shape = "linear"
  # budget: the first round's H over the last one's.
  c.ratio = 3.0
  # budget, two_phase: the fraction of the rounds that are long.
  c.split = 0.5
  return c


def _eval(size: str, every: int) -> ml_collections.ConfigDict:
  """Evaluation on the validation split."""
  c = ml_collections.ConfigDict()
  c.every_steps = every
  # Windows per evaluation batch.
  c.batch_size = 16
  # Evaluations during training: this many batches of windows spread evenly
  # over the whole split (0 = the whole split).
  c.num_batches = 8 if size != "tiny" else 2
  # The final evaluation: 0 = the whole split, every target once (cut to
  # max_tokens); n > 0 = a spread sample of n batches.
  c.final_num_batches = 0 if size != "tiny" else 4
  # Cap on the targets of a whole-split evaluation: a larger split is sampled
  # evenly to it (0 = no cap). The embedded corpora fit under it whole.
  c.max_tokens = 2_000_000
  return c


def _stream() -> ml_collections.ConfigDict:
  """Streaming, overlapped syncs of the DiLoCo family (autoloco_jax/algorithms/diloco/streaming.py)."""
  c = ml_collections.ConfigDict()
  # P fragments synced in turn, every H/P steps.
  c.fragments = 1
  # strided (blocks p, p+P, ...) | contiguous
  c.mode = "strided"
  # What a fragment is made of: block (a transformer block) | sublayer (a block's
  # attention or MLP: up to 2L fragments of L blocks).
  c.unit = "block"
  # Inner steps each exchange is in flight.
  c.tau = 0
  # On arrival, local <- mix * local + (1 - mix) * global (the paper's 0.5; used
  # only when tau >= 1).
  c.mix = 0.5
  # The worker's own pseudo-gradient stands in for the average until it arrives.
  c.eager = False
  return c


def _compress() -> ml_collections.ConfigDict:
  """What the DiLoCo family and the gossip methods (NoLoCo, GASLoC: gossip/compressed_exchange.py)
  send (autoloco_jax/compression/codecs.py, exchange.py)."""
  c = ml_collections.ConfigDict()
  # identity | bf16 | fp8 | fp4 | int8 | int4 | topk
  c.codec = "identity"
  # Values per float32 scale (fp8, fp4, int8, int4).
  c.block_size = 128
  # topk: values per chunk.
  c.chunk_size = 4096
  # topk: the share of each chunk kept.
  c.density = 1 / 64
  # topk: bits per kept value (32, 16, 8, 4, 2).
  c.value_bits = 32
  # Error feedback's decay of the residual; None or < 0: no error feedback.
  c.ef_beta = ml_collections.FieldReference(None, field_type=float)
  # How the DiLoCo family averages the decoded messages: mean (over all K
  # workers, SparseLoCo's equation) | senders (each coordinate over the workers
  # that sent it, the authors' code's scatter-mean).
  c.aggregate = "mean"
  return c


def _network() -> ml_collections.ConfigDict:
  """The simulated clock of every run (autoloco_jax/sim/clock.py, algorithms.md §6).

  Tuples: () = the named setting; (x,) = x for every link or worker; K values =
  per worker (a link runs at its slower end); a KxK tuple of tuples = per link.
  """
  c = ml_collections.ConfigDict()
  # ideal | homogeneous (10 Gbit/s, 1 ms) | hetero (half 10, half 1 Gbit/s;
  # 1 ms in, 50 ms between sites).
  c.name = "homogeneous"
  # Override of the setting's bandwidths, Gbit/s.
  c.bandwidth_gbps = ()
  # Override of its latencies, ms.
  c.latency_ms = ()
  # Seconds per inner step of one worker; 0 = measured at start.
  c.step_time = 0.0
  # Per-worker compute-time multipliers (2 = half speed).
  c.speed_factors = ()
  # Share of a step an all-reduce may hide behind (the backward pass; the
  # streaming DiLoCo paper's simulation assumes 2/3); 0 = none.
  c.overlap_backward = 0.0
  # More named settings timed alongside, logged as sim_time_<name> (e.g.
  # ("hetero",)).
  c.also = ()
  return c


def _checkpoint(size: str) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  # Save every N rounds, and at the end.
  c.every_rounds = 2 if size in ACCELERATOR_SIZES else 5
  # Checkpoints kept (older ones deleted).
  c.keep = 2
  return c


def _faults() -> ml_collections.ConfigDict:
  """Injected faults (autoloco_jax/sim/faults.py): workers missing rounds, a NaN round."""
  c = ml_collections.ConfigDict()
  # Each worker misses each round with this probability.
  c.drop_prob = 0.0
  # Explicit drops, "ROUND:W[,W];ROUND:W", e.g. "2:1;5:0,3".
  c.drop_schedule = ""
  # Poison the parameters before this round (-1: never).
  c.nan_at_round = -1
  return c


def _log() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.tensorboard = True
  c.progress = True
  return c


def set_field(config: ml_collections.ConfigDict, dotted: str, value) -> None:
  """Sets ``config.a.b = value`` for ``dotted = "a.b"``; a name the config does
  not have is a ``KeyError`` (an override with a typo never passes silently)."""
  *parents, field = dotted.split(".")
  node = config
  for part in parents:
    node = node[part]
  if field not in node:
    raise KeyError(f"config has no field {dotted}")
  node[field] = value
