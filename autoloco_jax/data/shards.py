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
same single pass, and `fingerprint` keys caches of tokenized shards. The
`parquet` and `jsonl` sources of `autoloco_jax.data.sources` are these readers.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import json
import math
import os
import pathlib
from typing import IO, Iterable, Iterator, Union

#: The formats of corpus shards read here (each one a value of `data_cfg.source`).
STREAMED = ("parquet", "jsonl")

# Rows per record batch read from a parquet shard: large enough to amortise
# pyarrow's per-batch cost, small enough that a batch of long documents (code
# files, books) stays a few megabytes.
PARQUET_BATCH_ROWS = 1024

PathLike = Union[str, os.PathLike]


def list_shards(pattern: str) -> list[pathlib.Path]:
  """The files named by `pattern`, deduplicated and sorted by path.

  The `files` source's file list (`matching_files`), one step wider: `pattern` is a file,
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
    matched = matching_files(part)
    if not matched:
      where = f" (part {part!r})" if len(parts) > 1 else ""
      raise FileNotFoundError(f"no shards: pattern {pattern!r}{where} matches no files")
    files.update(matched)
  return sorted(files, key=str)


def matching_files(part: str) -> list[pathlib.Path]:
  """The files `part` names: itself, every file under a directory, or a glob's
  matches (`**` recurses); unsorted, possibly none."""
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
  `cap_documents`: the document that reaches the cap is cut at it.

  Raises:
    ImportError: when pyarrow is not installed.
    ValueError: when a file has no `text_key` column, or it is not a string
      column (naming the file and the columns it has).
  """
  return cap_documents(
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
  `cap_documents`: the document that reaches the cap is cut at it.

  Raises:
    ValueError: naming the file and the 1-based line number, when a line is not
      valid JSON (or not UTF-8), is not a JSON object, lacks `text_key`, or
      holds a value there that is not a string.
  """
  return cap_documents(_jsonl_documents(_as_paths(paths), text_key), max_bytes)


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


def cap_documents(docs: Iterable[str], max_bytes: int) -> Iterator[str]:
  """The leading documents holding at most `max_bytes` UTF-8 bytes; 0 = no cap.

  The streaming counterpart of `sources._cap`: the document that reaches the cap is
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
