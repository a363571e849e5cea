"""The API is live: a script starts the app, trains a checkpoint through /start_job, then a new
gradio_client calls every named endpoint with it. An endpoint added to the app and not called here
fails the test, so the list stays whole."""
import re
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT, serving, wait_job


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    store = tmp_path_factory.mktemp("live-store")
    with serving(store) as url:
        yield url, store


def _start(name, parent=""):
    """/start_job's named arguments: a one-epoch tiny run (a fine-tune names training settings only)."""
    return dict(name=name, preset="tiny", parent=parent,
                settings={"epochs": 1, "max_train": 200, "max_dev": 50})


def _docs_session() -> str:
    """The gradio_client session of docs/api.md (the block after its `tested` marker)."""
    page = (ROOT / "docs" / "api.md").read_text()
    block = re.search(r"<!-- tested: session -->\s*```python\n(.*?)```", page, re.S)
    assert block, "docs/api.md lost its tested session"
    return block.group(1)


def _refused(call, expected):
    with pytest.raises(Exception) as e:
        call()
    assert expected in str(e.value) and "Traceback" not in str(e.value), str(e.value)


def _birthplace_model(name, store):
    import torch
    from lab.storage import checkpoints
    from plugins.tasks.birthplace import core as birthplace
    from lab.modeling.model import build
    from tests.conftest import tiny_config
    tok = birthplace.tokenizer()
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config(vocab_size=tok.vocab_size, n_positions=128, n_layer=1)).eval(),
                     tok, name, store, provenance={"source": "scratch", "task": "birthplace"})


