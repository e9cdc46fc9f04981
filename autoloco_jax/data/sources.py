"""The sources of `data_cfg.source`: where a run's documents come from.

`SourceSpec` reads the source fields of `config.data` once, typed and checked;
`load_documents` returns training and validation documents as UTF-8 bytes from
the embedded Shakespeare plays, any TFDS catalog dataset, local text files,
seeded random bytes (`synthetic`), or corpus shards streamed by
`autoloco_jax.data.shards` (`parquet`, `jsonl`). `autoloco_jax.data.corpus`
tokenizes and packs them.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Iterable, Iterator, NamedTuple

import numpy as np

from autoloco_jax.data import shards

#: Every value of `data_cfg.source`.
SOURCES = ("shakespeare", "tfds", "files", "synthetic") + shards.STREAMED

#: The `synthetic` source's training bytes when `max_bytes` is 0, and its
#: documents' length: seeded random bytes, for speed checks on any machine
#: (`benchmarks/device_check.py`), no dataset or package needed.
SYNTHETIC_BYTES = 8 << 20
_SYNTHETIC_DOC_BYTES = 1 << 16

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
    return self.source in shards.STREAMED

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
  files = shards.matching_files(path)
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
  every document that `shards.is_validation` routes there (one pass each)."""
  source, text_key = spec.source, spec.text_key
  pattern, eval_pattern = spec.path, spec.eval_path
  if not pattern:
    raise ValueError(f"{source} source needs data_cfg.path (a glob of shards)")
  shards.list_shards(pattern)  # a pattern that matches nothing fails now
  if eval_pattern:
    shards.list_shards(eval_pattern)

  def utf8(docs: Iterator[str]) -> Iterator[bytes]:
    return (doc.encode("utf-8") for doc in docs if doc)

  if eval_pattern:
    return Documents(
        utf8(shards.iter_documents(source, pattern, text_key, max_bytes=spec.max_bytes)),
        utf8(
            shards.iter_documents(source, eval_pattern, text_key, max_bytes=spec.eval_cap)
        ),
    )
  fraction = spec.val_fraction

  def split(validation: bool, cap: int) -> Iterator[bytes]:
    docs = shards.iter_documents(source, pattern, text_key)
    kept = (
        d
        for i, d in enumerate(docs)
        if shards.is_validation(i, fraction, 0) == validation
    )
    return utf8(shards.cap_documents(kept, cap))

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
