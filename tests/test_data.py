"""Tests of the data module: sources, play split, worker shards and batch reading."""

import collections
import math
import types

import ml_collections
import numpy as np
import pytest

from autoloco_jax.data import corpus, shakespeare, sources, tokenizers

SEQ_LEN = 64


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
  """A TFDS data dir with the Shakespeare plays prepared once per session (about half a second)."""
  path = tmp_path_factory.mktemp("tfds")
  shakespeare.prepare(path)
  return str(path)


@pytest.fixture(scope="session")
def plays(data_dir):
  return shakespeare.load_records(data_dir)


def shakespeare_cfg(data_dir, **overrides):
  cfg = ml_collections.ConfigDict(
      dict(
          source="shakespeare",
          data_dir=data_dir,
          seq_len=SEQ_LEN,
          batch_size=8,
          partition="iid",
          max_bytes=0,
      )
  )
  cfg.update(overrides)
  return cfg


@pytest.fixture(scope="session")
def iid_data(data_dir):
  return corpus.build(shakespeare_cfg(data_dir), num_workers=4, seed=0)


@pytest.fixture(scope="session")
def non_iid_data(data_dir):
  return corpus.build(shakespeare_cfg(data_dir, partition="non_iid"), num_workers=4, seed=0)


def synthetic_data(num_rows=12, num_workers=2, seed=3):
  """WorkerData over rows whose every token is the row id, dealt like `build` deals iid."""
  rows_NxL1 = np.repeat(np.arange(num_rows, dtype=np.uint8)[:, None], 9, axis=1)
  shards = list(np.arange(num_rows).reshape(num_workers, -1))
  eval_MxL1 = np.tile(np.array([[97, 98]], dtype=np.uint8), (4, 4))[:, :9]
  return corpus.WorkerData(rows_NxL1, shards, eval_MxL1, seed)


# ---------------------------------------------------------------------------
# Tokenizer and markup


def test_tokenizer_round_trip_non_ascii():
  text = "Ophélie dit: «être» — 夢 🎭\n"
  tok = tokenizers.ByteTokenizer()
  tokens = tok.encode(text)
  assert len(tokens) == len(text.encode("utf-8")) > len(text)
  assert tokens.max() < tokenizers.VOCAB_SIZE == corpus.VOCAB_SIZE == 256
  assert tok.decode(tokens) == text


def test_strip_markdown_snippet():
  markdown = (
      "# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_Enter BERNARDO_\n\n"
      "**BERNARDO**  \nWho's there?  \n__\\[Aside]_  \n\\--stand, ho!\n*Exit.*\n"
  )
  assert shakespeare.strip_markdown(markdown) == (
      "Hamlet\n\nACT I\n\nSCENE I. Elsinore.\n\nEnter BERNARDO\n\n"
      "BERNARDO\nWho's there?\n[Aside]\n--stand, ho!\nExit.\n"
  )


def test_plays_have_no_markdown_left(plays):
  for play in plays["train"] + plays["validation"]:
    text = play["text"]
    for markup in ("**", "*", "_", "\\", "]("):
      assert markup not in text, (play["title"], markup)
    for line in text.splitlines():
      assert not line.startswith("#"), (play["title"], line)
      assert line == line.rstrip(), (play["title"], line)
  hamlet = next(p for p in plays["train"] if p["title"] == "Hamlet")
  # Speaker names and verse survive.
  assert "HAMLET\nTo be, or not to be: that is the question:" in hamlet["text"]


# ---------------------------------------------------------------------------
# Play split


