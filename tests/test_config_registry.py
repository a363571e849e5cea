import re
import sys
import textwrap

import pytest

from lab import registry
from lab.config import ConfigError, DecodeConfig, ModelConfig, TrainConfig, split_overrides
from lab.modeling.model import build
from lab.registry import PluginError, Registry
from tests.conftest import tiny_config


def test_duplicate_name_raises():
    reg = Registry("norm")
    reg.register("x", "one")(lambda: 1)
    with pytest.raises(PluginError, match="already registered"):
        reg.register("x", "two")(lambda: 2)


def test_unknown_name_lists_valid_ones():
    registry.load_plugins()
    with pytest.raises(PluginError, match="choose one of: layernorm, rmsnorm"):
        registry.NORMS.get("batchnorm")


def test_describe_all_covers_every_registry():
    info = registry.describe_all()
    assert set(info) == {"model", "norm", "attention", "positional", "mlp", "decoder", "task"}
    assert {e["name"] for e in info["attention"]} >= {"mha", "gqa", "mqa"}
    assert {e["name"]: e["objectives"] for e in info["task"]} == {
        "captions": ("lm",), "birthplace": ("span", "qa"), "text": ("lm",)}
    assert all(e["description"] for entries in info.values() for e in entries)


def test_third_party_plugin_from_entry_point(tmp_path, monkeypatch):
    """A package that declares the tfmr_lab.plugins entry point is found and registered."""
    (tmp_path / "thirdparty_norm.py").write_text(textwrap.dedent("""
        from torch import nn
        from lab.registry import NORMS
        @NORMS.register("scalenorm", "ScaleNorm (Nguyen & Salazar 2019)")
        def scalenorm(n_embd, eps=1e-5, bias=True):
            return nn.LayerNorm(n_embd, eps=eps, elementwise_affine=False)
    """))
    dist = tmp_path / "thirdparty_norm-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-norm\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[tfmr_lab.plugins]\nscalenorm = thirdparty_norm\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_loaded", False)
    try:
        registry.load_plugins()
        assert "scalenorm" in registry.NORMS
        model = build(tiny_config(norm="scalenorm"))
        assert model.transformer.h[0].ln_1.elementwise_affine is False
    finally:
        registry.NORMS._entries.pop("scalenorm", None)
        sys.modules.pop("thirdparty_norm", None)


THIRD_PARTY_NORM = """
from dataclasses import dataclass, field

import torch
from torch import nn

from lab.registry import NORMS


@dataclass
class ScaledSettings:
    scale: float = field(default=1.0, metadata={"help": "the gain's first value", "min": 0.01})


class Scaled(nn.Module):
    def __init__(self, n_embd, eps, scale):
        super().__init__()
        self.scale, self.eps = scale, eps
        self.gain = nn.Parameter(torch.full((n_embd,), scale))

    def forward(self, x):
        return self.gain * x / (x.norm(dim=-1, keepdim=True) / x.size(-1) ** 0.5 + self.eps)


@NORMS.register("scaled", "A norm with a gain that starts at `scale`", settings=ScaledSettings)
def scaled(n_embd, eps, settings):
    return Scaled(n_embd, eps, settings.scale)
"""


def _python(args, cwd, env) -> str:
    """`python ARGS` in a fresh process; it must succeed, and its output is returned."""
    import subprocess
    done = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_third_party_plugin_with_a_setting_works_everywhere(tmp_path, corpus_dir):
    """A package installed through the entry point, with a setting of its own, and no edit to
    lab/: listed by the CLI, trained from a config file and from --set, rebuilt from the
    checkpoint, queued from the Train form's values, and run through the contract tests."""
    import json
    import os
    from tests.conftest import ROOT
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "thirdparty_scaled.py").write_text(THIRD_PARTY_NORM)
    dist = tmp_path / "site" / "thirdparty_scaled-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-scaled\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[tfmr_lab.plugins]\nscaled = thirdparty_scaled\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT)]),
           "LAB_STORE": str(tmp_path / "store")}

    def run(*args):
        return _python(args, ROOT, env)

    listed = json.loads(run("-m", "lab", "plugins", "--json"))
    scaled = [e for e in listed["norm"] if e["name"] == "scaled"][0]
    assert scaled["params"][0]["name"] == "scale" and scaled["params"][0]["default"] == 1.0
    small = ["--set", "epochs=1", "--set", "max_train=64", "--set", "max_dev=16"]
    (tmp_path / "c.json").write_text(json.dumps({"model": {"norm": "scaled",
                                                           "settings": {"norm": {"scale": 0.5}}}}))
    run("-m", "lab", "train", "--preset", "tiny", "--name", "from-file", "--config",
        str(tmp_path / "c.json"), "--set", "norm.scale=2", *small)     # --set over the file
    run("-c", textwrap.dedent("""
        import torch
        from lab.storage import checkpoints
        ck = checkpoints.load("from-file")
        assert ck.config.norm == "scaled" and ck.config.settings["norm"] == {"scale": 2.0}
        assert ck.model.transformer.h[0].ln_1.scale == 2.0
        from lab.config import ConfigError, ModelConfig
        try:
            ModelConfig.from_dict({"norm": "scaled", "norm.scale": 0.001})
            raise AssertionError("an out-of-bounds setting was taken")
        except ConfigError as e:
            assert str(e) == "norm.scale must be between 0.01 and inf, got 0.001", e
        from lab.worker import jobs
        from lab.presets import get
        from lab.ui.train import form_fields, form_values, start
        m, t = get("tiny")
        values = dict(zip(form_fields(), form_values(m.replace(norm="scaled"), t)))
        assert values["norm.scale"] == 1.0
        values["norm.scale"] = 3.0
        start("from-form", "tiny", "", *values.values())
        spec = jobs.list_jobs()[0]["spec"]["model"]
        assert spec["norm"] == "scaled" and spec["settings"]["norm"] == {"scale": 3.0}, spec
    """))
    out = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_plugin_contracts.py",
              "-k", "scaled")
    assert int(re.search(r"(\d+) passed", out).group(1)) >= 12 and "failed" not in out


