"""Tests of the tokenizers: bytes, SentencePiece (trained and cached here), Hugging Face.

The corpus is the docstrings of a few standard-library modules (English prose
with some code), so nothing is downloaded.
"""

import ast
import math
import os
import sysconfig
import time

import numpy as np
import pytest

# Both are required (requirements.txt): a missing one fails here, not skips.
import sentencepiece  # noqa: F401  (toks.train_sentencepiece needs it)
import tokenizers as hf

from autoloco_jax.data import corpus as corpus_lib, tokenizers as toks

VOCAB = 400  # Byte fallback takes 256 pieces and this corpus has ~90 characters.
HELD_OUT = "The quick brown fox jumps over the lazy dog, then returns the value.\n"
ODD = "naïve café — 你好 🙂\ttabs\n\n  and  spaces  \r\n"


def encode_documents(tok, docs) -> np.ndarray:
  """The documents' tokens joined by the separator, as `data.tokenize` packs them."""
  return corpus_lib.tokenize((d.encode() for d in docs), tok, np.dtype(np.int32)).tokens_T


def bytes_per_token(tok, texts) -> float:
  """UTF-8 bytes of `texts` per token, each text encoded alone."""
  return sum(len(t.encode()) for t in texts) / sum(len(tok.encode(t)) for t in texts)


def _docstrings(module: str) -> list[str]:
  path = os.path.join(sysconfig.get_paths()["stdlib"], module)
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  nodes = (
      n
      for n in ast.walk(tree)
      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
  )
  return [doc for n in nodes if (doc := ast.get_docstring(n))]


@pytest.fixture(scope="module")
def corpus():
  """About 40 KB of docstrings, one document each."""
  docs = []
  for module in (
      "textwrap.py",
      "argparse.py",
      "functools.py",
      "random.py",
      "fractions.py",
  ):
    docs += _docstrings(module)
  assert sum(map(len, docs)) > 20_000
  return docs


@pytest.fixture(scope="module")
def spm_path(corpus, tmp_path_factory):
  return toks.train_sentencepiece(corpus, VOCAB, tmp_path_factory.mktemp("spm"))


def _count_trainings(monkeypatch):
  calls = []
  train = toks._train_model_proto
  monkeypatch.setattr(
      toks, "_train_model_proto", lambda *a, **k: calls.append(1) or train(*a, **k)
  )
  return calls


# ----------------------------------------------------------------------------
# Bytes


def utf8(text: str) -> np.ndarray:
  return np.frombuffer(text.encode("utf-8"), np.uint8)


def test_bytes_tokenizer_is_utf8_bytes(corpus):
  tok = toks.ByteTokenizer()
  assert tok.vocab_size == 256 == toks.VOCAB_SIZE
  for text in [HELD_OUT, ODD, ""] + corpus[:5]:
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and ids.ndim == 1
    np.testing.assert_array_equal(ids, utf8(text))
    assert tok.decode(ids) == text == tok.decode(utf8(text))
  np.testing.assert_array_equal(tok.separator_ids, utf8(toks.SEPARATOR.decode()))
  joined = encode_documents(tok, corpus[:3])
  np.testing.assert_array_equal(
      joined, np.frombuffer(toks.SEPARATOR.join(d.encode() for d in corpus[:3]), np.uint8)
  )
  assert bytes_per_token(tok, [HELD_OUT, ODD]) == 1.0
  assert tok.fingerprint() == toks.ByteTokenizer().fingerprint()


# ----------------------------------------------------------------------------
# SentencePiece


def test_sentencepiece_trains_and_round_trips(spm_path, corpus):
  assert os.path.basename(spm_path).startswith("spm-") and spm_path.endswith(".model")
  tok = toks.SentencePieceTokenizer(spm_path)
  assert tok.vocab_size == VOCAB
  ids = tok.encode(HELD_OUT)
  assert ids.dtype == np.int32 and ids.ndim == 1
  assert 0 < len(ids) < len(HELD_OUT.encode())
  assert ids.min() >= 0 and ids.max() < VOCAB
  # Lossless, even for characters never seen in training (byte fallback).
  for text in [HELD_OUT, ODD, ""] + corpus[:5]:
    assert tok.decode(tok.encode(text)) == text
  # Documents are separated by EOS, which decodes as toks.SEPARATOR.
  np.testing.assert_array_equal(tok.separator_ids, [2])
  docs = [HELD_OUT, ODD, corpus[0]]
  joined = encode_documents(tok, docs)
  assert (joined == 2).sum() == 2
  assert tok.decode(joined) == toks.SEPARATOR.decode().join(docs)
  assert bytes_per_token(tok, corpus[-20:]) > 1.3
  assert len(tok.fingerprint()) == 16


