"""The text task: a person's own corpus, written here by `datasets` itself in every format the lab
reads, imported into the store, refused in one line when it cannot be, tokenized once (the second
run reads the cache) and trained on, with bits per byte among the dev scores."""
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab.cli import main as cli_main
from lab.config import ConfigError, TrainConfig
from lab.evaluation.metrics import sentence_nlls
from lab.inputs import data, tokenizers
from lab.presets import configs
from lab.storage import checkpoints
from lab.training import runs
from plugins.tasks.text import corpora
from plugins.tasks.text.corpora import DatasetError

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("a lighthouse keeper counts gulls over grey water while ferries cross the sound and "
         "children fly kites from the harbour wall").split()


def texts(n: int, seed: int = 0) -> list[str]:
    """A corpus the lab has never seen: seeded sentences of harbour words (and one non-ASCII)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        k = int(torch.randint(4, 16, (1,), generator=g))
        idx = torch.randint(len(WORDS), (k,), generator=g).tolist()
        out.append(" ".join(WORDS[j] for j in idx) + (" café" if i % 7 == 0 else ""))
    return out


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same 400 texts (column `body`, beside an int column `id`) in every format, each
    written by `datasets`; and a DatasetDict folder with train and validation splits."""
    from datasets import Dataset, DatasetDict
    folder = tmp_path_factory.mktemp("sources")
    body = texts(400)
    ds = Dataset.from_dict({"id": list(range(len(body))), "body": body})
    ds.to_json(str(folder / "corpus.jsonl"))
    ds.to_csv(str(folder / "corpus.csv"), index=False)
    ds.to_csv(str(folder / "corpus.tsv"), index=False, sep="\t")
    ds.to_parquet(str(folder / "corpus.parquet"))
    ds.save_to_disk(str(folder / "saved"))
    DatasetDict({"train": ds.select(range(300)),
                 "validation": ds.select(range(300, 400))}).save_to_disk(str(folder / "saved-dict"))
    (folder / "corpus.txt").write_text("\n".join(body) + "\n\n", encoding="utf-8")   # a blank line too
    return folder, body


def stored_texts(name: str) -> dict[str, list[str]]:
    return {s: list(corpora.split(name, s)[corpora.TEXT]) for s in corpora.info(name)["splits"]}


@pytest.mark.parametrize("file", ["corpus.jsonl", "corpus.csv", "corpus.tsv", "corpus.parquet",
                                  "saved", "corpus.txt"])
def test_every_format_imports_whole_with_a_seeded_dev_cut(sources, file):
    folder, body = sources
    meta = corpora.import_source(folder / file, "mine", dev_fraction=0.1, seed=3)
    got = stored_texts("mine")
    assert meta["text_column"] == ("text" if file.endswith(".txt") else "body")   # guessed, and said
    assert meta["split_from"] == {"from": "train", "dev_fraction": 0.1, "seed": 3}
    assert len(got["dev"]) == 40 and len(got["train"]) == 360
    assert sorted(got["train"] + got["dev"]) == sorted(body)     # every text, once; the blank line dropped
    assert meta["splits"]["dev"]["rows"] == 40
    assert meta["splits"]["train"]["characters"] == sum(len(t) for t in got["train"])
    assert meta["splits"]["train"]["bytes"] == sum(len(t.encode()) for t in got["train"])
    assert meta["preview"] == [t[:200] for t in got["train"][:3]]
    # the same seed cuts the same dev split
    corpora.import_source(folder / file, "again", dev_fraction=0.1, seed=3)
    assert stored_texts("again")["dev"] == got["dev"]


