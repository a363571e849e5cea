"""A value is parsed and checked once, where it enters: the Train form's or the API's values when
the job is queued, the stored job's when the worker reads it; nothing between or below converts or
checks them again (lab.settings' `coerce` and `check_value` are the lab's one parser and one
checker of a setting's value: every call is counted here, by setting and value)."""
import os
import signal
import sys

import pytest

from lab import settings as lab_settings
from lab import presets
from lab.storage import checkpoints
from lab.worker import jobs

LR, WINDOW = 0.00123, 7
SMALL = {"max_steps": 1, "max_train": 16, "max_dev": 8, "epochs": 1}


@pytest.fixture
def counted(monkeypatch):
    """[(what, key, value)] for every parse and check of a setting's value from now on (a
    parse's own recursion into a type's parts is the same parse)."""
    seen, depth = [], [0]
    real_coerce, real_check = lab_settings.coerce, lab_settings.check_value

    def coerce(key, value, typ):
        if depth[0] == 0:
            seen.append(("parse", key, value))
        depth[0] += 1
        try:
            return real_coerce(key, value, typ)
        finally:
            depth[0] -= 1

    def check_value(key, value, f):
        seen.append(("check", key, value))
        return real_check(key, value, f)
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith(("lab", "plugins")):
            if getattr(module, "coerce", None) is real_coerce:
                monkeypatch.setattr(module, "coerce", coerce)
            if getattr(module, "check_value", None) is real_check:
                monkeypatch.setattr(module, "check_value", check_value)
    return seen


def _times(seen, key, value) -> dict:
    def same(v):
        try:
            return float(v) == float(value)
        except (TypeError, ValueError):
            return False
    return {what: sum(1 for w, k, v in seen if w == what and k == key and same(v))
            for what in ("parse", "check")}


def _form_values(**given) -> list:
    from lab.ui import train
    model_cfg, train_cfg = presets.get("tiny")
    values = dict(zip(train.form_fields(), train.form_values(model_cfg.replace(attention="sliding"),
                                                             train_cfg)))
    values.update(given)
    return [values[k] for k in train.form_fields()]


def _run_stored_job(store) -> str:
    """What the worker does with a queued job, here in this process: claim it and run it."""
    job, fd = jobs.claim_next(store)
    os.environ["LAB_JOB_LOCK_FD"] = str(fd)
    old = signal.getsignal(signal.SIGTERM)
    try:
        return jobs.run_job(job["id"], store)
    finally:
        signal.signal(signal.SIGTERM, old)
        os.close(fd)


@pytest.mark.parametrize("door", ["form", "api"])
def test_a_value_is_parsed_and_checked_once_where_it_enters_and_once_where_the_worker_reads_it(
        door, counted, store, corpus_dir):
    from lab.ui import train
    if door == "form":
        values = _form_values(**{"lr": LR, "attention.window": WINDOW, "tokenizer": "gpt2"},
                              **SMALL)
        counted.clear()
        train.start("once", "tiny", "", *values, store=store)
    else:
        given = {"lr": str(LR), "attention": "sliding", "attention.window": str(WINDOW), **SMALL}
        counted.clear()
        train.start_job("once", "tiny", "", given, store=store)
    assert _times(counted, "lr", LR) == {"parse": 1, "check": 1}
    assert _times(counted, "attention.window", WINDOW) == {"parse": 1, "check": 1}
    counted.clear()
    assert _run_stored_job(store) == "done"
    assert _times(counted, "lr", LR) == {"parse": 1, "check": 1}
    assert _times(counted, "attention.window", WINDOW) == {"parse": 1, "check": 1}
    ck = checkpoints.load("once", store)
    assert ck.config.plugin_settings("attention").window == WINDOW
    assert checkpoints.info("once", store)["train"]["lr"] == LR
