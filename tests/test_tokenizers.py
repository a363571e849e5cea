"""Models from scratch with a word or character vocabulary (the tokenization comparison), and
fine-tunes that start from some blocks of a parent (the layer-choice comparison)."""
import json

import pytest
import torch

from lab.storage import checkpoints
from lab.inputs import data, tokenizers
from lab.training import runs
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.modeling.generate import sample_captions
from lab.config import DecodeConfig


def test_the_word_vocabulary_is_the_training_words_seen_twice_most_frequent_first():
    tok = tokenizers.WordTokenizer.from_texts(["a dog runs .", "a cat sits .", "a dog ."])
    assert tok.words == [".", "a", "dog"]          # 3, 3, 2 times (ties by spelling); cat, runs,
    assert tok.vocab_size == 5 and tok.eos_id == 0  # sits once
    ids = tok.encode("a  cat runs .")
    assert ids == [3, 1, 1, 2]                     # unknown words are <unk> (1)
    assert tok.decode(ids) == "a <unk> <unk> ."
    assert tok.decode([0] + tok.encode("a dog .") + [0]) == "a dog ."
    assert tok.token_strings([3, 1, 0]) == ["a", "<unk>", ""]


def test_the_character_tokenizer_maps_unknown_characters_only_when_asked():
    strict = tokenizers.CharTokenizer.from_text("ab c")
    with pytest.raises(tokenizers.TokenizerError, match="not in this tokenizer's alphabet: '&'"):
        strict.encode("a&b")
    lenient = tokenizers.CharTokenizer.from_text("ab c", unk=tokenizers.CAPTION_UNK)
    assert lenient.decode(lenient.encode("a&b")) == f"a{tokenizers.CAPTION_UNK}b"
    with pytest.raises(tokenizers.TokenizerError, match="not in the alphabet"):
        tokenizers.CharTokenizer("abc", unk="z")


def test_scratch_tokenizers_are_built_from_the_whole_training_split(corpus_dir):
    train = data.load_split("train", corpus_dir)
    words = tokenizers.for_scratch("words", train)
    chars = tokenizers.for_scratch("char", train)
    assert 2000 < words.vocab_size < 4000 and chars.vocab_size < 100
    dev = data.load_split("dev", corpus_dir)
    assert all(chars.decode(chars.encode(c)).replace(tokenizers.CAPTION_UNK, "") for c in dev[:50])
    with pytest.raises(tokenizers.TokenizerError, match="tokenizer must be one of gpt2, words, char"):
        tokenizers.for_scratch("bpe", train)


@pytest.mark.parametrize("kind", ["words", "char"])
def test_a_model_trained_with_its_own_vocabulary_keeps_it_and_writes_captions(corpus_dir, kind):
    cfg = TrainConfig(epochs=1, lr=3e-3, max_train=256, max_dev=40, tokenizer=kind)
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=192)
    events = list(runs.train(kind, model_cfg, cfg))
    assert events[-1]["event"] == "done"
    ck = checkpoints.load(kind)
    assert ck.tokenizer.kind == kind and ck.meta["tokenizer"] == kind
    assert ck.config.vocab_size == ck.tokenizer.vocab_size < 4000
    eval_ = [e for e in events if e["event"] == "eval"][0]
    assert eval_["dev_word_perplexity"] > 1
    gen = sample_captions(ck.model, ck.tokenizer, 3, DecodeConfig(seed=0, max_new_tokens=60))
    assert all(isinstance(g.text, str) for g in gen) and any(g.text.strip() for g in gen)


def test_a_damaged_word_list_is_one_message(tmp_path):
    for meta, said in (({"kind": "words", "words": ["a", "a"]}, "no valid word list"),
                       ({"kind": "words", "words": ["two words"]}, "no valid word list"),
                       ({"kind": "words"}, "no valid word list"),
                       ({"kind": "char", "chars": "ab", "unk": "z"}, "outside its alphabet")):
        (tmp_path / tokenizers.TOKENIZER_META).write_text(json.dumps(meta))
        with pytest.raises(tokenizers.TokenizerError, match=said):
            tokenizers.load(tmp_path)


def test_a_fine_tune_keeps_its_parents_tokenizer():
    with pytest.raises(ConfigError, match="a fine-tune keeps its parent's tokenizer"):
        list(runs.train("ft", None, TrainConfig(tokenizer="char"), parent="anything"))
    with pytest.raises(ConfigError, match="tokenizer must be 'gpt2'"):
        TrainConfig(tokenizer="bpe").validate()


