"""The benchmark's reference model and inner optimizer, written in PyTorch.

The same decoder-only transformer as ``autoloco_jax/model/transformer.py`` in plain eager
PyTorch, trained with ``torch.optim.AdamW`` under the same clipping, schedule and
hyperparameters as ``autoloco_jax/runtime/inner.py`` on the same global batch: what a
competent PyTorch user would write for this model on a CPU. The throughput
benchmark (``benchmarks/throughput/``) times it in a child process of its own
(torch's threads and JAX's never share a process), unit by unit, each unit
bracketed by a unit of the JAX ``reference`` row in the benchmark's process.

Matching ``transformer.py`` (pre-norm, no biases):

  x = embed(tokens)                         # [V, D], normal(0.02)
  per block: x = x + out(attn(rope(qkv(rmsnorm(x)))))   # fused [D, 3D] qkv
             x = x + down(gelu_tanh(up(rmsnorm(x))))    # D -> F -> D
  logits = rmsnorm(x) @ embed^T             # tied readout (config tie_embeddings)

RMSNorm: eps 1e-6, a learned scale. RoPE: rotate-half pairs (i, i + K/2),
``theta_i = 10000^(-i / (K/2))``. Attention: causal softmax(q k^T / sqrt(K)) v
(``F.scaled_dot_product_attention``). Residual output projections (``out``,
``down``) start at normal(0.02 / sqrt(2 layers)). The parameter count equals
``model.param_count`` for every config (checked by the benchmark before it
times anything, and by ``tests/test_benchmarks.py`` when torch is installed,
which also checks that the two models give the same loss on the same weights).

Inner optimizer: ``clip_grad_norm_`` at ``clip_norm``, then AdamW (``b1``, ``b2``,
``eps``; decoupled weight decay on matrices only) under ``inner.schedule``'s
linear warmup + cosine decay.

torch is not a dependency of this project; with it installed, one unit of
``steps`` steps is timed by::

  python -m benchmarks.throughput --rows=reference,pytorch --rows_only --out /tmp/t.json
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time

import torch
import torch.nn.functional as F
from torch import nn

_ROPE_BASE = 10_000.0
_INIT_STD = 0.02


def rope_tables(length: int, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
  """sin and cos of the rotary angles ``pos * theta_i``, each [L, K/2] float32
  (computed in float64 like ``model.rope_tables``)."""
  half = head_dim // 2
  inv_freq_K2 = _ROPE_BASE ** (-torch.arange(half, dtype=torch.float64) / half)
  angles_LxK2 = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq_K2
  return angles_LxK2.sin().float(), angles_LxK2.cos().float()


def apply_rope(x_BxHxLxK: torch.Tensor, sin_LxK2: torch.Tensor, cos_LxK2: torch.Tensor):
  """Rotates feature pairs (i, i + K/2) of q or k by position-dependent angles."""
  x1, x2 = x_BxHxLxK.chunk(2, dim=-1)
  return torch.cat([x1 * cos_LxK2 - x2 * sin_LxK2, x2 * cos_LxK2 + x1 * sin_LxK2], -1)


class Block(nn.Module):
  """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

  def __init__(self, d_model: int, num_heads: int, mlp_dim: int):
    super().__init__()
    self.num_heads = num_heads
    self.attn_norm = nn.RMSNorm(d_model, eps=1e-6)
    self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
    self.out = nn.Linear(d_model, d_model, bias=False)
    self.mlp_norm = nn.RMSNorm(d_model, eps=1e-6)
    self.up = nn.Linear(d_model, mlp_dim, bias=False)
    self.down = nn.Linear(mlp_dim, d_model, bias=False)

  def forward(self, x_BxLxD, sin_LxK2, cos_LxK2):
    b, l, d = x_BxLxD.shape
    h = self.num_heads
    qkv_3xBxHxLxK = (
        self.qkv(self.attn_norm(x_BxLxD)).view(b, l, 3, h, d // h).permute(2, 0, 3, 1, 4)
    )
    q_BxHxLxK = apply_rope(qkv_3xBxHxLxK[0], sin_LxK2, cos_LxK2)
    k_BxHxLxK = apply_rope(qkv_3xBxHxLxK[1], sin_LxK2, cos_LxK2)
    o_BxHxLxK = F.scaled_dot_product_attention(
        q_BxHxLxK, k_BxHxLxK, qkv_3xBxHxLxK[2], is_causal=True
    )
    x_BxLxD = x_BxLxD + self.out(o_BxHxLxK.transpose(1, 2).reshape(b, l, d))
    mlp_BxLxD = self.down(F.gelu(self.up(self.mlp_norm(x_BxLxD)), approximate="tanh"))
    return x_BxLxD + mlp_BxLxD


class Transformer(nn.Module):
  """Decoder-only LM with a tied readout: tokens_BxL -> logits_BxLxV."""

  def __init__(
      self,
      vocab_size: int,
      d_model: int,
      num_layers: int,
      num_heads: int,
      mlp_dim: int,
      seq_len: int,
  ):
    super().__init__()
    self.embed = nn.Embedding(vocab_size, d_model)
    self.blocks = nn.ModuleList(
        Block(d_model, num_heads, mlp_dim) for _ in range(num_layers)
    )
    self.final_norm = nn.RMSNorm(d_model, eps=1e-6)
    sin_LxK2, cos_LxK2 = rope_tables(seq_len, d_model // num_heads)
    self.register_buffer("sin_LxK2", sin_LxK2, persistent=False)
    self.register_buffer("cos_LxK2", cos_LxK2, persistent=False)
    residual_std = _INIT_STD / math.sqrt(2 * num_layers)
    for name, p in self.named_parameters():
      if p.ndim == 2:
        std = residual_std if name.endswith(("out.weight", "down.weight")) else _INIT_STD
        nn.init.normal_(p, std=std)

  def forward(self, tokens_BxL: torch.Tensor) -> torch.Tensor:
    length = tokens_BxL.shape[1]
    sin_LxK2, cos_LxK2 = self.sin_LxK2[:length], self.cos_LxK2[:length]
    x_BxLxD = self.embed(tokens_BxL)
    for block in self.blocks:
      x_BxLxD = block(x_BxLxD, sin_LxK2, cos_LxK2)
    return self.final_norm(x_BxLxD) @ self.embed.weight.T


def loss_fn(model: nn.Module, tokens_BxL1: torch.Tensor) -> torch.Tensor:
  """Mean next-token cross-entropy (nats), as ``model.loss_fn``."""
  logits_BxLxV = model(tokens_BxL1[:, :-1])
  return F.cross_entropy(logits_BxLxV.flatten(0, 1), tokens_BxL1[:, 1:].flatten())


def param_count(model: nn.Module) -> int:
  return sum(p.numel() for p in model.parameters())


def lr_at(step: int, inner: dict, total_steps: int) -> float:
  """``inner.schedule``: linear warmup from ``lr / warmup`` to ``lr``, then cosine
  decay to ``lr * min_lr_ratio`` at ``total_steps`` (optax's
  ``warmup_cosine_decay_schedule``)."""
  lr, warmup = inner["lr"], max(int(inner["warmup_steps"]), 1)
  if step < warmup:
    return lr / warmup + (lr - lr / warmup) * step / warmup
  decay = max(total_steps, warmup + 1) - warmup
  t = min(step - warmup, decay) / decay
  end = lr * inner["min_lr_ratio"]
  return end + (lr - end) * 0.5 * (1 + math.cos(math.pi * t))


class Trainer:
  """The model, AdamW and synthetic data; ``unit(steps)`` trains ``steps`` steps
  on the global batch and reads the loss once at the end (as the JAX reference
  reads its summed loss once per round)."""

  def __init__(self, spec: dict):
    m, inner = spec["model"], spec["inner"]
    torch.manual_seed(spec.get("seed", 0))
    self.model = Transformer(
        m["vocab_size"],
        m["d_model"],
        m["num_layers"],
        m["num_heads"],
        m["mlp_dim"],
        m["seq_len"],
    )
    matrices = [p for p in self.model.parameters() if p.ndim >= 2]
    vectors = [p for p in self.model.parameters() if p.ndim < 2]
    self.optimizer = torch.optim.AdamW(
        [dict(params=matrices), dict(params=vectors, weight_decay=0.0)],
        lr=inner["lr"],
        betas=(inner["b1"], inner["b2"]),
        eps=inner["eps"],
        weight_decay=inner["weight_decay"],
        fused=True,
    )
    self.scheduler = torch.optim.lr_scheduler.LambdaLR(
        self.optimizer, lambda s: lr_at(s, inner, spec["total_steps"]) / inner["lr"]
    )
    self.clip_norm = inner["clip_norm"]
    generator = torch.Generator().manual_seed(spec.get("seed", 0))
    # Random bytes: speed does not depend on the text. A few batches, cycled.
    self.tokens_SxNxL1 = torch.randint(
        0,
        m["vocab_size"],
        (8, spec["global_batch"], m["seq_len"] + 1),
        generator=generator,
    )
    self.step = 0

  def train_step(self) -> torch.Tensor:
    tokens_NxL1 = self.tokens_SxNxL1[self.step % len(self.tokens_SxNxL1)]
    loss = loss_fn(self.model, tokens_NxL1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
    self.optimizer.step()
    self.scheduler.step()
    self.optimizer.zero_grad(set_to_none=True)
    self.step += 1
    return loss.detach()

  def unit(self, steps: int, round_h: int = 0) -> float:
    del round_h  # one model, no rounds
    loss_sum = torch.zeros(())
    for _ in range(steps):
      loss_sum += self.train_step()
    return loss_sum.item()


#: The profile's kinds of operation, by aten name, first match wins.
KINDS = (
    ("attention scores and softmax (fused SDPA)", r"scaled_dot_product|flash_attention"),
    ("matmuls (projections, MLP, logits)", r"^aten::(mm|addmm|bmm)$"),
    ("clipping and AdamW", r"adamw|_foreach|Optimizer"),
    ("layout copies", r"^aten::(copy_|clone|contiguous|cat|_to_copy)$"),
    ("autograd and Python overhead", r"^(?!aten::)"),
    ("elementwise, norms, loss", r""),
)


def profile(trainer: Trainer, steps: int) -> dict:
  """``steps`` train steps under ``torch.profiler``: the wall milliseconds per step
  and each of :data:`KINDS`' milliseconds per step (self CPU time of its ops)."""
  from torch.profiler import ProfilerActivity
  from torch.profiler import profile as torch_profile

  trainer.unit(3)
  start = time.perf_counter()
  trainer.unit(steps)
  wall = (time.perf_counter() - start) / steps
  with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
    trainer.unit(steps)
  micros = dict.fromkeys((name for name, _ in KINDS), 0.0)
  for event in prof.key_averages():
    kind = next(name for name, pattern in KINDS if re.search(pattern, event.key))
    micros[kind] += event.self_cpu_time_total
  return dict(
      ms_per_step=1e3 * wall,
      profiled_ms_per_step=sum(micros.values()) / 1e3 / steps,
      kinds_ms_per_step={k: us / 1e3 / steps for k, us in micros.items()},
      threads=torch.get_num_threads(),
      torch=torch.__version__,
  )


def main() -> None:
  """Child side of the benchmark: build, check the parameter count, warm up,
  then serve timed units (``benchmarks/unit_server.py``). With ``--profile N``,
  print :func:`profile` of N steps as JSON instead."""
  from benchmarks import unit_server

  out = unit_server.channel()
  parser = argparse.ArgumentParser()
  parser.add_argument("--spec", required=True, help="JSON: model, inner, sizes")
  parser.add_argument("--profile", type=int, default=0, help="Profile N steps.")
  args = parser.parse_args()
  spec = json.loads(args.spec)
  torch.set_num_threads(spec["threads"])
  if args.profile:
    out.write(json.dumps(profile(Trainer(spec), args.profile)) + "\n")
    return
  trainer = Trainer(spec)
  count = param_count(trainer.model)
  if count != spec["expect_params"]:
    raise SystemExit(
        f"torch model has {count:,} parameters, the JAX model {spec['expect_params']:,}"
    )
  units = dict(pytorch=trainer.unit)
  t = time.perf_counter()
  trainer.unit(2)
  warm = dict(pytorch=time.perf_counter() - t)
  if spec.get("compile"):
    compiled = Trainer(spec)
    compiled.train_step = torch.compile(compiled.train_step)
    t = time.perf_counter()
    compiled.unit(2)
    warm["pytorch_compile"] = time.perf_counter() - t
    units["pytorch_compile"] = compiled.unit
  ready = dict(
      torch=torch.__version__,
      threads=torch.get_num_threads(),
      num_params=count,
      warm_up_seconds=warm,
      rows=list(units),
  )
  unit_server.serve(units, ready, out)


if __name__ == "__main__":
  main()
