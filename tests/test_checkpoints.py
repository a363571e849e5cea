import json
import os

import pytest
import torch

from lab.storage import checkpoints, health
from lab.inputs import tokenizers
from lab.errors import LabError
from lab.storage.checkpoints import CheckpointError
from lab.modeling.model import build
from tests.conftest import WEIGHT_DAMAGES, damage_weights, tiny_config


def _save(name="m", step=None, **overrides):
    """A tiny GPT-2-tokenizer checkpoint; step: with the training state a run keeps (resumable)."""
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=50257, **overrides)).eval()
    state = None if step is None else {
        "optimizer": torch.optim.AdamW(model.parameters()).state_dict(), "epoch": 1, "step": step}
    checkpoints.save(model, tokenizers.gpt2(), name, provenance={"source": "test"}, train_state=state)
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
    with pytest.raises(CheckpointError, match="damaged: model.safetensors is truncated"):
        checkpoints.load("m")


def test_weights_that_do_not_match_the_config(store):
    _save("m")
    cfg = json.loads((store / "m" / "config.json").read_text())
    cfg["model"]["n_embd"] = 64
    (store / "m" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="does not match its config.json.*wrong shapes"):
        checkpoints.load("m")


def test_a_missing_checkpoint_is_said_without_the_store_s_path_or_its_list(store):
    """The same words to the terminal and to an API caller: no server path, no list of what the
    store holds; a near name is offered, and a long name is cut."""
    with pytest.raises(CheckpointError) as e:
        checkpoints.load("beta")
    assert str(e.value) == "no checkpoint 'beta' in the store; it holds none yet: train or import one"
    _save("alpha-1")
    _save("gamma")
    with pytest.raises(CheckpointError) as e:
        checkpoints.load("alpha-2")
    assert str(e.value) == "no checkpoint 'alpha-2' in the store; did you mean 'alpha-1'?"
    with pytest.raises(CheckpointError) as e:
        checkpoints.load("zzz")
    said = str(e.value)
    assert said == ("no checkpoint 'zzz' in the store; it holds 2: the Checkpoints tab or "
                    "`python -m lab checkpoints` lists them") and str(store) not in said
    with pytest.raises(CheckpointError, match="not allowed"):
        checkpoints.check_name("../evil")
    with pytest.raises(CheckpointError) as e:
        checkpoints.check_name("x" * 10_000)
    assert len(str(e.value)) < 250 and "(10,000 characters)" in str(e.value)


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


def _refusals(store) -> dict:
    """Every action that takes a checkpoint, each asked to use 'bad' (the functions the API and
    the CLI call)."""
    from lab.storage import interop
    from lab.training import runs
    from lab.ui import attention, compare, evaluate
    from lab.worker import jobs
    return {
        "load (generate, CLI)": lambda: checkpoints.load("bad"),
        "compare": lambda: compare.compare(["good", "bad"], {"decoder": "greedy"}, n=1),
        "attention": lambda: attention.show("bad", "A dog .", False, 0),
        "evaluate": lambda: next(evaluate.scores(["bad"], {"decoder": "greedy"}, n=10)),
        "parent of a fine-tune": lambda: jobs.submit("ft", None, {"epochs": 1}, parent="bad"),
        "parent's blocks": lambda: jobs.submit("ft", None, {"epochs": 1}, parent="bad:1"),
        "export": lambda: interop.export_hf_gpt2("bad", store.parent / "exported"),
        "resume": lambda: runs.resume_point("bad"),
    }


@pytest.mark.parametrize("how", sorted(WEIGHT_DAMAGES))
def test_damaged_weights_are_listed_and_every_action_refuses_them_in_one_line(how, store):
    from lab.ui.checkpoints import rows
    from lab.worker import jobs
    _save("good")
    _save("bad", step=4)
    said = damage_weights(store / "bad", how)
    listed = {r["name"]: r for r in checkpoints.listing()}
    line = listed["bad"]["damaged"]
    assert "model" in listed["good"] and line.startswith("checkpoint 'bad' is damaged: ")
    assert said in line and line.endswith("; delete it, then train or import it again")
    assert "\n" not in line
    table = {r[0]: r for r in rows()}
    assert table["bad"][1:3] == ["damaged", line] and table["good"][1] == "gpt2"
    assert not checkpoints.health("bad").ok and checkpoints.health("good").ok
    for action, call in _refusals(store).items():
        with pytest.raises(LabError) as e:
            call()
        assert str(e.value) == line, action        # one gate: the same line from every action
    assert jobs.list_jobs() == [] and not (store.parent / "exported").exists()