def test_a_new_client_reaches_what_was_made_after_start_through_every_endpoint(live, tmp_path):
    from gradio_client import Client, handle_file
    url, store = live
    first = Client(url, verbose=False)
    job = first.predict(**_start("made-later"), api_name="/start_job")["job"]
    deadline = time.time() + 300
    while "data-status='done'" not in first.predict(job, api_name="/job_status")[0]:
        assert time.time() < deadline, first.predict(job, api_name="/job_status")[0]
        time.sleep(2)

    scope = {"URL": url}                                # docs/api.md's session, by name
    exec(_docs_session(), scope)
    assert scope["name"] == "made-later" and scope["info"]["source"] == "scratch"
    assert scope["said"] in (f"Job {scope['job']} is stopped.", f"Job {scope['job']}: stop requested (now).")
    assert "data-status=" in scope["progress"]

    c, called = Client(url, verbose=False), set()       # a client made after the checkpoint

    def call(api, *args, **kwargs):
        called.add(api)
        return c.predict(*args, **kwargs, api_name=api)
    greedy = {"decoder": "greedy"}
    assert "made-later" in str(call("/checkpoints")["data"])
    assert call("/checkpoint_info", "made-later")["source"] == "scratch"
    assert "lab-compare" in call("/compare", ["made-later"], greedy, 0, "A man", 2)
    assert "lab-matrix" in call("/decoder_matrix", ["made-later"], "1.0", 1, 0, "")
    note = call("/attention", "made-later", "A dog on a couch .", False, 0)[0]
    assert "tokens" in note
    assert call("/head_differences", "made-later", "made-later", "A dog .")["data"]
    lensed = call("/lens", "made-later", "A dog on a couch .", 3)
    assert lensed["checkpoint"] == "made-later" and len(lensed["layers"]) == 3      # embeddings + 2 blocks
    ablated = call("/ablate", "made-later", "1.1,2.2", "zero", "test", 20, 0)
    assert ablated["heads"] == ["1.1", "2.2"] and ablated["verdict"]
    scanned = call("/ablate_each", "made-later", "zero", "test", 20, 0)
    assert len(scanned["change"]) == 2 and "rank_agreement" in scanned["estimate"]
    patched = call("/patch", "made-later", "A dog on a couch", "A cat on a couch", "", "")
    assert len(patched["resid"]) == 2 and patched["answer"] != patched["wrong"]
    _refused(lambda: call("/patch", "made-later", "A dog", "A big dog", "", ""), "equal length in tokens")
    scores = call("/evaluate", ["made-later"], greedy, 100, 0, "auto")
    assert "100 / 100" in scores["summary"] and scores["rows"][0][0] == "made-later"
    per_checkpoint = {"made-later": {"decoder": "top_k", "top_k": 5}}    # its own over the shared
    assert "top_k, top_k=5" in call("/compare", ["made-later"], greedy, 0, "", 1, per_checkpoint)
    def data(table):            # a table shown by an update (it also becomes visible)
        return (table.get("value") or table)["data"] if "__type__" in table else table["data"]
    table, said = call("/exposure_bias", "made-later", 100)
    assert data(table)[0][4].startswith("+0.0000") and "made-later" in said
    _birthplace_model("bp-later", store)              # a birth-place model made after start
    table, said, answers, files = call("/birthplace_accuracy", ["bp-later"], "dev")
    files = files["value"] if isinstance(files, dict) and "__type__" in files else files
    assert [r[0] for r in data(table)] == ["bp-later", "London (baseline)"] and len(files) == 2
    assert len(data(answers)) == 500
    assert "100 / 100" in call("/compare_scores", ["made-later"], greedy, 100, 0)["summary"]
    assert "done" in call("/job_status", job)[0]
    _refused(lambda: call("/stop_job", job), "only queued or running jobs stop")
    _refused(lambda: call("/stop_job_after_checkpoint", job), "only queued or running jobs stop")
    _refused(lambda: call("/resume_job", job), "only interrupted, stopped or failed jobs resume")
    said, archive = call("/export_hf", "made-later", "")
    assert "download the .zip" in said and zipfile.is_zipfile(archive)
    said, files = call("/export_gguf", "made-later", "q8_0", "")
    assert "GGUF (q8_0)" in said and [Path(f).suffix for f in files] == [".gguf", ".Modelfile"]
    said, _ = call("/import_hf_upload", [handle_file(archive)], "1", "re-imported")
    assert "Imported" in said and "re-imported" in str(call("/checkpoints")["data"])
    _refused(lambda: call("/import_hf", str(tmp_path), "", "nope"), "LAB_ALLOWED_DIRS")
    _refused(lambda: call("/import_smollm2", "0", "smol"), "1 to 30")
    child = call("/start_job", **_start("child", parent="made-later"))["job"]   # a fine-tune of it
    said = call("/stop_job", child)                          # queued: stopped at once; running: asked
    assert said in (f"Job {child} is stopped.", f"Job {child}: stop requested (now).")
    said = call("/delete_checkpoint", "re-imported", "re-imported")[0]
    assert "Deleted re-imported" in said
    # the getting-started steps: a queued scratch job is stopped at once; the fine-tune needs its
    # parent, imported for real (about 10 s)
    assert "Queued job" in call("/start_scratch")
    from lab.worker import jobs
    scratch = next(j for j in jobs.list_jobs(store) if j["name"] == "quick-scratch")
    jobs.request_stop(scratch["id"], "now", store)
    assert "smollm2" in call("/start_import")
    assert "Queued job" in call("/start_finetune")
    fine = next(j for j in jobs.list_jobs(store) if j["name"] == "smollm2-captions")
    jobs.request_stop(fine["id"], "now", store)
    for j in (scratch, fine):                       # a running one saves, then ends stopped
        wait_job(j["id"], ("stopped",), store=store, timeout=120)
    assert call("/start_all").count("Queued job") == 2           # both start anew (or go on)
    # a sweep scoring what was made after start (no training): checked, started, stopped, resumed
    definition = {"name": "live", "checkpoints": ["made-later"],
                  "score": {"n": 5, "split": "test", "decoders": ["greedy"]}}
    assert [r["name"] for r in call("/check_sweep", definition)] == ["made-later"]   # scored as it is
    assert call("/start_sweep", definition) == ["made-later"]
    assert "made-later" in call("/stop_sweep", "live")
    from lab import sweeps
    live_job = sweeps.get("live", store)[1][0]["job"]["id"]
    wait_job(live_job, ("stopped", "done", "interrupted"), store=store, timeout=120)
    if jobs.get(live_job, store)["status"] != "done":         # it may have finished first
        assert "queued job" in call("/resume_sweep", "live")
    else:
        assert "nothing to resume" in call("/resume_sweep", "live")
    assert "made-later" in call("/sweep_status", "live")[0]
    assert len(call("/export_sweep", "live")) == 4
    for j in jobs.list_jobs(store):
        if j["status"] in ("queued", "running"):
            jobs.request_stop(j["id"], "now", store)
    assert any(r["name"] == "epochs" for r in call("/settings")["train"])
    # the text task's datasets: an upload, the list, a server folder refused, a delete
    corpus = tmp_path / "mine.txt"
    corpus.write_text("a first text\na second text\na third one\n", encoding="utf-8")
    said, _, _ = call("/import_dataset_upload", handle_file(str(corpus)), "mine", "", 0.34)
    assert "Imported **mine**: train 2 texts, dev 1 texts" in said
    assert [d["name"] for d in call("/datasets")] == ["mine"]
    _refused(lambda: call("/import_dataset", str(corpus), "other", "", 0.05), "LAB_ALLOWED_DIRS")
    _refused(lambda: call("/delete_dataset", "mine", False), "tick the box to confirm")
    assert "Deleted dataset **mine**" in call("/delete_dataset", "mine", True)[0]
    named = set(c.view_api(return_format="dict", print_info=False)["named_endpoints"])
    assert named - called == set(), f"endpoints no test called: {named - called}"