@pytest.mark.parametrize("overrides, message", [
    ({"n_embd": 768, "n_head": 7}, "n_embd=768 is not divisible by n_head=7"),
    ({"attention": "flash"}, "unknown plugin 'flash'; choose one of: gqa, mha, mqa"),
    ({"n_head": 4, "attention": "gqa", "attention.kv_groups": 3},
     "attention.kv_groups=3 must divide n_head=4"),
    ({"attention.kv_groups": 2}, "attention.kv_groups: the attention plugin 'mha' has no setting "
                                 "'kv_groups'; it has no settings"),
    ({"attention": "gqa", "attention.window": 2}, "attention.window: the attention plugin 'gqa' "
                                                  "has no setting 'window'; its settings are: kv_groups"),
    ({"attention": "gqa", "attention.kv_groups": 0}, r"attention.kv_groups must be between 1 and 4096"),
    ({"attention": "gqa", "attention.kv_groups": "two"}, "attention.kv_groups: expected a whole number"),
    ({"settings": {"attention": 3}}, "settings: expected"),
    ({"settings": {"tokenizer": {"x": 1}}}, "settings: unknown kind 'tokenizer'"),
    ({"positional": "rotary", "n_embd": 36, "n_head": 12}, "rotary positions need an even head width"),
    ({"norm_position": "middle"}, "norm_position must be 'pre' or 'post'"),
    ({"n_layer": 0}, "n_layer must be between 1 and"),
])
def test_model_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig.from_dict({**tiny_config().to_dict(), **overrides})


def test_unknown_key_and_wrong_type():
    with pytest.raises(ConfigError, match="unknown key.*n_heads.*valid keys are"):
        ModelConfig.from_dict({"n_heads": 4})
    with pytest.raises(ConfigError, match="n_layer: expected a whole number, got 'three'"):
        ModelConfig.from_dict({"n_layer": "three"})
    with pytest.raises(ConfigError, match="lr: expected a number"):
        TrainConfig.from_dict({"lr": "fast"})
    with pytest.raises(ConfigError, match=r"temperature must be between 0.01 and 100.0, got 0"):
        DecodeConfig.from_dict({"temperature": 0})
    with pytest.raises(ConfigError, match="top_p is not a setting of the greedy decoder; its "
                                          "settings are: none"):
        DecodeConfig.from_dict({"decoder": "greedy", "top_p": 0.5})
    cfg = DecodeConfig.from_dict({"decoder": "greedy", "top_p": 0.5, "temperature": 3}, lenient=True)
    assert cfg.settings == {} and cfg.decoder_settings() is None
    assert DecodeConfig.from_dict({"decoder": "top_k"}).settings == {"temperature": 1.0, "top_k": 40}


def test_json_round_trip_and_set_overrides(tmp_path):
    cfg = tiny_config(attention="gqa", settings={"attention": {"kv_groups": 2}})
    path = tmp_path / "c.json"
    path.write_text(cfg.to_json())
    assert ModelConfig.from_json(path) == cfg
    m, t = split_overrides(["n_head=6", "lr=3e-4", "shuffle=false", "attention=gqa",
                            "attention.kv_groups=3"], ModelConfig, TrainConfig)
    assert ModelConfig().replace(**m).n_head == 6
    assert ModelConfig().replace(**m).plugin_settings("attention").kv_groups == 3
    t = TrainConfig().replace(**t)
    assert t.lr == 3e-4 and t.shuffle is False
    with pytest.raises(ConfigError, match="unknown key 'n_heads'"):
        split_overrides(["n_heads=6"], ModelConfig, TrainConfig)


def test_head_count_sweep_builds():
    """The assignment swept head counts from 1 to 192 at width 768: every divisor builds."""
    for n_head in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 192):
        ModelConfig(n_embd=768, n_head=n_head).validate()


def test_train_form_zero_means_unset():
    """An empty optional Number in the form can arrive as 0: it means 'unset', never 'zero'."""
    from lab.presets import get
    from lab.ui.train import form_fields, form_settings, form_values
    m, t = get("tiny")
    given = dict(zip(form_fields(), form_values(m, t))) | {
        "max_dev": 0, "max_train": 0, "n_head": 4}
    values = form_settings(list(given.values()))
    assert (values["max_dev"], values["max_train"], values["n_head"]) == (None, None, 4)
    with pytest.raises(ConfigError, match="max_train must be between 1 and"):
        TrainConfig.from_dict({"max_train": 0})


