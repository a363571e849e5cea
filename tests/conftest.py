import os

import pytest
import torch

from lab.config import ModelConfig
from lab.data import DEFAULT_DATA_DIR

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def store(tmp_path, monkeypatch):
    """Every test gets its own empty checkpoint store."""
    path = tmp_path / "store"
    monkeypatch.setenv("LAB_STORE", str(path))
    return path


@pytest.fixture(scope="session")
def corpus_dir():
    if not DEFAULT_DATA_DIR.is_dir():
        pytest.fail(f"the real caption corpus is expected at {DEFAULT_DATA_DIR}")
    return DEFAULT_DATA_DIR


def tiny_config(**overrides) -> ModelConfig:
    base = dict(model="gpt2", vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                dropout=0.0)
    return ModelConfig(**{**base, **overrides})
