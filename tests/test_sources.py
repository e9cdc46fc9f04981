"""Tests of the streaming corpus readers (`autoloco_jax.data.shards`): parquet and
jsonl shards, listing, caps, splits."""

import gzip
import io
import json
import os

import pyarrow as pa  # required (requirements.txt): a missing one fails, not skips
import pyarrow.parquet as pq
import pytest

from autoloco_jax.data import shards

# Unicode of 1 to 4 UTF-8 bytes per character, so caps can cut mid-character.
DOCS = [f"doc {i}: naïve café — 漢字 🙂 {'x' * (i % 7)}" for i in range(30)]


def write_parquet(path, texts, *, row_group_size=4, **extra_columns):
  """A parquet file with a `text` column, a `content` column and several row groups."""
  table = pa.table(
      {
          "text": texts,
          "content": [f"code {t}" for t in texts],
          "id": list(range(len(texts))),
          **extra_columns,
      }
  )
  pq.write_table(table, path, row_group_size=row_group_size)
  return path


def write_jsonl(path, records, *, blank_lines=False):
  lines = []
  for record in records:
    lines.append(json.dumps(record, ensure_ascii=False))
    if blank_lines:
      lines.append("   ")
  data = ("\n".join(lines) + "\n").encode("utf-8")
  if str(path).endswith(".gz"):
    with gzip.open(path, "wb") as f:
      f.write(data)
  else:
    path.write_bytes(data)
  return path


@pytest.fixture
def parquet_shards(tmp_path):
  """Three parquet shards of 10 documents each, in 3 row groups of at most 4 rows."""
  folder = tmp_path / "pq"
  folder.mkdir()
  return [
      write_parquet(folder / f"shard-{i:05d}.parquet", DOCS[10 * i : 10 * (i + 1)])
      for i in range(3)
  ]


@pytest.fixture
def jsonl_shards(tmp_path):
  """A plain, a .jsonl.gz and a .json.gz shard of 10 documents each, with blank lines."""
  folder = tmp_path / "js"
  folder.mkdir()
  names = ["a.jsonl", "b.jsonl.gz", "c.json.gz"]
  return [
      write_jsonl(
          folder / name,
          [
              {"text": t, "content": f"code {t}", "id": 10 * i + j}
              for j, t in enumerate(DOCS[10 * i : 10 * (i + 1)])
          ],
          blank_lines=True,
      )
      for i, name in enumerate(names)
  ]


def nbytes(docs):
  return sum(len(d.encode("utf-8")) for d in docs)


# ----------------------------------------------------------------------------
# parquet


def test_parquet_reads_documents_in_order(parquet_shards):
  assert pq.ParquetFile(parquet_shards[0]).metadata.num_row_groups == 3
  assert list(shards.iter_parquet(parquet_shards, "text")) == DOCS
  assert list(shards.iter_parquet(parquet_shards, "text", batch_size=3)) == DOCS


def test_parquet_text_key_selects_column(parquet_shards):
  assert list(shards.iter_parquet(parquet_shards, "content")) == [
      f"code {d}" for d in DOCS
  ]


def test_parquet_accepts_single_path(parquet_shards):
  assert list(shards.iter_parquet(str(parquet_shards[1]), "text")) == DOCS[10:20]


def test_parquet_skips_nulls(tmp_path):
  path = tmp_path / "n.parquet"
  pq.write_table(pa.table({"text": ["a", None, "b"]}), path)
  assert list(shards.iter_parquet([path], "text")) == ["a", "b"]


def test_parquet_missing_or_non_string_column(parquet_shards):
  with pytest.raises(ValueError, match=r"shard-00000\.parquet: no column 'body'"):
    list(shards.iter_parquet(parquet_shards, "body"))
  with pytest.raises(ValueError, match=r"column 'id' has type int64, expected a string"):
    list(shards.iter_parquet(parquet_shards, "id"))


def test_parquet_reading_streams(tmp_path, monkeypatch):
  """The first document costs one row group's I/O, not the file's, and one batch."""
  # 100 row groups of 20 documents of 300 bytes, uncompressed and without
  # per-row-group statistics (which would make the footer most of the file): 600 kB.
  texts = [f"{i:06d} " + os.urandom(147).hex() for i in range(2000)]
  path = tmp_path / "big.parquet"
  pq.write_table(
      pa.table({"text": texts}),
      path,
      row_group_size=20,
      compression="none",
      write_statistics=False,
  )
  size = os.path.getsize(path)

  bytes_read = []
  batches_read = []
  real_parquet_file = pq.ParquetFile

  class CountingFile(io.RawIOBase):
    """A file whose reads are counted."""

    def __init__(self, f):
      self._f = f

    def readable(self):
      return True

    def seekable(self):
      return True

    def seek(self, *args):
      return self._f.seek(*args)

    def tell(self):
      return self._f.tell()

    def read(self, n=-1):
      data = self._f.read(n)
      bytes_read.append(len(data))
      return data

  class CountingParquetFile(real_parquet_file):
    """The real reader over a counting file (same keyword arguments), counting batches."""

    def __init__(self, source, **kwargs):
      super().__init__(CountingFile(open(source, "rb")), **kwargs)

    def iter_batches(self, *args, **kwargs):
      for batch in super().iter_batches(*args, **kwargs):
        batches_read.append(batch.num_rows)
        yield batch

  monkeypatch.setattr(pq, "ParquetFile", CountingParquetFile)
  docs = shards.iter_parquet([path], "text", batch_size=8)
  assert next(docs) == texts[0]
  assert batches_read == [8]
  # The footer (in 64 kB reads) and one row group's column chunk (6 kB): about
  # 12% of this small file; pyarrow's default pre_buffer=True would read all of it.
  assert sum(bytes_read) < size / 4, (sum(bytes_read), size)
  assert list(docs) == texts[1:]
  assert batches_read == [8] * 250  # batches run across row groups


