"""What changes as training goes: the learning rate's schedule, and the inputs scheduled sampling
mixes at a teacher-forcing probability the task gives (Bengio et al. 2015)."""
from __future__ import annotations

import math

import torch

from lab.config import TrainConfig
from lab.inputs.data import Batch
from lab.modeling.sampling import draw


def scheduled_lr(cfg: TrainConfig, step: int, total_steps: int, steps_per_epoch: int = 1) -> float:
    """The learning rate of the step after `step` steps: constant; warmup_cosine, a linear warm-up
    over warmup_steps, then a cosine decay to 10% of lr at the last step; or mingpt, minGPT's
    trainer as the birth-place assignment runs it: the same warm-up, then
    max(0.1, (1 + cos(pi * progress)) / 2) with progress reaching 1 after decay_epochs and not
    clamped there (minGPT's 650 epochs with a 200-epoch decay go down, up at 400, down at 600)."""
    if cfg.lr_schedule == "constant":
        return cfg.lr
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "mingpt":
        end = round(cfg.decay_epochs * steps_per_epoch) if cfg.decay_epochs else total_steps
        progress = (step - cfg.warmup_steps) / max(end - cfg.warmup_steps, 1)
        return cfg.lr * max(0.1, 0.5 * (1.0 + math.cos(math.pi * progress)))
    span = max(total_steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


@torch.no_grad()
def scheduled_inputs(model, batch: Batch, p_gold: float) -> Batch:
    """Scheduled sampling in one parallel pass: the model predicts every next token from the gold
    prefix, one token is sampled at each position, and each caption token of the input is
    replaced by that sample with probability 1 - p_gold. The targets stay the gold tokens."""
    B, L = batch.input_ids.shape
    logits = model(batch.input_ids).logits[:, :-1].float()
    sampled = draw(torch.softmax(logits, -1).reshape(B * (L - 1), -1)).view(B, L - 1)
    swap = (torch.rand(B, L - 1, device=sampled.device) >= p_gold) & (batch.loss_mask > 0)
    mixed = batch.input_ids.clone()
    mixed[:, 1:] = torch.where(swap, sampled, batch.input_ids[:, 1:])
    targets = torch.full_like(batch.input_ids, -100)
    targets[:, :-1] = batch.input_ids[:, 1:]
    mask = torch.zeros(B, L, dtype=batch.loss_mask.dtype, device=batch.loss_mask.device)
    mask[:, :-1] = batch.loss_mask
    return Batch(mixed, mask, targets)

