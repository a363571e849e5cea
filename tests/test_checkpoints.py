import json

import pytest
import torch

from lab.storage import checkpoints
from lab.inputs import tokenizers
from lab.storage.checkpoints import CheckpointError
from lab.modeling.model import build
from tests.conftest import tiny_config


def _save(name="m", **overrides):
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=50257, **overrides)).eval()
    checkpoints.save(model, tokenizers.gpt2(), name, provenance={"source": "test"})
    return model


def test_round_trip(store):
    model = _save(attention="gqa", positional="rotary", tie_embeddings=True,
                  settings={"attention": {"kv_groups": 2}, "positional": {"theta": 500.0}})
    ck = checkpoints.load("m")
    ids = torch.randint(0, 50257, (2, 9))
    torch.testing.assert_close(ck.model(ids).logits, model(ids).logits)
    assert ck.tokenizer.encode("A cat .") == tokenizers.gpt2().encode("A cat .")
    assert ck.meta["source"] == "test"
    assert sorted(p.name for p in (store / "m").iterdir()) == [
        "config.json", "lab_tokenizer.json", "metrics.json", "model.safetensors",
        "tokenizer.json", "tokenizer_config.json"]
    assert checkpoints.names() == ["m"]


def test_crash_during_save_leaves_nothing_half_written(store, monkeypatch):
    _save("keep")
    before = (store / "keep" / "model.safetensors").read_bytes()

    class Boom(Exception):
        pass

    def broken_save(self, directory):
        raise Boom()
    monkeypatch.setattr(tokenizers.HFTokenizer, "save", broken_save)
    model = build(tiny_config(vocab_size=50257))
    with pytest.raises(Boom):
        checkpoints.save(model, tokenizers.gpt2(), "keep", overwrite=True)
    with pytest.raises(Boom):
        checkpoints.save(model, tokenizers.gpt2(), "new")
    assert sorted(p.name for p in store.iterdir() if p.name != ".lab") == ["keep"]
    assert (store / "keep" / "model.safetensors").read_bytes() == before


def test_existing_name_is_refused():
    _save("m")
    with pytest.raises(CheckpointError, match="already exists"):
        _save("m")


def test_truncated_weights(store):
    _save("m")
    f = store / "m" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        checkpoints.load("m")


def test_weights_that_do_not_match_the_config(store):
    _save("m")
    cfg = json.loads((store / "m" / "config.json").read_text())
    cfg["model"]["n_embd"] = 64
    (store / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="does not match its config.json.*wrong shapes"):
        checkpoints.load("m")


def test_missing_checkpoint_lists_the_available_ones():
    _save("alpha")
    with pytest.raises(CheckpointError, match="no checkpoint 'beta'.*available: alpha"):
        checkpoints.load("beta")
    with pytest.raises(CheckpointError, match="not allowed"):
        checkpoints.check_name("../evil")


def test_missing_files(store):
    _save("m")
    (store / "m" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="damaged: model.safetensors is missing"):
        checkpoints.load("m")


def test_delete(store):
    _save("m")
    checkpoints.delete("m")
    assert checkpoints.names() == []


def test_deleting_a_parent_names_its_fine_tunes(store):
    from lab.ui import checkpoints as tab
    _save("base")
    model = build(tiny_config(vocab_size=50257))
    checkpoints.save(model, tokenizers.gpt2(), "child", provenance={"source": "finetune", "parent": "base"})
    said, rows, details, choice, confirm = tab.delete("base", "base")
    assert said == ("Deleted base. Fine-tuned from it: child; they keep their own weights, and their "
                    "provenance still names base.")
    assert [r[0] for r in rows] == ["child"] and details == {}     # its details are cleared
    assert choice["value"] is None and confirm == ""                # and so are the choice and the box


def test_a_taken_name_offers_a_resume_only_where_there_is_a_run(store):
    """An imported checkpoint has no run to resume: its refusal does not offer one."""
    from lab.storage import store as lab_store
    checkpoints.save(build(tiny_config()), tokenizers.CharTokenizer("abc"), "imported", store)
    with pytest.raises(checkpoints.CheckpointError) as e:
        checkpoints.refuse_existing("imported", store)
    assert str(e.value) == "checkpoint 'imported' already exists; choose another name or delete it first"
    (store / lab_store.RUNS / "imported").mkdir(parents=True)
    with pytest.raises(checkpoints.CheckpointError, match="delete it first, or resume its run"):
        checkpoints.refuse_existing("imported", store)
