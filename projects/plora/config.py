"""PLoRA sweep: 8 LoRA configs fine-tuned on held-out plays, packed vs one after another.

Run (2 CPU cores, about 4 minutes, plus about 1.5 minutes the first time to
pretrain the base, which is then cached in the workdir):
  python -m projects.plora.sweep --config projects/plora/config.py --workdir runs/plora
It writes ``docs/plora.json`` (the numbers) and ``docs/plora.md`` (tables of them);
  python -m projects.plora.sweep --render_only
rewrites the tables from the JSON without rerunning.
Sizes: ``projects/plora/config.py:tiny`` (a smoke run of 4 of the jobs, one per
rank, a couple of minutes), ``:cpu`` (default), ``:gpu`` (a 12-layer d=768 base;
not run here).
Expected (cpu): every adapter improves on the base's held-out loss (about 2.14
to 2.11-2.13 nats/byte after 40 steps), packed and one after another give each
adapter the same losses (differences ~1e-7), and the packed sweep's makespan is
about 2-3.7x shorter; see ``docs/plora.md``.
"""

import ml_collections

from configs import common

# name: rank, alpha, peak lr, targets, seed. Ranks 4..32, both attention and
# MLP targets, three learning rates: a typical small LoRA sweep.
SWEEP = (
    ("r4-attn", 4, 8.0, 3e-3, "attn", 0),
    ("r4-all", 4, 8.0, 1e-2, "all", 1),
    ("r8-attn", 8, 16.0, 3e-3, "attn", 2),
    ("r8-mlp", 8, 16.0, 1e-2, "mlp", 3),
    ("r16-all", 16, 32.0, 3e-3, "all", 4),
    ("r16-attn", 16, 32.0, 1e-3, "attn", 5),
    ("r32-mlp", 32, 32.0, 3e-3, "mlp", 6),
    ("r32-all", 32, 64.0, 1e-3, "all", 7),
)

# size: (pretrain steps, pretrain batch, lora steps, lora batch, seq_len)
_SIZES = {
    "tiny": (40, 8, 8, 4, 32),
    "cpu": (300, 16, 40, 8, 64),
    "gpu": (5000, 64, 500, 16, 512),
}


def get_config(size: str = "cpu"):
  c = common.base(size)
  pre_steps, pre_batch, steps, batch, seq = _SIZES[size]
  c.algorithm = "plora"
  c.num_workers = 1
  c.data.seq_len = seq
  c.model.seq_len = seq
  c.inner.warmup_steps = max(pre_steps // 20, 1)

  # Pretraining of the base, which is frozen afterwards.
  c.pretrain = ml_collections.ConfigDict()
  # AdamW steps of the base on the training plays.
  c.pretrain.steps = pre_steps
  # Sequences per step.
  c.pretrain.batch_size = pre_batch
  # Batches staged per jitted call.
  c.pretrain.chunk_steps = 50

  # The LoRA sweep and the planner.
  c.lora = ml_collections.ConfigDict()
  # (name, rank, alpha, lr, targets, seed) per job; tiny keeps one job per rank.
  c.lora.sweep = SWEEP[1::2] if size == "tiny" else SWEEP
  # Fine-tuning steps of every job.
  c.lora.steps = steps
  # Sequences per job per step.
  c.lora.batch_size = batch
  # Batches staged per jitted call.
  c.lora.chunk_steps = 20
  # Share of each validation play (its head) used to fine-tune; the tail is the eval set.
  c.lora.train_fraction = 0.8
  # AdamW of every adapter: warmup, then cosine down to min_lr_ratio of its peak lr.
  c.lora.warmup_steps = max(steps // 10, 1)
  c.lora.min_lr_ratio = 0.1
  c.lora.weight_decay = 0.01
  c.lora.b1 = 0.9
  c.lora.b2 = 0.999
  c.lora.eps = 1e-8
  # Global-norm clip of each adapter's gradient.
  c.lora.clip_norm = 1.0
  # Per-device memory budget of the planner, in MiB.
  c.lora.budget_mib = 512.0
  # A tighter budget, planned and printed only.
  c.lora.demo_budget_mib = 100.0
  # Devices a group's adapter axis is split over.
  c.lora.num_devices = 1
  # Steps per timed call of a cost-model measurement.
  c.lora.calibrate_steps = 5
  # Round-robin rounds of the cost model; each program keeps its fastest.
  c.lora.calibrate_rounds = 5
  # Eval batches of lora.batch_size sequences.
  c.lora.eval_batches = 8
  return c
