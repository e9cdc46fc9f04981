"""Tokenizers a run can use (`data.tokenizer`), and bits per byte as their common axis.

Three kinds sit behind one small interface (`Tokenizer`: `name`, `vocab_size`,
`separator_ids`, `encode`, `decode`, `fingerprint`):

* `ByteTokenizer` (`data.tokenizer="bytes"`, the default): one token per UTF-8
  byte, vocabulary 256. Documents are separated by the bytes of `SEPARATOR`
  (a blank line).
* `SentencePieceTokenizer`: a SentencePiece `.model` file, either given as a
  path or trained offline on the training split (`data.tokenizer=
  "sentencepiece"`, `data.vocab_size` pieces) by `train_sentencepiece`, which
  caches the model under a key of the corpus content and the settings. Trained
  models are lossless: no text normalization, whitespace kept, newlines as a
  piece of their own and byte fallback for characters outside the vocabulary,
  so `decode(encode(text)) == text` for any text. Documents are separated by
  the model's EOS id.
* `HFTokenizer`: a Hugging Face `tokenizer.json` (the `tokenizers` library,
  read from a local file, never from the hub). Documents are separated by its
  end-of-text token (the first of `HF_SEPARATOR_TOKENS` in its vocabulary),
  else by the encoding of `SEPARATOR`.

`decode` turns a separator id back into `SEPARATOR`, so for every lossless
tokenizer the decoded token stream of packed documents (`data.tokenize`) is
`SEPARATOR.join(docs)`.

Why bits per byte: a model's loss is in nats per *token*, and tokens differ
between tokenizers (a byte, or a few characters of a learned piece), so losses
per token of runs with different tokenizers are not comparable. The text is the
same, though: dividing by the UTF-8 bytes a token covers on average gives bits
per byte, bpb = loss_per_token / (ln 2 * bytes_per_token), the entropy rate of
the text itself, comparable across tokenizers (and equal to loss / ln 2 for the
byte tokenizer, where bytes_per_token is 1). `data.build` measures the ratio
on the evaluation split (`WorkerData.bits_per_byte`).

`sentencepiece` and `tokenizers` are imported only when a tokenizer of theirs
is built, so the byte tokenizer needs neither.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

import filelock
import numpy as np

from autoloco_jax.data import sources

#: The byte tokenizer's vocabulary: one id per byte value.
VOCAB_SIZE = 256
#: What separates packed documents (a blank line); `decode` gives it back for
#: a separator id.
SEPARATOR = b"\n\n"

TOKENIZER_NAMES = ("bytes", "sentencepiece")
SPM_MODEL_TYPES = ("bpe", "unigram", "char", "word")
#: Tokens that end a text in common Hugging Face tokenizers, tried in this
#: order as the document separator of an `HFTokenizer`.
HF_SEPARATOR_TOKENS = ("</s>", "<|endoftext|>", "<eos>", "<|end_of_text|>", "[SEP]")

# Bumped when the trainer options below change, so cached models are rebuilt.
_SPM_RECIPE_VERSION = 1
# SentencePiece's reserved pieces: <unk>=0, <s>=1, </s>=2 (the separator), and
# "\n" as a user-defined piece (training splits documents into lines, so a
# newline would otherwise only be reachable through byte fallback).
_SPM_META_PIECES = 4
_SPM_NUM_BYTE_PIECES = 256
# Lines longer than this many characters are cut into chunks for training
# (SentencePiece skips sentences over `max_sentence_length` bytes; 4 bytes per
# character at most in UTF-8).
_SPM_CHUNK_CHARS = 2048


class Tokenizer(Protocol):
  """What a run needs from a tokenizer."""

  name: str
  vocab_size: int
  # int32 [S]: the ids placed between packed documents.
  separator_ids: np.ndarray

  def encode(self, text: str) -> np.ndarray:
    """int32 [T] token ids of `text` (no separator or BOS/EOS added)."""
    ...

  def decode(self, ids) -> str:
    """Text of token ids; separator ids become `SEPARATOR`."""
    ...

  def fingerprint(self) -> str:
    """A short stable hash identifying the tokenizer (for cache keys)."""
    ...


def _hash16(*parts: bytes) -> str:
  digest = hashlib.sha256()
  for part in parts:
    digest.update(len(part).to_bytes(8, "little"))
    digest.update(part)
  return digest.hexdigest()[:16]


def _separator_text() -> str:
  return SEPARATOR.decode("utf-8")


class ByteTokenizer:
  """UTF-8 bytes as tokens (vocabulary `VOCAB_SIZE`)."""

  name = "bytes"
  vocab_size = VOCAB_SIZE

  def __init__(self):
    self.separator_ids = self.encode(_separator_text())

  def encode(self, text: str) -> np.ndarray:
    """int32 [T]: the UTF-8 bytes of `text`."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

  def decode(self, ids) -> str:
    """Text from byte ids; invalid UTF-8 (e.g. a model's samples) becomes U+FFFD."""
    return np.asarray(ids, dtype=np.uint8).tobytes().decode("utf-8", errors="replace")

  def fingerprint(self) -> str:
    return _hash16(b"bytes", SEPARATOR)

  def __repr__(self) -> str:
    return "ByteTokenizer()"


