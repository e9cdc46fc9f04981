"""PLoRA sweep: 8 LoRA configs fine-tuned on held-out plays, packed vs one after another.

Run (2 CPU cores, about 4 minutes, plus about 1.5 minutes the first time to
pretrain the base, which is then cached in the workdir):
  python -m experiments.plora_sweep --config configs/plora.py --workdir runs/plora
It writes ``docs/plora.md`` (tables) and ``docs/plora.json`` (raw numbers);
``--render_only`` rewrites the tables from the JSON without rerunning.
Sizes: ``configs/plora.py:tiny`` (a smoke run, about 2 minutes), ``:cpu``
(default), ``:gpu`` (a 12-layer d=768 base; not run here).
Expected (cpu): the base ends pretraining at about 2.05 nats/byte (train) and
scores about 2.14 on the held-out play tails; every adapter improves on it
(about 2.11-2.13 after 40 steps); packed and one-after-another runs give each
adapter the same losses (differences ~1e-7) and parameters (~1e-5); makespan
about 2-3.7x shorter packed, training throughput about 1x (0.9-1.3x seen on a
shared 2-core CPU); see ``docs/plora.md``.
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
  c.pretrain = ml_collections.ConfigDict(
      dict(
          steps=pre_steps,  # AdamW steps of the base on the training plays
          batch_size=pre_batch,
          chunk_steps=50,
      )
  )  # batches staged per jitted call
  c.inner.warmup_steps = max(pre_steps // 20, 1)
  c.lora = ml_collections.ConfigDict(
      dict(
          sweep=SWEEP,  # (name, rank, alpha, lr, targets, seed) per job
          steps=steps,  # fine-tuning steps of every job
          batch_size=batch,  # sequences per job per step
          chunk_steps=20,
          train_fraction=0.8,  # head of each validation play: fine-tune train
          warmup_steps=max(steps // 10, 1),
          min_lr_ratio=0.1,
          weight_decay=0.01,
          b1=0.9,
          b2=0.999,
          eps=1e-8,
          clip_norm=1.0,
          budget_mib=512.0,  # per-device memory budget of the planner
          demo_budget_mib=100.0,  # a tighter budget, planned and printed only
          num_devices=1,  # devices a group's adapter axis is split over
          calibrate_steps=5,  # steps per timed call of a cost-model measurement
          calibrate_rounds=5,  # round-robin rounds; each program keeps its fastest
          eval_batches=8,
      )
  )  # eval batches of lora.batch_size
  return c
