"""What a person takes away and what a first visit does: tables as CSV/JSON, the comparison report
(opened offline), the full dev set scored at the end of a run, the getting-started steps."""
import csv
import io
import json
import math

import gradio as gr
import pytest
import torch

from lab.storage import checkpoints, exports
from lab.evaluation import report
from lab.worker import jobs
from lab.training import runs
from lab.inputs import tokenizers
from lab.config import ModelConfig, TrainConfig
from lab.modeling.model import build
from tests.conftest import tiny_config


def _save(name, seed=0, store=None):
    torch.manual_seed(seed)
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tokenizers.gpt2(),
                     name, store, provenance={"source": "scratch"})


def test_a_table_downloads_as_csv_and_json_with_its_provenance(store):
    headers = ["checkpoint", "perplexity ↓", "note"]
    rows = [["a", 12.5, 'says "hi", twice'], ["b", float("nan"), "é\nnew line"]]
    csv_path, json_path = exports.write_table(headers, rows, "scores a/b", store, {"seed": 3})
    from pathlib import Path
    assert Path(csv_path).parent == store / ".lab" / "exports" and Path(json_path).parent == Path(csv_path).parent
    assert Path(csv_path).name.startswith("scores-a-b-") and csv_path.endswith(".csv")
    back = list(csv.reader(io.StringIO(open(csv_path, encoding="utf-8").read())))
    assert back[0] == headers and back[1] == ["a", "12.5", 'says "hi", twice'] and back[2][2] == "é\nnew line"
    doc = json.load(open(json_path, encoding="utf-8"))
    assert doc["seed"] == 3 and doc["columns"] == headers
    assert doc["rows"][0] == {"checkpoint": "a", "perplexity ↓": 12.5, "note": 'says "hi", twice'}
    assert doc["rows"][1]["perplexity ↓"] is None          # NaN is no JSON number


def test_downloads_never_pile_up(store, tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    for i in range(30):
        (folder / f"f{i}.csv").write_text("x")
    exports.prune(folder, keep=10)
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"f{i}.csv" for i in range(21, 30))
    (folder / "big.zip").write_bytes(b"x" * 1000)                # bytes count as well as files
    exports.prune(folder, keep=100, keep_bytes=500)
    assert list(folder.iterdir()) == []


def test_the_report_is_one_file_with_no_address_outside_it(store):
    from lab.evaluation import attention_maps
    _save("a", store=store)
    ck = checkpoints.load("a", store)
    cap = attention_maps.capture(ck.model, ck.tokenizer, "A dog on a couch .")
    doc = report.self_contained(attention_maps.bertviz_html(cap, "head", "/assets"), "/assets")
    assert "/assets/" not in doc and "cdnjs" not in doc and "src=" not in doc.split("<body", 1)[1][:2000]
    assert "define('d3'" in doc and doc.count("<script") >= 5
    page = report.comparison("<table class='lab-compare'></table>", {"seed": 0}, {"a": {"model": {}}},
                             {"headers": ["checkpoint"], "rows": [["a"]], "verdicts": ["a is better"],
                              "provenance": {"n": 100}}, [("a", "row 1: A dog", doc, 400)])
    assert "a is better" in page and 'sandbox="allow-scripts"' in page
    # no attribute loads anything from an address (the libraries' own comments name some; the
    # browser test opens the file with every request blocked)
    unescaped = __import__("html").unescape(page)
    assert not __import__("re").search(r"""(src|href)\s*=\s*["']?(https?:)?//""", unescaped)
    assert "cdnjs" not in unescaped


def test_the_report_escapes_what_people_typed(store):
    """A caption, a setting or a checkpoint's details holding markup stay text in the report."""
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    page = report.comparison(f"<td>{__import__('html').escape(evil)}</td>", {"prefix": evil},
                             {"a": {"note": evil}}, {"headers": [evil], "rows": [[evil]],
                                                     "verdicts": [evil], "provenance": {"x": evil}},
                             [("a", evil, "<p>doc</p>", 100)])
    assert "<script>alert" not in page and "<img src=x" not in page
    assert page.count("&lt;script&gt;alert(1)") >= 6


