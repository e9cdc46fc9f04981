"""Streaming readers of text documents from corpus shards (parquet, jsonl).

The field's pretraining corpora ship as many shards of one record per
document, the text under one key:

* parquet (FineWeb, FineWeb-Edu, DCLM, The Stack v2 dedup, ...): a columnar
  file; the text column (`text`, or `content` for The Stack) is read alone,
  in record batches of `PARQUET_BATCH_ROWS` rows.
* jsonl (C4 as released by AllenAI, The Pile, SlimPajama, ...): one JSON
  object per line, plain or gzip-compressed (`.gz`, read transparently).

Everything streams: documents come out of a generator, one shard after the
other, and no reader holds more than a bounded window of a shard. A parquet
shard is read with `pre_buffer=False` (pyarrow's default pre-buffering fetches
the text column of every row group at the first batch, which is the whole
shard), so memory is bounded by one row group of the text column plus one
batch; a jsonl shard is read one line at a time, so memory is bounded by the
longest line. A corpus of any size can be read on a small host.

`list_shards` expands a glob (or a comma-separated list of globs, or a
directory) into a sorted list of files, `iter_documents` reads them by
format, `is_validation` routes each document to training or validation in the
same single pass, and `fingerprint` keys caches of tokenized shards.

Also the in-memory sources of `data_cfg.source` (`load_documents`): the embedded
Shakespeare plays, any TFDS catalog dataset, local text files, seeded random
bytes (`synthetic`). Every source
gives training and validation documents as UTF-8 bytes; `autoloco_jax.data.corpus`
tokenizes and packs them.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import hashlib
import json
import math
import os
import pathlib
from typing import IO, Any, Iterable, Iterator, NamedTuple, Union

import numpy as np

STREAMED = ("parquet", "jsonl")
#: Every value of `data_cfg.source`.
SOURCES = ("shakespeare", "tfds", "files", "synthetic") + STREAMED

#: The `synthetic` source's training bytes when `max_bytes` is 0, and its
#: documents' length: seeded random bytes, for speed checks on any machine
#: (`benchmarks/device_check.py`), no dataset or package needed.
SYNTHETIC_BYTES = 8 << 20
_SYNTHETIC_DOC_BYTES = 1 << 16

# Rows per record batch read from a parquet shard: large enough to amortise
# pyarrow's per-batch cost, small enough that a batch of long documents (code
# files, books) stays a few megabytes.
PARQUET_BATCH_ROWS = 1024

PathLike = Union[str, os.PathLike]


def list_shards(pattern: str) -> list[pathlib.Path]:
  """The files named by `pattern`, deduplicated and sorted by path.

  The `files` source's `_list_files`, one step wider: `pattern` is a file,
  a directory (every file under it, recursively), or a glob (`**` recurses),
  or a comma-separated list of these, whose matches are merged. The sort is by
  path string, so the order does not depend on the filesystem's listing order.

  Raises:
    FileNotFoundError: when nothing matches (naming the pattern), or when one
      of the comma-separated parts matches nothing (naming that part), since a
      mistyped part would otherwise silently drop shards.
  """
  parts = [part.strip() for part in str(pattern).split(",") if part.strip()]
  if not parts:
    raise FileNotFoundError(f"no shards: pattern {pattern!r} is empty")
  files: set[pathlib.Path] = set()
  for part in parts:
    matched = _list_part(part)
    if not matched:
      where = f" (part {part!r})" if len(parts) > 1 else ""
      raise FileNotFoundError(f"no shards: pattern {pattern!r}{where} matches no files")
    files.update(matched)
  return sorted(files, key=str)


def _list_part(part: str) -> list[pathlib.Path]:
  expanded = os.path.expanduser(part)
  if os.path.isdir(expanded):
    return [p for p in pathlib.Path(expanded).rglob("*") if p.is_file()]
  if os.path.isfile(expanded):
    return [pathlib.Path(expanded)]
  return [
      pathlib.Path(p) for p in glob.glob(expanded, recursive=True) if os.path.isfile(p)
  ]


def iter_documents(
    source: str, pattern: str, text_key: str, *, max_bytes: int = 0
) -> Iterator[str]:
  """Documents of every shard matching `pattern`, read as `source` ('parquet' or 'jsonl').

  The shards are listed eagerly (so a bad pattern or source fails at the
  call, not at the first `next`); the documents stream. See `iter_parquet` and
  `iter_jsonl` for `text_key` and `max_bytes`.
  """
  readers = {"parquet": iter_parquet, "jsonl": iter_jsonl}
  if source not in readers:
    raise ValueError(f"unknown source {source!r}: expected one of {STREAMED}")
  paths = list_shards(pattern)
  return readers[source](paths, text_key, max_bytes=max_bytes)


def iter_parquet(
    paths: PathLike | Iterable[PathLike],
    text_key: str,
    *,
    max_bytes: int = 0,
    batch_size: int = PARQUET_BATCH_ROWS,
) -> Iterator[str]:
  """Documents from the `text_key` column of each parquet file, in file and row order.

  Each file is read in record batches of `batch_size` rows of that column
  alone (`ParquetFile.iter_batches`, without pre-buffering), so memory is
  bounded by one row group of the column plus one batch. Null values are
  skipped. `max_bytes` caps the UTF-8 bytes yielded over all files, as in
  `_cap_documents`: the document that reaches the cap is cut at it.

  Raises:
    ImportError: when pyarrow is not installed.
    ValueError: when a file has no `text_key` column, or it is not a string
      column (naming the file and the columns it has).
  """
  return _cap_documents(
      _parquet_documents(_as_paths(paths), text_key, batch_size), max_bytes
  )


def _parquet_documents(
    paths: list[pathlib.Path], text_key: str, batch_size: int
) -> Iterator[str]:
  try:
    import pyarrow as pa
    import pyarrow.parquet as pq
  except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("reading parquet shards needs pyarrow: pip install pyarrow") from e
  for path in paths:
    # pre_buffer=False: pyarrow's default pre-buffers the column chunks of all
    # the row groups it is asked for, i.e. the whole text column of the file.
    parquet_file = pq.ParquetFile(path, pre_buffer=False)
    schema = parquet_file.schema_arrow
    if text_key not in schema.names:
      raise ValueError(f"{path}: no column {text_key!r} (columns: {schema.names})")
    column_type = schema.field(text_key).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
      raise ValueError(
          f"{path}: column {text_key!r} has type {column_type}, expected a string"
      )
    for batch in parquet_file.iter_batches(columns=[text_key], batch_size=batch_size):
      for text in batch.column(0).to_pylist():
        if text is not None:
          yield text


def iter_jsonl(
    paths: PathLike | Iterable[PathLike], text_key: str, *, max_bytes: int = 0
) -> Iterator[str]:
  """Documents under `text_key` of each line of each JSON-lines file, in file and line order.

  A file whose name ends in `.gz` (`.jsonl.gz`, `.json.gz`) is decompressed on
  the fly. Files are read one line at a time, so memory is bounded by the
  longest line. Blank lines are skipped, and so is a line whose `text_key` is
  null. `max_bytes` caps the UTF-8 bytes yielded over all files, as in
  `_cap_documents`: the document that reaches the cap is cut at it.

  Raises:
    ValueError: naming the file and the 1-based line number, when a line is not
      valid JSON (or not UTF-8), is not a JSON object, lacks `text_key`, or
      holds a value there that is not a string.
  """
  return _cap_documents(_jsonl_documents(_as_paths(paths), text_key), max_bytes)


def _jsonl_documents(paths: list[pathlib.Path], text_key: str) -> Iterator[str]:
  for path in paths:
    with _open_lines(path) as lines:
      for line_number, line in enumerate(lines, start=1):
        if not line.strip():
          continue
        where = f"{path}, line {line_number}"
        try:
          record = json.loads(line)
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
          raise ValueError(f"{where}: not valid JSON ({e})") from e
        if not isinstance(record, dict):
          raise ValueError(
              f"{where}: expected a JSON object, got {type(record).__name__}"
          )
        if text_key not in record:
          raise ValueError(f"{where}: no key {text_key!r} (keys: {sorted(record)[:10]})")
        text = record[text_key]
        if text is None:
          continue
        if not isinstance(text, str):
          raise ValueError(
              f"{where}: {text_key!r} holds {type(text).__name__}, expected a string"
          )
        yield text


def _open_lines(path: pathlib.Path) -> IO[bytes]:
  """`path` opened for binary line reading, gunzipped when its name ends in `.gz`."""
  if path.name.endswith(".gz"):
    return gzip.open(path, "rb")
  return open(path, "rb")


def _as_paths(paths: PathLike | Iterable[PathLike]) -> list[pathlib.Path]:
  """One path or an iterable of them, as a list of `pathlib.Path`."""
  if isinstance(paths, (str, os.PathLike)):
    return [pathlib.Path(paths)]
  return [pathlib.Path(p) for p in paths]


def _cap_documents(docs: Iterable[str], max_bytes: int) -> Iterator[str]:
  """The leading documents holding at most `max_bytes` UTF-8 bytes; 0 = no cap.

  The streaming counterpart of `_cap`: the document that reaches the cap is
  cut at it and nothing after it is read. The cut falls on
  a character boundary (a multi-byte character that would straddle the cap is
  dropped whole), so the total may fall up to 3 bytes short of `max_bytes`;
  an empty cut is not yielded.
  """
  if max_bytes <= 0:
    yield from docs
    return
  total = 0
  for doc in docs:
    encoded = doc.encode("utf-8")
    if total + len(encoded) >= max_bytes:
      cut = encoded[: max_bytes - total].decode("utf-8", errors="ignore")
      if cut:
        yield cut
      return
    total += len(encoded)
    yield doc


def is_validation(index: int, val_fraction: float, seed: int) -> bool:
  """Whether document `index` (0-based, in reading order) goes to validation.

  A per-document rule rather than a `split_documents(docs)` pair of
  iterators, so one pass over the corpus can route each document as it
  streams by, with nothing buffered and no second pass.

  The rule spreads validation evenly, like the `files` source's
  `_spread_indices`: document i is held out when floor((i + 1) * f + u) exceeds
  floor(i * f + u), where f is `val_fraction` and u in [0, 1) is a
  phase drawn from `seed`. The first n documents then hold exactly
  floor(n * f + u) validation documents, within one of n * f for every n,
  and at least one as soon as n >= 1 / f. A random per-document draw would
  only match the fraction on average, and a small corpus could get no
  validation at all. The price: held-out documents fall at a regular stride
  of about 1 / f, and the seed only shifts the phase of that stride.

  Args:
    index: the document's position in the stream, from 0.
    val_fraction: the fraction to hold out, in [0, 1); 0 holds out nothing.
    seed: picks the phase; the same (index, val_fraction, seed) always gives
      the same answer, on any host.
  """
  if not 0.0 <= val_fraction < 1.0:
    raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
  if index < 0:
    raise ValueError(f"index must be >= 0, got {index}")
  if val_fraction == 0.0:
    return False
  phase = _unit_float(f"is_validation:{seed}")
  return math.floor((index + 1) * val_fraction + phase) > math.floor(
      index * val_fraction + phase
  )


def _unit_float(key: str) -> float:
  """A float in [0, 1) from a stable hash of `key` (the same in every process)."""
  digest = hashlib.sha256(key.encode("utf-8")).digest()
  return int.from_bytes(digest[:7], "big") / 2.0**56


def fingerprint(paths: PathLike | Iterable[PathLike]) -> str:
  """A short hex hash of the shards' (resolved path, size, mtime), in the order given.

  For cache keys: a tokenized cache keyed by it is rebuilt when a shard is
  added, removed, renamed or rewritten. It reads no file contents, so it is
  cheap on a large corpus; a rewrite that keeps both size and mtime (to the
  nanosecond, where the filesystem records it) goes unseen.

  Raises:
    FileNotFoundError: when a path does not exist.
  """
  h = hashlib.sha256()
  for path in _as_paths(paths):
    stat = path.stat()
    h.update(f"{path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode("utf-8"))
  return h.hexdigest()[:16]


# ----------------------------------------------------------------------------
# The sources of `data_cfg.source`.

DATA_DIR_ENV = "AUTOLOCO_DATA_DIR"

# Records read from a TFDS data source per call: large enough to amortise the
# per-call overhead, small enough that `max_bytes` is not overshot by much.
_TFDS_READ_CHUNK = 1024


def config_field(
    data_cfg: Any, name: str, default: Any = None, required: bool = False
) -> Any:
  """`data_cfg.name`, or `default` when it is absent or None; works for
  ConfigDicts, dicts and plain objects.

  Raises:
    ValueError: when a `required` field is absent.
  """
  value = (
      data_cfg.get(name) if isinstance(data_cfg, dict) else getattr(data_cfg, name, None)
  )
  if value is None and required:
    raise ValueError(f"data config is missing the required field {name!r}")
  return default if value is None else value


def default_data_dir() -> str:
  """Where TFDS datasets are prepared: $AUTOLOCO_DATA_DIR, else ~/.cache/autoloco_jax/tfds."""
  return os.environ.get(DATA_DIR_ENV) or os.path.expanduser("~/.cache/autoloco_jax/tfds")


@dataclasses.dataclass(frozen=True)
class SourceSpec:
  """Where a run's documents come from: the source fields of `config.data`,
  read once (`from_config`), typed and checked.

  Attributes:
    source: one of `SOURCES`.
    name: the TFDS catalog name (`tfds`).
    text_key: the text feature (`tfds`) or column (`parquet`, `jsonl`).
    train_split, eval_split: TFDS split names.
    path: a file, folder or glob (`files`, `parquet`, `jsonl`).
    eval_path: validation shards (`parquet`, `jsonl`); '' = `val_fraction`.
    val_fraction: share held out for validation (`files`, `parquet`, `jsonl`).
    data_dir: datasets and caches, resolved ('' in the config:
      `default_data_dir()`).
    max_bytes: cap on the training text read; 0 = all.
    eval_max_bytes: cap on the validation text; None = `max_bytes`.
    download: `tfds`: prepare the dataset if it is not in `data_dir`.
  """

  source: str
  name: str = ""
  text_key: str = "text"
  train_split: str = "train"
  eval_split: str = "validation"
  path: str = ""
  eval_path: str = ""
  val_fraction: float = 0.1
  data_dir: str = ""
  max_bytes: int = 0
  eval_max_bytes: int | None = None
  download: bool = True

  def __post_init__(self):
    if self.source not in SOURCES:
      raise ValueError(f"unknown data source {self.source!r}; expected one of {SOURCES}")
    if self.max_bytes < 0:
      raise ValueError(f"max_bytes must be >= 0 (0 = no cap), got {self.max_bytes}")
    held_out = self.source == "files" or (self.streamed and not self.eval_path)
    if held_out and not 0.0 < self.val_fraction < 1.0:
      raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")

  @classmethod
  def from_config(cls, data_cfg: Any) -> "SourceSpec":
    """The spec of `config.data` (a ConfigDict, dict or object); absent or
    None fields take the defaults above."""
    values = {"source": str(config_field(data_cfg, "source", required=True))}
    for f in dataclasses.fields(cls):
      if f.name not in ("source", "data_dir", "eval_max_bytes"):
        values[f.name] = type(f.default)(config_field(data_cfg, f.name, f.default))
    eval_max_bytes = config_field(data_cfg, "eval_max_bytes")
    values["eval_max_bytes"] = None if eval_max_bytes is None else int(eval_max_bytes)
    values["data_dir"] = os.path.expanduser(
        str(config_field(data_cfg, "data_dir", "")) or default_data_dir()
    )
    return cls(**values)

  @property
  def streamed(self) -> bool:
    """Whether the documents stream from shards (`parquet`, `jsonl`)."""
    return self.source in STREAMED

  @property
  def eval_cap(self) -> int:
    """The cap on the validation text: `eval_max_bytes`, else `max_bytes`."""
    return self.max_bytes if self.eval_max_bytes is None else self.eval_max_bytes


# ----------------------------------------------------------------------------
# Sources: each returns training and validation documents as UTF-8 bytes.


class Documents(NamedTuple):
  """Training and validation documents (UTF-8 bytes), in a deterministic order."""

  train: Iterable[bytes]
  validation: Iterable[bytes]


def load_documents(spec: SourceSpec | Any) -> Documents:
  """The documents of `spec` (a `SourceSpec`, or a data config to read one
  from), with `max_bytes` applied to training (lists for the in-memory sources,
  streams for parquet and jsonl)."""
  if not isinstance(spec, SourceSpec):
    spec = SourceSpec.from_config(spec)
  if spec.streamed:
    return _streamed_documents(spec)
  if spec.source == "shakespeare":
    docs = _shakespeare_documents(spec)
  elif spec.source == "tfds":
    docs = _tfds_documents(spec)
  elif spec.source == "synthetic":
    docs = _synthetic_documents(spec)
  else:
    docs = _file_documents(spec)
  return Documents(_cap(docs.train, spec.max_bytes), _cap(docs.validation, spec.eval_cap))


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


def _shakespeare_documents(spec: SourceSpec) -> Documents:
  # Imported here: TFDS is only needed by the sources that use it.
  from autoloco_jax.data import shakespeare

  plays = shakespeare.load_plays(spec.data_dir)
  return Documents(
      [text.encode("utf-8") for text in plays["train"]],
      [text.encode("utf-8") for text in plays["validation"]],
  )


def _tfds_documents(spec: SourceSpec) -> Documents:
  import tensorflow_datasets as tfds

  # Imported to register 'shakespeare_plays' with TFDS (and for quiet_tfds).
  from autoloco_jax.data import shakespeare

  name = spec.name
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
  with shakespeare.quiet_tfds():
    builder = tfds.builder(name, data_dir=spec.data_dir, file_format="array_record")
    prepared = builder.is_prepared()
  if not prepared:
    if not spec.download:
      raise ValueError(
          f"tfds dataset {name!r} is not prepared in {builder.data_dir} and download is off"
      )
    print(
        f"Preparing the TFDS dataset {name!r} once into {builder.data_dir} ...",
        flush=True,
    )
    # try_download_gcs=False: build from the original sources, never probe GCS.
    with shakespeare.quiet_tfds():
      builder.download_and_prepare(
          download_config=tfds.download.DownloadConfig(try_download_gcs=False)
      )
  text_key = spec.text_key
  features = list(builder.info.features.keys())
  if text_key not in features:
    raise ValueError(
        f"tfds dataset {name!r} has no text feature {text_key!r}; its features are {features}"
    )
  train_source = builder.as_data_source(split=spec.train_split)
  eval_source = builder.as_data_source(split=spec.eval_split)
  return Documents(
      _read_text(train_source, text_key, spec.max_bytes),
      _read_text(eval_source, text_key, spec.eval_cap),
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


def _synthetic_documents(spec: SourceSpec) -> Documents:
  """Uniform random bytes (seed 0), `max_bytes` of training text (0:
  `SYNTHETIC_BYTES`) and an eighth of that for validation, in documents of 64 KiB.
  A model learns nothing from them beyond the byte-unigram entropy (8 bits)."""
  total = spec.max_bytes or SYNTHETIC_BYTES
  rng = np.random.default_rng(0)

  def documents(num_bytes: int) -> list[bytes]:
    text = rng.integers(0, 256, num_bytes, dtype=np.uint8).tobytes()
    return [
        text[i : i + _SYNTHETIC_DOC_BYTES]
        for i in range(0, num_bytes, _SYNTHETIC_DOC_BYTES)
    ]

  return Documents(documents(total), documents(max(total // 8, _SYNTHETIC_DOC_BYTES)))


def _list_files(path: str) -> list[pathlib.Path]:
  """Files named by `path`: one file, every file under a directory, or a glob's matches; sorted."""
  if not path:
    raise ValueError("files source needs data_cfg.path (a file, directory or glob)")
  files = _list_part(path)
  if not files:
    raise ValueError(f"no such file: path {path!r} matches no files")
  return sorted(files)