class _SingleIdSeparator:
  """Decoding for tokenizers whose separator is one special id (not a text token)."""

  separator_ids: np.ndarray
  _special_separator: bool

  def _decode_text(self, ids: list[int]) -> str:
    raise NotImplementedError

  def decode(self, ids) -> str:
    """Text of token ids; each separator id becomes `SEPARATOR`."""
    ids_t = np.asarray(ids, dtype=np.int64).reshape(-1)
    if not self._special_separator:
      return self._decode_text(ids_t.tolist())
    cuts = np.flatnonzero(ids_t == self.separator_ids[0])
    pieces = np.split(ids_t, cuts)
    # Every piece but the first starts with the separator id.
    texts = [self._decode_text(p.tolist()) for p in pieces[:1]]
    texts += [self._decode_text(p[1:].tolist()) for p in pieces[1:]]
    return _separator_text().join(texts)


class SentencePieceTokenizer(_SingleIdSeparator):
  """A SentencePiece model (`.model` file); documents are separated by its EOS id.

  A model without an EOS id separates documents by the encoding of
  `SEPARATOR` instead.
  """

  def __init__(self, model_path: str | os.PathLike):
    import sentencepiece as spm

    self.path = os.fspath(model_path)
    if not os.path.isfile(self.path):
      raise ValueError(f"SentencePiece model file not found: {self.path}")
    with open(self.path, "rb") as f:
      self._proto = f.read()
    self._sp = spm.SentencePieceProcessor(model_proto=self._proto)
    self.name = f"sentencepiece:{os.path.basename(self.path)}"
    self.vocab_size = int(self._sp.get_piece_size())
    eos = int(self._sp.eos_id())
    self._special_separator = eos >= 0
    if self._special_separator:
      self.separator_ids = np.array([eos], dtype=np.int32)
    else:
      self.separator_ids = self.encode(_separator_text())

  def encode(self, text: str) -> np.ndarray:
    """int32 [T] piece ids of `text` (no BOS/EOS added)."""
    return np.asarray(self._sp.encode(text, out_type=int), dtype=np.int32).reshape(-1)

  def _decode_text(self, ids: list[int]) -> str:
    return self._sp.decode(ids)

  def fingerprint(self) -> str:
    return _hash16(b"sentencepiece", self._proto)

  def __repr__(self) -> str:
    return f"SentencePieceTokenizer({self.path!r})"