def test_docs_plugin_example_is_one_new_file(tmp_path):
    """docs/plugins.md's "Writing a built-in plugin" example, saved as a new file under
    plugins/attention/ and nothing else edited: the CLI lists it with its settings, and the
    contract tests run it."""
    import json
    import os
    import shutil
    from tests.conftest import ROOT
    page = (ROOT / "docs" / "plugins.md").read_text()
    code = re.search(r"## Writing a built-in plugin.*?```python\n(.*?)```", page, re.S).group(1)
    shutil.copytree(ROOT / "plugins", tmp_path / "plugins",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "plugins" / "attention" / "strided.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}

    def run(*args):
        return _python(args, tmp_path, env)

    listed = json.loads(run("-m", "lab", "plugins", "--json"))
    strided = [e for e in listed["attention"] if e["name"] == "strided"][0]
    assert [p["name"] for p in strided["params"]] == ["local", "stride"]
    # from tmp_path, appending the test folder to sys.path: the copied plugins/ is the one found
    out = run("-m", "pytest", "-q", "-p", "no:cacheprovider", "--import-mode=append",
              str(ROOT / "tests" / "test_plugin_contracts.py"), "-k", "strided")
    assert int(re.search(r"(\d+) passed", out).group(1)) >= 10 and "failed" not in out


def test_one_parser_for_block_lists():
    """The layers kept from a pretrained model and the blocks a fine-tune trains are read alike:
    in order, each once, within the model."""
    from lab.storage.interop import parse_layers
    from lab.training.parameters import parse_train_layers
    for parse in (lambda t: parse_layers(t, 4), lambda t: parse_train_layers(t, 4)):
        assert parse("1,3") == [1, 3] and parse("4, 2") == [4, 2]
        with pytest.raises(ConfigError, match=r"repeats block\(s\) \[2\]; name each block once"):
            parse("2,2")
        with pytest.raises(ConfigError, match=r"\[5\] out of range: this model has blocks 1 to 4"):
            parse("1,5")
    assert parse_train_layers("all", 4) is None


def test_configs_from_before_plugin_settings_still_load():
    """Checkpoints and queued jobs written before plugins had settings keep kv_groups and
    rope_theta at the top: they become gqa's and rotary's settings (meaningless elsewhere)."""
    old = dict(model="llama", vocab_size=49152, n_positions=8192, n_embd=576, n_layer=3, n_head=9,
               kv_groups=3, n_inner=1536, norm="rmsnorm", norm_position="pre", attention="gqa",
               positional="rotary", mlp="swiglu", bias=False, norm_eps=1e-5, rope_theta=100000.0,
               tie_embeddings=True, dropout=0.0, init_std=0.02)
    cfg = ModelConfig.from_dict(old)
    assert cfg.settings == {"attention": {"kv_groups": 3}, "positional": {"theta": 100000.0}}
    from lab.modeling.model import kv_heads
    assert kv_heads(cfg) == 3
    gqa_all_heads = {**old, "kv_groups": None}            # None meant as many as n_head
    assert ModelConfig.from_dict(gqa_all_heads).settings["attention"] == {"kv_groups": 9}
    plain = {**tiny_config().to_dict(), "kv_groups": None, "rope_theta": 10000.0}
    del plain["settings"]
    assert ModelConfig.from_dict(plain).settings == {}


def test_a_key_that_moved_names_where_it_lives_now():
    """A renamed key or one the captions task owns now is refused on the command line (and the
    form and API, which take the same keys) with the new way to say it; a config file of that time
    still reads (tests/test_older_store.py)."""
    for given, said in (("max_train_captions=5", "max_train_captions is max_train now: --set max_train=VALUE"),
                        ("keep_bleu_best=true", "keep_bleu_best is keep_also now: --set keep_also=bleu"),
                        ("ss_k=3", "ss_k is the captions task plugin's own setting now: --set task=captions "
                                   "--set task.ss_k=VALUE")):
        with pytest.raises(ConfigError) as e:
            split_overrides([given], ModelConfig, TrainConfig)
        assert str(e.value) == f"--set: {said}"
    model, train = split_overrides(["max_train=5", "keep_also=bleu", "task.ss_k=3"], ModelConfig, TrainConfig)
    cfg = TrainConfig().replace(**train)
    cfg.validate()
    assert (cfg.max_train, cfg.keep_also, cfg.plugin_settings("task").ss_k) == (5, "bleu", 3.0)
    with pytest.raises(ConfigError, match="keep_also=perplexity: keep_also names another metric of "
                                          "the captions task than perplexity"):
        TrainConfig(keep_also="perplexity").validate()
    with pytest.raises(ConfigError, match="keep_also=bleu: .* birthplace task than accuracy"):
        TrainConfig(task="birthplace", early_stop="accuracy", keep_also="bleu").validate()
