"""A checkpoint as one GGUF file, the format llama.cpp, Ollama and LM Studio run: written with the
`gguf` package from the model transformers' own class makes of it (lab/storage/interop.py), so a
part GGUF cannot describe is refused by the same rule as the Hugging Face export.

Names and layouts are llama.cpp's converter's (convert_hf_to_gguf.py): GPT-2's Conv1D weights
turned back to (out, in); Llama's query and key rows permuted to the interleaved rotary layout
llama.cpp expects (transformers' GGUF loader permutes them back). The tokenizer goes in as
byte-level BPE with the lab's start token added before every text, as the lab reads one. An
Ollama Modelfile is written beside the file.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np

from lab.storage import checkpoints, hf_llama, interop
from lab.storage.checkpoints import CheckpointError

TYPES = ("f32", "f16", "q8_0")
ARCH = {"gpt2": "gpt2", "llama": "llama"}
GPT2_TENSORS = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output",
                "ln_2": "ffn_norm", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
LLAMA_TENSORS = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                 "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
TOP = {"transformer.wte": "token_embd", "transformer.wpe": "position_embd",
       "transformer.ln_f": "output_norm", "model.embed_tokens": "token_embd",
       "model.norm": "output_norm", "lm_head": "output"}


def export_gguf(checkpoint: str, out: str | Path, kind: str = "f16", store=None) -> Path:
    """Write checkpoint as the GGUF file `out` (a new file ending in .gguf) with its weights as
    `kind` (f32, f16 or q8_0; norms and biases stay f32), and `out`'s stem + .Modelfile beside it."""
    if kind not in TYPES:
        raise CheckpointError(f"GGUF type must be one of {', '.join(TYPES)}, got {kind!r}")
    out = _out_file(out)
    ck = checkpoints.load(checkpoint, store)
    hf = interop.hf_model_of(checkpoint, ck, "GGUF export")
    vocab = _bpe_vocab(checkpoint, ck.tokenizer)
    tmp = out.parent / f".tmp-{uuid.uuid4().hex[:8]}.gguf"
    try:
        _write(tmp, checkpoint, hf, vocab, ck.tokenizer, kind)
        _modelfile(out, ck.tokenizer)             # "x": refused if another export made it meanwhile
        try:
            os.link(tmp, out)                     # never over a file another export has written
        except OSError:
            modelfile_path(out).unlink(missing_ok=True)
            raise
    except FileExistsError as e:
        raise CheckpointError(f"{e.filename} exists; choose a new file name") from None
    except OSError as e:
        raise CheckpointError(f"GGUF export to {out} failed: {e.strerror or e}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _write(path: Path, checkpoint: str, hf, vocab: dict, tok, kind: str) -> None:
    import gguf
    writer = gguf.GGUFWriter(str(path), ARCH[hf.config.model_type])
    try:
        _describe(writer, checkpoint, hf.config, kind)
        _tokenizer(writer, vocab, tok, hf.config.vocab_size)
        for name, data, qtype in _tensors(hf, kind):
            writer.add_tensor(name, data, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()


def modelfile_path(out: Path) -> Path:
    return out.with_suffix(".Modelfile")


def _out_file(out) -> Path:
    if "\0" in str(out):
        raise CheckpointError("export: the output path contains a NUL character")
    out = Path(out)
    if out.suffix != ".gguf":
        raise CheckpointError(f"GGUF export writes a file ending in .gguf, got {out.name!r}")
    if out.exists() or modelfile_path(out).exists():
        raise CheckpointError(f"{out if out.exists() else modelfile_path(out)} exists; choose a "
                              f"new file name")
    if not out.parent.is_dir():
        raise CheckpointError(f"export: {out.parent} is not a folder")
    return out


def _bpe_vocab(checkpoint: str, tok) -> dict:
    """The tokenizer's byte-level BPE (tokenizer.json's model) or a refusal naming its kind."""
    backend = getattr(getattr(tok, "hf", None), "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else {}
    pre = json.dumps(spec.get("pre_tokenizer"))
    if spec.get("model", {}).get("type") != "BPE" or "ByteLevel" not in pre:
        raise CheckpointError(f"{checkpoint} reads text with a {tok.kind!r} tokenizer; GGUF export "
                              f"takes byte-level BPE tokenizers (gpt2, SmolLM2's, one from an HF "
                              f"folder): llama.cpp has no {tok.kind!r} tokenizer")
    return spec


def _describe(writer, checkpoint: str, c, kind: str) -> None:
    """The model's shape under the architecture's keys (llama.cpp reads these to build it)."""
    import gguf
    llama = c.model_type == "llama"
    writer.add_name(checkpoint)
    writer.add_context_length(c.max_position_embeddings if llama else c.n_positions)
    writer.add_embedding_length(c.hidden_size)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_head_count(c.num_attention_heads)
    if llama:
        writer.add_feed_forward_length(c.intermediate_size)
        writer.add_head_count_kv(c.num_key_value_heads)
        writer.add_layer_norm_rms_eps(c.rms_norm_eps)
        writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
        writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
        writer.add_vocab_size(c.vocab_size)
    else:
        writer.add_feed_forward_length(c.n_inner or 4 * c.hidden_size)
        writer.add_layer_norm_eps(c.layer_norm_epsilon)
    writer.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                          "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[kind])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _tokenizer(writer, spec: dict, tok, vocab_size: int) -> None:
    """Tokens by id, their types (special ones as control), merges, and the start, end and padding
    tokens; a text gets the lab's start token, as in the lab."""
    model = spec["model"]
    tokens = {i: t for t, i in model["vocab"].items()}
    special = set()
    for added in spec.get("added_tokens", []):
        tokens[added["id"]] = added["content"]
        if added.get("special"):
            special.add(added["id"])
    n = max(max(tokens) + 1, tok.vocab_size, vocab_size)         # a row of the embedding each
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm" if "Digits" in json.dumps(spec.get("pre_tokenizer")) else "gpt-2")
    writer.add_token_list([tokens.get(i, f"[PAD{i}]") for i in range(n)])
    writer.add_token_types([3 if i in special else (1 if i in tokens else 5) for i in range(n)])
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in model["merges"]])
    ids = hf_llama.special_ids(tok)                  # the ones the HF export writes too
    writer.add_bos_token_id(ids["bos_token_id"])
    writer.add_eos_token_id(ids["eos_token_id"])
    writer.add_pad_token_id(ids["pad_token_id"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


def _tensors(hf, kind: str):
    """(GGUF name, array, its GGML type) for every weight, in llama.cpp's names and layouts."""
    c = hf.config
    state = {k: v.detach().float() for k, v in hf.state_dict().items()
             if k.split(".")[-2:] not in (["attn", "bias"], ["attn", "masked_bias"])}   # masks
    if c.tie_word_embeddings or "lm_head.weight" not in state:
        emb = state.get("transformer.wte.weight", state.get("model.embed_tokens.weight"))
        state["lm_head.weight"] = emb           # llama.cpp's gpt2 reads its own output matrix
    for key, value in state.items():
        name, weight = _gguf_name(key), value
        if key.endswith(interop.CONV1D):
            weight = weight.t()
        if c.model_type == "llama" and name.endswith(("attn_q.weight", "attn_k.weight")):
            heads = c.num_attention_heads if "attn_q" in name else c.num_key_value_heads
            weight = _permute(weight, heads)
        if c.model_type == "llama" and name == "output.weight" and c.tie_word_embeddings:
            continue                            # llama.cpp's llama ties to token_embd itself
        yield (name, *_typed(weight.contiguous().numpy(), kind))


def _gguf_name(key: str) -> str:
    stem, _, param = key.rpartition(".")
    if stem in TOP:
        return f"{TOP[stem]}.{param}"
    parts = stem.split(".")                     # transformer.h.N.<part> / model.layers.N.<part>
    part = ".".join(parts[3:])
    table = GPT2_TENSORS if parts[0] == "transformer" else LLAMA_TENSORS
    return f"blk.{parts[2]}.{table[part]}.{param}"


def _permute(w, heads: int):
    """HF's rotary layout (halves) to llama.cpp's (interleaved pairs), per head."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _typed(a: np.ndarray, kind: str):
    """The array as `kind` wants it: vectors and rows llama.cpp cannot quantize stay f32/f16."""
    import gguf
    from gguf.quants import quantize
    T = gguf.GGMLQuantizationType
    if a.ndim == 1 or kind == "f32":
        return a.astype(np.float32), T.F32
    if kind == "q8_0" and a.shape[-1] % 32 == 0:
        return quantize(a.astype(np.float32), T.Q8_0), T.Q8_0
    return a.astype(np.float16), T.F16


def _modelfile(out: Path, tok) -> None:
    """Ollama's recipe: the file, the prompt as written (the start token comes from the file), and
    end-of-text as the stop."""
    end = tok.token_text(tok.eos_id)
    with open(modelfile_path(out), "x") as f:
        f.write(f'FROM ./{out.name}\nTEMPLATE """{{{{ .Prompt }}}}"""\nPARAMETER stop "{end}"\n')