def test_a_large_import_cuts_by_row_numbers_in_order_without_an_index_list(tmp_path, monkeypatch):
    """Past IN_MEMORY_ROWS the steps go through scratch files. Blank rows interleaved (some
    only white space) are dropped before the dev cut, and both parts keep the source's order.
    `Dataset.select` is never given an index array: it turns one into a Python list, about 90
    bytes a row (3 GB for a 2 GB corpus of 33 million captions)."""
    from datasets import Dataset
    monkeypatch.setattr(corpora, "IN_MEMORY_ROWS", 50)
    monkeypatch.setattr(corpora, "CUT_BATCH", 64)
    select = Dataset.select

    def contiguous_only(self, indices, *args, **kwargs):     # save_to_disk's shards are ranges
        assert isinstance(indices, range), "Dataset.select was called with an index array"
        return select(self, indices, *args, **kwargs)
    monkeypatch.setattr(Dataset, "select", contiguous_only)
    body = texts(600, seed=5)
    lines = [t if i % 5 else "  \t" if i % 10 else "" for i, t in enumerate(body)]
    (tmp_path / "big.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines),
                                        encoding="utf-8")
    meta = corpora.import_source(tmp_path / "big.jsonl", "big", dev_fraction=0.25, seed=1)
    got = stored_texts("big")
    kept = [t for t in lines if t.strip()]
    assert len(kept) == 480 and len(got["dev"]) == 120 and len(got["train"]) == 360
    assert sorted(got["train"] + got["dev"]) == sorted(kept)
    position = {t: i for i, t in enumerate(kept)}          # the seeded sentences are distinct
    assert len(position) == len(kept)
    for part in ("train", "dev"):
        assert [position[t] for t in got[part]] == sorted(position[t] for t in got[part])
    assert meta["splits"]["dev"]["rows"] == 120


def test_a_saved_dataset_dict_keeps_its_own_splits(sources):
    folder, body = sources
    meta = corpora.import_source(folder / "saved-dict", "dict")
    got = stored_texts("dict")
    assert meta["split_from"] == {"from": "source"}
    assert got["train"] == body[:300] and got["dev"] == body[300:]


def test_the_text_column_is_chosen_or_refused_by_name(sources):
    folder, body = sources
    assert corpora.import_source(folder / "corpus.jsonl", "chosen", text_column="body")["text_column"] == "body"
    with pytest.raises(DatasetError, match=r"no column 'nope'; its columns are id, body"):
        corpora.import_source(folder / "corpus.jsonl", "x", text_column="nope")
    with pytest.raises(DatasetError, match=r"column 'id' holds int64, not text; its text columns are body"):
        corpora.import_source(folder / "corpus.parquet", "x", text_column="id")
    assert corpora.names() == ["chosen"]