def _four_blocks():
    from lab.modeling.model import build
    torch.manual_seed(0)
    m = build(ModelConfig(model="gpt2", n_layer=4, n_head=2, n_embd=32, n_positions=48,
                          vocab_size=50257)).eval()
    checkpoints.save(m, tokenizers.gpt2(), "four", provenance={"source": "scratch"})
    return m


def test_a_fine_tune_starts_from_the_blocks_it_names(corpus_dir):
    """parent 'four:4,2' is blocks 4 then 2 of checkpoint four, the rest of its weights as they
    are; the checkpoint says which blocks of the original it holds."""
    m = _four_blocks()
    assert runs.check_parent("four:4,2") == 2 and runs.check_parent("four:all") == 4
    model, tok, meta = runs.load_parent("four:4,2")
    assert meta["layers"] == [4, 2] and model.config.n_layer == 2
    assert torch.equal(model.transformer.h[0].attn.c_attn.weight, m.transformer.h[3].attn.c_attn.weight)
    assert torch.equal(model.transformer.wte.weight, m.transformer.wte.weight)
    cfg = TrainConfig(epochs=1, lr=1e-3, max_train=64, max_dev=20)
    list(runs.train("ft", None, cfg, parent="four:4,2"))
    info = checkpoints.info("ft")
    assert info["parent"] == "four:4,2" and info["layers"] == [4, 2]
    assert checkpoints.load("ft").config.n_layer == 2
    for bad, said in (("four:5", r"the blocks of parent 'four:5' \[5\] out of range: this model "
                                 r"has blocks 1 to 4"),
                      ("four:x", "must be 1-based block numbers"),
                      ("smollm2", "give its blocks, e.g. smollm2:1,2,3"),
                      ("gpt2:1,2,3", "no checkpoint 'gpt2'")):
        with pytest.raises((ConfigError, checkpoints.CheckpointError), match=said):
            runs.check_parent(bad)


def test_a_fine_tune_of_some_packaged_smollm2_blocks_needs_no_import(corpus_dir, smollm2_hf,
                                                                     monkeypatch):
    from lab.storage import smollm2
    monkeypatch.setattr(smollm2, "load_hf", lambda path=None: smollm2_hf)   # read once a session
    assert runs.check_parent("smollm2:1,15,30") == 3
    cfg = TrainConfig(epochs=1, lr=2e-4, max_train=16, max_dev=8, max_steps=1,
                      batch_size=8)
    events = list(runs.train("ft2", None, cfg, parent="smollm2:30,1"))
    assert events[-1]["event"] == "done"
    info = checkpoints.info("ft2")
    assert info["layers"] == [30, 1] and "SmolLM2" in info["pretrained"]
    ck = checkpoints.load("ft2")
    assert ck.config.n_layer == 2 and ck.tokenizer.kind == "smollm2"
    assert "smollm2" not in checkpoints.names()


def test_a_tokenizer_read_from_checkpoint_files_is_read_once_a_process_by_its_contents(tmp_path,
                                                                                       monkeypatch):
    """Checkpoints carrying the same tokenizer files share one tokenizer, parsed once; files that
    differ (another kind, or an edited tokenizer.json) are read for themselves, and damaged ones
    are still refused in one line."""
    import shutil
    from tests.conftest import tiny_config
    from lab.modeling.model import build
    read, real = [], tokenizers._from_files
    monkeypatch.setattr(tokenizers, "_from_files", lambda *a: read.append(a[-1]) or real(*a))
    monkeypatch.setattr(tokenizers, "_LOADED", tokenizers.OrderedDict())
    for name in ("a", "b"):
        checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), name, tmp_path)
    a, b = tokenizers.load(tmp_path / "a"), tokenizers.load(tmp_path / "b")
    assert a is b and len(read) == 1 and a.encode("A dog .") == tokenizers.gpt2().encode("A dog .")
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "a", other)
    spec = json.loads((other / "tokenizer.json").read_text())
    spec["added_tokens"][0]["content"] = "<|end|>"                       # another end-of-text
    spec["model"]["vocab"]["<|end|>"] = spec["model"]["vocab"].pop("<|endoftext|>")
    (other / "tokenizer.json").write_text(json.dumps(spec))
    changed = tokenizers.load(other)
    assert changed is not a and len(read) == 2 and changed.decode([50256]) == "<|end|>"
    assert a.decode([50256]) == "<|endoftext|>"
    (other / "tokenizer.json").write_text("{not json")
    with pytest.raises(tokenizers.TokenizerError, match="its tokenizer files cannot be read"):
        tokenizers.load(other)


_ODD_TEXTS = ["", " leading space", "two  spaces", "tab\tand\nnewline", "ünïcödé 😀 字",
              "<|endoftext|>A dog<|endoftext|>", "  <|endoftext|>", "\u200b\ufffd"]