def test_sentencepiece_cache_hit_and_keys(spm_path, corpus, monkeypatch):
  cache_dir = os.path.dirname(spm_path)
  calls = _count_trainings(monkeypatch)
  mtime = os.stat(spm_path).st_mtime_ns
  start = time.perf_counter()
  assert toks.train_sentencepiece(iter(corpus), VOCAB, cache_dir) == spm_path
  assert time.perf_counter() - start < 1.0
  assert calls == [] and os.stat(spm_path).st_mtime_ns == mtime
  changed_corpus = toks.train_sentencepiece(corpus[:-1], VOCAB, cache_dir)
  changed_vocab = toks.train_sentencepiece(corpus, VOCAB + 10, cache_dir)
  changed_type = toks.train_sentencepiece(corpus, VOCAB, cache_dir, model_type="unigram")
  assert len(calls) == 3
  assert len({spm_path, changed_corpus, changed_vocab, changed_type}) == 4
  assert toks.SentencePieceTokenizer(changed_vocab).vocab_size == VOCAB + 10
  models = sorted(f for f in os.listdir(cache_dir) if f.endswith(".model"))
  assert len(models) == 4  # No temporary files left behind.
  assert not [f for f in os.listdir(cache_dir) if ".tmp" in f]


def test_sentencepiece_training_is_deterministic(spm_path, corpus, tmp_path):
  again = toks.train_sentencepiece(corpus, VOCAB, tmp_path)
  assert again != spm_path and os.path.basename(again) == os.path.basename(spm_path)
  a, b = toks.SentencePieceTokenizer(spm_path), toks.SentencePieceTokenizer(again)
  assert a.fingerprint() == b.fingerprint()
  for text in [HELD_OUT] + corpus[:10]:
    np.testing.assert_array_equal(a.encode(text), b.encode(text))
  # A line sample smaller than the corpus is seeded, hence also reproducible.
  small = [
      toks.train_sentencepiece(corpus, VOCAB, tmp_path / d, max_sentences=200)
      for d in ("x", "y")
  ]
  assert open(small[0], "rb").read() == open(small[1], "rb").read()


def test_sentencepiece_small_vocab_without_byte_fallback(corpus, tmp_path):
  path = toks.train_sentencepiece(corpus, 300, tmp_path, byte_fallback=False)
  tok = toks.SentencePieceTokenizer(path)
  assert tok.vocab_size == 300
  assert tok.decode(tok.encode(HELD_OUT)) == HELD_OUT
  assert bytes_per_token(tok, [HELD_OUT]) > 1.0


def test_existing_model_path_loads(spm_path, tmp_path):
  cfg = dict(tokenizer=spm_path)
  tok = toks.from_config(cfg, train_texts=_never_called, cache_dir=tmp_path)
  assert isinstance(tok, toks.SentencePieceTokenizer)
  assert tok.fingerprint() == toks.SentencePieceTokenizer(spm_path).fingerprint()
  assert tok.decode(tok.encode(HELD_OUT)) == HELD_OUT


def _never_called():
  raise AssertionError("train_texts must not be called")


def test_from_config(corpus, tmp_path, monkeypatch):
  assert isinstance(toks.from_config({}, _never_called, tmp_path), toks.ByteTokenizer)
  bytes_tok = toks.from_config(dict(tokenizer="bytes"), _never_called, tmp_path)
  assert isinstance(bytes_tok, toks.ByteTokenizer)

  cfg = dict(tokenizer="sentencepiece", vocab_size=VOCAB)
  calls = _count_trainings(monkeypatch)
  tok = toks.from_config(cfg, lambda: iter(corpus), tmp_path)
  assert isinstance(tok, toks.SentencePieceTokenizer) and tok.vocab_size == VOCAB
  again = toks.from_config(cfg, lambda: iter(corpus), tmp_path)
  assert again.path == tok.path and len(calls) == 1


# ----------------------------------------------------------------------------
# Hugging Face


def _train_hf(corpus, path, special_tokens=("<unk>", "</s>")):
  tokenizer = hf.Tokenizer(hf.models.BPE(unk_token="<unk>"))
  tokenizer.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
  tokenizer.decoder = hf.decoders.ByteLevel()
  trainer = hf.trainers.BpeTrainer(
      vocab_size=500,
      special_tokens=list(special_tokens),
      initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
      show_progress=False,
  )
  tokenizer.train_from_iterator(corpus, trainer=trainer)
  tokenizer.save(str(path))
  return str(path)


