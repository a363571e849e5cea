"""HF Llama interop: a `LlamaForCausalLM` folder (SmolLM2, or any local Llama checkpoint) into the
lab's `llama` family with a block selection, and a `llama` checkpoint (SmolLM2, its fine-tunes,
any block selection, a llama model trained here) back out to a folder that
`transformers.AutoModelForCausalLM.from_pretrained` loads.

The lab's llama blocks keep GPT-2's module names: the query, key and value projections are one
matrix (`attn.c_attn`, HF's q, k and v stacked in that order), the output projection is
`attn.c_proj`, and the SwiGLU MLP keeps HF's own names. Rotary positions rotate halves, as HF's
`rotate_half` does, so the weights move across unchanged.
"""
from __future__ import annotations

import torch

from lab.config import ModelConfig, family_defaults
from lab.inputs import tokenizers
from lab.storage import lazy
from lab.storage.checkpoints import CheckpointError

# what a Llama config must say for the lab's llama family to compute the same function
SUPPORTED = {"hidden_act": ("silu",), "attention_bias": (False, None), "mlp_bias": (False, None),
             "pretraining_tp": (1, None)}


def llama_parts() -> dict:
    """HF Llama's parts: the llama family's own, as its plugin declares them."""
    parts = family_defaults("llama")
    return {"model": "llama", **{k: parts[k] for k in ("norm", "norm_position", "attention",
                                                        "positional", "mlp", "bias")}}


def unsupported(hf: dict) -> list[str]:
    """What in an HF Llama config.json the lab's llama family does not compute, in words."""
    odd = [f"{k}={hf[k]!r}" for k, ok in SUPPORTED.items() if k in hf and hf[k] not in ok]
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else rope
    if kind not in ("default", None):
        odd.append(f"rope_scaling of type {kind!r}")
    head_dim = hf.get("head_dim")
    if head_dim and hf.get("num_attention_heads") and hf.get("hidden_size") and \
            head_dim * hf["num_attention_heads"] != hf["hidden_size"]:
        odd.append(f"head_dim={head_dim} (not hidden_size / num_attention_heads)")
    return odd


def llama_config(hf: dict, n_layer: int) -> ModelConfig:
    """The lab's `llama` config of `n_layer` blocks of an HF Llama config (its config.json)."""
    rope = hf.get("rope_parameters") or {}
    theta = rope.get("rope_theta") or hf.get("rope_theta") or 10000.0
    return ModelConfig.from_dict(dict(       # a file's values: they enter here
        model="llama", vocab_size=hf["vocab_size"], n_positions=hf["max_position_embeddings"],
        n_embd=hf["hidden_size"], n_layer=n_layer, n_head=hf["num_attention_heads"],
        n_inner=hf["intermediate_size"], norm_eps=hf.get("rms_norm_eps", 1e-6),   # the rest is the
        tie_embeddings=hf.get("tie_word_embeddings", False),     # llama family's own parts
        settings={"attention": {"kv_groups": hf.get("num_key_value_heads") or hf["num_attention_heads"]},
                  "positional": {"theta": theta}}))


def llama_state(hf_state, layers: list[int]) -> lazy.Lazy:
    """HF Llama names -> the lab's (GPT-2-style) names, keeping the chosen blocks in order; each
    tensor made when asked (query, key and value rows joined then), from tensors at hand or read
    one at a time (lab/storage/lazy.py)."""
    shape = hf_state.shape if isinstance(hf_state, lazy.Lazy) else lambda k: tuple(hf_state[k].shape)
    out = {}

    def take(dst: str, src: str) -> None:
        out[dst] = (shape(src), lambda: hf_state[src].contiguous())

    take("transformer.wte.weight", "model.embed_tokens.weight")
    take("transformer.ln_f.weight", "model.norm.weight")
    for new, old in enumerate(layers):
        src, dst = f"model.layers.{old - 1}.", f"transformer.h.{new}."
        qkv = [src + f"self_attn.{p}_proj.weight" for p in "qkv"]
        out[dst + "attn.c_attn.weight"] = ((sum(shape(k)[0] for k in qkv), *shape(qkv[0])[1:]),
                                           lambda qkv=qkv: torch.cat([hf_state[k] for k in qkv], dim=0))
        take(dst + "attn.c_proj.weight", src + "self_attn.o_proj.weight")
        for p in ("gate_proj", "up_proj", "down_proj"):
            take(dst + f"mlp.{p}.weight", src + f"mlp.{p}.weight")
        take(dst + "ln_1.weight", src + "input_layernorm.weight")
        take(dst + "ln_2.weight", src + "post_attention_layernorm.weight")
    if "lm_head.weight" in hf_state and not torch.equal(hf_state["lm_head.weight"],
                                                         hf_state["model.embed_tokens.weight"]):
        take("lm_head.weight", "lm_head.weight")
    return lazy.Lazy(out)


