"""Every setting is described once (lab.settings) and everything that shows or checks it reads that
description: validation, the CLI, the Train form, the API and the configuration reference."""
import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

from lab.config import ConfigError, DecodeConfig, ModelConfig, TrainConfig, describe_settings
from lab.registry import REGISTRIES, load_plugins
from lab.settings import choices_of, reference_markdown
from tests.conftest import ROOT, serving


def test_the_configuration_reference_is_current():
    """docs/configuration.md is what `python -m lab settings --markdown` writes today with the
    built-in plugins (a third-party plugin installed here changes nothing)."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == reference_markdown(describe_settings(built_in_only=True)), \
        "regenerate it: python -m lab settings --markdown --built-in > docs/configuration.md"
    for f in dataclasses.fields(TrainConfig):
        if f.name != "settings":            # the task's own: listed under its plugin
            assert f"| `{f.name}` |" in page
    assert "| `task.dataset` |" in page


def test_the_reference_lists_the_built_in_plugins_whatever_else_is_installed(monkeypatch):
    """A third-party plugin with a setting of its own, installed here, is in the settings the lab
    describes and not in the reference page, which stays current."""
    from lab.registry import Entry

    @dataclasses.dataclass
    class Scale:
        scale: float = 1.0

    def scaled(n_embd, settings=None):
        return None
    scaled.__module__ = "thirdparty_scaled"
    load_plugins()
    monkeypatch.setitem(REGISTRIES["norm"]._entries, "scaled",
                        Entry("scaled", scaled, "a third party's norm", Scale, {}))
    assert "scaled" in describe_settings()["plugins"]["norm"]
    assert "scaled" not in describe_settings(built_in_only=True)["plugins"]["norm"]
    test_the_configuration_reference_is_current()


def test_every_setting_has_its_help_and_its_bounds():
    load_plugins()
    classes = [TrainConfig, ModelConfig, DecodeConfig] + [
        REGISTRIES[k].get(n).settings for k in (*ModelConfig.PLUGIN_KINDS, *TrainConfig.PLUGIN_KINDS, "decoder")
        for n in REGISTRIES[k].names() if REGISTRIES[k].get(n).settings]
    for cls in classes:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
            if f.type in ("int", "float", "int | None", "float | None") and f.name != "seed":
                assert "min" in f.metadata and "max" in f.metadata, f"{cls.__name__}.{f.name}"


def test_the_train_form_reads_the_description():
    """Each field's hint is its help (and what blank means); a field with choices offers exactly
    them; no list of choices or help is typed in the form's code."""
    from lab.ui import train
    source = (ROOT / "lab" / "ui" / "train.py").read_text()
    assert "warmup_cosine" not in source and "inverse_sigmoid" not in source
    for cls, names in ((ModelConfig, train.MODEL_FIELDS), (TrainConfig, train.TRAIN_FIELDS)):
        for name in names:
            f = cls.__dataclass_fields__[name]
            component = train._field_component(cls, name, None)
            assert f.metadata["help"] in component.info, name
            if "blank" in f.metadata:
                assert f.metadata["blank"] in component.info, name
            if choices_of(f) is not None and name != "objective":
                assert [c[0] for c in component.choices] == [str(c) for c in choices_of(f)], name
    assert set(train.TRAIN_FIELDS) == {f.name for f in dataclasses.fields(TrainConfig)} - {"settings"}
    assert {f"{k}.{f.name}" for k, _, f in train.setting_fields() if k == "task"} >= {"task.dataset"}