def test_hf_tokenizer_json_loads_and_round_trips(corpus, tmp_path):
  path = _train_hf(corpus, tmp_path / "tokenizer.json")
  tok = toks.from_config(dict(tokenizer=path), _never_called, tmp_path)
  assert isinstance(tok, toks.HFTokenizer)
  assert tok.vocab_size == 500
  assert tok.separator_token == "</s>"
  np.testing.assert_array_equal(tok.separator_ids, [1])
  for text in [HELD_OUT, ODD, ""] + corpus[:5]:
    ids = tok.encode(text)
    assert ids.dtype == np.int32 and ids.ndim == 1
    assert tok.decode(ids) == text
  docs = [HELD_OUT, ODD]
  assert tok.decode(encode_documents(tok, docs)) == toks.SEPARATOR.decode().join(docs)
  assert bytes_per_token(tok, corpus[-20:]) > 1.3
  # A folder holding tokenizer.json works too.
  by_dir = toks.from_config(dict(tokenizer=str(tmp_path)), _never_called, tmp_path)
  assert by_dir.fingerprint() == tok.fingerprint()


def test_hf_tokenizer_without_eos_separates_by_blank_line(corpus, tmp_path):
  path = _train_hf(corpus, tmp_path / "plain.json", special_tokens=("<unk>",))
  tok = toks.HFTokenizer(path)
  assert tok.separator_token is None
  np.testing.assert_array_equal(tok.separator_ids, tok.encode(toks.SEPARATOR.decode()))
  docs = [HELD_OUT, "second document"]
  assert tok.decode(encode_documents(tok, docs)) == toks.SEPARATOR.decode().join(docs)


# ----------------------------------------------------------------------------
# Bits per byte and errors


def test_bits_per_byte_conversion(spm_path, corpus):
  """Same text, two tokenizers: equal loss per byte means equal bpb."""
  texts = corpus[-20:]
  tok = toks.SentencePieceTokenizer(spm_path)
  num_bytes = sum(len(t.encode()) for t in texts)
  num_tokens = sum(len(tok.encode(t)) for t in texts)
  rows = np.zeros((2, 9), np.uint8)
  worker_data = corpus_lib.WorkerData(
      rows, [np.arange(2)], rows, 0, bytes_per_token=num_bytes / num_tokens
  )
  nats_total = 1234.5
  bpb = worker_data.bits_per_byte(nats_total / num_tokens)
  assert bpb == pytest.approx(nats_total / num_bytes / math.log(2))


def test_errors(corpus, spm_path, tmp_path):
  with pytest.raises(ValueError, match="unknown tokenizer 'gpt9'"):
    toks.from_config(dict(tokenizer="gpt9"), _never_called, tmp_path)
  with pytest.raises(ValueError, match="not found"):
    toks.from_config(
        dict(tokenizer=str(tmp_path / "nope.model")), _never_called, tmp_path
    )
  with pytest.raises(ValueError, match="not found"):
    toks.from_config(
        dict(tokenizer=str(tmp_path / "tokenizer.json")), _never_called, tmp_path
    )
  with pytest.raises(ValueError, match="not found"):
    toks.SentencePieceTokenizer(tmp_path / "nope.model")
  with pytest.raises(ValueError, match="needs data.vocab_size"):
    toks.from_config(dict(tokenizer="sentencepiece"), _never_called, tmp_path)
  for bad in (0, 1):
    with pytest.raises(ValueError, match="vocab_size must be >= 2"):
      toks.from_config(
          dict(tokenizer="sentencepiece", vocab_size=bad), _never_called, tmp_path
      )
  with pytest.raises(ValueError, match="too small"):
    toks.from_config(
        dict(tokenizer="sentencepiece", vocab_size=100), _never_called, tmp_path
    )
  # Above the fixed minimum but below 256 bytes + this corpus's characters.
  with pytest.raises(ValueError, match="training failed for vocab_size 300"):
    toks.train_sentencepiece(corpus, 300, tmp_path)
  with pytest.raises(ValueError, match="model_type"):
    toks.train_sentencepiece(corpus, VOCAB, tmp_path, model_type="wordpiece")
  with pytest.raises(ValueError, match="no training text"):
    toks.train_sentencepiece(["", "  \n\n"], VOCAB, tmp_path)
  bad_json = tmp_path / "bad.json"
  bad_json.write_text("{}")
  with pytest.raises(ValueError, match="not a Hugging Face tokenizer"):
    toks.HFTokenizer(bad_json)
  assert not [f for f in os.listdir(tmp_path) if f.endswith(".model")]
