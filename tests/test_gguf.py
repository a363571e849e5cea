"""GGUF out: `lab export gguf` writes one file that transformers' own GGUF loader reads back with
the lab's tokens (the start token added), logits (within a bound per type) and greedy text, for
both families with their defaults, a model trained here and a SmolLM2 cut; what GGUF cannot hold
is refused by name and nothing is written."""
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lab.config import DecodeConfig, ModelConfig
from lab.inputs import tokenizers
from lab.modeling.generate import generate
from lab.modeling.model import build
from lab.storage import checkpoints, gguf_export
from lab.storage.checkpoints import CheckpointError
from tests.conftest import ROOT, tiny_config

# the largest logit difference allowed, as a share of the largest logit: f32 is exact to float
# rounding; f16 and q8_0 round every weight (q8_0: 8 bits a value, a scale per 32)
BOUND = {"f32": 1e-5, "f16": 5e-3, "q8_0": 3e-2}
PROMPT = "A man riding a"


def _noisy(model):
    """Weights off their initial values (biases included), as after training."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model.eval()


@pytest.fixture(scope="module")
def small_bpe():
    """A byte-level BPE of 304 tokens trained here, as a tokenizer from an HF folder would be (the
    lab's own GPT-2 and SmolLM2 tokenizers are the same kind, 50,257 and 49,152 tokens: reading
    those back takes transformers seconds a file)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator([PROMPT + " horse on a beach .", "A dog on a couch ."] * 20, trainers.BpeTrainer(
        vocab_size=304, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tokenizers.HFTokenizer(PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>"),
                                  "hf-small")


def _families(vocab: int) -> dict:
    """Each family with its defaults (the gpt2 one ties its embeddings; the llama one here not,
    with two key/value heads)."""
    return {"gpt2": tiny_config(vocab_size=vocab, n_positions=64),
            "llama": ModelConfig.from_dict({"model": "llama", "vocab_size": vocab, "n_positions": 64,
                                            "n_embd": 64, "n_layer": 2, "n_head": 4, "dropout": 0.0,
                                            "tie_embeddings": False, "attention.kv_groups": 2})}


def _read_back(path, n_positions):
    """The file through transformers alone. Its GPT-2 mapping reads `context_length` as n_ctx, not
    n_positions (the position table's rows), so a GPT-2 not of 1,024 positions says how many."""
    extra = {"n_positions": n_positions} if "gpt2" in path.name else {}
    hf = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, **extra).eval()
    return hf, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def _agrees(model, tok, path, kind, n_positions):
    hf, hf_tok = _read_back(path, n_positions)
    ids = hf_tok(PROMPT).input_ids
    assert ids == [tok.bos_id if tok.bos_id is not None else tok.eos_id] + tok.encode(PROMPT)
    with torch.no_grad():
        ours, theirs = model(torch.tensor([ids])), hf(torch.tensor([ids])).logits
    ours = getattr(ours, "logits", ours)
    assert (ours - theirs).abs().max() <= BOUND[kind] * ours.abs().max()
    if kind != "q8_0":
        (new, _, _), = generate(model, [ids], DecodeConfig(decoder="greedy", max_new_tokens=10),
                                tok.eos_id)
        out = hf.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10,
                          pad_token_id=tok.eos_id)[0, len(ids):].tolist()
        assert out[:len(new)] == new


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_each_family_reads_back_with_the_labs_tokens_logits_and_text(tmp_path, store, family, small_bpe):
    tok = small_bpe
    cfg = _families(tok.vocab_size)[family]
    model = _noisy(build(cfg))
    checkpoints.save(model, tok, family, store, provenance={"source": "scratch"})
    for kind in gguf_export.TYPES:
        path = gguf_export.export_gguf(family, tmp_path / f"{family}-{kind}.gguf", kind, store)
        _agrees(model, tok, path, kind, cfg.n_positions)
    modelfile = gguf_export.modelfile_path(path).read_text()
    assert modelfile.startswith(f"FROM ./{family}-q8_0.gguf\n")
    assert 'PARAMETER stop "<|endoftext|>"' in modelfile
    sizes = {k: (tmp_path / f"{family}-{k}.gguf").stat().st_size for k in gguf_export.TYPES}
    assert sizes["f32"] > sizes["f16"] > sizes["q8_0"]


def test_the_command_exports_a_smollm2_cut_that_transformers_reads_as_the_lab_does(tmp_path, store):
    """SmolLM2 cut to three blocks through `lab export gguf`: its own tokenizer (start token 0,
    digits split), grouped keys and values, tied embeddings."""
    from lab.storage.smollm2 import import_smollm2
    import_smollm2("cut", [1, 15, 30], store)
    ck = checkpoints.load("cut", store)
    out = tmp_path / "cut.gguf"
    done = subprocess.run([sys.executable, "-m", "lab", "--store", str(store), "export", "gguf", "cut",
                           str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"exported cut to {out} (f16;" in done.stdout
    _agrees(ck.model.eval(), ck.tokenizer, out, "f16", ck.config.n_positions)


def test_what_gguf_cannot_hold_is_refused_by_name_and_nothing_is_written(tmp_path, store):
    tok = tokenizers.gpt2()
    checkpoints.save(build(tiny_config(vocab_size=50257)), tok, "ok", store)
    checkpoints.save(build(tiny_config(model="perceiver", vocab_size=50257)), tok, "perc", store)
    chars = tokenizers.CharTokenizer("abc ")
    checkpoints.save(build(tiny_config(vocab_size=chars.vocab_size)), chars, "chars", store)
    cases = [("perc", "p.gguf", "f16", "perc is a perceiver model; GGUF export takes the gpt2 and llama"),
             ("chars", "c.gguf", "f16", "chars reads text with a 'char' tokenizer; GGUF export takes "
                                         "byte-level BPE"),
             ("ok", "ok.bin", "f16", "GGUF export writes a file ending in .gguf, got 'ok.bin'"),
             ("ok", "ok.gguf", "q4", "GGUF type must be one of f32, f16, q8_0, got 'q4'")]
    for name, file, kind, said in cases:
        with pytest.raises(CheckpointError, match=said.replace("(", r"\(")):
            gguf_export.export_gguf(name, tmp_path / file, kind, store)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
    gguf_export.export_gguf("ok", tmp_path / "ok.gguf", "f16", store)
    with pytest.raises(CheckpointError, match="ok.gguf exists; choose a new file name"):
        gguf_export.export_gguf("ok", tmp_path / "ok.gguf", "f16", store)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.Modelfile", "ok.gguf", "store"]
