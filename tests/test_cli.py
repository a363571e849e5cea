"""The command line end to end on the real corpus: train a tiny model, generate, evaluate; and
every user error is one line on stderr with exit status 2, no traceback."""
import json
import subprocess
import sys

import pytest


def lab(*args, check=True):
    out = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True)
    if check and out.returncode != 0:
        raise AssertionError(f"exit {out.returncode}: {out.stderr}")
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    events = lab("--store", str(store), "train", "--preset", "tiny", "--name", "tiny",
                 "--set", "max_train=300", "--set", "max_dev=100",
                 "--set", "epochs=2", "--set", "patience=5",
                 # a word vocabulary: GPT-2's 50,257-way output layer would be ~97% of this
                 # model's work (GPT-2 tokens are covered by the other modules)
                 "--set", "tokenizer=words", "--json").stdout.splitlines()
    return store, [json.loads(e) for e in events]


def test_train_writes_checkpoint_and_run_files(trained):
    store, events = trained
    kinds = [e["event"] for e in events]
    assert kinds[0] == "data" and kinds[-1] == "done" and kinds.count("eval") == 2
    evals = [e for e in events if e["event"] == "eval"]
    assert evals[1]["dev_perplexity"] < evals[0]["dev_perplexity"]
    info = json.loads(lab("--store", str(store), "checkpoints", "--json").stdout)
    assert [c["name"] for c in info] == ["tiny"]
    assert info[0]["source"] == "scratch" and info[0]["train"]["max_train"] == 300
    assert info[0]["metrics"]["epoch"] == 2
    run = store / "_runs" / "tiny"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == len(events) - 1          # every trainer event, in order
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tb").iterdir())


def test_generate_json(trained):
    store, _ = trained
    out = json.loads(lab("--store", str(store), "generate", "--checkpoint", "tiny", "--n", "5",
                         "--decoder", "top_p", "--top-p", "0.9", "--temperature", "0.7",
                         "--seed", "0", "--prompt", "A man", "--json").stdout)
    assert len(out["captions"]) == 5
    assert all(c["text"].startswith("A man") for c in out["captions"])
    again = json.loads(lab("--store", str(store), "generate", "--checkpoint", "tiny", "--n", "5",
                           "--decoder", "top_p", "--temperature", "0.7", "--prompt", "A man",
                           "--json").stdout)
    assert again["captions"] == out["captions"]


def test_evaluate_json(trained):
    store, _ = trained
    out = json.loads(lab("--store", str(store), "evaluate", "--checkpoint", "tiny", "--split", "test",
                         "--n", "50", "--decoder", "random", "--seed", "0", "--bleu-tokens", "words",
                         "--json").stdout)
    assert out["perplexity"]["sentences"] == 5000
    assert set(out["bleu"]) >= {"forward", "backward", "harmonic"}
    prov = out["provenance"]
    assert prov["n"] == 50 and prov["bleu_tokens"] == "words" and len(prov["subset_hash"]) == 12
    assert prov["decode"]["decoder"] == "random"


def test_plugins_json():
    out = json.loads(lab("plugins", "--json").stdout)
    assert {"model", "norm", "attention", "positional", "mlp", "decoder", "presets"} <= set(out)


@pytest.mark.parametrize("args, message", [
    (["train", "--preset", "tiny", "--set", "attention=flash"], "unknown plugin 'flash'"),
    (["train", "--preset", "tiny", "--set", "n_head=5"], "not divisible by n_head=5"),
    (["train", "--preset", "nope"], "unknown preset 'nope'"),
    (["train", "--preset", "tiny", "--data-dir", "/nonexistent"], "caption corpus not found"),
    (["generate", "--checkpoint", "missing"], "no checkpoint 'missing'"),
    (["train", "--resume", "missing"], "no checkpoint 'missing'"),
    (["train", "--resume", "x", "--preset", "tiny"], "drop --preset"),
    (["train", "--resume", "x", "--set", "n_layer=3"], "cannot change the model's architecture"),
    (["generate", "--checkpoint", "x", "--temperature", "-1"], "temperature must be between 0.01"),
])
def test_user_errors_are_one_line(args, message):
    out = lab(*args, check=False)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_prompt_longer_than_context(trained):
    store, _ = trained
    out = lab("--store", str(store), "generate", "--checkpoint", "tiny", "--prompt", "a " * 80,
              check=False)
    assert out.returncode == 2 and "context is 64 tokens" in out.stderr


def test_attention_json(trained, tmp_path):
    store, _ = trained
    out = json.loads(lab("--store", str(store), "attention", "--checkpoint", "tiny", "--text",
                         "A cat on a mat .", "--html", str(tmp_path / "v.html"), "--json").stdout)
    assert out["tokens"][0] == "<bos>" and len(out["attentions"]) == 2
    assert len(out["attentions"][0]) == 4                    # heads
    html = (tmp_path / "v.html").read_text()
    assert "cdnjs" not in html and "d3.min" in html


def test_config_json_and_bleu_early_stop(tmp_path):
    """A config file sets model and training; early stopping can follow dev harmonic BLEU."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"model": {"n_layer": 1, "n_embd": 32, "n_head": 2, "n_positions": 48,
                                         "norm": "rmsnorm", "positional": "rotary"},
                               "train": {"epochs": 2, "lr": 1e-3, "max_train": 100,
                                         "max_dev": 40, "early_stop": "bleu", "tokenizer": "words",
                                         "patience": 2, "task.bleu_samples": 20}}))
    events = [json.loads(e) for e in lab("--store", str(tmp_path / "s"), "train", "--config", str(cfg),
                                         "--name", "c", "--json").stdout.splitlines()]
    evals = [e for e in events if e["event"] == "eval"]
    assert len(evals) == 2 and all(0.0 <= e["dev_harmonic_bleu"] <= 1.0 for e in evals)
    info = json.loads(lab("--store", str(tmp_path / "s"), "checkpoints", "--json").stdout)[0]
    assert info["model"]["norm"] == "rmsnorm" and info["train"]["early_stop"] == "bleu"
    out = lab("train", "--config", str(tmp_path / "missing.json"), check=False)
    assert out.returncode == 2 and "no such file" in out.stderr


def test_resume_from_the_command_line(trained, tmp_path):
    """`train --resume NAME --set epochs=3` goes on with the saved run for one more epoch."""
    import shutil
    store = tmp_path / "store"
    shutil.copytree(trained[0], store)
    events = [json.loads(e) for e in lab("--store", str(store), "train", "--resume", "tiny", "--set",
                                         "epochs=3", "--json").stdout.splitlines()]
    assert [e["epoch"] for e in events if e["event"] == "eval"] == [3]
    info = json.loads(lab("--store", str(store), "checkpoints", "--json").stdout)[0]
    assert info["metrics"]["epoch"] == 3 and info["train"]["max_train"] == 300
    again = lab("--store", str(store), "train", "--resume", "tiny", check=False)
    assert again.returncode == 2 and "already trained 3 of 3 epochs" in again.stderr


def test_a_reader_that_leaves_early_is_no_error(tmp_path):
    """`python -m lab plugins --json | head -1`: the pipe closes early; no error, exit 0."""
    import subprocess
    import sys
    from tests.conftest import ROOT
    proc = subprocess.Popen([sys.executable, "-m", "lab", "plugins", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**__import__("os").environ, "LAB_STORE": str(tmp_path)})
    first = proc.stdout.readline()
    proc.stdout.close()                                   # the reader leaves
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and first.startswith(b"{")
    assert "error" not in err and "Traceback" not in err, err