def test_the_weights_verdict_is_kept_until_the_files_change(store, monkeypatch):
    """The values are read once: a second listing, a load and a job's check read no tensor, nor
    does another process (the sidecar in .lab/health/); a write to the weights, even one that
    keeps the size and the mtime, or to the config, is checked again."""
    _save("m")
    health.forget(store / "m")                  # as a checkpoint copied into the store: no verdict
    read, real = [], health.nonfinite
    monkeypatch.setattr(health, "nonfinite", lambda path: read.append(path.parent.name) or real(path))
    assert "model" in checkpoints.listing()[0] and read == ["m"]
    checkpoints.listing()
    checkpoints.load("m")
    checkpoints.check_loadable("m")
    assert read == ["m"]
    health._memory.clear()                                     # as a new process finds it
    checkpoints.listing()
    assert read == ["m"]
    assert json.loads((store / ".lab" / "health" / "m.json").read_text())["problem"] == ""
    weights = store / "m" / "model.safetensors"
    before = weights.stat()
    damage_weights(store / "m", "nan")
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))   # a copy that keeps the mtime
    assert weights.stat().st_size == before.st_size
    assert "holds NaN" in checkpoints.listing()[0]["damaged"] and read == ["m", "m"]
    cfg = store / "m" / "config.json"
    cfg.write_text(cfg.read_text().replace('"n_embd": 32', '"n_embd": 64'))
    assert "wrong shapes" in checkpoints.listing()[0]["damaged"]
    checkpoints.delete("m")
    assert not (store / ".lab" / "health" / "m.json").exists()


def test_a_save_keeps_its_verdict_from_the_tensors_it_wrote(store, monkeypatch):
    """What the lab writes is judged from the tensors in memory as it writes them: the first look
    (the page's poll after a job's save) reads no tensor, and NaN weights saved are listed as such."""
    read, real = [], health.nonfinite
    monkeypatch.setattr(health, "nonfinite", lambda path: read.append(path.parent.name) or real(path))
    _save("m")
    checkpoints.listing()
    checkpoints.load("m")
    assert read == [] and json.loads((store / ".lab" / "health" / "m.json").read_text())["problem"] == ""
    model = build(tiny_config(vocab_size=50257)).eval()
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.weight[0, 0] = float("nan")
    checkpoints.save(model, tokenizers.gpt2(), "n", store)
    damaged = {r["name"]: r.get("damaged") for r in checkpoints.listing()}
    assert "holds NaN in transformer.h.0.mlp.c_fc.weight (1 of" in damaged["n"] and read == []


def test_a_damaged_resume_state_is_refused_before_the_run_goes_on(store):
    from lab.training import runs
    _save("r", step=4)
    model = build(tiny_config(vocab_size=50257)).eval()
    checkpoints.write_dir(runs.last_dir("r"), model, tokenizers.gpt2(), train_state={
        "optimizer": torch.optim.AdamW(model.parameters()).state_dict(), "epoch": 1, "step": 9})
    damage_weights(runs.last_dir("r"), "inf")
    with pytest.raises(CheckpointError) as e:
        runs.resume_point("r")
    assert str(e.value).startswith("the state run 'r' kept to resume from is damaged: "
                                   "model.safetensors holds inf in ")
    assert str(e.value).endswith("; start the run again")


def test_unreadable_metrics_leave_the_checkpoint_usable(store):
    from lab.ui import compare
    from lab.ui.checkpoints import rows
    _save("m")
    (store / "m" / "metrics.json").write_text('{"dev_perplexity": ')
    found = checkpoints.info("m")
    assert found["metrics"] == {} and found["metrics_unreadable"].startswith("metrics.json is not valid JSON")
    assert rows()[0][10] == "unreadable"
    assert checkpoints.load("m").metrics == {}
    assert "lab-compare" in compare.compare(["m"], {"decoder": "greedy"}, n=1)[0]
    (store / "m" / "metrics.json").write_text('{"dev_perplexity": "abc"}')
    assert checkpoints.info("m")["metrics_unreadable"] == "metrics.json: dev_perplexity is 'abc', not a number"


def test_folders_the_store_cannot_use_are_listed_with_why(store):
    from lab.ui.checkpoints import rows
    _save("m")
    for folder in ("we ird", "-dash", ".hidden", "_backup"):
        (store / folder).mkdir()
    listed = {r["name"]: r.get("unusable") for r in checkpoints.listing()}
    assert listed["m"] is None and ".lab" not in listed and "_runs" not in listed
    assert "its name holds a space" in listed["we ird"]
    assert "its name starts with '-'" in listed["-dash"]
    assert "its name starts with '.' (a hidden folder)" in listed[".hidden"]
    assert "its name starts with '_'" in listed["_backup"]
    assert all(v is None or v.endswith("or move it out of the store") for v in listed.values())
    assert {r[0]: r[1] for r in rows()} == {"m": "gpt2", "we ird": "not usable", "-dash": "not usable",
                                            ".hidden": "not usable", "_backup": "not usable"}
    assert checkpoints.names() == ["m"]                 # nothing offers them to an action


@pytest.mark.parametrize("change, said", [
    (lambda b: b + b"\0" * 8, "is corrupt: its tensors do not fill the file end to end"),
    (lambda b: b[:8] + b"[" + b[9:], "is corrupt: its header is not valid JSON"),
    (lambda b: (10 ** 9).to_bytes(8, "little") + b[8:], "is not a safetensors file"),
    (lambda b: b[:5], "is truncated: 5 bytes, too few for a safetensors header"),
    (lambda b: b[:200], "is truncated: its header should be"),
])
def test_a_weights_header_that_does_not_hold_is_named(change, said, store):
    _save("m")
    weights = store / "m" / "model.safetensors"
    weights.write_bytes(change(weights.read_bytes()))
    with pytest.raises(CheckpointError, match=f"checkpoint 'm' is damaged: model.safetensors {said}"):
        checkpoints.check_loadable("m")