def _same_reading(ours, theirs, texts):
    """`ours` (an HFTokenizer) reads and writes every text as transformers' tokenizer `theirs`."""
    assert (ours.vocab_size, ours.eos_id) == (len(theirs), theirs.eos_token_id)
    ids = theirs(list(texts), add_special_tokens=False)["input_ids"]
    assert ours.encode_batch(texts) == ids
    assert [ours.encode(t) for t in texts] == ids
    assert [ours.decode(i) for i in ids] == [theirs.decode(i, skip_special_tokens=False) for i in ids]
    every = list(range(0, len(theirs), 97)) + [ours.eos_id]
    assert ours.decode(every) == theirs.decode(every, skip_special_tokens=False)
    assert [ours.token_text(i) for i in every] == theirs.convert_ids_to_tokens(every)


def test_gpt2_is_transformers_gpt2_file_for_file(tmp_path, corpus_dir):
    """GPT-2's BPE is made with `tokenizers` alone and is transformers' GPT2Tokenizer as built
    from OpenAI's files: the same files saved, the same ids and texts for every dev caption."""
    from transformers import GPT2TokenizerFast
    folder = tokenizers.gpt2_files()
    vocab = json.loads((folder / "encoder.json").read_text(encoding="utf-8"))
    merges = [tuple(line.split()) for line in
              (folder / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:] if line.strip()]
    theirs = GPT2TokenizerFast(vocab=vocab, merges=merges)
    ours = tokenizers._build_gpt2()
    theirs.save_pretrained(str(tmp_path / "theirs"))
    ours.save(tmp_path / "ours")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "theirs" / name).read_bytes()
    _same_reading(ours, theirs, data.load_split("dev", corpus_dir) + _ODD_TEXTS)


def test_a_checkpoints_tokenizer_reads_as_transformers_reads_its_files(tmp_path, smollm2_hf):
    """GPT-2's and SmolLM2's tokenizers saved in a checkpoint are read with `tokenizers` alone:
    they read every text as transformers' AutoTokenizer reads the same folder, and save the same
    files again. Files only transformers reads as written (spaces cleaned up after decoding) are
    read by it."""
    from transformers import AutoTokenizer
    for kind, tok in (("gpt2", tokenizers.gpt2()),
                      ("smollm2", tokenizers.HFTokenizer(smollm2_hf[1], "smollm2"))):
        tok.save(tmp_path / kind)
        read = tokenizers.load(tmp_path / kind)
        assert read._hf is None and read.kind == kind
        _same_reading(read, AutoTokenizer.from_pretrained(str(tmp_path / kind)),
                      ["A man rides a horse on a beach .", *_ODD_TEXTS])
        read.save(tmp_path / f"{kind}-again")
        assert {p.name: p.read_bytes() for p in (tmp_path / kind).iterdir()} == \
            {p.name: p.read_bytes() for p in (tmp_path / f"{kind}-again").iterdir()}
    config = json.loads((tmp_path / "gpt2" / "tokenizer_config.json").read_text())
    (tmp_path / "gpt2" / "tokenizer_config.json").write_text(
        json.dumps(config | {"clean_up_tokenization_spaces": True}))
    assert tokenizers.load(tmp_path / "gpt2")._hf is not None


def test_a_process_reading_a_gpt2_checkpoint_imports_no_transformers(tmp_path):
    """What every `lab` command and job that reads a GPT-2 checkpoint is spared."""
    import subprocess
    import sys
    from tests.conftest import ROOT, tiny_config
    from lab.modeling.model import build
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "m", tmp_path)
    script = ("import sys; from lab.storage import checkpoints; "
              f"ck = checkpoints.load('m', {str(tmp_path)!r}); "
              "print(ck.tokenizer.encode('A dog .'), 'transformers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.stdout.split() == ["[32,", "3290,", "764]", "False"], done.stdout + done.stderr


def test_the_app_starts_without_transformers_tokenizer_classes(tmp_path):
    """Building the page loads no tokenizer class of transformers' (the first one read builds
    its lazy module's map of every model: about 1 s of CPU at each start of the app); a request
    that needs one loads it then, under one lock (tokenizers.from_transformers)."""
    import subprocess
    import sys
    from tests.conftest import ROOT
    script = ("import sys; from lab.ui import build_app; build_app(store=sys.argv[1]); "
              "print(sorted(m for m in sys.modules if m.startswith('transformers.models.auto')))")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "store")], capture_output=True,
                          text=True, cwd=ROOT, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[-2] == "[]", done.stdout[-2000:]
