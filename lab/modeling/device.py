"""Where a model runs and in what precision: the device a setting names, bf16 where the GPU has it,
and autocast around a step."""
from __future__ import annotations

import contextlib

import torch

from lab.errors import ConfigError


def pick_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is available; use 'auto' or 'cpu'")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_precision(name: str, device: torch.device) -> str:
    """'bf16' or 'fp32': auto is bf16 on a CUDA GPU that has it, fp32 elsewhere."""
    if name == "auto":
        return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    return name


def autocast(device: torch.device, precision: str):
    """bf16 autocast (matrix products in bf16, weights and reductions in float32), or nothing."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
