"""Fields every config shares, with a size preset.

Sizes: ``tiny`` (tests, seconds), ``cpu`` (2 CPU cores, a few minutes),
``study`` (the runs of configs/studies, about a minute each), ``gpu`` (one TPU/GPU VM; documented, not run on the CPU machines).
"""

import ml_collections

SIZES = {
    # name: (d_model, layers, heads, mlp, seq_len, batch/worker, total steps, H, eval every)
    "tiny": (64, 2, 2, 256, 64, 4, 40, 10, 20),
    "cpu": (128, 4, 4, 512, 128, 8, 600, 25, 100),
    # studies (configs/studies): 60-odd runs of about a minute each on 2 cores
    "study": (128, 2, 4, 512, 64, 8, 600, 20, 50),
    "gpu": (768, 12, 12, 3072, 1024, 32, 20_000, 500, 1000),
}


def base(size: str = "cpu") -> ml_collections.ConfigDict:
  if size not in SIZES:
    raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
  d, layers, heads, mlp, seq, batch, steps, h, every = SIZES[size]
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.algorithm = "diloco"  # ddp | diloco | autoloco | noloco | gasloc (own groups below)
  c.num_workers = 4  # K simulated workers on the replica axis
  c.num_devices = 0  # devices on the mesh; 0 = all JAX sees
  c.total_steps = steps  # T: inner-step budget, the same for every method
  c.chunk_steps = 0  # batches staged per inner call; 0 = min(64, H_max)

  c.model = ml_collections.ConfigDict(
      dict(
          vocab_size=256,  # set from the data at run time
          d_model=d,
          num_layers=layers,
          num_heads=heads,
          mlp_dim=mlp,
          seq_len=seq,  # set from data.seq_len at run time
          tie_embeddings=True,
          dtype="float32",
      )
  )

  c.data = ml_collections.ConfigDict(
      dict(
          # shakespeare (embedded) | tfds | files | parquet | jsonl
          source="shakespeare",
          name="",  # TFDS catalog name when source=tfds, e.g. lm1b
          text_key="text",  # text feature (tfds) or column (parquet, jsonl)
          train_split="train",
          eval_split="validation",
          path="",  # file, folder or glob: source=files | parquet | jsonl
          eval_path="",  # parquet | jsonl: validation shards; '' = val_fraction
          val_fraction=0.1,  # files, parquet, jsonl: share held out for validation
          data_dir="",  # datasets and caches; '' = ~/.cache/autoloco_jax/tfds
          max_bytes=0,  # cap on training text read (0 = all)
          # bytes | sentencepiece (trained on the training split, cached) |
          # a path to a SentencePiece .model or a Hugging Face tokenizer.json
          tokenizer="bytes",
          vocab_size=1024,  # tokenizer=sentencepiece: pieces to learn
          seq_len=seq,  # L tokens per sequence
          batch_size=batch,  # B sequences per worker per inner step
          partition="iid",  # iid | non_iid worker shards
      )
  )

  c.inner = ml_collections.ConfigDict(
      dict(
          lr=3e-3 if size != "gpu" else 4e-4,
          warmup_steps=max(steps // 20, 1),
          min_lr_ratio=0.1,
          weight_decay=0.1,
          b1=0.9,
          b2=0.95,
          eps=1e-8,
          clip_norm=1.0,
      )
  )

  # Each algorithm's own hyperparameters, named with its paper's symbols.
  # DiLoCo (and AutoLoCo's reference): outer Nesterov SGD, paper defaults.
  c.diloco = ml_collections.ConfigDict(
      dict(alpha=0.7, beta=0.9)  # outer learning rate
  )  # outer momentum
  c.autoloco = ml_collections.ConfigDict(
      dict(
          correction="none",  # none | momentum | lr | both | table
          reference="schedule",  # S_ref: schedule (H_ref steps from the round's
          # start) | peak (H_ref * peak lr)
          h_ref=0,
          # correction=table: DiLoCo's ((H, alpha, beta), ...) tuned at fixed H,
          # interpolated at each round's H (one of them (H_ref, alpha, beta))
          tuned=(),
          # the outer momentum buffer when a round's H differs from the last
          # round's: keep | restart (zero it) | rescale (by r_t / r_{t-1})
          on_change="keep",
      )
  )  # H_ref, the interval (alpha, beta) are tuned for; 0 = interval.h
  # NoLoCo (public-code defaults): m <- beta m + alpha mean_G(theta - phi) + gamma (mean_G phi - phi)
  c.noloco = ml_collections.ConfigDict(
      dict(
          alpha=0.7, beta=0.5, gamma=ml_collections.FieldReference(None, field_type=float)
      )
  )  # None = alpha
  # GASLoC: y = start + eta (theta - start); theta' = y - alpha Lap(y) + gamma (y - y_prev)
  c.gasloc = ml_collections.ConfigDict(
      dict(
          eta=0.7,  # scale of each worker's drift
          gamma=0.5,  # momentum on y_t - y_{t-1}
          alpha=0.0,  # gossip step on the Laplacian; 0 = 1/(degree+1)
          mix_momentum=False,
      )
  )  # True: gossip the momentum term too (DiLoCo on complete)
  # Who talks to whom in the gossip algorithms (autoloco_jax/topology.py).
  c.gossip = ml_collections.ConfigDict(
      dict(
          topology="matching",  # matching | groups | ring | torus | exponential | complete
          group_size=2,  # groups: workers per group (matching = 2)
          pool_size=16,
      )
  )  # random partitions drawn from the seed; one per round

  c.interval = ml_collections.ConfigDict(
      dict(
          controller="fixed",  # fixed | lr_quadratic | loss_ratio | agreement | schedule
          h=h,  # H (fixed) or H_0 (adaptive)
          h_min=1,
          h_max=0,  # bounds of adaptive controllers; 0 = h
          c=0.0,  # lr_quadratic: H = (c / lr)^2; 0 = sqrt(h) * peak lr
          target=0.5,
          grow=1.25,
          shrink=0.7,
          ema=0.5,
          hysteresis=0.15,
          schedule=(),  # schedule: the rounds' H, replayed open loop (last repeats)
      )
  )  # agreement

  c.eval = ml_collections.ConfigDict(
      dict(every_steps=every, batch_size=16, num_batches=8 if size != "tiny" else 2)
  )
  c.comm = ml_collections.ConfigDict(dict(bytes_per_param=4))
  # Streaming, overlapped syncs of the DiLoCo family (autoloco_jax/streaming.py):
  # P fragments synced in turn every H/P steps, each exchange in flight for tau
  # steps, merged on arrival as local <- mix * local + (1 - mix) * global (mix:
  # the paper's 0.5; used only when tau >= 1), eager: the worker's own
  # pseudo-gradient stands in for the average until it arrives.
  c.stream = ml_collections.ConfigDict(
      dict(fragments=1, mode="strided", tau=0, mix=0.5, eager=False)
  )  # mode: strided (block p, p+P, ...) | contiguous
  # What the DiLoCo family and the gossip methods (NoLoCo, GASLoC: gossip.py)
  # send (autoloco_jax/codecs.py, exchange.py): codec
  # identity | bf16 | fp8 | fp4 | int8 | int4 | topk; error feedback with decay
  # ef_beta (None or < 0: off).
  c.compress = ml_collections.ConfigDict(
      dict(
          codec="identity",
          block_size=128,  # values per float32 scale (fp8, fp4, int8, int4)
          chunk_size=4096,  # topk: values per chunk
          density=1 / 64,  # topk: share of each chunk kept
          value_bits=32,  # topk: bits per kept value (32, 16, 8, 4, 2)
          ef_beta=ml_collections.FieldReference(None, field_type=float),
      )
  )
  # The simulated clock of every run (autoloco_jax/comm.py, algorithms.md §6).
  # Tuples: () = the named setting; (x,) = x for every link or worker; K values
  # = per worker (a link runs at its slower end); a KxK tuple of tuples = per link.
  c.network = ml_collections.ConfigDict(
      dict(
          name="homogeneous",  # ideal | homogeneous (10 Gbit/s, 1 ms) | hetero
          # (half 10, half 1 Gbit/s; 1 ms in, 50 ms between sites)
          bandwidth_gbps=(),  # override of the setting's bandwidths, Gbit/s
          latency_ms=(),  # override of its latencies, ms
          step_time=0.0,  # s per inner step of one worker; 0 = measured at start
          speed_factors=(),  # per-worker compute-time multipliers (2 = half speed)
          also=(),
      )
  )  # more named settings timed alongside, logged as
  # sim_time_<name> (e.g. ("hetero",))
  c.checkpoint = ml_collections.ConfigDict(
      dict(
          every_rounds=5 if size != "gpu" else 2,  # save every N rounds, and at the end
          keep=2,
      )
  )  # checkpoints kept (older ones deleted)
  # Injected faults (autoloco_jax/faults.py): workers missing rounds, a NaN round.
  c.faults = ml_collections.ConfigDict(
      dict(
          drop_prob=0.0,  # each worker misses each round with this probability
          drop_schedule="",  # explicit drops, "ROUND:W[,W];ROUND:W", e.g. "2:1;5:0,3"
          nan_at_round=-1,
      )
  )  # poison the parameters before this round (-1: never)
  # overlap: dispatch the next round before reading this one's metrics (train.py);
  # False: read them at once (the old path, for comparisons).
  c.log = ml_collections.ConfigDict(dict(tensorboard=True, progress=True, overlap=True))
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