def test_final_dev_scores_the_kept_checkpoint_on_every_dev_caption(corpus_dir):
    cfg = TrainConfig(epochs=1, lr=1e-3, max_train=64, max_dev=40, settings={"task": {"final_dev": True}},
                      tokenizer="words")     # 5,000 dev captions through a small output layer
    model_cfg = ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48)
    events = list(runs.train("fd", model_cfg, cfg))
    final = [e for e in events if e["event"] == "final"]
    assert len(final) == 1 and final[0]["final_dev_captions"] == 5000
    assert final[0]["text"].startswith("the kept checkpoint on all 5,000 dev captions: perplexity ")
    metrics = checkpoints.info("fd")["metrics"]
    assert metrics["final_dev_captions"] == 5000 and metrics["dev_perplexity"] != metrics["final_dev_perplexity"]
    assert math.isfinite(metrics["final_dev_word_perplexity"])
    assert metrics["final_summary"] == f"perplexity {metrics['final_dev_perplexity']:.2f} on all 5,000 dev captions"
    assert [e for e in events if e["event"] == "progress" and e.get("final")][0]["dev_items"] == 5000


def test_without_final_dev_only_the_chosen_dev_captions_are_scored(corpus_dir):
    cfg = TrainConfig(epochs=1, lr=1e-3, max_train=64, max_dev=40)
    list(runs.train("nofd", ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=48), cfg))
    assert "final_dev_captions" not in checkpoints.info("nofd")["metrics"]


def test_getting_started_steps_queue_once_and_say_where_they_stand(store):
    from lab.ui import start
    assert "not started" in start.step_status(start.SCRATCH, store)
    said = start.train_scratch(store)
    assert "Queued job 1" in said and start.SCRATCH in said
    assert "already making" in start.train_scratch(store)          # a second press queues nothing
    job = jobs.get(1, store)
    assert job["spec"]["preset"] == "quick" and job["spec"]["train"]["epochs"] == 1
    assert "queued" in start.step_status(start.SCRATCH, store)
    _save(start.SMOLLM2, store=store)             # stands in for the import (tested in test_smollm2)
    assert "Queued job 2" in start.finetune(store)
    spec = jobs.get(2, store)["spec"]
    assert spec["parent"] == start.SMOLLM2 and spec["preset"] == "smollm2-quick"
    assert spec["train"]["max_train"] == 800 and spec["train"]["max_dev"] == 200
    with pytest.raises(Exception, match="not in the store yet"):
        start.ready_to_compare(store)
    jobs.request_stop(1, "now", store)             # a queued job stops at once
    assert "Press the button again" in start.step_status(start.SCRATCH, store)
    assert "Queued job 3" in start.train_scratch(store)            # and starts anew
    _save(start.FINETUNE, seed=1, store=store)
    assert "queued" in start.step_status(start.FINETUNE, store)     # its job still runs (final_dev, say)
    for job_id in (2, 3):
        jobs.request_stop(job_id, "now", store)
    _save(start.SCRATCH, store=store)
    assert "done" in start.step_status(start.FINETUNE, store)
    assert start.ready_to_compare(store) == [start.SCRATCH, start.FINETUNE]


def test_the_train_tab_chooses_a_job_started_elsewhere(store):
    """A job queued by the getting-started panel shows in the Train tab without being picked."""
    from lab.ui import start
    from lab.ui.jobs_view import poll
    first = poll(None, [], store=store)
    assert "No job selected" in first[0]
    again = poll(None, [], first[-1], store=store)       # nothing changed: nothing is sent again
    assert all(part == gr.skip() for part in again[:4])
    start.train_scratch(store)
    progress, *_, labels, _, _ = poll(None, [], again[-1], store=store)
    assert labels["value"] == "1" and "data-status='queued'" in progress
    jobs.request_stop(1, "now", store)