# ----------------------------------------------------------------------------
# jsonl


def test_jsonl_reads_plain_and_gzip_in_order(jsonl_shards):
  assert list(shards.iter_jsonl(jsonl_shards, "text")) == DOCS
  assert list(shards.iter_jsonl(jsonl_shards, "content")) == [f"code {d}" for d in DOCS]


def test_jsonl_skips_null_text(tmp_path):
  path = write_jsonl(tmp_path / "n.jsonl", [{"text": "a"}, {"text": None}, {"text": "b"}])
  assert list(shards.iter_jsonl(path, "text")) == ["a", "b"]


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("{not json", "not valid JSON"),
        ('["a", "list"]', "expected a JSON object, got list"),
        ('{"body": "x"}', "no key 'text'"),
        ('{"text": 3}', "'text' holds int, expected a string"),
    ],
)
@pytest.mark.parametrize("name", ["bad.jsonl", "bad.jsonl.gz"])
def test_jsonl_bad_line_names_file_and_line(tmp_path, name, bad_line, message):
  good = json.dumps({"text": "fine"})
  data = "\n".join([good, "", good, bad_line, good]).encode("utf-8")
  path = tmp_path / name
  if name.endswith(".gz"):
    path.write_bytes(gzip.compress(data))
  else:
    path.write_bytes(data)
  docs = shards.iter_jsonl([path], "text")
  # Streaming: the good lines before the bad one come out first.
  assert [next(docs), next(docs)] == ["fine", "fine"]
  with pytest.raises(ValueError, match=rf"{name}, line 4: {message}"):
    next(docs)


def test_jsonl_invalid_utf8_is_value_error(tmp_path):
  path = tmp_path / "latin1.jsonl"
  path.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
  with pytest.raises(ValueError, match=r"latin1\.jsonl, line 2: not valid JSON"):
    list(shards.iter_jsonl([path], "text"))


# ----------------------------------------------------------------------------
# max_bytes


@pytest.mark.parametrize("reader", ["parquet", "jsonl"])
def test_max_bytes_cuts_at_the_cap(parquet_shards, jsonl_shards, reader):
  paths = parquet_shards if reader == "parquet" else jsonl_shards
  read = shards.iter_parquet if reader == "parquet" else shards.iter_jsonl
  assert list(read(paths, "text", max_bytes=0)) == DOCS
  sizes = [len(d.encode("utf-8")) for d in DOCS]
  # A cap on a document boundary: exactly the leading documents.
  cap = sum(sizes[:12])
  assert list(read(paths, "text", max_bytes=cap)) == DOCS[:12]
  # A cap 10 bytes into document 12: it is cut there (across a shard boundary).
  docs = list(read(paths, "text", max_bytes=cap + 10))
  assert docs[:12] == DOCS[:12] and len(docs) == 13
  assert docs[12] == DOCS[12].encode("utf-8")[:10].decode("utf-8")
  assert nbytes(docs) == cap + 10
  # A cap far past the corpus: everything.
  assert list(read(paths, "text", max_bytes=10**9)) == DOCS


def test_max_bytes_never_splits_a_character():
  docs = ["ab", "漢字"]  # 2 + 6 bytes; a cap of 4 falls inside '漢'
  assert list(shards.cap_documents(iter(docs), 4)) == ["ab"]
  assert list(shards.cap_documents(iter(docs), 5)) == ["ab", "漢"]
  for cap in range(1, 12):
    out = list(shards.cap_documents(iter(docs), cap))
    assert cap - 3 <= nbytes(out) <= cap or nbytes(out) == 8


def test_max_bytes_stops_reading(tmp_path):
  """Nothing past the capped document is read: a bad line after it never raises."""
  good = json.dumps({"text": "x" * 10})
  path = tmp_path / "a.jsonl"
  path.write_text("\n".join([good, good, "{broken"]) + "\n")
  assert list(shards.iter_jsonl([path], "text", max_bytes=15)) == ["x" * 10, "x" * 5]


# ----------------------------------------------------------------------------
# list_shards and iter_documents


