"""Bad input, table-driven, through the CLI and through the API (gradio_client against the running
app): every case gets one clear line naming what was wrong (asserted per case), no traceback, never
"Something went wrong", and the store is exactly as before. The store holds a good checkpoint, one
whose metrics cannot be read (usable all the same), three damaged in their config or tokenizer,
one for each way weights are found damaged (tests/conftest.py WEIGHT_DAMAGES) and three folders
that cannot be checkpoints: none of them may stop the app, the lists, or anything done with the
good one. Also: 8 concurrent clients during a training job, and checkpoints made after the app
started."""
import hashlib
import json
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from lab.storage import checkpoints
from lab import cli
from lab.worker import jobs
from lab.inputs import tokenizers
from lab.modeling.model import build
from tests.conftest import WEIGHT_DAMAGES, damage_weights, serving, tiny_config, wait_job

ROOT = Path(__file__).resolve().parent.parent


DAMAGED = ["badconfig", "notok", "badtokmeta"] + [f"w-{how}" for how in WEIGHT_DAMAGES]
UNUSABLE = ["we ird", "-dash", ".hidden"]


def _make_store(store: Path) -> None:
    """`good`, `badmetrics` (usable, its metrics unreadable), the checkpoints of DAMAGED, each
    damaged in one way, and the folders of UNUSABLE."""
    tok = tokenizers.gpt2()
    torch.manual_seed(0)
    for name in ["good", "badmetrics"] + DAMAGED:
        checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tok, name, store,
                         provenance={"source": "scratch"}, metrics={"dev_perplexity": 9.5, "epoch": 1})
    (store / "badmetrics" / "metrics.json").write_text('{"dev_perplexity": "abc"}')
    (store / "badconfig" / "config.json").write_text("[1, 2, 3]")
    (store / "notok" / "tokenizer.json").unlink()
    (store / "badtokmeta" / "lab_tokenizer.json").write_text("{not json")
    for how in WEIGHT_DAMAGES:
        damage_weights(store / f"w-{how}", how)
    for folder in UNUSABLE:
        (store / folder).mkdir()
        (store / folder / "notes.txt").write_text("not a checkpoint")


# a file's contents' hash by its inode, size and times: each file is read once until it changes
# (the lab replaces a file by renaming a new one over it, and any write moves its times)
HASHES: dict[tuple, str] = {}