def test_a_value_gets_the_same_answer_through_every_door():
    """The CLI's --set, the API's named settings, the form and a config file all refuse a bad
    value with one and the same message, and take a good one to the same config."""
    from lab.presets import configs, get
    from lab.ui.train import form_fields, form_settings, form_values
    m, t = get("tiny")
    form = dict(zip(form_fields(), form_values(m, t)))
    for key, value in (("epochs", 0), ("lr", -1), ("early_stop", "loss"), ("max_steps", -3),
                       ("attention.kv_groups", 3), ("task", "nope")):
        said = []
        extra = {"attention": "gqa"} if key.startswith("attention.") else {}
        for call in (lambda: configs("tiny", [f"{k}={v}" for k, v in {**extra, key: value}.items()]),
                     lambda: configs("tiny", named={**extra, key: value}),
                     lambda: configs("tiny", named=form_settings(list({**form, **extra,
                                                                       key: value}.values())))):
            with pytest.raises(ConfigError) as e:
                call()
            said.append(str(e.value))
        assert len(set(said)) == 1 and key.split(".")[-1] in said[0], said
    good = {"epochs": 3, "attention": "gqa", "attention.kv_groups": 2, "max_steps": None}
    by_set = configs("tiny", [f"{k}={'' if v is None else v}" for k, v in good.items()])[:2]
    by_name = configs("tiny", named=good)[:2]
    by_form = configs("tiny", named=form_settings(list({**form, **good}.values())))[:2]
    assert by_set == by_name == by_form
    assert by_name[1].epochs == 3 and by_name[0].settings["attention"] == {"kv_groups": 2}


def test_named_settings_refuse_an_unknown_name_by_name():
    from lab.presets import configs
    with pytest.raises(ConfigError, match="unknown key 'n_heads'"):
        configs("tiny", named={"n_heads": 2})
    with pytest.raises(ConfigError, match="attention.nope: the attention plugin 'mha' has no setting"):
        configs("tiny", named={"attention.nope": 2})
    with pytest.raises(ConfigError, match="expected a JSON object keyed by setting name"):
        configs("tiny", named=[1, 2])


def test_a_blank_means_what_its_setting_says():
    from lab.presets import configs
    m, t, _ = configs("tiny", named={"weight_decay": None, "max_steps": "", "objective": None})
    assert (t.weight_decay, t.max_steps, t.objective) == (0.0, None, "")
    with pytest.raises(ConfigError, match="epochs: expected a whole number, got None"):
        configs("tiny", named={"epochs": None})


def test_cli_lists_every_setting_and_every_preset(capsys):
    from lab.cli import main
    from lab.presets import names
    main(["settings", "--json"])
    described = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in described["train"]] == [f.name for f in dataclasses.fields(TrainConfig)]
    assert described["plugins"]["attention"]["gqa"][0]["name"] == "attention.kv_groups"
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = capsys.readouterr().out
    assert "birthplace-perceiver" in names()          # a task package's own presets too
    assert all(name in shown for name in names())


def _api_example() -> str:
    """The gradio_client example of docs/api.md (the block after its `tested` marker)."""
    page = (ROOT / "docs" / "api.md").read_text()
    block = re.search(r"<!-- tested: start_job -->\s*```python\n(.*?)```", page, re.S)
    assert block, "docs/api.md lost its tested /start_job example"
    return block.group(1)


def test_the_api_example_runs_with_a_third_party_plugin_installed(tmp_path):
    """Installing a plugin with a setting of its own moves no client's arguments: the documented
    /start_job call, with named settings, queues the job it says, and an unknown name is refused
    by name."""
    from gradio_client import Client
    from lab.worker import jobs
    from tests.test_config_registry import THIRD_PARTY_NORM
    site = tmp_path / "site"
    site.mkdir()
    (site / "thirdparty_scaled.py").write_text(THIRD_PARTY_NORM)
    dist = site / "thirdparty_scaled-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-scaled\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[tfmr_lab.plugins]\nscaled = thirdparty_scaled\n")
    store = tmp_path / "store"
    store.mkdir()
    with serving(store, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), LAB_WORKER="0") as url:
        scope = {"URL": url}
        exec(_api_example(), scope)
        job = jobs.list_jobs(store)[0]
        assert job["name"] == scope["NAME"] and scope["queued"]["job"] == job["id"]
        assert job["spec"]["train"]["epochs"] == 1
        assert job["spec"]["model"]["settings"]["attention"] == {"kv_groups": 2}
        client = Client(url, verbose=False)
        client.predict(name="scaled-one", preset="tiny", parent="",
                       settings={"norm": "scaled", "norm.scale": 0.5, "epochs": 1},
                       api_name="/start_job")
        assert jobs.list_jobs(store)[0]["spec"]["model"]["settings"]["norm"] == {"scale": 0.5}
        with pytest.raises(Exception, match="unknown key 'n_heads'"):
            client.predict(name="x", preset="tiny", parent="", settings={"n_heads": 2},
                           api_name="/start_job")
        described = client.predict(api_name="/settings")
        assert any(r["name"] == "norm.scale" for r in described["plugins"]["norm"]["scaled"])