class HFTokenizer(_SingleIdSeparator):
  """A Hugging Face `tokenizer.json` read with `tokenizers.Tokenizer.from_file`.

  The separator is the first of `HF_SEPARATOR_TOKENS` in the vocabulary; when
  there is none, documents are separated by the encoding of `SEPARATOR`
  (a blank line), as the byte tokenizer does. `encode` adds no special tokens
  (the tokenizer's post-processor is not applied).
  """

  def __init__(self, path: str | os.PathLike):
    import tokenizers as hf_tokenizers  # the Hugging Face library, not this module

    self.path = os.fspath(path)
    if not os.path.isfile(self.path):
      raise ValueError(f"Hugging Face tokenizer file not found: {self.path}")
    with open(self.path, "rb") as f:
      self._json = f.read()
    try:
      self._tok = hf_tokenizers.Tokenizer.from_str(self._json.decode("utf-8"))
    except Exception as e:  # The library raises a bare Exception on bad JSON.
      raise ValueError(f"not a Hugging Face tokenizer.json: {self.path}: {e}") from e
    self.name = f"hf:{os.path.basename(self.path)}"
    self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
    self.separator_token = None
    for token in HF_SEPARATOR_TOKENS:
      token_id = self._tok.token_to_id(token)
      if token_id is not None:
        self.separator_token = token
        self.separator_ids = np.array([token_id], dtype=np.int32)
        break
    self._special_separator = self.separator_token is not None
    if not self._special_separator:
      self.separator_ids = self.encode(_separator_text())

  def encode(self, text: str) -> np.ndarray:
    """int32 [T] token ids of `text` (no special tokens added)."""
    ids = self._tok.encode(text, add_special_tokens=False).ids
    return np.asarray(ids, dtype=np.int32).reshape(-1)

  def _decode_text(self, ids: list[int]) -> str:
    return self._tok.decode(ids, skip_special_tokens=False)

  def fingerprint(self) -> str:
    return _hash16(b"huggingface", self._json)

  def __repr__(self) -> str:
    return f"HFTokenizer({self.path!r})"


# ----------------------------------------------------------------------------
# Training SentencePiece


def _training_lines(text: str) -> Iterator[str]:
  """Non-blank lines of a document, long ones cut into `_SPM_CHUNK_CHARS` chunks."""
  for line in text.split("\n"):
    if not line.strip():
      continue
    for start in range(0, len(line), _SPM_CHUNK_CHARS):
      yield line[start : start + _SPM_CHUNK_CHARS]


def _sample_lines(
    texts: Iterable[str], max_sentences: int, seed: int
) -> tuple[str, list[str], int]:
  """One pass over `texts`: (content hash, a uniform sample of their lines, line count).

  The hash covers every text as streamed (lengths included, so document
  boundaries count); the sample is a seeded reservoir of at most
  `max_sentences` lines, in a deterministic order.
  """
  digest = hashlib.sha256()
  rng = random.Random(seed)
  sample: list[str] = []
  seen = 0
  for text in texts:
    raw = text.encode("utf-8")
    digest.update(len(raw).to_bytes(8, "little"))
    digest.update(raw)
    for line in _training_lines(text):
      if len(sample) < max_sentences:
        sample.append(line)
      else:
        j = rng.randrange(seen + 1)
        if j < max_sentences:
          sample[j] = line
      seen += 1
  return digest.hexdigest(), sample, seen


def min_sentencepiece_vocab(byte_fallback: bool = True) -> int:
  """A lower bound on the vocabulary of a trained model: reserved pieces (and
  the 256 byte pieces with byte fallback). Training also needs a piece per
  distinct character (at `character_coverage`), so the real minimum depends on
  the corpus; `train_sentencepiece` reports it when the vocabulary is too small.
  """
  return _SPM_META_PIECES + (_SPM_NUM_BYTE_PIECES if byte_fallback else 0) + 1


