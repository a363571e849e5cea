"""Training FLOPs and model FLOPs utilisation (MFU): how much of the device's peak the model's
useful arithmetic reaches.

FLOPs per token follow PaLM (Chowdhery et al. 2022, appendix B): 6N + 12·L·H·Q·T, where N is the
parameters that take part in a matrix product (every parameter except the input embedding and
position tables, which are looked up, not multiplied; a tied output layer counts once), L the
blocks, H the query heads, Q the head width and T the sequence length attended over. 6N is the
forward (2N) and backward (4N) products of the weights; 12·L·H·Q·T the attention scores and their
weighted sum, forward and backward. Only real (unpadded) tokens count, so padding is waste, not
utilisation; frozen blocks (train_layers) are counted as if they trained.
"""
from __future__ import annotations

import re

import torch

# Dense peak FLOP/s per precision (no sparsity), from the vendors' datasheets. Matched in order by
# whole words of torch.cuda.get_device_name(): "NVIDIA H100 80GB HBM3" is the SXM part. fp32 is the
# plain float32 rate (PyTorch leaves TF32 matrix products off by default).
PEAK_FLOPS = [
    ("H100 PCIe", {"bf16": 756e12, "fp32": 51e12}),
    ("H100 NVL", {"bf16": 835e12, "fp32": 60e12}),
    ("H100", {"bf16": 989e12, "fp32": 67e12}),       # SXM
    ("H200", {"bf16": 989e12, "fp32": 67e12}),
    ("A100", {"bf16": 312e12, "fp32": 19.5e12}),
    ("L40S", {"bf16": 362e12, "fp32": 91.6e12}),
    ("L4", {"bf16": 121e12, "fp32": 30.3e12}),
]


def device_name(device: torch.device) -> str:
    """What the peak table is keyed by: the CUDA device's name, else the device type ('cpu')."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def peak_flops(name: str, precision: str) -> float | None:
    """The device's dense peak FLOP/s at 'bf16' or 'fp32', or None when it is not in the table."""
    for key, peaks in PEAK_FLOPS:
        if re.search(rf"\b{re.escape(key)}\b", name):     # whole words: "L4" is not "NVIDIA L40"
            return peaks.get(precision)
    return None


def matmul_params(model) -> int:
    """N of the estimate: parameters used in matrix products (embedding lookups excluded)."""
    total = sum(p.numel() for p in model.parameters())      # a tied matrix is listed once
    tables = list(model.transformer.wpe.parameters())
    if model.lm_head.weight is not model.transformer.wte.weight:
        tables.append(model.transformer.wte.weight)
    return total - sum(p.numel() for p in tables)


def per_token(n_params: int, n_layer: int, n_embd: int, seq_len: int) -> int:
    """Training FLOPs (forward and backward) per token: 6N + 12·L·H·Q·T, with H·Q = n_embd."""
    return 6 * n_params + 12 * n_layer * n_embd * seq_len


def mfu(flops: float, seconds: float, peak: float | None, processes: int = 1) -> float | None:
    """Achieved FLOP/s over the peak of all the processes' devices; None when the peak is unknown."""
    if peak is None or seconds <= 0:
        return None
    return flops / seconds / (peak * processes)


def format_mfu(value: float | None) -> str:
    return "MFU unknown" if value is None else f"MFU {100 * value:.1f}%"