def _file_documents(spec: SourceSpec) -> Documents:
  files = _list_files(spec.path)
  val_fraction = spec.val_fraction
  docs = []
  for file in files:
    # Raw bytes: the byte tokenizer needs no decoding, so files that are not
    # valid UTF-8 still load (other tokenizers see U+FFFD there).
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


def _streamed_documents(spec: SourceSpec) -> Documents:
  """Parquet or jsonl shards, streamed: `eval_path`'s shards for validation, or
  every document that `sources.is_validation` routes there (one pass each)."""
  source, text_key = spec.source, spec.text_key
  pattern, eval_pattern = spec.path, spec.eval_path
  if not pattern:
    raise ValueError(f"{source} source needs data_cfg.path (a glob of shards)")
  list_shards(pattern)  # a pattern that matches nothing fails now
  if eval_pattern:
    list_shards(eval_pattern)

  def utf8(docs: Iterator[str]) -> Iterator[bytes]:
    return (doc.encode("utf-8") for doc in docs if doc)

  if eval_pattern:
    return Documents(
        utf8(iter_documents(source, pattern, text_key, max_bytes=spec.max_bytes)),
        utf8(iter_documents(source, eval_pattern, text_key, max_bytes=spec.eval_cap)),
    )
  fraction = spec.val_fraction

  def split(validation: bool, cap: int) -> Iterator[bytes]:
    docs = iter_documents(source, pattern, text_key)
    kept = (d for i, d in enumerate(docs) if is_validation(i, fraction, 0) == validation)
    return utf8(_cap_documents(kept, cap))

  return Documents(split(False, spec.max_bytes), split(True, spec.eval_cap))


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