def test_bad_sources_get_one_line_and_leave_nothing(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    binary = tmp_path / "weights.jsonl"
    binary.write_bytes(b"PK\x03\x04\x00\x00\x00binary")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("first line\nna\xefve".encode("utf-8")[:11] + b"na\xefve caf\xe9\n")
    blanks = tmp_path / "blanks.txt"
    blanks.write_text("\n  \n\n", encoding="utf-8")
    one = tmp_path / "one.txt"
    one.write_text("just one text\n", encoding="utf-8")
    notjson = tmp_path / "broken.jsonl"
    notjson.write_text('{"text": "fine"}\n{"text": \n', encoding="utf-8")
    cases = [(empty, r"empty\.txt is empty$"),
             (binary, r"is a binary file, not text \(a NUL byte at offset 4\)"),
             (latin, r"is not UTF-8 text: byte offset 13 \(b'\\xef'\) is not valid UTF-8"),
             (blanks, r"column 'text' holds no text \(every row is empty\)"),
             (one, r"has 1 text; a dataset needs at least 2"),
             (notjson, r"broken\.jsonl: cannot be read as jsonl: "),
             (tmp_path / "missing.csv", r"no such file or folder"),
             (tmp_path, r"a folder must be one written by Dataset.save_to_disk"),
             (Path(__file__), r"a \.py is not a corpus the lab reads; give \.txt, \.jsonl")]
    for source, said in cases:
        with pytest.raises(DatasetError, match=said) as e:
            corpora.import_source(source, "bad")
        assert "\n" not in str(e.value)
    assert corpora.names() == []
    assert [p.name for p in corpora.root().iterdir()] == []      # no half-written folder


def test_a_name_is_taken_once_and_delete_frees_it(sources, store):
    folder, _ = sources
    corpora.import_source(folder / "corpus.parquet", "mine")
    with pytest.raises(DatasetError, match=r"a dataset named 'mine' is already in the store"):
        corpora.import_source(folder / "corpus.jsonl", "mine")
    with pytest.raises(DatasetError, match=r"dataset name"):
        corpora.import_source(folder / "corpus.jsonl", "../escape")
    corpora.delete("mine")
    assert corpora.names() == []
    with pytest.raises(DatasetError, match=r"no dataset 'mine' in the store"):
        corpora.info("mine")


def test_a_job_naming_a_dataset_not_in_the_store_is_refused_before_it_is_queued(sources, store):
    """Refused where it enters, in one line, with nothing queued; a near name is offered."""
    from lab.worker import jobs
    folder, _ = sources
    corpora.import_source(folder / "corpus.jsonl", "harbour")
    train = {"task": "text", "settings": {"task": {"dataset": "harbor"}}, "epochs": 1}
    with pytest.raises(DatasetError) as e:
        jobs.submit("t", {"model": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2}, train, store=store)
    assert str(e.value) == "no dataset 'harbor' in the store; did you mean 'harbour'?"
    assert jobs.list_jobs(store) == []


KILLED_IMPORT = """
import sys
from plugins.tasks.text import corpora
corpora.import_source(sys.argv[1], "victim")
"""


def test_a_kill_inside_an_import_leaves_no_dataset_and_the_next_import_clears_it(sources, store):
    folder, _ = sources
    done = subprocess.run([sys.executable, "-c", KILLED_IMPORT, str(folder / "corpus.jsonl")], cwd=ROOT,
                          capture_output=True, env={**os.environ, "LAB_STORE": str(store),
                                                    "LAB_FAULTS": "kill@dataset-import"})
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert corpora.names() == []
    assert [p.name.startswith(".tmp-victim-") for p in corpora.root().iterdir()] == [True]
    corpora.import_source(folder / "corpus.jsonl", "victim")
    assert corpora.names() == ["victim"]
    assert [p.name for p in corpora.root().iterdir()] == ["victim"]


def test_tokenizing_is_a_batched_map_whose_second_run_reads_the_cache(sources, monkeypatch):
    folder, _ = sources
    corpora.import_source(folder / "corpus.parquet", "mine")
    tok = tokenizers.gpt2()
    first = corpora.tokenized("mine", "train", tok)
    train = list(corpora.split("mine", "train")[corpora.TEXT])
    assert list(first["ids"]) == [tok.encode(t) for t in train]
    key = corpora.tokenizer_key(tok)
    counts = corpora.info("mine")["tokens"][key]
    assert counts == {"tokenizer": "gpt2", "train": sum(len(tok.encode(t)) for t in train)}

    def never(*a, **k):
        raise AssertionError("tokenized again")
    monkeypatch.setattr(corpora, "_encode", never)
    again = corpora.tokenized("mine", "train", tok)
    assert list(again["ids"]) == list(first["ids"])
    cached = list((corpora.path_of("mine") / "tokens" / key).glob("train-*.arrow"))
    assert [str(f) for f in cached] == [again.cache_files[0]["filename"]]


def test_blocks_join_the_texts_and_count_the_bytes_their_targets_cover(sources):
    folder, _ = sources
    corpora.import_source(folder / "saved-dict", "dict")
    tok = tokenizers.gpt2()
    blocks = corpora.blocks("dict", "dev", tok, 16)
    eos = tok.eos_id
    stream = [t for ids in corpora.tokenized("dict", "dev", tok)["ids"] for t in [eos, *ids]]
    assert all(len(b) == 16 for b in blocks["ids"])
    assert [t for b in blocks["ids"] for t in b] == stream[:16 * len(blocks)]   # the last partial dropped
    b = blocks[0]
    inner = tok.decode([t for t in b["ids"][1:] if t != eos])
    assert b["bytes"] == len(inner.encode()) + b["ids"][1:].count(eos)


def _train(name, *sets, store=None, parent=None):
    model_cfg, train_cfg, _ = configs("tiny", ["n_layer=1", "n_embd=32", "n_head=2", "max_steps=4",
                                               "max_dev=30", "batch_size=8", *sets])
    events = list(runs.train(name, None if parent else model_cfg, train_cfg, parent=parent, store=store))
    assert events[-1]["event"] == "done", events[-1]
    return events


def test_a_model_trains_on_its_own_corpus_with_bits_per_byte_from_its_dev_texts(sources):
    folder, _ = sources
    corpora.import_source(folder / "corpus.jsonl", "mine")
    events = _train("mine-model", "task=text", "task.dataset=mine")
    said = next(e for e in events if e["event"] == "data")
    assert (said["train_items"], said["dev_items"], said["unit"]) == (380, 20, "texts")
    scores = [e for e in events if e["event"] == "eval"][-1]
    ck = checkpoints.load("mine-model")
    assert ck.meta["train"]["settings"] == {"task": {"dataset": "mine", "examples": "lines", "bleu": "auto"}}
    tok = ck.tokenizer
    dev = list(corpora.split("mine", "dev")[corpora.TEXT])
    seqs = [[tok.eos_id, *tok.encode(t), tok.eos_id] for t in dev]
    with torch.no_grad():
        nll, n = sentence_nlls(ck.model.eval(), seqs, tok.eos_id)
    # lm-evaluation-harness's bits per byte: the summed NLL in bits over the UTF-8 bytes (each
    # text's end-of-text predicts its newline: one byte and one word more)
    bpb = nll.sum().item() / math.log(2) / sum(len(t.encode()) + 1 for t in dev)
    assert scores["dev_bits_per_byte"] == pytest.approx(bpb, rel=1e-5)
    words = sum(len(t.split()) + 1 for t in dev)
    assert scores["dev_word_perplexity"] == pytest.approx(math.exp(nll.sum().item() / words), rel=1e-5)


def test_blocks_a_character_vocabulary_and_a_fine_tune_train_on_it(sources):
    folder, _ = sources
    corpora.import_source(folder / "saved-dict", "dict")
    events = _train("blocks", "task=text", "task.dataset=dict", "task.examples=blocks", "n_positions=32")
    assert next(e for e in events if e["event"] == "data")["unit"] == "blocks"
    _train("chars", "task=text", "task.dataset=dict", "tokenizer=char")
    assert checkpoints.load("chars").tokenizer.kind == "char"
    _train("tuned", "task=text", "task.dataset=dict", parent="blocks")
    assert checkpoints.load("tuned").meta["parent"] == "blocks"


def test_the_task_settings_are_set_and_checked_like_a_plugin_s():
    cfg = TrainConfig.from_dict({"task": "text", "task.dataset": "mine"})
    assert cfg.plugin_settings("task").dataset == "mine"
    assert TrainConfig.from_dict(json.loads(cfg.to_json())) == cfg
    assert "dataset" not in cfg.replace(task="captions").settings["task"]   # another task drops them
    with pytest.raises(ConfigError, match=r"task=text trains on a dataset in the store: --set task.dataset=NAME"):
        TrainConfig.from_dict({"task": "text"})
    with pytest.raises(ConfigError, match=r"the task plugin 'captions' has no setting 'dataset'"):
        TrainConfig.from_dict({"task.dataset": "mine"})
    with pytest.raises(ConfigError, match=r"task.examples must be 'lines' or 'blocks', got 'pages'"):
        TrainConfig.from_dict({"task": "text", "task.dataset": "mine", "task.examples": "pages"})


def test_the_data_commands(sources, capsys):
    folder, _ = sources
    assert cli_main(["data", "import", str(folder / "corpus.csv"), "--name", "mine",
                     "--dev-fraction", "0.25"]) == 0
    said = capsys.readouterr().out
    assert "text column 'body' of id, body" in said and "dev 100 texts" in said
    assert "--set task=text --set task.dataset=mine" in said
    assert cli_main(["data", "list", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["mine"]
    assert cli_main(["data", "show", "mine"]) == 0
    assert "train 300 texts" in capsys.readouterr().out
    assert cli_main(["data", "delete", "mine"]) == 2
    assert "add --yes to confirm" in capsys.readouterr().err
    assert cli_main(["data", "delete", "mine", "--yes"]) == 0
    assert cli_main(["data", "show", "mine"]) == 2
    assert capsys.readouterr().err.startswith("error: no dataset 'mine' in the store")
    assert cli_main(["train", "--preset", "tiny", "--name", "m", "--set", "task=text",
                     "--set", "task.dataset=absent"]) == 2
    assert "no dataset 'absent' in the store" in capsys.readouterr().err


def test_models_of_a_dataset_are_scored_on_its_texts_with_bits_per_byte(sources):
    from lab.config import DecodeConfig
    from lab.evaluation.evaluate import evaluate, evaluate_live, verdicts
    from lab.inputs import tasks
    from lab.modeling.model import build
    from tests.conftest import tiny_config
    folder, body = sources
    corpora.import_source(folder / "saved-dict", "dict")
    _train("own", "task=text", "task.dataset=dict")
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "imported",
                     provenance={"source": "hf"})                       # no task: an import
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "captions-model",
                     provenance={"source": "scratch", "task": "captions"})
    own, imported = checkpoints.load("own"), checkpoints.load("imported")
    texts, source = tasks.texts([own], "test")
    assert texts == body[300:]                      # the dataset has no test split: its dev
    assert source == {"split": "dev", "source": "dataset dict", "named": "dataset dict", "unit": "texts",
                      "note": "dataset dict has no test split: scored on dev"}
    assert tasks.texts([own, imported], "test")[0] == texts          # an import follows the others
    with pytest.raises(ConfigError, match=r"trained on different corpora.*own: dataset dict; "
                                          r"captions-model: "):
        tasks.texts([own, checkpoints.load("captions-model")], "test")
    alone = evaluate("own", n=5, skip_bleu=True)
    assert alone["provenance"]["data_dir"] == "dataset dict" and alone["split"] == "dev"
    assert (alone["provenance"]["unit"], alone["provenance"]["named"]) == ("texts", "dataset dict")
    # the rows of a comparison are called by their task's word (its unit), texts when they differ
    from lab.ui.common import unit_of
    assert [unit_of(names) for names in (["own", "imported"], ["captions-model", "imported"],
                                         ["imported"], ["own", "captions-model"])] == \
        ["texts", "captions", "captions", "texts"]
    *_, last = evaluate_live({"imported": imported, "own": own}, 100, DecodeConfig(decoder="greedy"),
                             chunk=50, n_boot=50)
    assert last["done"] == 100 and last["provenance"]["texts"] == "dataset dict"
    assert last["models"]["own"]["bits_per_byte"] == pytest.approx(alone["perplexity"]["bits_per_byte"],
                                                                    rel=1e-6)
    assert any("bits per byte" in v for v in verdicts(last))
    assert "forward_bleu" in last["models"]["own"]        # task.bleu=auto: these average 10 words


def test_bleu_is_a_task_setting_and_not_scored_on_long_texts(sources):
    """task.bleu=no, or auto on texts averaging over BLEU_MAX_WORDS words: Evaluate generates
    nothing and shows perplexity and bits per byte alone, saying why BLEU is not scored."""
    from lab.config import DecodeConfig
    from lab.evaluation.evaluate import evaluate, evaluate_live, verdicts
    from lab.ui.evaluate import numeric_table, provenance_md, table
    from plugins.tasks.text import BLEU_MAX_WORDS, TextTask
    folder, _ = sources
    corpora.import_source(folder / "saved-dict", "dict")
    _train("short", "task=text", "task.dataset=dict", "task.bleu=no")
    _train("other", "task=text", "task.dataset=dict")
    short, other = checkpoints.load("short"), checkpoints.load("other")
    long_texts = [" ".join(["word"] * (BLEU_MAX_WORDS + 5))] * 3
    assert "average 35.0 words, over the 30" in TextTask().bleu_skipped(other, long_texts)
    assert TextTask().bleu_skipped(other, ["a short text"]) == ""
    *_, last = evaluate_live({"other": other, "short": short}, 20, DecodeConfig(decoder="greedy"),
                             chunk=10, n_boot=50)
    assert last["provenance"]["bleu_skipped"] == "short was trained with task.bleu=no"
    assert last["provenance"]["generated"] == {}                        # nothing generated
    assert not any("bleu" in key for row in last["models"].values() for key in row)
    assert not any("bleu" in key for key in last["differences"][0])
    said = verdicts(last)              # per word, per byte, per sentence; no BLEU
    assert len(said) == 3 and not any("BLEU" in v for v in said)
    assert table(last)[1][-3:] == ["— (not scored)"] * 3
    headers, rows = numeric_table(last)                 # the download: BLEU cells empty
    assert all(v is None for row in rows for h, v in zip(headers, row) if "bleu" in h or h == "backward_n")
    summary = provenance_md(last)
    assert "BLEU not scored: short was trained with task.bleu=no" in summary
    assert "20 / 20** texts scored" in summary and "paired bootstrap by text" in summary
    alone = evaluate("short", n=5)
    assert "bleu" not in alone and alone["provenance"]["bleu_skipped"].endswith("task.bleu=no")


def test_a_sweep_over_a_dataset_trains_and_scores_on_its_texts(sources, store):
    """A grid over how the corpus becomes examples: each run trains on the dataset in the
    background worker and is scored on its held-out texts (dev: it has no test split)."""
    from lab import sweeps
    from tests.test_sweeps import _serve
    folder, body = sources
    corpora.import_source(folder / "saved-dict", "dict")
    sweeps.start({"name": "own", "preset": "tiny", "grid": {"task.examples": ["lines", "blocks"]},
                  "score": {"n": 12, "decoders": ["greedy"]},
                  "set": ["task=text", "task.dataset=dict", "tokenizer=words", "max_steps=3",
                          "max_dev=20", "n_positions=32"]}, store)
    _serve(store, "own")
    t = sweeps.table("own", store)
    assert [r["status"] for r in t["rows"]] == ["done", "done"]
    for run in ("own-lines", "own-blocks"):
        scored = sweeps.read_results("own", run, store)["kept"][0]["splits"]["test"]
        dev = body[300:]
        assert scored["n"] == 12
        assert scored["subset_hash"] == data.subset_hash([dev[i] for i in data.subset_indices(100, 12, 0)])


def test_compare_and_generate_continue_held_out_texts(sources, capsys):
    """held_out=N: row i starts with the first N words of a held-out (dev) text drawn by the seed,
    each row's continuation is what that prompt alone gives, and the texts come beside (Compare's
    table and CSV, generate's --json); a prefix and held-out prompts together are refused."""
    from lab.config import DecodeConfig
    from lab.modeling.generate import sample_captions
    from lab.ui import compare
    folder, _ = sources
    corpora.import_source(folder / "corpus.jsonl", "mine")
    _train("mine-model", "task=text", "task.dataset=mine")
    dev = list(corpora.split("mine", "dev")[corpora.TEXT])
    table, record = compare.compare(["mine-model"], {"decoder": "greedy"}, seed=3, n=4, held_out=3)
    held = record["held_out_texts"]
    assert len(held) == 4 and set(held) <= set(dev) and record["held_out"] == 3
    rows, per_cell = compare.count_labels(["mine-model"])
    assert record["unit"] == "texts" and rows["label"] == "texts"
    assert per_cell["label"] == "texts per cell"
    from lab.ui import build_app                 # a page opens with the store's choice named so
    labels = {getattr(b, "label", None) for b in build_app().blocks.values()}
    assert {"texts", "texts per cell"} <= labels and not {"captions", "captions per cell"} & labels
    ck = checkpoints.load("mine-model")
    for text, whole_text in zip(record["captions"]["mine-model"], held):
        start = " ".join(whole_text.split()[:3])
        assert text.startswith(start)
        alone = sample_captions(ck.model, ck.tokenizer, 1, DecodeConfig(decoder="greedy"), prompt=start)
        assert text == alone[0].text
    assert "held-out text" in table and "its first 3 words are the row" in table
    csv = compare.caption_files(record)
    assert any(str(f).endswith(".csv") and "held-out text" in Path(f).read_text() for f in csv)
    with pytest.raises(ConfigError, match="a prefix .* and held-out prompts .* both given"):
        compare.plan(["mine-model"], {"decoder": "greedy"}, prefix="a", held_out=2)
    assert cli_main(["generate", "--checkpoint", "mine-model", "--held-out", "2", "--n", "3",
                     "--decoder", "greedy", "--json"]) in (0, None)
    rows = json.loads(capsys.readouterr().out)["captions"]
    assert len(rows) == 3 and all(r["text"].startswith(" ".join(r["held_out_text"].split()[:2]))
                                  for r in rows)


def test_the_train_form_offers_the_stores_datasets_and_follows_them(sources, store):
    """task.dataset is a list of the store's datasets (store_choices), not a box to type a name
    into; a dataset imported while the page is open joins the list on the next tick."""
    import gradio as gr
    from lab.ui.common import Context
    from lab.ui.train import _follow_store_choices, _setting_component
    from plugins.tasks.text import TextSettings
    folder, _ = sources
    corpora.import_source(folder / "corpus.txt", "first")
    field = next(f for f in __import__("dataclasses").fields(TextSettings) if f.name == "dataset")
    ctx = Context(store=str(store))
    with gr.Blocks():
        dd = _setting_component("task", "text", field, True, "", ctx.store)
        _follow_store_choices(ctx, [dd])
    assert isinstance(dd, gr.Dropdown) and [tuple(c) for c in dd.choices] == [("(none chosen)", ""),
                                                                              ("first", "first")]
    (refresh, (seen,), _), = ctx.pulse.parts
    assert refresh(seen.value) == (gr.skip(), gr.skip())        # nothing new: left as it is
    corpora.import_source(folder / "corpus.txt", "second")
    update, now = refresh(seen.value)
    assert [value for _, value in now] == ["", "first", "second"] and update["choices"] == now
    from lab.ui.train import _store_choices
    assert _store_choices(lambda store: [])[0] == ("(none in the store yet)", "")

    def broken(store):
        raise PermissionError("a store it cannot read")
    assert _store_choices(broken) == [("(none in the store yet)", "")]   # the form still builds


def test_two_checkpoints_trained_on_the_same_data_are_alike_whatever_else_their_runs_set():
    """The pair Compare opens on: a fine-tune beside a scratch model of the same task and data. A
    run's other task settings (scheduled sampling, BLEU samples), or a checkpoint saved before its
    task recorded settings, do not part them; another dataset does."""
    from lab.ui.common import trained_on
    older = {"source": "scratch"}
    captions = {"task": "captions", "train": {"task": "captions", "settings": {"task": {
        "bleu_samples": 8, "scheduled_sampling": "linear"}}}}
    assert trained_on(older) == trained_on(captions)
    text = lambda name: {"task": "text", "train": {"task": "text", "settings": {"task": {"dataset": name, "examples": "lines"}}}}  # noqa: E731
    assert trained_on(text("wiki")) == trained_on({**text("wiki"), "source": "finetune"})
    assert trained_on(text("wiki")) != trained_on(text("poems")) != trained_on(captions)