def test_validation_plays_never_in_training(plays, iid_data):
  train_titles = {p["title"] for p in plays["train"]}
  val_titles = {p["title"] for p in plays["validation"]}
  assert len(train_titles) + len(val_titles) == 38
  assert len(val_titles) >= 3 and not train_titles & val_titles
  assert len({p["genre"] for p in plays["validation"]}) >= 3
  train_text = "\n".join(p["text"] for p in plays["train"])
  for play in plays["validation"]:
    text = play["text"]
    # Passages from across the play (a whole-play check would pass trivially).
    for start in range(len(text) // 10, len(text) - 300, len(text) // 10):
      assert text[start : start + 300] not in train_text, play["title"]
  # And the packed sequences: no validation sequence occurs in the training stream.
  train_stream = tokenizers.SEPARATOR.join(p["text"].encode() for p in plays["train"])
  for row in iid_data.eval_batches(batch_size=10, num_batches=2).reshape(-1, SEQ_LEN + 1):
    assert row.astype(np.uint8).tobytes() not in train_stream


# ---------------------------------------------------------------------------
# Worker shards


def test_iid_shards_disjoint_equal_and_seeded(data_dir, iid_data):
  shards = [iid_data.worker_sequence_ids(k) for k in range(4)]
  all_ids = np.concatenate(shards)
  assert len(np.unique(all_ids)) == len(all_ids)
  assert len({len(s) for s in shards}) == 1
  assert iid_data.info["train_sequences"] == len(all_ids)
  again = corpus.build(shakespeare_cfg(data_dir), num_workers=4, seed=0)
  other = corpus.build(shakespeare_cfg(data_dir), num_workers=4, seed=1)
  for k in range(4):
    np.testing.assert_array_equal(again.worker_sequence_ids(k), shards[k])
  assert not np.array_equal(other.worker_sequence_ids(0), shards[0])
  # Every row is dealt except fewer than K left over (the shuffle decides which).
  num_rows = iid_data.info["packed_sequences"]
  assert 0 <= num_rows - len(all_ids) < 4
  assert all_ids.min() >= 0 and all_ids.max() < num_rows


def test_non_iid_workers_have_disjoint_documents(plays, non_iid_data):
  docs = non_iid_data.worker_documents
  assert len(docs) == 4
  # Contiguous, disjoint, covering every training play.
  np.testing.assert_array_equal(np.concatenate(docs), np.arange(len(plays["train"])))
  assert all(len(d) > 0 for d in docs)
  streams = [
      tokenizers.SEPARATOR.join(plays["train"][i]["text"].encode() for i in docs[k])
      for k in range(4)
  ]
  # Each worker's sequences come from its own plays only.
  for k in range(4):
    ids = non_iid_data.worker_sequence_ids(k)
    for row in non_iid_data.train_sequences(ids[:: max(1, len(ids) // 20)]):
      owners = [j for j in range(4) if row.tobytes() in streams[j]]
      assert owners == [k]
  # Workers see different genres (plays are sorted by genre).
  genres = [{plays["train"][i]["genre"] for i in docs[k]} for k in range(4)]
  assert genres[0] != genres[-1]


# ---------------------------------------------------------------------------
# Batch reading


def test_train_batches_shapes_and_determinism(iid_data):
  positions = iid_data.init_positions()
  assert positions.dtype == np.int64 and positions.shape == (4,) and not positions.any()
  tokens, new_positions = iid_data.train_batches(positions, num_steps=5, batch_size=3)
  assert (
      tokens.shape == (4, 5, 3, SEQ_LEN + 1) and tokens.dtype == np.uint8
  )  # byte tokens stay uint8 (staged as such)
  # Bytes of the plays' text: mostly letters and spaces, many distinct bytes and
  # no control byte but the newline (not, say, zeros or random bytes).
  text = tokens.tobytes()
  assert sum(chr(b).isalpha() or b == 32 for b in text) > 0.8 * len(text)
  assert len(set(text)) > 40 and {b for b in text if b < 32} <= {10}
  np.testing.assert_array_equal(new_positions, [15, 15, 15, 15])
  again, _ = iid_data.train_batches(positions, num_steps=5, batch_size=3)
  np.testing.assert_array_equal(tokens, again)
  # Each worker reads from its own shard.
  for k in range(4):
    shard_rows = {
        iid_data.train_sequences(i).tobytes() for i in iid_data.worker_sequence_ids(k)
    }
    for row in tokens[k].reshape(-1, SEQ_LEN + 1):
      assert row.astype(np.uint8).tobytes() in shard_rows


def test_train_batches_resumable(iid_data):
  start = np.array([0, 7, 100, 4000])  # 4000 + 18 crosses the epoch end of a 4xxx shard
  start[3] = iid_data.shard_sizes[3] - 5
  whole, end = iid_data.train_batches(start, num_steps=6, batch_size=3)
  first, middle = iid_data.train_batches(start, num_steps=3, batch_size=3)
  second, end2 = iid_data.train_batches(middle, num_steps=3, batch_size=3)
  np.testing.assert_array_equal(np.concatenate([first, second], axis=1), whole)
  np.testing.assert_array_equal(end, end2)
  np.testing.assert_array_equal(end, start + 18)


def test_train_batches_cross_epochs():
  wd = synthetic_data(num_rows=12, num_workers=2)  # shards of 6 rows
  tokens, positions = wd.train_batches(
      wd.init_positions(), num_steps=5, batch_size=4
  )  # 20 reads
  np.testing.assert_array_equal(positions, [20, 20])
  ids_KxN = tokens[..., 0].reshape(2, 20)
  assert (tokens == tokens[..., :1]).all()  # each row is its id repeated
  orders = []
  for k in range(2):
    shard = set(wd.worker_sequence_ids(k).tolist())
    for epoch in range(3):
      epoch_ids = ids_KxN[k, 6 * epoch : 6 * epoch + 6]
      assert set(epoch_ids.tolist()) == shard  # every row exactly once per epoch
      orders.append(tuple(epoch_ids))
    assert set(ids_KxN[k, 18:].tolist()) <= shard
  assert len(set(orders)) > 2  # epochs are reshuffled
  # Reading from positions inside the third epoch matches the long read.
  tail, _ = wd.train_batches(np.array([16, 16]), num_steps=1, batch_size=4)
  np.testing.assert_array_equal(tail[:, 0, :, 0], ids_KxN[:, 16:20])


def test_eval_batches_fixed(iid_data):
  batches = iid_data.eval_batches(batch_size=4, num_batches=3)
  assert batches.shape == (3, 4, SEQ_LEN + 1) and batches.dtype == np.uint8
  np.testing.assert_array_equal(
      batches, iid_data.eval_batches(batch_size=4, num_batches=3)
  )
  np.testing.assert_array_equal(
      batches.reshape(12, -1), iid_data.eval_batches(batch_size=12, num_batches=1)[0]
  )
  with pytest.raises(ValueError, match="too little validation data"):
    iid_data.eval_batches(batch_size=iid_data.num_eval_sequences, num_batches=2)


def test_unigram_entropy(iid_data):
  assert synthetic_data().unigram_entropy() == pytest.approx(math.log(2))
  entropy = iid_data.unigram_entropy()
  # The same from every validation window's tokens, counted here.
  windows = iid_data.eval_batches(batch_size=iid_data.num_eval_sequences, num_batches=1)
  counts = collections.Counter(windows[0, :, :-1].ravel().tolist())
  total = sum(counts.values())
  want = -sum(c / total * math.log(c / total) for c in counts.values())
  assert entropy == pytest.approx(want, abs=1e-3)
  # English text: well below uniform bytes (log 256 = 5.55 nats), above 3 nats.
  assert 3.0 < entropy < 3.6


# ---------------------------------------------------------------------------
# Files and tfds sources


def write_docs(directory, count=10, size=600):
  for i in range(count):
    words = " ".join(f"w{i}x{j}" for j in range(size // 6))
    (directory / f"doc{i:02d}.txt").write_text(f"document {i}\n{words}\n")


def files_cfg(path, **overrides):
  fields = dict(
      source="files",
      path=str(path),
      seq_len=16,
      batch_size=2,
      partition="iid",
      val_fraction=0.1,
  )
  fields.update(overrides)
  return types.SimpleNamespace(**fields)  # any attribute object works as a config


def test_files_source_glob(tmp_path):
  write_docs(tmp_path)
  (tmp_path / "notes.md").write_text("not matched by the glob")
  wd = corpus.build(files_cfg(tmp_path / "doc*.txt"), num_workers=2, seed=0)
  assert wd.info["train_documents"] == 9 and wd.info["eval_documents"] == 1
  docs = sources.load_documents(files_cfg(tmp_path / "doc*.txt"))
  assert all(b"not matched" not in d for d in docs.train + docs.validation)
  assert not set(docs.train) & set(docs.validation)
  non_iid = corpus.build(
      files_cfg(tmp_path / "doc*.txt", partition="non_iid"), num_workers=3, seed=0
  )
  assert [len(d) for d in non_iid.worker_documents] == [3, 3, 3]


def test_files_source_single_file_tail(tmp_path):
  write_docs(tmp_path, count=1, size=3000)
  text = (tmp_path / "doc00.txt").read_bytes()
  docs = sources.load_documents(files_cfg(tmp_path / "doc00.txt", val_fraction=0.2))
  assert docs.train[0] + docs.validation[0] == text
  assert 0.1 < len(docs.validation[0]) / len(text) < 0.3


def test_synthetic_source_is_seeded_random_bytes(tmp_path):
  cfg = files_cfg(tmp_path, source="synthetic", max_bytes=1 << 18)
  docs = sources.load_documents(cfg)
  assert sum(map(len, docs.train)) == 1 << 18 and docs.validation
  assert docs == sources.load_documents(cfg)  # the same bytes every time
  wd = corpus.build(cfg, num_workers=2, seed=0)
  # Uniform bytes: the unigram entropy is log(256) nats, up to sampling.
  assert abs(wd.unigram_entropy() - math.log(256)) < 0.05


def test_error_missing_path(tmp_path):
  with pytest.raises(ValueError, match="matches no files"):
    corpus.build(files_cfg(tmp_path / "nothing*.txt"), num_workers=2, seed=0)


def test_error_empty_file(tmp_path):
  write_docs(tmp_path, count=3)
  (tmp_path / "doc03.txt").write_text("  \n")
  with pytest.raises(ValueError, match="empty file.*doc03.txt"):
    corpus.build(files_cfg(tmp_path / "*.txt"), num_workers=2, seed=0)


def test_error_unknown_source(tmp_path):
  with pytest.raises(ValueError, match="unknown data source 'ftp'"):
    corpus.build(files_cfg(tmp_path, source="ftp"), num_workers=2, seed=0)


def test_error_unknown_partition(tmp_path):
  with pytest.raises(ValueError, match="unknown partition mode 'by_author'"):
    corpus.build(files_cfg(tmp_path, partition="by_author"), num_workers=2, seed=0)


def test_error_unknown_tfds_name(tmp_path):
  cfg = files_cfg(
      tmp_path, source="tfds", name="no_such_dataset_xyz", data_dir=str(tmp_path)
  )
  with pytest.raises(ValueError, match="unknown tfds dataset name 'no_such_dataset_xyz'"):
    corpus.build(cfg, num_workers=2, seed=0)
  assert not any(tmp_path.iterdir())  # failed before touching the data dir


def test_error_too_little_data(tmp_path):
  write_docs(tmp_path, count=2, size=60)
  with pytest.raises(ValueError, match="too little data"):
    corpus.build(files_cfg(tmp_path, batch_size=64), num_workers=2, seed=0)
  with pytest.raises(ValueError, match="too little data.*non_iid"):
    corpus.build(files_cfg(tmp_path, partition="non_iid"), num_workers=4, seed=0)


def test_tfds_source_reads_registered_builder(data_dir):
  # The generic tfds path, exercised offline on the prepared Shakespeare builder.
  cfg = ml_collections.ConfigDict(
      dict(
          source="tfds",
          name="shakespeare_plays",
          text_key="text",
          train_split="train",
          eval_split="validation",
          data_dir=data_dir,
          seq_len=SEQ_LEN,
          batch_size=4,
          max_bytes=300_000,
      )
  )
  wd = corpus.build(cfg, num_workers=2, seed=0)
  assert wd.info["train_bytes"] == 300_000 and wd.info["eval_bytes"] == 300_000
  cfg.text_key = "body"
  with pytest.raises(ValueError, match="no text feature 'body'"):
    corpus.build(cfg, num_workers=2, seed=0)


def test_default_data_dir_env(monkeypatch):
  monkeypatch.setenv(sources.DATA_DIR_ENV, "/somewhere/tfds")
  assert sources.default_data_dir() == "/somewhere/tfds"
  monkeypatch.delenv(sources.DATA_DIR_ENV)
  assert sources.default_data_dir().endswith("autoloco_jax/tfds")
