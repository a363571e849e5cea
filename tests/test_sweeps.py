"""Sweeps: a grid of runs x seeds queued through the job ledger, each scored in its own job when its
training ends; the table's intervals and paired differences; stop / resume run by run; recipes;
the BLEU between the splits that the reports give."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.worker import jobs
from lab import sweeps
from lab.config import ConfigError
from lab.errors import LabError
from lab.training.runs import read_events
from lab.worker.jobs import Worker
from tests.conftest import ROOT

# a word vocabulary keeps the tiny runs cheap (GPT-2's output layer would be most of their work)
TINY = ["max_train=120", "max_dev=40", "epochs=1", "log_every=1", "tokenizer=words"]


def _lab(store, *args, timeout=600):
    return subprocess.run([sys.executable, "-m", "lab", "--store", str(store), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _serve(store, name, timeout=300):
    import time
    worker, t0 = Worker(store, poll_s=0.2), time.time()
    while not sweeps.all_ended(name, store):
        assert time.time() - t0 < timeout, sweeps.get(name, store)[1]
        worker.tick()
        time.sleep(0.3)
    for proc in worker.children.values():
        proc.wait(timeout=60)


def test_sweep_from_the_command_line_trains_scores_and_reads_as_one_table(store, tmp_path):
    """Two settings, two decoders: every run trains in its own job, is scored on the same captions
    with the same seeds, and the table pairs each row with the baseline row."""
    out = _lab(store, "sweep", "start", "heads", "--preset", "tiny", "--grid", "n_head=1,2",
               *[a for s in TINY for a in ("--set", s)], "--n", "24",
               "--decoder", "random", "--decoder", "greedy", "--wait")
    assert out.returncode == 0, out.stderr
    assert "heads-n_head1: done" in out.stdout and "| # | n_head | decoder |" in out.stdout
    t = json.loads(_lab(store, "sweep", "show", "heads", "--json").stdout)
    rows = t["rows"]
    # grid values keep their setting's type in the JSON (n_head is a whole number)
    assert [(r["run"], r["n_head"], r["decoder"]) for r in rows] == [
        ("heads-n_head1", 1, "random t=1"), ("heads-n_head1", 1, "greedy"),
        ("heads-n_head2", 2, "random t=1"), ("heads-n_head2", 2, "greedy")]
    for r in rows:
        assert r["status"] == "done" and r["params"] > 0 and r["train_s"] > 0 and r["tokens_per_s"] > 0
        for key in ("perplexity", "word_perplexity", "forward_bleu", "backward_bleu", "harmonic_bleu"):
            lo, hi = r[f"{key}_ci"]
            assert lo <= r[key] <= hi, (key, r)
        assert r["kv_bytes_per_token"] == 2 * 2 * 64 * 4       # 2 layers x (k, v) x width 64 x fp32
    # rows of one run share its perplexity; the baseline row has no difference with itself
    assert rows[0]["perplexity"] == rows[1]["perplexity"] and rows[0]["perplexity_diff"] is None
    assert rows[1]["perplexity_diff"] is None                      # the same checkpoint as #1
    assert rows[2]["perplexity_diff"] == pytest.approx(rows[2]["perplexity"] - rows[0]["perplexity"])
    lo, hi = rows[3]["harmonic_bleu_diff_ci"]
    assert lo <= rows[3]["harmonic_bleu_diff"] <= hi
    assert sum(bool(r["best"]) for r in rows) >= 1
    # the runs' jobs are ordinary jobs, their checkpoints ordinary checkpoints
    assert {j["name"] for j in jobs.list_jobs(store)} == {"heads-n_head1", "heads-n_head2"}
    listed = json.loads(_lab(store, "sweep", "list", "--json").stdout)
    assert listed[0]["name"] == "heads" and listed[0]["statuses"] == {"done": 2}
    out = _lab(store, "sweep", "export", "heads", "--out", str(tmp_path / "x"))
    files = sorted(Path(p).suffix for p in out.stdout.split())
    assert files == [".csv", ".html", ".json", ".md"], out.stderr
    report = (tmp_path / "x" / "heads.html").read_text()
    assert "<svg" in report and "heads-n_head2" in report and "src=\"http" not in report
    csv_head = (tmp_path / "x" / "heads.csv").read_text().splitlines()[0]
    assert "harmonic_bleu_ci_lo" in csv_head and "harmonic_bleu_ci_hi" in csv_head


def test_a_run_stopped_while_scoring_resumes_by_scoring_only(store):
    """The worst moment: the run trained, and its job died while scoring. Resume scores it again
    (no training), and a run stopped before it started starts. The runs keep two bests (the best
    dev perplexity and the best dev BLEU), and both are scored."""
    sweeps.start({"name": "s", "preset": "tiny", "grid": {"n_layer": [1, 2]}, "score": {"n": 12},
                  "set": TINY + ["epochs=3", "early_stop=none", "keep_also=bleu", "task.bleu_samples=8"]},
                 store)
    _, runs = sweeps.get("s", store)
    jobs.request_stop(runs[1]["job"]["id"], store=store)           # queued: stopped before it started
    _serve(store, "s")
    _, runs = sweeps.get("s", store)
    assert [sweeps.run_status(r, store) for r in runs] == ["done", "stopped"]
    first = runs[0]
    sweeps.results_path("s", first["name"], store).unlink()       # as if killed while scoring
    with jobs.connect(store) as con:
        con.execute("UPDATE jobs SET status='interrupted' WHERE id=?", (first["job"]["id"],))
    said = sweeps.resume("s", store=store)
    assert len(said) == 2 and all("queued job" in line for line in said), said
    _, runs = sweeps.get("s", store)
    assert runs[0]["job"]["spec"].get("after_only") is True
    assert runs[1]["job"]["spec"].get("after_only") is None
    _serve(store, "s")
    _, runs = sweeps.get("s", store)
    assert [sweeps.run_status(r, store) for r in runs] == ["done", "done"]
    starts = [e for e in read_events(Path(store) / "_runs" / first["name"] / "metrics.jsonl")
              if e["event"] == "start"]
    assert len(starts) == 1                                        # scored again, not trained again
    evals = [e for e in read_events(Path(store) / "_runs" / first["name"] / "metrics.jsonl")
             if e["event"] == "eval"]
    res = sweeps.read_results("s", first["name"], store)
    by = {k["kept_by"]: k for k in res["kept"]}
    assert by["dev perplexity"]["checkpoint"] == first["name"]
    assert by["dev harmonic BLEU"]["checkpoint"] == first["name"] + "-bleu"
    best_ppl = min(evals, key=lambda e: e["dev_perplexity"])
    best_bleu = max(evals, key=lambda e: e["dev_harmonic_bleu"])     # the first of ties
    assert by["dev perplexity"]["epoch"] == best_ppl["epoch"]
    assert by["dev harmonic BLEU"]["epoch"] == best_bleu["epoch"]
    assert by["dev harmonic BLEU"]["dev_harmonic_bleu"] == best_bleu["dev_harmonic_bleu"]
    rows = sweeps.table("s", store)["rows"]
    assert [r["kept_by"] for r in rows] == ["dev perplexity", "dev harmonic BLEU"] * 2
    assert sweeps.resume("s", store=store) == ["nothing to resume: every run is queued, running or done"]


def test_runs_with_different_tokenizers_compare_per_word(store):
    """A grid over the tokenizer: BLEU on whitespace words for every run, the lowest perplexity
    and the paired difference per word (per token they differ in kind), said under the table."""
    sweeps.start({"name": "tok", "preset": "tiny", "grid": {"tokenizer": ["gpt2", "char"]},
                  "score": {"n": 12, "decoders": [{"decoder": "greedy", "max_new_tokens": 60}],
                            "exposure": True},
                  "set": TINY + ["n_positions=160", "max_steps=3"]}, store)
    _serve(store, "tok")
    t = sweeps.table("tok", store)
    assert t["spec"]["score"]["bleu_tokens"] == "words" and t["per_word"]
    a, b = t["rows"]
    assert (a["tokenizer"], b["tokenizer"]) == ("gpt2", "char") and b["status"] == "done"
    assert b["perplexity_diff"] == pytest.approx(b["word_perplexity"] - a["word_perplexity"])
    assert "lowest perplexity" in (a["best"] if a["word_perplexity"] < b["word_perplexity"] else b["best"])
    assert "runs compare per word" in sweeps.how_text(t)
    res = sweeps.read_results("tok", "tok-char", store)["kept"][0]
    assert res["tokenizer"] == "char" and res["bleu_tokens"] == "words"
    # the exposure-bias gap after 8 own tokens, measured on the same captions, with its interval
    assert [r["prefix"] for r in res["splits"]["test"]["exposure"]] == [0, 1, 2, 4, 8]
    for r in (a, b):
        lo, hi = r["exposure_gap_ci"]
        assert lo <= r["exposure_gap"] <= hi
    assert "exposure gap @8 [95%]" in sweeps.display(t)[0]


def test_a_birthplace_sweep_scores_accuracy_paired_by_question(store):
    """Fine-tunes on the birth-place questions (here from scratch, two learning rates): each run
    answers the same dev questions greedily; the table shows accuracy with its Wilson interval
    and the difference against row 1 paired by question."""
    sweeps.start({"name": "bp", "preset": "birthplace-finetune", "grid": {"lr": [6e-4, 3e-3]},
                  "set": ["n_layer=2", "n_head=2", "n_embd=32", "max_train=32",
                          "max_dev=16", "batch_size=16", "epochs=1"],
                  "score": {"split": "dev", "n": 40}}, store)
    _serve(store, "bp")
    t = sweeps.table("bp", store)
    assert t["answers"] and [r["status"] for r in t["rows"]] == ["done", "done"]
    a, b = t["rows"]
    correct = [sweeps.read_results("bp", r["run"], store)["kept"][0]["splits"]["dev"]["correct"]
               for r in (a, b)]
    assert [len(c) for c in correct] == [40, 40] and a["split"] == "dev"
    for r, c in zip((a, b), correct):
        assert r["accuracy"] == sum(c) / 40 and r["accuracy_ci"][0] <= r["accuracy"] <= r["accuracy_ci"][1]
    assert a["accuracy_diff"] is None and b["accuracy_diff"] == pytest.approx(b["accuracy"] - a["accuracy"])
    assert b["accuracy_diff_ci"][0] <= b["accuracy_diff"] <= b["accuracy_diff_ci"][1]
    assert "best accuracy" in (a["best"] + b["best"])
    headers, _ = sweeps.display(t)
    assert "accuracy [95%]" in headers and "Δaccuracy vs #1 [95%]" in headers and "fwd BLEU" not in headers
    assert "Wilson" in sweeps.how_text(t) and "dev accuracy" in sweeps.summary_line(
        sweeps.read_results("bp", a["run"], store))


@pytest.mark.parametrize("change, message", [
    ({"grid": {"n_head": [1, 5]}}, "run 2 (n_head=5, seed=0): n_embd=64 is not divisible by n_head=5"),
    ({"grid": {"nope": [1]}}, "run 1 (nope=1, seed=0): --set: unknown key 'nope'"),
    ({"grid": {"attention.window": [4]}}, "the attention plugin 'mha' has no setting 'window'"),
    ({"seeds": [0, 0]}, "seeds repeats a seed"),
    ({"grid": {"n_head": [1, 2, 1]}}, "grid n_head: 1 appears more than once; write each value once"),
    ({"grid": {"n_head": [1, "1"]}}, "grid n_head: 1 appears more than once"),
    ({"checkpoints": ["a", "a"]}, "checkpoints names a checkpoint more than once"),
    ({"grid": {"n_head": list(range(1, 202))}}, "a sweep runs at most 200"),
    ({"score": {"n": 0}}, "score.n must be a whole number from 1 to 5000"),
    ({"score": {"bleu_tokens": "bpe"}}, "score.bleu_tokens must be 'auto', 'gpt2' or 'words'"),
    ({"grid": {"tokenizer": ["gpt2", "bpe"]}}, "run 2 (tokenizer=bpe, seed=0): tokenizer must be"),
    ({"grid": {"parent": ["smollm2:1,2,31"]}}, "the blocks of parent 'smollm2:1,2,31' [31] out of range"),
    ({"grid": {"max_steps": [0]}}, "max_steps must be between 1 and"),
    ({"preset": "birthplace-vanilla"}, "objective=span of task birthplace has nothing to score"),
    ({"preset": "birthplace-finetune"}, "birth-place answers are scored on dev (the test questions"),
    ({"preset": "birthplace-finetune", "score": {"split": "dev", "exposure": True}},
     "exposure bias is measured on captions"),
    ({"score": {"decoders": ["top_k,top_p=0.9"]}}, "top_p is not a setting of the top_k decoder"),
    ({"score": {"split": "test", "pick_on_test": True}}, "set score.split to dev"),
    ({"name": "../x"}, "sweep name '../x' is not allowed"),
    ({"checkpoints": ["a"], "grid": {"n_head": [1]}}, "not both"),
    ({"checkpoints": ["missing"]}, "missing"),
    ({"parent": "missing"}, "missing"),
])
def test_a_bad_sweep_is_refused_whole_with_one_message(store, change, message):
    # GPT-2 tokens, so that a parent's own refusals are the ones checked (a fine-tune keeps them)
    spec = {"name": "bad", "preset": "tiny", "set": [s for s in TINY if not s.startswith("tokenizer")],
            **change}
    with pytest.raises(LabError) as e:
        sweeps.start(spec, store)
    assert message in str(e.value) and "\n" not in str(e.value)
    with jobs.connect(store) as con:                      # nothing was queued, nothing recorded
        assert con.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0
        assert con.execute("SELECT COUNT(*) FROM sweeps").fetchone()[0] == 0


def test_a_sweep_name_and_its_run_names_are_never_taken_twice(store):
    sweeps.start({"name": "once", "preset": "tiny", "set": TINY}, store)
    with pytest.raises(ConfigError, match="sweep 'once' already exists"):
        sweeps.start({"name": "once", "preset": "tiny", "set": TINY}, store)
    # a run whose checkpoint a queued job will write: the sweep is refused before anything queues
    other = jobs.submit("c-n_layer2", {"n_layer": 1}, {"max_train": 5}, store=store)
    with pytest.raises(ConfigError, match=f"run 2 .*job {other} is already writing checkpoint 'c-n_layer2'"):
        sweeps.start({"name": "c", "preset": "tiny", "set": TINY, "grid": {"n_layer": [1, 2]}}, store)
    assert [s["name"] for s in sweeps.list_sweeps(store)] == ["once"]
    assert {j["name"] for j in jobs.list_jobs(store)} == {"once-001", "c-n_layer2"}


def test_every_recipe_plans_at_both_budgets(store):
    """Each shipped recipe is a valid sweep at `cpu` and `full` (checked as its jobs will be)."""
    for name in sweeps.recipe_names():
        for budget in ("cpu", "full"):
            doc = sweeps.recipe(name, budget)
            if name == "decoder-search":
                continue                              # needs a stored checkpoint: planned below
            if name == "finetune-layers-gpt2":        # needs a GPT-2 a person imported
                with pytest.raises(LabError, match="no checkpoint 'gpt2'"):
                    sweeps.check({**doc, "name": "r-g"}, store)
                continue
            spec, runs = sweeps.check({**doc, "name": f"r-{name}-{budget}"}, store)
            assert runs and spec.recipe == f"{name} ({budget})"
    heads = sweeps.check({**sweeps.recipe("heads", "cpu"), "name": "h"}, store)[1]
    assert [r.values["n_head"] for r in heads] == [1, 3, 6, 12, 24, 48, 96, 192]
    gqa = sweeps.check({**sweeps.recipe("gqa", "cpu"), "name": "g"}, store)[1]
    assert [r.model.settings["attention"]["kv_groups"] for r in gqa] == [1, 2, 3, 4, 6, 12]
    assert [r.name for r in gqa][:2] == ["g-kv_groups1", "g-kv_groups2"]
    layers = sweeps.check({**sweeps.recipe("finetune-layers", "cpu"), "name": "fl"}, store)[1]
    assert [r.name for r in layers] == ["fl-smollm2_1_2_3", "fl-smollm2_14_15_16", "fl-smollm2_28_29_30",
                                        "fl-smollm2_1_15_30", "fl-smollm2_all"]
    assert all(r.model is None and r.parent.startswith("smollm2:") for r in layers)
    ss = sweeps.check({**sweeps.recipe("scheduled-sampling", "cpu"), "name": "ss"}, store)
    assert ss[0].score["exposure"] and [r.train.settings["task"]["scheduled_sampling"] for r in ss[1]] == [
        "none", "linear", "exponential", "inverse_sigmoid"]
    tok = sweeps.check({**sweeps.recipe("tokenization", "cpu"), "name": "tk"}, store)[0]
    assert tok.score["bleu_tokens"] == "words" and tok.score["decoders"][0]["max_new_tokens"] == 190


def test_split_to_split_bleu_reproduces_the_reports_figures():
    """GPT-2 tokens, every caption of both splits: 0.550, 0.611, 0.538 harmonic."""
    rows = sweeps.split_bleu(n_boot=200)["rows"]
    for r in rows:
        assert round(r["harmonic"], 3) == r["report"], r
        assert r["harmonic_ci"][0] < r["harmonic"] < r["harmonic_ci"][1]


def test_a_fine_tunes_form_shows_its_parents_tokenizer_locked_and_starts_without_one(store):
    """Choosing a parent locks the tokenizer field with nothing chosen and says which tokenizer
    the parent keeps (GPT-2 BPE ticked for SmolLM2 contradicted it); such a form starts the job
    and a sweep; clearing the parent gives the field back; a reload shows the job the same way."""
    import torch
    from lab.storage import checkpoints
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    from lab.presets import get
    from lab.ui import train
    from tests.conftest import tiny_config
    words = tokenizers.WordTokenizer.from_texts(["a dog on a couch", "a cat on a mat"] * 2, min_count=1)
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config(vocab_size=words.vocab_size)), words, "p-words", store)
    field = train.parent_view("p-words", "tiny", store)[-2]
    assert field["value"] is None and field["interactive"] is False
    assert field["info"] == f"kept from p-words: its own tokenizer (words, {words.vocab_size:,} tokens)"
    cleared = train.parent_view("", "tiny", store)[-2]
    assert cleared["value"] == get("tiny")[1].tokenizer and cleared["interactive"] is True
    m, t = get("tiny")
    values = dict(zip(train.form_fields(), train.form_values(m, t.replace(epochs=1))))
    values["tokenizer"] = None                               # what the locked field sends
    train.start("ft-words", "tiny", "p-words", *values.values(), store=store)
    job = jobs.list_jobs(store)[0]
    assert job["spec"]["parent"] == "p-words" and job["spec"]["train"]["tokenizer"] == "gpt2"
    assert "tokenizer" not in train.sweep_settings("tiny", "p-words", *values.values())[2]
    shown = train.job_form(job, store)[3 + len(train.MODEL_FIELDS) + train.TRAIN_FIELDS.index("tokenizer")]
    assert shown["value"] is None and "kept from p-words" in shown["info"]
    with pytest.raises(ConfigError, match="choose a tokenizer for a new model: gpt2, words or char"):
        train.start("scratch", "tiny", "", *values.values(), store=store)
    # a resumed fine-tune (its spec has no parent) shows its own checkpoint's tokenizer, locked
    checkpoints.save(build(tiny_config(vocab_size=words.vocab_size)), words, "ft-words", store)
    resumed = {**job, "spec": {**job["spec"], "parent": None}}
    shown = train.job_form(resumed, store)[3 + len(train.MODEL_FIELDS) + train.TRAIN_FIELDS.index("tokenizer")]
    assert shown["value"] is None and shown["info"].startswith("kept from ft-words: its own tokenizer (words")


def test_the_train_forms_settings_start_a_sweep(store):
    """What the Train form changed from its preset becomes the sweep's every-run settings, as
    KEY=VALUE lines the sweep form reads back; a fine-tune carries only training settings."""
    from lab.presets import get
    from lab.ui import train
    m, t = get("tiny")
    values = train.form_values(m.replace(n_head=2, norm="rmsnorm"), t.replace(epochs=1, tokenizer="char"))
    preset, parent, lines, split = train.sweep_settings("tiny", "", *values)
    assert (preset, parent, split) == ("tiny", "", "test")
    assert lines.splitlines() == ["n_head=2", "norm=rmsnorm", "epochs=1", "tokenizer=char"]
    spec, runs = sweeps.check({"name": "ft", "preset": preset, "set": lines.splitlines()}, store)
    assert runs[0].model.n_head == 2 and runs[0].train.tokenizer == "char"
    assert train.sweep_settings("tiny", "some-parent", *values)[2] == "epochs=1\ntokenizer=char"
    import dataclasses
    five_heads = dataclasses.replace(m, n_head=5)      # the form can hold any number
    with pytest.raises(ConfigError, match="n_embd=64 is not divisible by n_head=5"):
        train.sweep_settings("tiny", "", *train.form_values(five_heads, t))
    # birth-place fine-tunes are scored on dev, whose questions have places
    bm, bt = get("birthplace-finetune")
    preset, _, lines, split = train.sweep_settings("birthplace-finetune", "pre",
                                                   *train.form_values(bm, bt.replace(epochs=3)))
    assert (lines, split) == ("epochs=3", "dev")
    sweeps.check({"name": "bpft", "preset": preset, "set": [lines], "score": {"split": split}}, store)


def test_a_ledger_row_written_before_steps_were_named_still_reads_and_resumes(store):
    """A queued job of a sweep, its scoring kept the old way (`score`, `score_only`): it reads as
    the step `score`, its sweep finds it, and resuming it queues the same scoring."""
    sweeps.start({"name": "old", "preset": "tiny", "set": TINY}, store)
    _, (run,) = sweeps.get("old", store)
    spec = dict(run["job"]["spec"])
    (step,) = spec.pop("after")
    old = {**spec, "score": {k: v for k, v in step.items() if k != "step"}}
    with jobs.connect(store) as con:
        con.execute("UPDATE jobs SET spec=?, status='stopped' WHERE id=?",
                    (json.dumps(old), run["job"]["id"]))
    _, (run,) = sweeps.get("old", store)
    assert run["job"]["spec"]["after"] == [step] and "score" not in run["job"]["spec"]
    (line,) = sweeps.resume("old", store=store)
    assert "queued job" in line, line
    _, (run,) = sweeps.get("old", store)
    assert run["job"]["status"] == "queued" and run["job"]["spec"]["after"] == [step]


def test_a_runs_training_time_adds_its_segments_once(tmp_path):
    """A run stopped and resumed: each segment's own time counts once, whether its elapsed goes on
    from the time before (elapsed_before, as runs write now) or starts at 0 (older logs)."""
    from lab.sweeps.scoring import training_figures

    def log(*events):
        path = tmp_path / f"m{len(list(tmp_path.iterdir()))}.jsonl"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        return training_figures(path)["train_s"]
    now = log({"event": "start", "elapsed_before": 0.0}, {"event": "step", "elapsed_s": 30.0},
              {"event": "start", "elapsed_before": 35.0}, {"event": "step", "elapsed_s": 50.0},
              {"event": "done", "elapsed_s": 60.0})
    older = log({"event": "start"}, {"event": "step", "elapsed_s": 30.0},
                {"event": "start"}, {"event": "done", "elapsed_s": 25.0})
    assert now == pytest.approx(30.0 + 25.0) and older == pytest.approx(55.0)