def kv_heads(state: dict, config: ModelConfig) -> int:
    """The key/value heads of the lab's llama weights, read from the weights themselves (the first
    block's fused query-key-value rows), whatever the config left blank."""
    rows = state["transformer.h.0.attn.c_attn.weight"].shape[0]
    return (rows - config.n_embd) // 2 // (config.n_embd // config.n_head)


def hf_state(state: dict, config: ModelConfig) -> dict:
    """The lab's llama weights under HF Llama's names (llama_state's inverse, every block)."""
    q = config.n_embd
    kv = config.n_embd // config.n_head * kv_heads(state, config)
    out = {"model.embed_tokens.weight": state["transformer.wte.weight"],
           "model.norm.weight": state["transformer.ln_f.weight"]}
    for i in range(config.n_layer):
        src, dst = f"transformer.h.{i}.", f"model.layers.{i}."
        for p, part in zip("qkv", torch.split(state[src + "attn.c_attn.weight"], [q, kv, kv], dim=0)):
            out[dst + f"self_attn.{p}_proj.weight"] = part
        out[dst + "self_attn.o_proj.weight"] = state[src + "attn.c_proj.weight"]
        for p in ("gate_proj", "up_proj", "down_proj"):
            out[dst + f"mlp.{p}.weight"] = state[src + f"mlp.{p}.weight"]
        out[dst + "input_layernorm.weight"] = state[src + "ln_1.weight"]
        out[dst + "post_attention_layernorm.weight"] = state[src + "ln_2.weight"]
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def weights_limit(cfg: ModelConfig, width: int) -> int:
    """The most bytes an HF Llama's model.safetensors of this config can hold: every weight at
    `width` bytes, the header (64 KiB and 256 bytes a tensor), and 1% slack."""
    C, V, L = cfg.n_embd, cfg.vocab_size, cfg.n_layer
    kv = C // cfg.n_head * cfg.settings["attention"]["kv_groups"]
    block = 2 * C * C + 2 * C * kv + 3 * C * (cfg.n_inner or 4 * C) + 2 * C
    values = V * C * (1 if cfg.tie_embeddings else 2) + L * block + C
    return 64 * 1024 + 256 * (3 + 9 * L) + int(values * width * 1.01)


def special_ids(tok) -> dict:
    """An exported config's start, end and padding tokens: the lab's (a text starts after
    end-of-text, and a batch pads with it), so config.json, generation_config.json and the
    tokenizer's files agree."""
    start = tok.bos_id if tok.bos_id is not None else tok.eos_id
    return {"bos_token_id": start, "eos_token_id": tok.eos_id, "pad_token_id": tok.eos_id}


def hf_model(ck):
    """A `llama` checkpoint as a transformers LlamaForCausalLM, every weight in place."""
    LlamaConfig, LlamaForCausalLM = tokenizers.from_transformers("LlamaConfig", "LlamaForCausalLM")
    c, state = ck.config, ck.model.state_dict()
    hf_cfg = LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.n_embd, intermediate_size=c.n_inner or 4 * c.n_embd,
        num_hidden_layers=c.n_layer, num_attention_heads=c.n_head,
        num_key_value_heads=kv_heads(state, c), max_position_embeddings=c.n_positions,
        rms_norm_eps=c.norm_eps, hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": c.settings["positional"]["theta"]},
        tie_word_embeddings=c.tie_embeddings, attention_bias=False, mlp_bias=False,
        **special_ids(ck.tokenizer))
    model = LlamaForCausalLM(hf_cfg)
    missing, unexpected = model.load_state_dict(hf_state(state, c), strict=False)
    missing = [k for k in missing if not (c.tie_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise CheckpointError(f"export mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.eval()
