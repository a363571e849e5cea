"""Data handling on the real caption corpus."""
import pytest
import torch

from lab.inputs import data, tokenizers
from lab.inputs.data import DataError, assignment_loss, collate, encode_captions, load_split
from lab.modeling.model import build
from tests.conftest import tiny_config


def test_real_corpus_splits(corpus_dir):
    sizes = {s: len(load_split(s, corpus_dir)) for s in data.SPLITS}
    assert sizes == {"train": 15000, "dev": 5000, "test": 5000}
    test = load_split("test", corpus_dir)
    assert all(c == c.strip() and "\r" not in c for c in test)
    assert not set(test) & set(load_split("train", corpus_dir))


def test_encoding_matches_the_assignment(corpus_dir):
    tok = tokenizers.gpt2()
    assert tok.eos_id == 50256 and tok.vocab_size == 50257
    caps = load_split("train", corpus_dir)
    seqs = encode_captions(caps, tok, 1024)
    assert all(s[0] == 50256 and s[-1] == 50256 and 50256 not in s[1:-1] for s in seqs)
    lengths = [len(s) - 2 for s in seqs]
    assert max(lengths) <= 34
    assert 12.5 < sum(lengths) / len(lengths) < 14.0      # about 13.2 tokens a caption


def test_gpt2_files_are_checked(monkeypatch, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "encoder.json").write_text("{}")
    (tmp_path / "data" / "vocab.bpe").write_text("")

    class Spec:
        submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(tokenizers.importlib.util, "find_spec", lambda name: Spec)
    with pytest.raises(tokenizers.TokenizerError, match="SHA-256 mismatch"):
        tokenizers.gpt2_files()


def test_dynamic_padding_equals_fixed_padding_to_36(corpus_dir):
    """Padding to the batch's longest caption gives the assignment's loss with padding to 36."""
    tok = tokenizers.gpt2()
    seqs = encode_captions(load_split("dev", corpus_dir)[:32], tok, 64)
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=50257, n_positions=64)).eval()
    short, fixed = collate(seqs, 50256), collate(seqs, 50256, pad_to=36)
    assert short.input_ids.size(1) < 36
    with torch.no_grad():
        a = assignment_loss(model(short.input_ids).logits, short)
        b = assignment_loss(model(fixed.input_ids).logits, fixed)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def test_per_epoch_shuffle_is_seeded():
    seqs = [[50256, i, 50256] for i in range(100)]
    first = lambda seed: next(data.batches(seqs, 10, 50256, True, torch.Generator().manual_seed(seed)))
    assert torch.equal(first(1).input_ids, first(1).input_ids)
    assert not torch.equal(first(1).input_ids, first(2).input_ids)


def test_missing_corpus_names_both_ways(monkeypatch, tmp_path):
    monkeypatch.delenv("LAB_DATA_DIR", raising=False)
    monkeypatch.setattr(data, "DEFAULT_DATA_DIR", tmp_path / "nope")
    with pytest.raises(DataError, match="--data-dir DIR or set LAB_DATA_DIR"):
        data.resolve_data_dir()
    monkeypatch.setenv("LAB_DATA_DIR", str(tmp_path / "gone"))
    with pytest.raises(DataError, match="not found.*LAB_DATA_DIR"):
        data.resolve_data_dir()


def test_empty_or_unreadable_corpus(tmp_path):
    (tmp_path / "train.txt").write_text("  \r\n\r\n")
    with pytest.raises(DataError, match="holds no captions"):
        load_split("train", tmp_path)
    (tmp_path / "dev.txt").write_bytes(b"\xff\xfe bad")
    with pytest.raises(DataError, match="not UTF-8"):
        load_split("dev", tmp_path)
    with pytest.raises(DataError, match="split 'test' not found.*expected test.txt"):
        load_split("test", tmp_path)


def test_coco_annotation_json(tmp_path):
    (tmp_path / "captions_val2017.json").write_text(
        '{"annotations": [{"image_id": 1, "caption": "A dog  on a couch.\\n"}]}')
    assert load_split("val", tmp_path) == ["A dog on a couch."]