def _train_model_proto(lines: Sequence[str], options: dict[str, Any], seed: int) -> bytes:
  """The serialized model SentencePiece trains on `lines` with `options`."""
  import sentencepiece as spm

  spm.set_random_generator_seed(seed)
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_writer=model, **options
  )
  return model.getvalue()


def train_sentencepiece(
    texts: Iterable[str],
    vocab_size: int,
    cache_dir: str | os.PathLike,
    *,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    byte_fallback: bool = True,
    seed: int = 0,
    max_sentences: int = 1_000_000,
) -> str:
  """Trains (or reuses) a SentencePiece model on `texts`; returns the `.model` path.

  The model is cached at `cache_dir/spm-<key>.model`, where the key hashes the
  content of `texts` (streamed once, every time: a cache hit still reads the
  corpus) and every setting, so a changed corpus or setting trains a new model
  and an unchanged one reuses the file. Concurrent processes serialize on a
  file lock, and the model is written to a temporary name and renamed, so a
  reader never sees a partial file.

  Training is offline and deterministic: documents are split into non-blank
  lines, at most `max_sentences` of them are kept (a reservoir sample seeded by
  `seed`, so memory stays bounded), and SentencePiece runs single-threaded with
  its random generator seeded. The model is lossless (identity normalization,
  whitespace kept, a "\\n" piece and, with `byte_fallback`, byte pieces for
  characters outside the vocabulary; without it they decode as " ⁇ ") and has
  <unk>=0, <s>=1, </s>=2; </s> separates documents.

  Args:
    texts: the training documents.
    vocab_size: pieces in the model, reserved and byte pieces included.
    cache_dir: folder of the cached models (created if missing).
    model_type: one of `SPM_MODEL_TYPES`.
    character_coverage: fraction of characters covered by character pieces.
    byte_fallback: encode characters outside the vocabulary as UTF-8 bytes
      (needs 256 byte pieces in the vocabulary) instead of <unk>.
    seed: seeds the line sample and SentencePiece's random generator.
    max_sentences: the most lines trained on.

  Raises:
    ValueError: bad settings, no training text, or a vocabulary too small
      (or too large) for the corpus.
  """
  if model_type not in SPM_MODEL_TYPES:
    raise ValueError(
        f"unknown SentencePiece model_type {model_type!r}; expected one of {SPM_MODEL_TYPES}"
    )
  vocab_size = int(vocab_size)
  min_vocab = min_sentencepiece_vocab(byte_fallback)
  if vocab_size < min_vocab:
    raise ValueError(
        f"vocab_size {vocab_size} is too small for a SentencePiece model: it needs at "
        f"least {min_vocab} (reserved pieces"
        + (", 256 byte-fallback pieces" if byte_fallback else "")
        + ") plus one piece per distinct character"
    )
  if not 0.0 < character_coverage <= 1.0:
    raise ValueError(f"character_coverage must be in (0, 1], got {character_coverage}")
  if max_sentences < 1:
    raise ValueError(f"max_sentences must be >= 1, got {max_sentences}")

  import sentencepiece as spm

  corpus_hash, lines, num_lines = _sample_lines(texts, max_sentences, seed)
  if not lines:
    raise ValueError("no training text for the SentencePiece model (all texts are blank)")
  options = dict(
      vocab_size=vocab_size,
      model_type=model_type,
      character_coverage=float(character_coverage),
      byte_fallback=bool(byte_fallback),
      normalization_rule_name="identity",
      remove_extra_whitespaces=False,
      add_dummy_prefix=False,
      allow_whitespace_only_pieces=True,
      split_digits=True,
      user_defined_symbols=["\n"],
      unk_id=0,
      bos_id=1,
      eos_id=2,
      pad_id=-1,
      max_sentence_length=4 * _SPM_CHUNK_CHARS,
      input_sentence_size=0,  # The sample above already bounds the input.
      shuffle_input_sentence=False,
      num_threads=1,
      minloglevel=2,
  )
  settings = dict(
      options,
      seed=int(seed),
      max_sentences=int(max_sentences),
      recipe=_SPM_RECIPE_VERSION,
      sentencepiece=spm.__version__,
  )
  key = _hash16(corpus_hash.encode(), json.dumps(settings, sort_keys=True).encode())
  cache_dir = os.path.expanduser(os.fspath(cache_dir))
  os.makedirs(cache_dir, exist_ok=True)
  path = os.path.join(cache_dir, f"spm-{key}.model")
  if os.path.isfile(path):
    return path
  with filelock.FileLock(os.path.join(cache_dir, f"spm-{key}.lock")):
    if os.path.isfile(path):  # Another process trained it meanwhile.
      return path
    print(
        f"Training a SentencePiece {model_type} model ({vocab_size} pieces) on "
        f"{len(lines)} of {num_lines} lines into {path} ...",
        flush=True,
    )
    try:
      proto = _train_model_proto(lines, options, seed)
    except RuntimeError as e:
      raise ValueError(
          f"SentencePiece training failed for vocab_size {vocab_size}: {e}"
      ) from e
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
      f.write(proto)
    os.replace(tmp, path)
  return path