def test_score_downloads_hold_a_number_per_cell(store):
    """Each figure and its interval's ends are columns of numbers, not '26.89 [22.39, 32.06]'."""
    from lab.ui.evaluate import numeric_table, score_files
    figure = {"n": 100, "backward_n": 100}
    for i, f in enumerate(("perplexity", "word_perplexity", "bits_per_byte", "forward_bleu",
                           "backward_bleu", "harmonic_bleu")):
        figure |= {f: 10.0 + i, f"{f}_ci": [9.0 + i, 11.0 + i]}
    snap = {"models": {"a": figure}, "provenance": {"perplexity_shown": "per sentence (assignment)",
                                                     "checkpoints": ["a"], "texts": "/srv/data/coco"},
            "differences": {}}
    headers, rows = numeric_table(snap)
    assert headers[:6] == ["checkpoint", "n", "backward_n", "perplexity", "perplexity_low", "perplexity_high"]
    assert rows == [["a", 100, 100, 10.0, 9.0, 11.0, 11.0, 10.0, 12.0, 12.0, 11.0, 13.0, 13.0, 12.0,
                     14.0, 14.0, 13.0, 15.0, 15.0, 14.0, 16.0]]
    csv_path, _, html_path = score_files({"verdicts": ["a is the only one"], "provenance": snap["provenance"],
                                          "snapshot": snap}, store)
    back = list(csv.reader(open(csv_path, encoding="utf-8")))
    assert [float(v) for v in back[1][3:]] == rows[0][3:]
    # and a report to read: the figures with their intervals, the verdicts, no address outside it
    page = open(html_path, encoding="utf-8").read()
    assert html_path.endswith(".html") and "tfmr-lab evaluation: a" in page
    assert "10.00 [9.00, 11.00]" in page and "a is the only one" in page
    assert "http" not in page.replace("http-equiv", "")
    assert "/srv/data" not in page and "&quot;texts&quot;: &quot;coco&quot;" in page   # no server folder in a report to share
    snap["provenance"]["perplexity_shown"] = "per word"           # tokenizers differ: not shown
    assert numeric_table(snap)[1][0][3:6] == [None, None, None]


def test_scores_use_the_decoder_each_checkpoint_writes_its_captions_with(store):
    """With a decoder per checkpoint, *Which is better?* scores each checkpoint with its own (the
    one its captions beside it were drawn with), and its summary names each one."""
    from lab.ui.compare import scores_form
    from lab.ui.evaluate import scores
    _save("a", 0, store)
    _save("b", 1, store)
    greedy, top_k = {"decoder": "greedy"}, {"decoder": "top_k", "top_k": 5}
    *_, (rows, said, record) = scores(["a", "b"], greedy, 20, 0, "auto", store,
                                      per_checkpoint={"b": top_k})
    assert record["provenance"]["decoders"]["b"]["decoder"] == "top_k"
    assert record["provenance"]["decoders"]["a"]["decoder"] == "greedy"
    assert "decoders **a** greedy; **b** top_k (top_k 5, temperature 1.0)" in said
    *_, (alone, _, _) = scores(["b"], top_k, 20, 0, "auto", store)
    assert rows[1][1:] == alone[0][1:]              # b's figures are those of its own decoder
    # the page's form: the per-checkpoint table ticked, as the Compare tab sends it
    from lab.config import DecodeConfig
    fields = [None] * len(DecodeConfig.setting_names())
    table = [["b", "top_k", *[5 if n == "top_k" else None for n in DecodeConfig.setting_names()]]]
    *_, (form_rows, _, _) = scores_form(["a", "b"], "greedy", *fields, 0, "", 8, 0, True, table, 20, "auto",
                                        store=store)
    assert form_rows == rows