def _hash(p: Path) -> str:
    st = p.stat()
    key = (str(p), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if key not in HASHES:
        HASHES[key] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return HASHES[key]


def snapshot(store: Path) -> list:
    """Every file of the store (not the lab's lock files, nor the weights' verdicts it keeps) with
    its size and contents' hash, and the ledger's rows."""
    out = []
    for p in sorted(store.rglob("*")):
        rel = p.relative_to(store).as_posix()
        if p.is_file() and not rel.startswith((".lab/locks", ".lab/jobs.sqlite", ".lab/logs",
                                               ".lab/health")) \
                and not rel.endswith(".log"):
            out.append(f"{rel} {p.stat().st_size} {_hash(p)}")
    if (store / ".lab" / "jobs.sqlite").exists():
        with sqlite3.connect(store / ".lab" / "jobs.sqlite") as con:
            out += [json.dumps(r) for r in con.execute("SELECT id, name, status FROM jobs").fetchall()]
    return out


def one_clear_line(message: str, expected: str) -> None:
    assert message.strip(), "an empty message"
    assert "\n" not in message.strip(), f"more than one line: {message!r}"
    assert "Traceback" not in message and "Something went wrong" not in message, message
    assert "internal error" not in message, message
    assert expected.lower() in message.lower(), f"{expected!r} not in {message!r}"


# ---------------------------------------------------------------- the CLI

@pytest.fixture(scope="module")
def cli_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("cli-store")
    _make_store(store)
    files = tmp_path_factory.mktemp("cli-files")
    (files / "a-file.txt").write_text("hello\n")
    (files / "binary.txt").write_bytes(b"\xff\xfe\x00bad")
    (files / "empty.txt").write_text("")
    (files / "list.json").write_text("[1]")
    (files / "badjson").mkdir()
    (files / "badjson" / "config.json").write_text("{oops")
    (files / "notempty").mkdir()
    (files / "notempty" / "x").write_text("x")
    (files / "deep.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    (files / "texts.txt").write_text("a first text\na second text\na third text\n")
    return store, files


def _cli_cases():
    G = ["generate", "--checkpoint", "good"]
    T = ["train", "--preset", "tiny", "--name", "fresh"]
    J = ["jobs", "submit", "--preset", "tiny", "--name", "queued"]
    F = "{files}"
    return [
        (["generate", "--checkpoint", "../elsewhere/x"], "is not allowed"),
        (["generate", "--checkpoint", "/etc"], "is not allowed"),
        (["generate", "--checkpoint", "missing"], "no checkpoint 'missing'"),
        (["generate", "--checkpoint", "x\n"], "is not allowed"),
        (G + ["--n", "0"], "number of captions"),
        (G + ["--n", "-3"], "number of captions"),
        (G + ["--n", "100000"], "number of captions"),
        (G + ["--n", "abc"], "invalid int value"),
        (G + ["--n", "2.5"], "invalid int value"),
        (G + ["--temperature", "nan"], "temperature: expected a finite number"),
        (G + ["--temperature", "inf"], "temperature: expected a finite number"),
        (G + ["--temperature", "0"], "temperature must be between 0.01 and 100.0, got 0"),
        (G + ["--temperature", "1e9"], "temperature must be between"),
        (G + ["--top-k", "0", "--decoder", "top_k"], "top_k must be between 1 and 1000000, got 0"),
        (G + ["--top-k", "5"], "top_k is not a setting of the random decoder; its settings are: temperature"),
        (G + ["--top-k", "10000000", "--decoder", "top_k"], "top_k must be between"),
        (G + ["--top-p", "0", "--decoder", "top_p"], "top_p must be in (0, 1]"),
        (G + ["--top-p", "1.5", "--decoder", "top_p"], "top_p must be in (0, 1]"),
        (G + ["--top-p", "nan", "--decoder", "top_p"], "top_p: expected a finite number"),
        (G + ["--num-beams", "10000000", "--decoder", "beam"], "num_beams must be between 1 and 16"),
        (G + ["--num-beams", "0", "--decoder", "beam"], "num_beams must be between 1 and 16, got 0"),
        (G + ["--seed", "-1"], "seed must be between 0 and"),
        (G + ["--seed", str(2 ** 70)], "seed must be between 0 and"),
        (G + ["--max-new-tokens", "0"], "max_new_tokens must be between 1 and"),
        (G + ["--max-new-tokens", "100000"], "max_new_tokens must be between"),
        (G + ["--decoder", "nope"], "unknown plugin 'nope'"),
        (G + ["--prompt", "x" * 5000], "the prompt is 5000 characters"),
        (G + ["--prompt", "dog " * 200], "context is 64 tokens"),
        (["generate", "--checkpoint", "badconfig"], "holds a list, not a json object"),
        (["generate", "--checkpoint", "notok"], "tokenizer.json is missing"),
        (["generate", "--checkpoint", "badtokmeta"], "lab_tokenizer.json is damaged"),
        (["evaluate", "--checkpoint", "good", "--n", "0"], "n must be between 1 and"),
        (["evaluate", "--checkpoint", "good", "--n", str(10 ** 9)], "n must be between 1 and"),
        (["evaluate", "--checkpoint", "good", "--split", "nope"], "invalid choice: 'nope'"),
        (["evaluate", "--checkpoint", "x/y"], "is not allowed"),
        (["evaluate", "--checkpoint", "badconfig"], "damaged"),
        (["evaluate", "--checkpoint", "good", "--temperature", "-2"], "temperature must be between 0.01"),
        (["attention", "--checkpoint", "good", "--text", "hi", "--html", "/nonexistent/dir/v.html"],
         "cannot write it"),
        (["attention", "--checkpoint", "good", "--text", "x" * 5000], "the prompt is 5000 characters"),
        (["attention", "--checkpoint", "badconfig", "--text", "hi"], "damaged"),
        (["attention", "--checkpoint", "good", "--text", ""], "type a text"),
        (["attention", "--checkpoint", "good", "--text", "  "], "type a text"),
        (["attention", "--checkpoint", "good", "--text", "hi", "--html", "/tmp/v.html",
          "--asset-url", "javascript:alert(1)//"], "asset URL 'javascript:alert(1)//'"),
        (["attention", "--checkpoint", "good", "--text", "hi", "--view", "nope"], "invalid choice"),
        (T + ["--set", "lr=nan"], "lr: expected a finite number"),
        (T + ["--set", "lr=inf"], "lr: expected a finite number"),
        (T + ["--set", "lr=-1"], "lr must be between 1e-12"),
        (T + ["--set", "lr=1e9"], "lr must be between"),
        (T + ["--set", f"seed={2 ** 70}"], "seed must be between 0 and"),
        (T + ["--set", "seed=-1"], "seed must be between 0 and"),
        (T + ["--set", "n_embd=1000000000"], "n_embd"),
        (T + ["--set", "n_layer=100000"], "n_layer must be between"),
        (T + ["--set", "n_embd=16384", "--set", "n_layer=256", "--set", "n_head=16"], "parameters"),
        (T + ["--set", "epochs=0"], "epochs must be between 1 and"),
        (T + ["--set", "batch_size=-1"], "batch_size must be between 1 and"),
        (T + ["--set", "device=tpu"], "device must be 'auto', 'cpu' or 'cuda'"),
        (T + ["--set", "train_layers=abc"], "train_layers must be 'all' or block numbers"),
        (T + ["--set", "train_layers=5"], "out of range: this model has blocks 1 to 2"),
        (T + ["--set", "nope=1"], "unknown key 'nope'"),
        (T + ["--set", "dropout=1.5"], "dropout must be between 0.0 and 1.0"),
        (T + ["--set", "attention=gqa", "--set", "attention.kv_groups=3"],
         "attention.kv_groups=3 must divide n_head=4"),
        (T + ["--set", "kv_groups=3"], "kv_groups is the gqa attention plugin's own setting now"),
        (T + ["--set", "attention.window=3"], "the attention plugin 'mha' has no setting 'window'"),
        (T + ["--set", "n_head=0"], "n_head must be between 1 and"),
        (T + ["--set", "n_head=5"], "not divisible by n_head=5"),
        (T + ["--set", "patience=0"], "patience must be between 1 and"),
        (T + ["--set", "max_train=-5"], "max_train must be between 1 and"),
        (T + ["--set", "eval_every=-1"], "eval_every must be between 0 and"),
        (T + ["--set", "epochs=2.5"], "epochs: expected a whole number"),
        (T + ["--set", "epochs=" + "9" * 40], "epochs: expected a whole number"),
        (T + ["--set", "shuffle=maybe"], "shuffle: expected true or false"),
        (T + ["--set", "noequals"], "--set expects key=value"),
        (["train", "--preset", "tiny", "--name", "../x"], "is not allowed"),
        (["train", "--preset", "tiny", "--name", ".lab"], "is not allowed"),
        (["train", "--preset", "tiny", "--name", "good"], "'good' already exists"),
        (["train", "--preset", "nope"], "unknown preset 'nope'"),
        (T + ["--config", "/nonexistent.json"], "no such file"),
        (T + ["--config", F + "/deep.json"], "nests its JSON too deeply to read"),
        (["data", "import", F + "/texts.txt", "--name", "cut", "--seed", "-1"],
         "the seed of the dev cut must be a whole number from 0"),
        (T + ["--config", F + "/list.json"], "expected a JSON object"),
        (T + ["--config", F + "/binary.txt"], "--config"),
        (["train", "--preset", "tfmr-finetune", "--name", "ft", "--parent", "missing"], "no checkpoint 'missing'"),
        (["train", "--preset", "tfmr-finetune", "--name", "ft", "--parent", "badconfig"], "damaged"),
        (["train", "--resume", "missing"], "no checkpoint 'missing'"),
        (["train", "--resume", "good"], "kept no training state"),
        (["import", "gpt2", "/nonexistent", "--name", "imp"], "does not exist"),
        (["import", "gpt2", F + "/a-file.txt", "--name", "imp"], "is a file"),
        (["import", "gpt2", "{store}/good", "--name", "imp"], "is a tfmr-lab checkpoint"),
        (["import", "gpt2", F + "/badjson", "--name", "imp"], "is not valid json"),
        (["import", "gpt2", "a\0b", "--name", "imp"], "nul character"),
        (["import", "gpt2", F, "--name", "imp"], "config.json is missing"),
        (["import", "gpt2", F, "--name", "good"], "'good' already exists"),
        (["import", "gpt2", F, "--name", "x/y"], "is not allowed"),
        (["import", "smollm2", "--name", "imp", "--layers", "31"], "out of range"),
        (["import", "smollm2", "--name", "imp", "--layers", "1,1"], "repeats block"),
        (["import", "smollm2", "--name", "imp", "--layers", "a,b"], "block numbers separated by commas"),
        (["import", "smollm2", "/nonexistent.gguf", "--name", "imp"], "does not exist"),
        (["import", "smollm2", F, "--name", "imp"], "is a folder"),
        (["import", "smollm2", "--name", "good"], "'good' already exists"),
        (["export", "hf", "good", F + "/a-file.txt"], "is a file"),
        (["export", "hf", "good", "a\0b"], "nul character"),
        (["export", "hf", "good", F + "/notempty"], "is not empty"),
        (["export", "hf", "badconfig", "/tmp/never-written"], "damaged"),
        (["export", "hf", "missing", "/tmp/never-written"], "no checkpoint 'missing'"),
        (["delete", "missing", "--yes"], "no checkpoint 'missing'"),
        (["delete", "../x", "--yes"], "is not allowed"),
        (["delete", "good"], "add --yes to confirm"),
        (["bleu", "--hypotheses", "/nonexistent", "--references", F + "/a-file.txt"], "cannot read"),
        (["bleu", "--hypotheses", F + "/binary.txt", "--references", F + "/a-file.txt"], "not utf-8"),
        (["bleu", "--hypotheses", F + "/empty.txt", "--references", F + "/a-file.txt"], "holds no lines"),
        (["bleu", "--hypotheses", F + "/a-file.txt", "--references", F], "cannot read"),
        (["sweep", "start", "../x", "--preset", "tiny"], "sweep name '../x' is not allowed"),
        (["sweep", "start"], "sweep start needs the sweep's NAME"),
        (["sweep", "start", "s", "--preset", "tiny", "--grid", "n_head"], "--grid expects KEY=V1,V2"),
        (["sweep", "start", "s", "--preset", "tiny", "--grid", "n_head=5"],
         "run 1 (n_head=5, seed=0): n_embd=64 is not divisible by n_head=5"),
        (["sweep", "start", "s", "--preset", "tiny", "--grid", "nope=1"], "unknown key 'nope'"),
        (["sweep", "start", "s", "--preset", "tiny", "--grid", "n_head=1,,"], "an empty value"),
        (["sweep", "start", "s", "--preset", "tiny", "--grid", "n_head=1,4,"], "an empty value"),
        (["sweep", "start", "s", "--preset", "tiny", "--seeds", "a"], "--seeds expects whole numbers"),
        (["sweep", "start", "s", "--preset", "tiny", "--seeds", "0,0"], "seeds repeats a seed"),
        (["sweep", "start", "s", "--preset", "tiny", "--n", "0"], "score.n must be a whole number"),
        (["sweep", "start", "s", "--preset", "tiny", "--decoder", "top_k,top_p=0.9"],
         "top_p is not a setting of the top_k decoder"),
        (["sweep", "start", "s", "--preset", "tiny", "--decoder", "top_k,40"], "settings are NAME=VALUE"),
        (["sweep", "start", "s", "--recipe", "nope"], "unknown recipe 'nope'"),
        (["sweep", "start", "s", "--recipe", "heads", "--budget", "huge"], "not 'huge'"),
        (["sweep", "start", "s", "--checkpoint", "missing"], "no checkpoint 'missing'"),
        (["sweep", "start", "s", "--checkpoint", "badconfig"], "damaged"),
        (["sweep", "start", "s", "--preset", "tiny", "--parent", "good", "--grid", "n_layer=1,2"],
         "keeps its parent's architecture"),
        (["sweep", "start", "s", "--preset", "tiny", "--grid", "n_head=" + ",".join(map(str, range(1, 301)))],
         "a sweep runs at most 200"),
        (["sweep", "start", "s", "--preset", "tiny", "--executor", "slurm", "--wait"], "invalid choice"),
        (["sweep", "show", "missing"], "no sweep 'missing'"),
        (["birthplace", "evaluate", "--checkpoint", "missing"], "no checkpoint 'missing'"),
        (["birthplace", "evaluate", "--checkpoint", "good"], "is not a birth-place model"),
        (["birthplace", "evaluate", "--checkpoint", "good", "--split", "train"], "invalid choice"),
        (["birthplace", "baseline", "--split", "test"], "the baseline is scored on dev"),
        (["birthplace", "pretrain", "--name", "../x"], "is not allowed"),
        (["birthplace", "pretrain", "--name", "good"], "'good' already exists"),
        (["birthplace", "pretrain", "--name", "p", "--model", "gpt3"], "invalid choice"),
        (["birthplace", "pretrain", "--name", "p", "--set", "objective=qa2"], "objectives are span, qa"),
        (["birthplace", "finetune", "--name", "f", "--parent", "good"], "needs a character model"),
        (["birthplace", "pretrain", "--name", "p", "--data-dir", "/etc"], "has no wiki.txt"),
        (["ablate", "--checkpoint", "good", "--each", "--n-ref", "-1"], "--n-ref must be between 1"),
        (["ablate", "--checkpoint", "good", "--each", "--n", "501"],
         "--n must be between 1 and 500 with --each, got 501"),             # the page's bounds
        (["ablate", "--checkpoint", "good", "--n", "2001"], "--n must be between 1 and 2000, got 2001"),
        (["ablate", "--checkpoint", "good", "--each", "--heads", "1.1"], "--heads and --each both given"),
        (["patch", "--checkpoint", "good", "--clean", "", "--corrupted", ""],
         "type a clean prompt and a corrupted one"),
        (["patch", "--checkpoint", "good", "--clean", "  ", "--corrupted", "a dog"],
         "type a clean prompt and a corrupted one"),
        (["sweep", "stop", "../x"], "is not allowed"),
        (["sweep", "resume", "missing"], "no sweep 'missing'"),
        (["sweep", "export", "missing"], "no sweep 'missing'"),
        (["jobs", "stop"], "a job id is a positive whole number"),
        (["jobs", "stop", "999"], "no job 999"),
        (["jobs", "resume", "999"], "no job 999"),
        (["jobs", "stop", "abc"], "invalid int value"),
        (["jobs", "submit", "--preset", "tiny"], "checkpoint name None is not allowed"),
        (["jobs", "submit", "--preset", "tiny", "--name", "../x"], "is not allowed"),
        (["jobs", "submit", "--preset", "tiny", "--name", "good"], "'good' already exists"),
        (J + ["--set", "train_layers=abc"], "train_layers must be 'all'"),
        (J + ["--set", "train_layers=5"], "out of range: this model has blocks 1 to 2"),
        (J + ["--set", "device=cuda"], "no cuda gpu"),
        (J + ["--set", "lr=nan"], "lr: expected a finite number"),
        (J + ["--set", "n_embd=1000000000"], "n_embd"),
        (J + ["--set", f"seed={2 ** 64}"], "seed must be between"),
        (["jobs", "submit", "--preset", "tfmr-finetune", "--name", "q", "--parent", "badconfig"], "damaged"),
        (["jobs", "submit", "--preset", "tfmr-finetune", "--name", "q", "--parent", "notok"],
         "tokenizer.json is missing"),
        (["jobs", "submit", "--preset", "tfmr-finetune", "--name", "q", "--parent", "good",
          "--set", "train_layers=3"], "out of range: this model has blocks 1 to 2"),
        *_cli_weight_cases(),
        (["--store", F + "/a-file.txt", "checkpoints"], "is a file, not a folder"),
        (["--store", "a\0b", "checkpoints"], "nul character"),
        (["nosuchcommand"], "invalid choice"),
    ]


def _cli_weight_cases():
    """Each damaged weights file, refused by every command that takes a checkpoint."""
    out = []
    for how, (_, said) in WEIGHT_DAMAGES.items():
        name = f"w-{how}"
        out += [(["generate", "--checkpoint", name], said),
                (["attention", "--checkpoint", name, "--text", "hi"], said),
                (["evaluate", "--checkpoint", name], said),
                (["train", "--preset", "tfmr-finetune", "--name", "ft", "--parent", name], said),
                (["jobs", "submit", "--preset", "tfmr-finetune", "--name", "q", "--parent", name], said),
                (["export", "hf", name, "/tmp/never-written"], said)]
    return out


CLI_CASES = _cli_cases()


@pytest.mark.parametrize("argv, expected", CLI_CASES, ids=[f"cli{i}" for i in range(len(CLI_CASES))])
def test_cli_bad_input(argv, expected, cli_store, capsys, monkeypatch):
    store, files = cli_store
    monkeypatch.setenv("LAB_STORE", str(store))
    argv = [a.replace("{files}", str(files)).replace("{store}", str(store)) for a in argv]
    before = snapshot(store)
    try:
        rc = cli.main(argv)
    except SystemExit as e:         # argparse's own refusals
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, (rc, err)
    assert err.startswith("error: ")
    one_clear_line(err, expected)
    assert snapshot(store) == before


def test_cli_lists_every_checkpoint_beside_damaged_ones(cli_store, capsys, monkeypatch):
    store, _ = cli_store
    monkeypatch.setenv("LAB_STORE", str(store))
    assert cli.main(["checkpoints"]) == 0
    out = capsys.readouterr().out.splitlines()
    lines = {line.split()[0]: line for line in out if not line.startswith("we ird")}
    assert "good" in lines and sum("DAMAGED: " in line for line in out) == len(DAMAGED)
    assert "DAMAGED: checkpoint 'w-nan' is damaged: model.safetensors holds NaN in" in lines["w-nan"]
    assert lines["badmetrics"].endswith("metrics unreadable: metrics.json: dev_perplexity is 'abc', "
                                        "not a number")
    assert sum("NOT USABLE: " in line for line in out) == len(UNUSABLE)
    assert cli.main(["checkpoints", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert "model" in rows["good"] and all("damaged" in rows[n] for n in DAMAGED)
    assert rows["badmetrics"]["metrics"] == {} and "metrics_unreadable" in rows["badmetrics"]
    assert all("is not a checkpoint the lab can use" in rows[n]["unusable"] for n in UNUSABLE)
    assert len(rows) == 2 + len(DAMAGED) + len(UNUSABLE)


def test_cli_bad_input_reaches_no_traceback_in_a_real_process(cli_store):
    store, _ = cli_store
    for argv in (["generate", "--checkpoint", "good", "--seed", str(2 ** 70)],
                 ["checkpoints"], ["generate", "--checkpoint", "badconfig"]):
        out = subprocess.run([sys.executable, "-m", "lab", "--store", str(store), *argv], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
        assert "Traceback" not in out.stderr + out.stdout


def test_bleu_keeps_empty_hypotheses_and_says_so(tmp_path, capsys):
    """An empty generated caption is a hypothesis that scores 0, as in nltk, not a line to skip."""
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu
    refs = ["a dog runs on the grass", "a cat sits on a mat", "two men ride horses on a beach"]
    hyps = ["a dog runs on a beach", "", "a cat sits on the grass"]
    (tmp_path / "h.txt").write_text("\n".join(hyps) + "\n")
    (tmp_path / "r.txt").write_text("\n".join(refs) + "\n")
    assert cli.main(["bleu", "--hypotheses", str(tmp_path / "h.txt"), "--references",
                     str(tmp_path / "r.txt"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["hypotheses"] == 3 and out["empty_hypotheses"] == 1
    r = [x.split() for x in refs]
    expected = sum(sentence_bleu(r, h.split(), smoothing_function=SmoothingFunction().method1)
                   for h in hyps) / 3
    assert out["forward"] == pytest.approx(expected, abs=1e-9)


# ---------------------------------------------------------------- the API

@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """The app on a store with damaged checkpoints and folders: it must start all the same."""
    store = tmp_path_factory.mktemp("api-store")
    _make_store(store)
    from gradio_client import Client
    with serving(store, store.parent / "app.log", LAB_ALLOWED_DIRS=None) as url:
        yield Client(url, verbose=False), url, store
    assert "Traceback" not in (store.parent / "app.log").read_text()


def _api_cases():
    C = dict(checkpoints=["good"], decoder="top_p", temperature=1.0, seed=0, prefix="", n=2)
    DECODER_KEYS = ("decoder", "temperature", "top_k", "top_p", "num_beams")

    def compare(expected, per=None, **over):
        a = {**C, **over}
        if a["decoder"] in ("beam", "greedy") and "temperature" not in over:
            del a["temperature"]                   # not a setting of those decoders
        decode = {k: v for k, v in a.items() if k in DECODER_KEYS}
        held = [a["held_out"]] if "held_out" in a else []
        return ("/compare", [a["checkpoints"], decode, a["seed"], a["prefix"], a["n"], per] + held,
                expected)

    def per_model(cells, expected):
        return compare(expected, per={"good": cells})

    def matrix(expected, checkpoints=("good",), temps="0.7,1.0", n=1, seed=0, prefix=""):
        return ("/decoder_matrix", [list(checkpoints), temps, n, seed, prefix], expected)

    def attention(expected, name="good", text="A dog .", generate=False, seed=0):
        return ("/attention", [name, text, generate, seed], expected)

    def evaluate(expected, names=("good",), decoder="random", temperature=1.0, n=100, seed=0,
                 bleu_tokens="auto", decode=None):
        decode = decode if decode is not None else {"decoder": decoder, "temperature": temperature}
        return ("/evaluate", [list(names), decode, n, seed, bleu_tokens], expected)

    cases = [
        compare("choose checkpoints to compare", checkpoints=[]),
        compare("held-out prompt words must be a whole number from 0 to 50, got 51", held_out=51),
        compare("held-out prompt words must be a whole number from 0 to 50, got -1", held_out=-1),
        compare("held-out prompt words must be a whole number from 0 to 50, got 'many'", held_out="many"),
        compare("a prefix ('A dog') and held-out prompts (3 words) both given", prefix="A dog", held_out=3),
        compare("is not allowed", checkpoints=["../elsewhere/x"]),
        compare("is not allowed", checkpoints=["/etc"]),
        compare("is not allowed", checkpoints=["good\n"]),
        compare("no checkpoint 'missing'", checkpoints=["missing"]),
        compare("holds a list", checkpoints=["badconfig"]),
        compare("tokenizer.json is missing", checkpoints=["notok"]),
        compare("lab_tokenizer.json is damaged", checkpoints=["badtokmeta"]),
        compare("no checkpoint 'missing'", checkpoints=["good", "missing"]),
        compare("at most 8 at once", checkpoints=["good"] * 9),
        compare("unknown plugin 'nope'", decoder="nope"),
        compare("temperature must be between 0.01 and 100.0, got 0", temperature=0),
        compare("temperature must be between 0.01 and 100.0, got -1", temperature=-1),
        compare("temperature must be between", temperature=1e9),
        compare("temperature: expected a number", temperature="abc"),
        compare("top_k must be between 1 and 1000000, got 0", decoder="top_k", top_k=0),
        compare("top_k: expected a whole number", decoder="top_k", top_k=2.5),
        compare("top_p must be in (0, 1]", top_p=0),
        compare("top_p must be in (0, 1]", top_p=2),
        compare("num_beams must be between 1 and 16", decoder="beam", num_beams=10 ** 7),
        compare("num_beams", decoder="beam", num_beams=0),
        compare("seed must be a whole number", seed=-1),
        compare("seed must be a whole number", seed=2 ** 70),
        compare("seed must be a whole number", seed=2.5),
        compare("seed must be a whole number", seed="abc"),
        compare("prefix is 5000 characters", prefix="x" * 5000),
        compare("prefix is 10000000 characters", prefix="x" * 10_000_000),
        compare("context is 64 tokens", prefix="dog " * 100),
        compare("number of captions must be a whole number from 1 to 200", n=0),
        compare("number of captions must be a whole number from 1 to 200", n=201),
        compare("number of captions must be a whole number from 1 to 200", n=2.5),
        compare("number of captions must be a whole number from 1 to 200", n=-1),
        compare("number of captions must be a whole number from 1 to 200", n=10 ** 12),
        compare("number of captions must be a whole number from 1 to 200, got True", n=True),
        compare("seed must be a whole number", seed=True),
        per_model({"temperature": 0}, "temperature must be between 0.01 and 100.0, got 0"),
        per_model({"decoder": "nope"}, "unknown plugin 'nope'"),
        per_model({"decoder": "beam", "num_beams": 10 ** 6}, "num_beams must be between 1 and 16"),
        per_model({"top_p": 5}, "top_p must be in (0, 1]"),
        matrix("captions per cell must be a whole number from 1 to 10", n=0),
        matrix("captions per cell must be a whole number from 1 to 10", n=300),
        matrix("captions per cell must be a whole number from 1 to 10", n=2.5),
        matrix("temperature: expected a number", temps="abc"),
        matrix("temperatures: give 1 to 6 numbers", temps=""),
        matrix("temperatures: give 1 to 6 numbers", temps=",".join(["0.7"] * 10)),
        matrix("temperature must be between 0.01 and 100.0, got 0", temps="0"),
        matrix("temperature: expected a finite number", temps="nan"),
        matrix("temperature must be between", temps="1e9"),
        matrix("choose checkpoints first", checkpoints=()),
        matrix("at most 4 at once", checkpoints=("good",) * 5),
        matrix("seed must be a whole number", seed=-1),
        matrix("no checkpoint 'missing'", checkpoints=("missing",)),
        matrix("prefix is 5000 characters", prefix="x" * 5000),
        attention("choose a checkpoint first", name=None),
        attention("choose a checkpoint first", name=""),
        attention("is not allowed", name="../x"),
        attention("no checkpoint 'missing'", name="missing"),
        attention("holds a list", name="badconfig"),
        attention("tokenizer.json is missing", name="notok"),
        attention("type a text", text=""),
        attention("text is 5000 characters", text="x" * 5000),
        attention("at most 64 can be shown", text="dog " * 100),
        attention("seed must be a whole number", seed=-1),
        attention("seed must be a whole number", seed=2 ** 70),
        ("/head_differences", ["good", "missing", "A dog ."], "no checkpoint 'missing'"),
        ("/head_differences", ["good", "badconfig", "A dog ."], "holds a list"),
        ("/head_differences", ["good", "good", ""], "choose a text first"),
        ("/head_differences", ["good", "good", "x" * 5000], "text is 5000 characters"),
        evaluate("choose checkpoints to evaluate", names=()),
        evaluate("no checkpoint 'missing'", names=("missing",)),
        evaluate("subset size must be a whole number from 1 to 5000", n=0),
        evaluate("subset size must be a whole number from 1 to 5000", n=10 ** 9),
        evaluate("seed must be a whole number", seed=-1),
        evaluate("temperature must be between 0.01 and 100.0, got 0", temperature=0),
        evaluate("temperature must be between", temperature=1e300),
        evaluate("unknown plugin 'nope'", decoder="nope"),
        evaluate("bleu_tokens must be 'auto', 'gpt2' or 'words'", bleu_tokens="nope"),
        evaluate("decode: expected a JSON object", decode=[1, 2]),
        evaluate("top_k is not a setting of the random decoder", decode={"decoder": "random", "top_k": 5}),
        evaluate("unknown key(s) nope", decode={"decoder": "random", "nope": 1}),
        compare("per_checkpoint names other, not among the chosen", per={"other": {}}),
        compare("per_checkpoint: expected a JSON object", per={"good": 3}),
        evaluate("at most 8 at once", names=("good",) * 9),
    ]
    job = ["/job_status", "/stop_job", "/stop_job_after_checkpoint", "/resume_job"]
    for endpoint in job:
        cases += [(endpoint, ["abc"], "job id must be a whole number"),
                  (endpoint, [-1], "job id must be a whole number"),
                  (endpoint, [2.5], "job id must be a whole number"),
                  (endpoint, [2 ** 70], "job id must be a whole number")]
        cases.append((endpoint, [999], "no job 999") if endpoint != "/job_status"
                     else (endpoint, [999], "no job 999"))
    cases += [(e, [None], "select a job first") for e in job[1:]]
    for name, expected in (("../x", "is not allowed"), ("missing", "no checkpoint 'missing'"),
                           ("badconfig", "holds a list"),
                           ("notok", "tokenizer.json is missing"), ("x\n", "is not allowed")):
        cases.append(("/checkpoint_info", [name], expected))
    for path in ("/etc", "/nonexistent", "", "a\0b", "/root"):
        cases.append(("/import_hf", [path, "", "imp"], "import"))
    cases += [("/import_hf", ["/etc", "", "../x"], "is not allowed"),
              ("/import_hf", ["/etc", "", "good"], "import"),
              ("/export_hf", ["missing", ""], "no checkpoint 'missing'"),
              ("/export_hf", ["badconfig", ""], "holds a list"),
              ("/export_hf", ["../x", ""], "is not allowed"),
              ("/export_hf", ["good", "/tmp/lab-export-anywhere"], "lab_allowed_dirs"),
              ("/export_hf", ["good", "/etc"], "lab_allowed_dirs"),
              ("/export_hf", ["good", "a\0b"], "give a folder path"),
              ("/export_gguf", ["missing", "f16", ""], "no checkpoint 'missing'"),
              ("/export_gguf", ["../x", "f16", ""], "is not allowed"),
              ("/export_gguf", ["good", "q4", ""], "is not in the list of choices"),
              ("/export_gguf", ["good", "f16", "/etc"], "lab_allowed_dirs"),
              ("/export_gguf", [None, "f16", ""], "choose the checkpoint to export"),
              ("/delete_checkpoint", ["missing", "missing"], "no checkpoint 'missing'"),
              ("/delete_checkpoint", ["../x", "../x"], "is not allowed"),
              ("/delete_checkpoint", ["good", "goo"], "type the checkpoint's name"),
              ("/delete_checkpoint", ["good", None], "type the checkpoint's name")]
    for endpoint in ("/sweep_status", "/stop_sweep", "/resume_sweep", "/export_sweep"):
        cases += [(endpoint, ["missing"], "no sweep 'missing'"), (endpoint, ["../x"], "is not allowed")]
    cases += [(e, [None], "choose a sweep first") for e in ("/stop_sweep", "/resume_sweep", "/export_sweep")]
    cases += [("/exposure_bias", [None, 500], "choose a captions checkpoint first"),
              ("/exposure_bias", ["missing", 500], "no checkpoint 'missing'"),
              ("/exposure_bias", ["../x", 500], "is not allowed"),
              ("/exposure_bias", ["good", 7], "is not in the list of choices")]
    cases += [("/birthplace_accuracy", [[], "dev"], "the store has no birth-place checkpoints yet: in the Train tab"),
              ("/birthplace_accuracy", [["missing"], "dev"], "no checkpoint 'missing'"),
              ("/birthplace_accuracy", [["../x"], "dev"], "is not allowed"),
              ("/birthplace_accuracy", [["good"], "dev"], "is not a birth-place model"),
              ("/birthplace_accuracy", [["good"], "train"], "is not in the list of choices: ['dev', 'test']"),
              ("/birthplace_accuracy", [["good"] * 9, "dev"], "at most 8")]
    for how, (_, said) in WEIGHT_DAMAGES.items():
        name = f"w-{how}"
        cases += [compare(said, checkpoints=["good", name]), attention(said, name=name),
                  evaluate(said, names=(name,)), ("/head_differences", ["good", name, "A dog ."], said),
                  ("/checkpoint_info", [name], said), ("/export_hf", [name, ""], said),
                  ("/export_gguf", [name, "q8_0", ""], said)]
    return cases


def _sweep_form_cases():
    """/start_sweep's and /check_sweep's form: name, recipe, budget, preset, parent, grid, every
    run's settings, seeds, captions scored, split, decoders, checkpoints to score."""
    F = dict(name="s", recipe="(build your own)", budget="cpu", preset="tiny", parent="",
             grid="n_head=1,4", settings="epochs=1", seeds="0", n=20, split="test",
             decoders="random", checkpoints="")
    bad = [({"name": "../x"}, "sweep name '../x' is not allowed"),
           ({"grid": "n_head"}, "each line is KEY=V1,V2"),
           ({"grid": "n_head=5"}, "n_embd=64 is not divisible by n_head=5"),
           ({"grid": "x" * 30000}, "at most 20000 are accepted"),
           ({"grid": "n_head=" + ",".join(map(str, range(1, 301)))}, "a sweep runs at most 200"),
           ({"settings": "lr"}, "--set expects key=value"),
           ({"settings": "lr=nan"}, "lr: expected a finite number"),
           ({"seeds": "a"}, "seeds are whole numbers"),
           ({"n": 0}, "captions scored must be a whole number from 1 to 5000"),
           ({"n": 10 ** 9}, "captions scored must be a whole number from 1 to 5000"),
           ({"decoders": "top_k,top_p=0.9"}, "top_p is not a setting of the top_k decoder"),
           ({"recipe": "nope"}, "unknown recipe 'nope'"),
           ({"checkpoints": "missing", "grid": ""}, "no checkpoint 'missing'"),
           ({"parent": "good", "grid": "n_layer=1,2"}, "keeps its parent's architecture")]
    return [({**F, **over}, expected) for over, expected in bad]


SWEEP_FORM_CASES = _sweep_form_cases()


@pytest.mark.parametrize("form, expected", SWEEP_FORM_CASES,
                         ids=[f"sweep_form{i}" for i in range(len(SWEEP_FORM_CASES))])
def test_sweep_form_refuses_before_queueing(form, expected, api):
    from lab.ui.experiments import check_form, start_form
    _, _, store = api
    before = snapshot(store)
    for said in (check_form(list(form.values()), store), start_form(list(form.values()), store)[1]):
        one_clear_line(said.replace("**Not valid:** ", "").replace("**Not started:** ", ""), expected)
    assert snapshot(store) == before


def _sweep_definition_cases():
    """/check_sweep's and /start_sweep's definition: one JSON object keyed by name."""
    D = {"name": "s", "preset": "tiny", "grid": {"n_head": [1, 4]}, "set": ["epochs=1"],
         "seeds": [0], "score": {"n": 20}}
    bad = [({"name": "../x"}, "sweep name '../x' is not allowed"),
           ({"grid": {"n_head": [5]}}, "n_embd=64 is not divisible by n_head=5"),
           ({"grid": "n_head=1,4"}, "grid"),
           ({"grid": {"n_head": list(range(1, 301))}}, "a sweep runs at most 200"),
           ({"set": ["lr"]}, "--set expects key=value"),
           ({"set": ["lr=nan"]}, "lr: expected a finite number"),
           ({"seeds": ["a"]}, "seeds"),
           ({"score": {"n": 0}}, "score.n must be a whole number from 1 to 5000"),
           ({"score": {"n": 20, "decoders": ["top_k,top_p=0.9"]}}, "top_p is not a setting of the top_k decoder"),
           ({"grid": {}, "checkpoints": ["missing"]}, "no checkpoint 'missing'"),
           ({"parent": "good", "grid": {"n_layer": [1, 2]}}, "keeps its parent's architecture"),
           ({"nope": 1}, "unknown key(s) nope")]
    return [({**D, **over}, expected) for over, expected in bad]


SWEEP_DEFINITION_CASES = _sweep_definition_cases()


@pytest.mark.parametrize("definition, expected", SWEEP_DEFINITION_CASES,
                         ids=[f"sweep_definition{i}" for i in range(len(SWEEP_DEFINITION_CASES))])
def test_api_sweep_definition_refuses_before_queueing(definition, expected, api):
    client, _, store = api
    before = snapshot(store)
    for endpoint in ("/check_sweep", "/start_sweep"):
        one_clear_line(_message(lambda: client.predict(definition, api_name=endpoint)), expected)
    assert snapshot(store) == before


API_CASES = _api_cases()
def _start_job_cases():
    """/start_job's named arguments: name, preset, parent and the settings object."""
    out = []
    for over, expected in (({"name": ""}, "give the new checkpoint a name"),
                           ({"name": "../x"}, "is not allowed"), ({"name": ".lab"}, "is not allowed"),
                           ({"name": "good"}, "'good' already exists"), ({"name": "x" * 300}, "at most 200"),
                           ({"name": "x\n"}, "checkpoint name 'x\\n' is not allowed"),
                           ({"name": " x"}, "checkpoint name ' x' is not allowed"),
                           ({"preset": "nope"}, "unknown preset 'nope'"),
                           ({"parent": "missing"}, "no checkpoint 'missing'"),
                           ({"parent": "badconfig"}, "holds a list"),
                           *[({"parent": f"w-{how}"}, said) for how, (_, said) in WEIGHT_DAMAGES.items()],
                           ({"n_head": 5}, "not divisible by n_head=5"),
                           ({"n_embd": 10 ** 9}, "n_embd"), ({"dropout": 1.5}, "dropout must be between"),
                           ({"epochs": 0}, "epochs must be between 1 and"),
                           ({"lr": -1}, "lr must be between 1e-12"),
                           ({"lr": 1e30}, "lr must be between"),
                           ({"seed": 2 ** 70}, "seed must be between"), ({"seed": 2.5}, "seed: expected a whole number"),
                           ({"train_layers": "abc"}, "train_layers must be 'all'"),
                           ({"train_layers": "5"}, "out of range: this model has blocks 1 to 2"),
                           ({"device": "cuda"}, "no cuda gpu"), ({"patience": 0}, "patience must be between 1 and"),
                           ({"eval_every": -1}, "eval_every must be between 0 and"),
                           ({"max_train": -5}, "max_train must be between 1 and"),
                           ({"max_dev": 10 ** 9}, "max_dev must be between"),
                           ({"log_every": 0}, "log_every must be between 1 and"),
                           ({"attention": "gqa", "attention.kv_groups": 3},
                            "attention.kv_groups=3 must divide n_head=4"),
                           ({"attention": "gqa", "attention.kv_groups": -2},
                            "attention.kv_groups must be between 1 and 4096"),
                           ({"model": "nope"}, "model: unknown plugin 'nope'"),
                           ({"n_heads": 2}, "unknown key 'n_heads'"),
                           ({"parent": "good", "n_layer": 4}, "keeps good's architecture"),
                           ({"shuffle": "maybe"}, "shuffle: expected true or false")):
        name = over.pop("name", "fresh-job")
        preset = over.pop("preset", "tiny")
        parent = over.pop("parent", "")
        out.append((over or {"name": name, "preset": preset, "parent": parent},
                    dict(name=name, preset=preset, parent=parent, settings=over), expected))
    return out


START_JOB_CASES = _start_job_cases()


def _message(call) -> str:
    from gradio_client.exceptions import AppError
    try:
        result = call()
    except AppError as e:
        return str(e)
    except ValueError as e:           # the client's own check of a value against the choices
        return str(e)
    return json.dumps(result)


@pytest.mark.parametrize("endpoint, args, expected", API_CASES,
                         ids=[f"api{i}-{c[0][1:]}" for i, c in enumerate(API_CASES)])
def test_api_bad_input(endpoint, args, expected, api):
    client, _, store = api
    before = snapshot(store)
    message = _message(lambda: client.predict(*args, api_name=endpoint))
    one_clear_line(message, expected)
    assert snapshot(store) == before


@pytest.mark.parametrize("case, args, expected", START_JOB_CASES,
                         ids=[f"start_job{i}" for i in range(len(START_JOB_CASES))])
def test_api_start_job_refuses_before_queueing(case, args, expected, api):
    client, _, store = api
    before = snapshot(store)
    message = _message(lambda: client.predict(**args, api_name="/start_job"))
    one_clear_line(message, expected)
    assert snapshot(store) == before


def test_at_least_150_bad_inputs_across_the_api_and_the_cli():
    """The bad-input tables stay broad: at least 150 inputs across the API and the CLI, 100 of
    them through the API."""
    assert len(API_CASES) + len(START_JOB_CASES) + len(CLI_CASES) >= 150
    assert len(API_CASES) + len(START_JOB_CASES) >= 100


def test_api_lists_every_checkpoint_and_sees_new_ones(api):
    client, _, store = api
    rows = client.predict(api_name="/checkpoints")
    data = {r[0]: r for r in rows["data"]}
    assert data["good"][1] == "gpt2" and [n for n in data if data[n][1] == "damaged"] == sorted(DAMAGED)
    assert data["badmetrics"][1] == "gpt2" and data["badmetrics"][10] == "unreadable"
    assert [n for n in data if data[n][1] == "not usable"] == sorted(UNUSABLE)
    found = client.predict("badmetrics", api_name="/checkpoint_info")
    assert found["metrics"] == {} and "dev_perplexity is 'abc'" in found["metrics_unreadable"]
    assert "lab-compare" in client.predict(["badmetrics"], {"decoder": "greedy"}, 0, "", 1,
                                           api_name="/compare")
    torch.manual_seed(3)
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tokenizers.gpt2(),
                     "made-later", store, provenance={"source": "scratch"})
    assert client.predict("made-later", api_name="/checkpoint_info")["name"] == "made-later"
    out = client.predict(["made-later"], {"decoder": "greedy"}, 0, "", 2, api_name="/compare")
    assert "lab-compare" in out
    checkpoints.delete("made-later", store)


def test_eight_concurrent_clients_during_a_job_all_succeed(api):
    from gradio_client import Client
    _, url, store = api
    job_id = jobs.submit("busy", get_tiny()[0], {**get_tiny()[1], "epochs": 3, "max_train": 2000},
                         store=store)
    results, errors = [], []

    def client_run(i):
        try:
            c = Client(url, verbose=False)
            for k in range(3):
                html = c.predict(["good"], {"decoder": "greedy"}, i * 10 + k, "A", 4,
                                 api_name="/compare")
                results.append("lab-compare" in html)
        except Exception as e:       # collected and shown below
            errors.append(f"{type(e).__name__}: {e}")
    threads = [threading.Thread(target=client_run, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join(timeout=600) for t in threads]
    job = jobs.get(job_id, store)
    jobs.request_stop(job_id, "now", store) if job["status"] in ("queued", "running") else None
    # the job ends here, its save written: later tests compare the store before and after an input
    wait_job(job_id, ("stopped", "done", "interrupted", "failed"), timeout=300, store=store)
    assert errors == [] and results == [True] * 24
    assert job["status"] in ("running", "done"), job


def get_tiny():
    from lab.presets import get
    m, t = get("tiny")
    return m.to_dict(), t.to_dict()


# ---------------------------------------------------------------- the server's log

def _event(url: str, elem_id: str, output: str) -> tuple[int, list]:
    """The page's event that reads the component `elem_id` and writes `output`: (its id, the
    values the page would send)."""
    import httpx
    config = httpx.get(url + "config", timeout=30).json()
    comps = {c["id"]: c for c in config["components"]}
    for dep in config["dependencies"]:
        ids = [comps[i]["props"].get("elem_id") for i in dep["inputs"]]
        if elem_id in ids and output in [comps[i]["props"].get("elem_id") for i in dep["outputs"]]:
            return dep["id"], [comps[i]["props"].get("value") for i in dep["inputs"]]
    raise AssertionError(f"no event reads {elem_id} and writes {output}")


def _queued(url: str, fn_index: int, data) -> str:
    """What the app answers an event sent as the page sends it (the queue): its error, or 'ok'."""
    import uuid
    import httpx
    session = uuid.uuid4().hex[:10]
    joined = httpx.post(url + "gradio_api/queue/join", timeout=30, json={
        "data": data, "fn_index": fn_index, "session_hash": session, "event_data": None,
        "trigger_id": None})
    assert joined.status_code == 200, joined.text
    with httpx.stream("GET", url + f"gradio_api/queue/data?session_hash={session}", timeout=120) as s:
        for line in s.iter_lines():
            message = json.loads(line[5:]) if line.startswith("data:") else {}
            if message.get("msg") == "process_completed":
                return "ok" if message["success"] else str(message["output"].get("error"))
    raise AssertionError("the event never completed")


def _logged(log: Path, call) -> tuple[str, str]:
    """(what `call` returns, the text the app's log gained meanwhile)."""
    start = log.stat().st_size
    said = call()
    return said, log.read_text()[start:]


def _refused_lines(logged: str) -> list[str]:
    """The lines of the log that refuse a request (the worker may log its own lines meanwhile)."""
    return [line for line in logged.splitlines() if line.startswith("refused: ")]


def test_what_gradio_refuses_before_the_lab_is_one_line_on_the_page_and_in_the_log(api, tmp_path):
    """A file of a type the upload does not take, text where the decoder table takes rows, a value
    where the upload takes files, too few values for an event: Gradio refuses each before the
    lab's code runs; each is one line for the caller and one line in the log, no traceback."""
    from gradio_client import handle_file
    client, url, store = api
    log = store.parent / "app.log"
    (tmp_path / "pic.png").write_bytes(b"not a picture")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    compare_form, values = _event(url, "compare-per-model", "compare-out")
    upload, _ = _event(url, "gpt2-upload", "checkpoints-message")
    table = values[:-1] + ["not a table"]
    cases = [(lambda: _message(lambda: client.predict([handle_file(tmp_path / "pic.png")], "", "imp",
                                                      api_name="/import_hf_upload")),
              "wrote: pic.png is not a file it takes (it takes .json, .safetensors, .txt, .jinja, .zip)"),
             (lambda: _message(lambda: client.predict([handle_file(tmp_path / "notes.txt")], "", "imp",
                                                      api_name="/import_hf_upload")),
              "notes.txt: not a file of an HF GPT-2 or Llama checkpoint"),
             (lambda: _queued(url, compare_form, table),
              "decoder per checkpoint (blank cells take the shared setting): 'not a table' is not a "
              "value this field takes"),
             (lambda: _queued(url, upload, ["not files", "", "imp"]),
              "save_pretrained wrote: 'not files' is not a value this field takes"),
             (lambda: _queued(url, compare_form, values[:3]),
              f"takes {len(values)} values (checkpoints, decoder, ")]
    before = snapshot(store)
    for call, expected in cases:
        said, lines = _logged(log, call)
        one_clear_line(said, expected)
        assert "Traceback" not in lines and _refused_lines(lines) == [f"refused: {said}"], lines
    assert snapshot(store) == before


def test_a_zip_bomb_uploaded_to_the_app_writes_next_to_nothing(api, tmp_path):
    """A 256 MiB model.safetensors of zeros in a 0.3 MB .zip, beside the config.json of a model
    whose weights take 6.7 MB: refused in one line (page and log), with less than 2 MB written by
    the app (the upload itself included), and the store as it was."""
    from gradio_client import handle_file
    from tests.conftest import SERVED, bytes_written, zip_bomb
    client, url, store = api
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "vocab_size": 50257, "n_positions": 64,
                                  "n_embd": 32, "n_layer": 2, "n_head": 4}))
    bomb = zip_bomb(tmp_path / "bomb.zip", config, 256 * 2 ** 20)
    pid, before = SERVED[url].pid, snapshot(store)
    start = bytes_written(pid)
    said, lines = _logged(store.parent / "app.log", lambda: _message(lambda: client.predict(
        [handle_file(bomb)], "", "bomb", api_name="/import_hf_upload")))
    written = bytes_written(pid) - start
    one_clear_line(said, "model.safetensors in bomb.zip is 268.4 MB unpacked, more than a GPT-2 of "
                         "its config.json (2 blocks of width 32, vocabulary 50257, 64 positions) can "
                         "need (6.7 MB)")
    assert "Traceback" not in lines and _refused_lines(lines) == [f"refused: {said}"], lines
    assert written < 2 * 2 ** 20, written
    assert snapshot(store) == before and not any((store / ".lab" / "uploads").iterdir())


def test_a_bug_keeps_its_traceback_in_the_log_and_a_mistake_is_one_line(caplog):
    import gradio as gr
    from lab.config import ConfigError
    from lab.ui.common import friendly

    def bug():
        return {}["missing"]

    def mistake():
        raise ConfigError("n must be a whole number from 1 to 200, got 0")
    with pytest.raises(gr.Error) as shown:
        friendly(bug)()
    assert shown.value.message.startswith("Something went wrong (KeyError")
    assert caplog.records[-1].exc_info is not None and "Traceback" in caplog.text
    caplog.clear()
    with pytest.raises(gr.Error) as shown:
        friendly(mistake)()
    assert shown.value.message == "n must be a whole number from 1 to 200, got 0"
    assert [r.getMessage() for r in caplog.records] == [f"refused: {shown.value.message}"]
    assert caplog.records[0].exc_info is None