def test_list_shards_glob_sorted_and_deduplicated(tmp_path):
  for name in ["b-2.jsonl", "a-10.jsonl", "a-1.jsonl", "notes.txt"]:
    (tmp_path / name).write_text("")
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "c.jsonl").write_text("")
  expected = [tmp_path / n for n in ["a-1.jsonl", "a-10.jsonl", "b-2.jsonl"]]
  assert shards.list_shards(str(tmp_path / "*.jsonl")) == expected
  # A comma-separated list of globs, overlapping, in any order: merged, sorted, once each.
  pattern = f"{tmp_path}/b*.jsonl, {tmp_path}/*.jsonl,{tmp_path}/a-1.jsonl"
  assert shards.list_shards(pattern) == expected
  assert shards.list_shards(str(tmp_path / "**" / "*.jsonl")) == sorted(
      expected + [tmp_path / "sub" / "c.jsonl"], key=str
  )
  # A directory: every file under it; a single file: itself.
  assert len(shards.list_shards(str(tmp_path))) == 5
  assert shards.list_shards(str(tmp_path / "notes.txt")) == [tmp_path / "notes.txt"]


def test_list_shards_no_match_names_the_pattern(tmp_path):
  pattern = str(tmp_path / "*.parquet")
  with pytest.raises(FileNotFoundError, match=r"\*\.parquet' matches no files"):
    shards.list_shards(pattern)
  (tmp_path / "x.jsonl").write_text("")
  with pytest.raises(FileNotFoundError, match=r"\(part '[^']*typo\*'\) matches no files"):
    shards.list_shards(f"{tmp_path}/*.jsonl,{tmp_path}/typo*")
  with pytest.raises(FileNotFoundError, match="empty"):
    shards.list_shards(" , ")


def test_iter_documents_over_a_glob(parquet_shards, jsonl_shards):
  parquet_glob = str(parquet_shards[0].parent / "shard-*.parquet")
  assert list(shards.iter_documents("parquet", parquet_glob, "text")) == DOCS
  assert list(shards.iter_documents("parquet", parquet_glob, "content", max_bytes=5)) == [
      "code "
  ]
  jsonl_glob = f"{jsonl_shards[0].parent}/*.jsonl*,{jsonl_shards[0].parent}/*.json.gz"
  assert list(shards.iter_documents("jsonl", jsonl_glob, "text")) == DOCS


def test_iter_documents_errors(tmp_path, parquet_shards):
  with pytest.raises(ValueError, match=r"unknown source 'csv'.*'parquet', 'jsonl'"):
    shards.iter_documents("csv", str(parquet_shards[0]), "text")
  # Raised at the call, before any document is asked for.
  with pytest.raises(FileNotFoundError, match="nothing-here"):
    shards.iter_documents("jsonl", str(tmp_path / "nothing-here*"), "text")


# ----------------------------------------------------------------------------
# is_validation


def split(n, fraction, seed):
  return [i for i in range(n) if shards.is_validation(i, fraction, seed)]


def test_validation_split_is_deterministic_and_about_the_fraction():
  val = split(1000, 0.1, seed=0)
  assert val == split(1000, 0.1, seed=0)
  assert len(val) == 100
  train = [i for i in range(1000) if not shards.is_validation(i, 0.1, 0)]
  assert set(train).isdisjoint(val) and len(train) + len(val) == 1000
  # Every prefix holds within one of the fraction.
  for n in range(1, 1001):
    assert abs(len([i for i in val if i < n]) - 0.1 * n) < 1
  for fraction in [0.01, 0.03, 0.25, 0.5]:
    assert abs(len(split(1000, fraction, seed=3)) - 1000 * fraction) < 1


def test_validation_split_seed_and_small_corpora():
  assert split(1000, 0.1, seed=0) != split(1000, 0.1, seed=1)
  # At least one validation document once there are 1 / fraction documents.
  for seed in range(20):
    assert len(split(10, 0.1, seed)) == 1
    assert len(split(34, 0.03, seed)) >= 1
  assert split(1000, 0.0, seed=0) == []


def test_validation_split_rejects_bad_arguments():
  for fraction in [-0.1, 1.0, 1.5]:
    with pytest.raises(ValueError, match="val_fraction"):
      shards.is_validation(0, fraction, 0)
  with pytest.raises(ValueError, match="index"):
    shards.is_validation(-1, 0.1, 0)


# ----------------------------------------------------------------------------
# fingerprint


def test_fingerprint_changes_with_the_shards(parquet_shards):
  before = shards.fingerprint(parquet_shards)
  assert before == shards.fingerprint(parquet_shards)
  assert len(before) == 16 and int(before, 16) >= 0
  assert shards.fingerprint(parquet_shards[:2]) != before
  # The same bytes, touched: the mtime changes the key.
  stat = parquet_shards[1].stat()
  os.utime(parquet_shards[1], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
  touched = shards.fingerprint(parquet_shards)
  assert touched != before
  # Rewritten with other content (other size), mtime pinned back: the size changes the key.
  write_parquet(parquet_shards[1], DOCS[:3])
  os.utime(parquet_shards[1], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
  assert shards.fingerprint(parquet_shards) not in (before, touched)


def test_fingerprint_missing_shard(tmp_path):
  with pytest.raises(FileNotFoundError):
    shards.fingerprint([tmp_path / "gone.parquet"])
