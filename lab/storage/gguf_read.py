"""A llama GGUF (SmolLM2's) read as transformers reads it, in a third of the time.

transformers reads a llama GGUF with the `gguf` package's reader, which walks every metadata value
element by element (the 49,152 tokens and 48,900 merges: about 3 s of CPU), and does so three
times, for the config, the weights and the tokenizer (about 18 s in all on a 2-core CPU). Here the
file's metadata and tensor table are read with transformers' own fast reader, the weights
de-quantized by the `gguf` package as transformers does (bit for bit the same tensors), the query
and key rows put back in the order llama.cpp's converter changed, and the tokenizer built by
transformers from the same metadata (tests/test_smollm2.py holds all of it equal to transformers'
reading, tensor for tensor and token for token). Only what the lab imports is read this way: a
`llama` file with a byte-level BPE tokenizer (`gpt2` in GGUF's words) and tensors of the names a
llama has; read() returns None for anything else, which transformers then reads.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lab.inputs import tokenizers

# GGUF tensor names -> transformers' Llama names (llama.cpp's convert_hf_to_gguf.py, reversed)
TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
BLOCK = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}


def read(path: Path):
    """(transformers' LlamaForCausalLM in float32, eval mode; its tokenizer) from a llama GGUF, or
    None when the file is not one this reads (transformers reads it then). A damaged file raises
    what its reading met (the caller names the file)."""
    try:
        from transformers.integrations.gguf.reader import GgufHeader, read_gguf_metadata
    except ImportError:         # another transformers than requirements.txt pins: its own reading
        return None
    metadata, names = read_gguf_metadata(str(path))
    if (metadata["general.architecture"] != "llama" or metadata.get("tokenizer.ggml.model") != "gpt2"
            or not set(names) <= set(_hf_names(names))):
        return None
    config = _config(metadata, names)
    state = _weights(GgufHeader.from_file(str(path)), config)
    return _model(config, state), _tokenizer(path)


def _hf_names(names) -> dict[str, str]:
    """{GGUF name: transformers' name} for the names this reader knows."""
    out = {}
    for name in names:
        base, _, kind = name.rpartition(".")
        if kind != "weight":                    # a llama has no biases (a file with some: transformers)
            continue
        if base in TOP:
            out[name] = f"{TOP[base]}.{kind}"
        elif base.startswith("blk.") and base.count(".") == 2 and base.split(".")[2] in BLOCK:
            _, block, part = base.split(".")
            out[name] = f"model.layers.{block}.{BLOCK[part]}.{kind}"
    return out


def _config(metadata: dict, names) -> "LlamaConfig":
    """transformers' LlamaConfig from the file's llama.* and tokenizer.ggml.* keys, as its GGUF
    reader maps them (a file without output.weight ties its embeddings)."""
    (LlamaConfig,) = tokenizers.from_transformers("LlamaConfig")

    def key(name, default=None):
        return metadata.get(f"llama.{name}", default)
    heads = key("attention.head_count")
    if not heads or not key("embedding_length"):
        raise ValueError("the file names no llama.attention.head_count or llama.embedding_length")
    token = {k: metadata.get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "unknown", "padding")}
    vocab = metadata.get("tokenizer.ggml.tokens")
    given = dict(
        vocab_size=key("vocab_size") or (vocab if isinstance(vocab, int) else len(vocab)),
        hidden_size=key("embedding_length"), intermediate_size=key("feed_forward_length"),
        num_hidden_layers=key("block_count"), num_attention_heads=heads,
        num_key_value_heads=key("attention.head_count_kv", heads),
        max_position_embeddings=key("context_length"), rms_norm_eps=key("attention.layer_norm_rms_epsilon"),
        rope_parameters={"rope_theta": key("rope.freq_base", 10000.0), "rope_type": "default"},
        head_dim=key("rope.dimension_count") or key("embedding_length") // heads,
        tie_word_embeddings="output.weight" not in names, bos_token_id=token["bos"],
        eos_token_id=token["eos"], unk_token_id=token["unknown"], pad_token_id=token["padding"])
    return LlamaConfig(**{k: v for k, v in given.items() if v is not None})    # absent: the class's default


def _weights(header, config) -> dict[str, torch.Tensor]:
    """Every tensor of the file in float32 under transformers' name; query and key rows back in
    the order of the heads' halves (llama.cpp interleaves them for its rotary kernel)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize
    from transformers.integrations.gguf.reader import load_gguf_state_dict
    raw, hf = load_gguf_state_dict(header), _hf_names(info.name for info in header.tensors)
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    state = {}
    for info in header.tensors:
        w = dequantize(np.asarray(raw[info.name].data), GGMLQuantizationType(info.ggml_type))
        w = np.asarray(w, dtype=np.float32).reshape(info.shape)
        part = info.name.split(".")[2] if info.name.startswith("blk.") else None
        if part in heads and info.name.endswith(".weight"):
            half = w.shape[0] // heads[part] // 2
            w = w.reshape(heads[part], half, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)
        w = np.ascontiguousarray(w)
        state[hf[info.name]] = torch.from_numpy(w if w.flags.writeable else w.copy())   # not the file's map
    return state


def _model(config, state: dict):
    """The model around the tensors as they are (nothing initialised, nothing copied)."""
    (AutoModelForCausalLM,) = tokenizers.from_transformers("AutoModelForCausalLM")
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"the file's tensors do not fit a llama: missing {sorted(missing)[:3]}, "
                         f"unexpected {sorted(unexpected)[:3]}")
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)      # its buffers
    model.tie_weights()
    return model.eval()


def _tokenizer(path: Path):
    """transformers' tokenizer of the file, built from its tokenizer.ggml.* keys as
    AutoTokenizer builds it, without the second reading of the file AutoTokenizer makes for the
    config."""
    (TokenizersBackend,) = tokenizers.from_transformers("TokenizersBackend")
    return TokenizersBackend.from_pretrained(str(path.parent), gguf_file=path.name)