def _shown(value):
    """A form value as job_form gives it: a plain value, or an update carrying one."""
    return value.get("value") if isinstance(value, dict) and value.get("__type__") == "update" else value


def test_the_form_restored_from_a_job_starts_the_same_job(store):
    """After a reload, the Train form shows a job's own settings (preset, parent, tokenizer, every
    plugin setting) read from its named spec: pressing Start again would queue the very same
    configs, never a form that Start refuses."""
    import torch
    from lab.modeling.model import build
    from lab.inputs import tokenizers
    from lab.storage import checkpoints
    from lab.worker import jobs
    from lab.presets import configs
    from lab.ui import train
    from tests.conftest import tiny_config
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config(vocab_size=50257)), tokenizers.gpt2(), "parent-a", store,
                     provenance={"source": "scratch", "task": "captions"})
    submitted = [
        ("own-gqa", "tiny", "", {"epochs": 1, "attention": "gqa", "attention.kv_groups": 2,
                                 "positional": "rotary", "positional.theta": 5000.0,
                                 "max_steps": 3, "lr_schedule": "warmup_cosine", "warmup_steps": 1}),
        ("a-fine-tune", "smollm2-quick", "parent-a", {"epochs": 2, "train_layers": "2",
                                                       "max_dev": 40}),
        ("birth", "birthplace-finetune", "", {"epochs": 3})]
    for name, preset, parent, named in submitted:
        m, t, _ = configs(preset, named=named)
        job_id = jobs.submit(name, None if parent else m.to_dict(), t.to_dict(), parent=parent or None,
                             preset=preset, store=store)
        job = jobs.get(job_id, store)
        shown = [_shown(v) for v in train.job_form(job, store)]
        assert shown[0] == name and shown[1] == preset and shown[2] == parent
        assert f"settings of job {job_id}" in shown[-1]
        values = shown[3:-1]
        assert len(values) == len(train.form_fields())
        again_m, again_t, _ = configs(preset, named=train.form_settings(values, parent))
        assert again_t.to_dict() == job["spec"]["train"], name
        if not parent:
            assert again_m.to_dict() == job["spec"]["model"], name


def test_a_stopped_job_says_where_it_stands_and_how_to_go_on():
    from lab.ui.jobs_view import progress_html
    job = {"status": "stopped", "error": None,
           "progress": {"event": "stopped", "epoch": 2, "step": 40, "saved": True,
                        "reason": "stopped during the epoch"}}
    assert "stopped at epoch 2, step 40 (stopped during the epoch); its state is saved: Resume goes " \
           "on from there" in progress_html(job)
    job["progress"]["saved"] = False
    assert "nothing was saved: Resume starts it again" in progress_html(job)
    assert "stopped before its first step" in progress_html({"status": "stopped", "error": None,
                                                            "progress": None})


def test_the_job_view_says_when_the_run_last_saved(store):
    """The Train tab's line: how long ago the run saved where it stands, and a periodic save's
    own line; a running job's last save is not called a stopped run's."""
    from lab.training.runs import last_dir
    from lab.ui.jobs_view import progress_html, written
    step = {"event": "step", "epoch": 1, "step": 40, "total_steps": 200, "train_loss": 3.0,
            "elapsed_s": 600, "eta_s": 60, "saved_s_ago": 252.0}
    assert "ETA 1m00s, saved 4m12s ago" in progress_html({"status": "running", "error": None,
                                                          "progress": step})
    saved = {"event": "saved", "epoch": 1, "step": 40, "save_s": 0.3}
    assert "running: saved where it stands at epoch 1, step 40" in progress_html(
        {"status": "running", "error": None, "progress": saved})
    last_dir("kept").mkdir(parents=True)
    assert written({"name": "kept", "status": "running"}).startswith("No checkpoint yet (one is")
    assert "saved where it stood. Resume goes on" in written({"name": "kept", "status": "interrupted"})
