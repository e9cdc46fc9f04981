"""Every source and every tokenizer trains through `experiments.run` (tiny runs).

The corpus is built here from the Python standard library's own `.py` files (no
download): parquet and jsonl shards, local text files, a SentencePiece model
and a Hugging Face tokenizer.json trained on it.
"""

import glob
import json
import os
import sysconfig

import pytest

from tests import helpers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  import pyarrow as pa
  import pyarrow.parquet as pq

  root = tmp_path_factory.mktemp("corpus")
  files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:60]
  docs = [open(f, encoding="utf-8", errors="replace").read()[:8000] for f in files]
  for i in range(3):
    pq.write_table(pa.table({"text": docs[i::3]}), root / f"part-{i}.parquet")
  with open(root / "shard.jsonl", "w") as f:
    f.writelines(json.dumps({"content": d}) + "\n" for d in docs)
  (root / "txt").mkdir()
  for i, d in enumerate(docs[:12]):
    (root / "txt" / f"doc{i:02d}.txt").write_text(d)
  return root, docs


def run(tmp_path, *flags):
  """``python -m experiments.run`` on the tiny config, in this process (one
  device, no ``XLA_FLAGS`` of its own: it needs no process of its own)."""
  helpers.run_main(
      "experiments.run",
      "--config",
      "configs/diloco.py:tiny",
      "--workdir",
      str(tmp_path / "run"),
      "--config.total_steps=10",
      "--config.num_workers=2",
      "--config.num_devices=1",
      "--config.log.progress=False",
      *flags,
  )
  records = [json.loads(l) for l in open(tmp_path / "run" / "metrics.jsonl")]
  first, summary = records[0], records[-1]
  assert summary["summary"] and summary["final_eval_bpb"] > 0
  # It learned from the source (an untrained model passes any fixed bound such as
  # bpb < 9): its final eval loss is at least 0.1 nats per token below the
  # untrained model's loss on its first batch (about log V, a uniform guess).
  untrained = first["loss_start"]
  assert summary["final_eval_loss"] < untrained - 0.1, (untrained, summary)
  return summary


def test_parquet_source_with_a_trained_sentencepiece(tmp_path, corpus):
  root, _ = corpus
  s = run(
      tmp_path,
      "--config.data.source=parquet",
      f"--config.data.path={root}/*.parquet",
      "--config.data.tokenizer=sentencepiece",
      "--config.data.vocab_size=400",
  )
  assert s["tokenizer"].startswith("sentencepiece") and s["eval_bytes_per_token"] > 1.2


def test_jsonl_source_with_a_tokenizer_json(tmp_path, corpus):
  from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders

  root, docs = corpus
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  tok.train_from_iterator(
      docs, trainers.BpeTrainer(vocab_size=400, special_tokens=["</s>"])
  )
  tok.save(str(tmp_path / "tokenizer.json"))
  s = run(
      tmp_path,
      "--config.data.source=jsonl",
      f"--config.data.path={root}/*.jsonl",
      "--config.data.text_key=content",
      f"--config.data.tokenizer={tmp_path / 'tokenizer.json'}",
  )
  assert s["eval_bytes_per_token"] > 1.2


def test_files_source_with_an_existing_sentencepiece_model(tmp_path, corpus):
  from autoloco_jax.data import tokenizers

  root, docs = corpus
  model = tokenizers.train_sentencepiece(docs, 300, tmp_path, byte_fallback=False)
  s = run(
      tmp_path,
      "--config.data.source=files",
      f"--config.data.path={root}/txt",
      f"--config.data.tokenizer={model}",
  )
  assert s["tokenizer"].startswith("sentencepiece")


def test_tfds_source_with_bytes(tmp_path):
  # The embedded plays as a TFDS catalog dataset read by name.
  s = run(tmp_path, "--config.data.source=tfds", "--config.data.name=shakespeare_plays")
  assert s["tokenizer"] == "bytes" and s["eval_bytes_per_token"] == 1.0
