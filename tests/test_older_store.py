"""What a person already has keeps working: a store written by the lab before its settings were
described once (tests/fixtures/older_store, made by the commands in its README, with the code of
that time) is read by today's code. Its checkpoints list healthy, load and write captions; its
stopped run resumes from the step it stopped at; its queued job and its queued sweep run, scored
as their sweep asked; its finished sweep's table reads, grid values as numbers; and a config file
of that time gives the same configs. The fixture keeps the safetensors headers the older code
wrote, not its weights: each file is written back from its header as the test begins."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lab.config import DecodeConfig, ModelConfig, TrainConfig
from lab.modeling.generate import sample_captions
from lab.presets import configs
from lab.storage import checkpoints
from lab import sweeps
from lab.worker import jobs
from tests.conftest import wait_job

FIXTURES = Path(__file__).parent / "fixtures"


def _weights(header: Path) -> None:
    """A safetensors file from the header the older code wrote (FILE.safetensors.json: its
    metadata, each tensor's dtype and shape, and the values of the small ones such as Adam's
    step): the metadata and every small value as written, the large tensors seeded (the fixture
    keeps no weights)."""
    doc = json.loads(header.read_text())
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for name, t in doc["tensors"].items():
        dtype = getattr(torch, t["dtype"])
        if "values" in t:
            tensors[name] = torch.tensor(t["values"], dtype=dtype).reshape(t["shape"])
        elif name.startswith("rng."):
            tensors[name] = torch.get_rng_state()
        else:
            value = 0.02 * torch.randn(t["shape"], generator=g)
            tensors[name] = (value.abs() if name.endswith("exp_avg_sq") else value).to(dtype)
    save_file(tensors, str(header.with_suffix("")), metadata=doc["metadata"])
    header.unlink()


@pytest.fixture
def older(store):
    shutil.copytree(FIXTURES / "older_store", store)
    for header in store.rglob("*.safetensors.json"):
        _weights(header)
    return store


def test_older_checkpoints_list_healthy_load_and_write(older):
    listed = {r["name"]: r for r in checkpoints.listing()}
    assert {"old-done", "old-sweep-n_head1", "old-sweep-n_head2"} <= set(listed)
    assert not any(r.get("damaged") for r in listed.values()), listed
    ck = checkpoints.load("old-done")
    assert (ck.config.attention, ck.config.positional) == ("gqa", "rotary")
    assert ck.config.settings["attention"]["kv_groups"] == 1
    out = sample_captions(ck.model, ck.tokenizer, 2, DecodeConfig(decoder="greedy", max_new_tokens=8))
    assert len(out) == 2


def test_an_older_stopped_run_goes_on_from_its_step(older):
    stopped = jobs.get(3)
    assert (stopped["name"], stopped["status"]) == ("old-stopped", "stopped")
    new_id = jobs.resume(3)
    assert jobs.resumes_from(new_id).startswith(" from step 19")
    worker = jobs.Worker(poll_s=0.2)
    # epoch 1 ends at step 20: its checkpoint is the resumed run's first save
    wait_job(new_id, ("running",), worker)
    jobs.request_stop(new_id, "after_checkpoint")     # read at its steps: the process is starting
    job = wait_job(new_id, jobs.FINAL, worker)
    assert job["status"] == "stopped", job["error"]
    assert checkpoints.info("old-stopped")["metrics"]["epoch"] == 1
    events = [json.loads(line) for line in
              (older / "_runs" / "old-stopped" / "metrics.jsonl").read_text().splitlines()]
    starts = [e for e in events if e["event"] == "start"]
    assert [s["first_step"] for s in starts] == [0, 19]       # the old run's, and the resumed one


def test_older_queued_jobs_and_sweeps_run_and_read(older):
    queued = {j["name"]: j for j in jobs.list_jobs() if j["status"] == "queued"}
    assert set(queued) == {"old-queued", "old-pending-n_head2"}
    # the sweep's scoring, kept as the job's field `score` then, is its step `score` now
    assert queued["old-pending-n_head2"]["spec"]["after"][0]["step"] == "score"
    worker = jobs.Worker(poll_s=0.2)
    for job in queued.values():
        done = wait_job(job["id"], jobs.FINAL, worker)
        assert done["status"] == "done", done["error"]
    assert checkpoints.info("old-queued")["model"]["positional"] == "rotary"
    for name, runs in (("old-sweep", 2), ("old-pending", 1)):
        rows = sweeps.table(name, n_boot=50)["rows"]
        assert len(rows) == runs and all(r["status"] == "done" for r in rows), rows
        assert all(type(r["n_head"]) is int and r["dev_perplexity"] > 1 for r in rows), rows


def test_an_older_config_file_gives_the_same_configs():
    doc = json.loads((FIXTURES / "older_config.json").read_text())
    model, train, _ = configs(None, None, doc)
    assert {k: v for k, v in model.to_dict().items() if k in doc["model"]} == doc["model"]
    newer = set(model.to_dict()) - set(doc["model"])          # settings added since: their defaults
    assert {k: getattr(model, k) for k in newer} == {k: ModelConfig.default(k) for k in newer}
    now = {**train.to_dict(), **train.settings["task"]}     # the captions task's settings were keys
    for key, value in doc["train"].items():         # renamed keys hold their value under the new name
        new, convert = TrainConfig.RENAMED.get(key, (key, None))
        assert now[new] == (convert(value) if convert else value), key


@pytest.fixture
def older_task_keys(store):
    shutil.copytree(FIXTURES / "older_task_keys", store, dirs_exist_ok=True)
    return store


def _events(store, run: str) -> list[dict]:
    path = store / "_runs" / run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_older_queued_work_with_the_captions_settings_at_the_top_runs_as_it_asked(older_task_keys):
    """Queued when the captions task's settings were top-level keys: the job keeps its second
    best-BLEU checkpoint, scores every dev caption at the end and samples its own tokens down to
    its floor; the sweep's grid over the schedule runs each schedule with its constant."""
    queued = {j["name"]: j for j in jobs.list_jobs() if j["status"] == "queued"}
    assert set(queued) == {"acc-queued", "acc-sweep-none", "acc-sweep-exponential"}
    worker = jobs.Worker(poll_s=0.2)
    for job in queued.values():
        done = wait_job(job["id"], jobs.FINAL, worker)
        assert done["status"] == "done", done["error"]
    train = checkpoints.info("acc-queued")["train"]
    assert (train["max_train"], train["max_dev"], train["keep_also"]) == (64, 16, "bleu")
    assert train["settings"]["task"] == {"bleu_samples": 8, "final_dev": True,
                                         "scheduled_sampling": "linear", "ss_k": 0.0, "ss_floor": 0.5}
    assert checkpoints.info("acc-queued-bleu")["kept_by"] == "dev harmonic BLEU"
    events = _events(older_task_keys, "acc-queued")
    assert checkpoints.info("acc-queued")["metrics"]["final_dev_captions"] == 5000
    forcing = [e["teacher_forcing"] for e in events if e["event"] == "step"]
    assert forcing == sorted(forcing, reverse=True) and forcing[0] > forcing[-1] >= 0.5
    assert not any("teacher_forcing" in e for e in _events(older_task_keys, "acc-sweep-none"))
    exponential = [e["teacher_forcing"] for e in _events(older_task_keys, "acc-sweep-exponential")
                   if e["event"] == "step"]
    assert exponential[:3] == pytest.approx([0.9, 0.81, 0.729])         # logged after each step
    rows = sweeps.table("acc-sweep", n_boot=50)["rows"]
    assert [r["status"] for r in rows] == ["done", "done"], rows


def test_older_training_configs_carry_their_keys_to_where_they_live_now():
    doc = json.loads((FIXTURES / "older_train_configs.json").read_text())
    captions = TrainConfig.from_dict(doc["captions"])
    captions.validate()
    assert (captions.max_train, captions.max_dev, captions.keep_also) == (64, 16, "bleu")
    assert captions.settings["task"] == {"bleu_samples": 8, "final_dev": True,
                                         "scheduled_sampling": "linear", "ss_k": 0.0, "ss_floor": 0.5}
    birthplace = TrainConfig.from_dict(doc["birthplace"])   # the captions keys at their defaults
    birthplace.validate()
    assert (birthplace.max_train, birthplace.keep_also, birthplace.settings) == (32, "none", {})