# ----------------------------------------------------------------------------
# From a config; measuring


def from_config(
    data_cfg: Any, train_texts: Callable[[], Iterable[str]], cache_dir: str | os.PathLike
) -> Tokenizer:
  """The tokenizer `data_cfg.tokenizer` names (`data_cfg`: `config.data`, or
  anything with its `tokenizer` and `vocab_size` fields, e.g. `data.DataSpec`).

  * `"bytes"` (also when the field is missing or empty): `ByteTokenizer`.
  * `"sentencepiece"`: a model of `data_cfg.vocab_size` pieces trained by
    `train_sentencepiece` on `train_texts()` (the training split's documents)
    with its default settings and seed 0, cached in `cache_dir`. The seed is
    fixed rather than the run's, so runs on the same data share one model.
  * a path to a `.model` file: `SentencePieceTokenizer`.
  * a path to a `.json` file, or to a folder holding `tokenizer.json`:
    `HFTokenizer`.

  `train_texts` is called only when a model has to be trained (or its cache
  entry looked up). Raises ValueError for an unknown value, a missing file or
  a bad vocab_size.
  """
  spec = str(sources.config_field(data_cfg, "tokenizer", "") or "bytes")
  if spec == "bytes":
    return ByteTokenizer()
  if spec == "sentencepiece":
    vocab_size = sources.config_field(data_cfg, "vocab_size")
    if vocab_size is None:
      raise ValueError("data.tokenizer='sentencepiece' needs data.vocab_size")
    if int(vocab_size) < 2:
      raise ValueError(f"vocab_size must be >= 2, got {vocab_size}")
    if int(vocab_size) < min_sentencepiece_vocab():
      raise ValueError(
          f"vocab_size {vocab_size} is too small for a SentencePiece model with byte "
          f"fallback: it needs at least {min_sentencepiece_vocab()} pieces plus one per "
          "distinct character of the training text"
      )
    return SentencePieceTokenizer(
        train_sentencepiece(train_texts(), vocab_size, cache_dir)
    )
  path = os.path.expanduser(spec)
  if os.path.isdir(path) and os.path.isfile(os.path.join(path, "tokenizer.json")):
    path = os.path.join(path, "tokenizer.json")
  if path.endswith(".model") or path.endswith(".json"):
    if not os.path.isfile(path):
      raise ValueError(f"tokenizer file not found: {path} (data.tokenizer={spec!r})")
    return SentencePieceTokenizer(path) if path.endswith(".model") else HFTokenizer(path)
  raise ValueError(
      f"unknown tokenizer {spec!r}; expected one of {TOKENIZER_NAMES}, a path to a "
      "SentencePiece .model file, or a path to a Hugging Face tokenizer.json"
  )
