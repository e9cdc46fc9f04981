"""The validation split as evaluation batches: all of it, or a fixed sample
spread over all of it.

The split is one token stream ``x_0 .. x_{T-1}`` (its documents joined by the
separator). Window ``w`` starts at ``s_w = w L`` and holds ``L + 1`` tokens, so
it predicts the targets ``x_{s_w + 1} .. x_{s_w + L}``: consecutive windows
overlap by one token and every target ``x_1 .. x_{T-1}`` lies in exactly one
window. The ``T - 1 - nL`` targets after the ``n`` whole windows are predicted
by one more window, the stream's last ``L + 1`` tokens, that counts only those
targets (weight 0 on the ones it repeats). The whole split's loss is then

    loss = sum_t w_t l_t / sum_t w_t,   l_t = -log p(x_t | x_{<t} in its window),

with ``w_t`` in {0, 1}: every target once, the same tokens for every run.

``whole`` returns that set (a split over ``max_tokens`` targets is cut to an
evenly spread subset of its windows); ``spread`` returns ``N * B`` whole windows
evenly spaced over the split, the cheap sample evaluated during training;
``select`` is the one the trainer asks for by ``num_batches``.
Each set carries the document of every target, so final losses can be paired
per document (a separator counts with the document before it).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class EvalSet(NamedTuple):
  """Evaluation batches and what they measure.

  Attributes:
    tokens_NxBxL1: N batches of B windows of L + 1 tokens (padding windows: 0).
    weights_NxBxL: float32, 1 for each target counted, 0 for padding and for
      targets another window already counts.
    doc_NxBxL: int32, the document of each target (-1 where the weight is 0).
    num_tokens: targets counted (the sum of the weights).
    num_bytes: UTF-8 bytes those targets stand for (``num_tokens`` times the
      split's bytes per token).
    whole: whether the set is the whole split (every target once).
  """

  tokens_NxBxL1: np.ndarray
  weights_NxBxL: np.ndarray
  doc_NxBxL: np.ndarray
  num_tokens: int
  num_bytes: float
  whole: bool


def window_starts(num_tokens: int, seq_len: int) -> np.ndarray:
  """Starts ``0, L, 2L, ...`` of the whole windows of ``L + 1`` tokens in a
  stream of ``num_tokens``: they predict each target once."""
  count = max(num_tokens - 1, 0) // seq_len
  return np.arange(count, dtype=np.int64) * seq_len


def _evenly(count: int, num: int) -> np.ndarray:
  """``num`` indices in ``[0, count)``, evenly spread, first and last included."""
  if num >= count:
    return np.arange(count, dtype=np.int64)
  return np.round(np.linspace(0, count - 1, num)).astype(np.int64)


def _assemble(
    tokens_T: np.ndarray,
    starts_W: np.ndarray,
    first_counted_W: np.ndarray,
    doc_starts_D: np.ndarray,
    seq_len: int,
    batch_size: int,
    bytes_per_token: float,
    whole: bool,
) -> EvalSet:
  """Windows at ``starts_W`` (target ``j`` of window ``w`` counted when ``j >=
  first_counted_W[w]``), padded with empty windows to whole batches of B."""
  num_windows = len(starts_W)
  num_batches = -(-num_windows // batch_size)
  padded = num_batches * batch_size
  L1 = seq_len + 1
  tokens = np.zeros((padded, L1), tokens_T.dtype)
  tokens[:num_windows] = np.asarray(tokens_T[starts_W[:, None] + np.arange(L1)])
  weights = np.zeros((padded, seq_len), np.float32)
  weights[:num_windows] = np.arange(seq_len)[None, :] >= first_counted_W[:, None]
  positions = starts_W[:, None] + 1 + np.arange(seq_len)
  doc = np.full((padded, seq_len), -1, np.int32)
  doc[:num_windows] = np.searchsorted(doc_starts_D, positions, side="right") - 1
  doc[weights == 0] = -1
  num_tokens = int(weights.sum())
  return EvalSet(
      tokens.reshape(num_batches, batch_size, L1),
      weights.reshape(num_batches, batch_size, seq_len),
      doc.reshape(num_batches, batch_size, seq_len),
      num_tokens,
      num_tokens * bytes_per_token,
      whole,
  )


def whole(
    tokens_T: np.ndarray,
    doc_starts_D: np.ndarray,
    seq_len: int,
    batch_size: int,
    bytes_per_token: float = 1.0,
    max_tokens: int = 0,
) -> EvalSet:
  """Every target of the split once (see the module docstring), in batches of
  ``batch_size`` windows. When the split has more than ``max_tokens`` targets
  (``max_tokens > 0``), ``max_tokens // L`` whole windows evenly spread over it
  instead (``whole=False``)."""
  _check(batch_size, seq_len)
  T = len(tokens_T)
  if T < seq_len + 1:
    raise ValueError(
        f"too little validation data: {T} tokens, less than one window of {seq_len + 1}"
    )
  starts = window_starts(T, seq_len)
  if max_tokens and T - 1 > max_tokens:
    starts = starts[_evenly(len(starts), max(max_tokens // seq_len, 1))]
    return _assemble(
        tokens_T, starts, np.zeros(len(starts), np.int64), doc_starts_D, seq_len,
        batch_size, bytes_per_token, whole=False,
    )
  first = np.zeros(len(starts), np.int64)
  rest = T - 1 - len(starts) * seq_len
  if rest:  # the stream's last L + 1 tokens, counting only its last `rest` targets
    starts = np.append(starts, T - 1 - seq_len)
    first = np.append(first, seq_len - rest)
  return _assemble(
      tokens_T, starts, first, doc_starts_D, seq_len, batch_size, bytes_per_token,
      whole=True,
  )


def spread(
    tokens_T: np.ndarray,
    doc_starts_D: np.ndarray,
    seq_len: int,
    batch_size: int,
    num_batches: int,
    bytes_per_token: float = 1.0,
) -> EvalSet:
  """``num_batches * batch_size`` whole windows evenly spaced over the split
  (first and last included), the same for every run."""
  _check(batch_size, seq_len)
  if num_batches < 1:
    raise ValueError(f"num_batches must be >= 1, got {num_batches}")
  starts = window_starts(len(tokens_T), seq_len)
  needed = num_batches * batch_size
  if needed > len(starts):
    raise ValueError(
        f"too little validation data: {num_batches} batches of {batch_size} need {needed} "
        f"windows of {seq_len + 1} tokens, only {len(starts)} available"
    )
  starts = starts[_evenly(len(starts), needed)]
  return _assemble(
      tokens_T, starts, np.zeros(needed, np.int64), doc_starts_D, seq_len, batch_size,
      bytes_per_token, whole=False,
  )


def select(
    tokens_T: np.ndarray,
    doc_starts_D: np.ndarray,
    seq_len: int,
    batch_size: int,
    num_batches: int,
    bytes_per_token: float = 1.0,
    max_tokens: int = 0,
) -> EvalSet:
  """:func:`spread` of ``num_batches`` batches, or :func:`whole` (capped at
  ``max_tokens``) when ``num_batches = 0`` or the sample would hold at least
  every window of the split."""
  if num_batches < 0:
    raise ValueError(f"num_batches must be >= 0 (0 = the whole split), got {num_batches}")
  count = len(window_starts(len(tokens_T), seq_len))
  if num_batches == 0 or num_batches * batch_size >= count:
    return whole(tokens_T, doc_starts_D, seq_len, batch_size, bytes_per_token, max_tokens)
  return spread(tokens_T, doc_starts_D, seq_len, batch_size, num_batches, bytes_per_token)


def per_document(
    losses_NxBxL: np.ndarray, eval_set: EvalSet, num_docs: int
) -> tuple[np.ndarray, np.ndarray]:
  """``(tokens_D, loss_sum_D)``: the counted targets of each document and the
  sum of their losses (float64), from per-target losses of ``eval_set``."""
  doc = eval_set.doc_NxBxL.reshape(-1)
  keep = doc >= 0
  losses = np.asarray(losses_NxBxL, np.float64).reshape(-1)[keep]
  tokens_D = np.bincount(doc[keep], minlength=num_docs)
  loss_sum_D = np.bincount(doc[keep], weights=losses, minlength=num_docs)
  return tokens_D, loss_sum_D


def _check(batch_size: int, seq_len: int) -> None:
  if batch_size < 1 or seq_len < 1:
    raise ValueError(
        f"batch_size and seq_len must be >= 1, got {batch_size} and {seq_len}"
    )
