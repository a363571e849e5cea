import sys
import textwrap

import pytest

from lab import registry
from lab.config import ConfigError, DecodeConfig, ModelConfig, TrainConfig, split_overrides
from lab.model import build
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
    assert set(info) == {"model", "norm", "attention", "positional", "mlp", "decoder"}
    assert {e["name"] for e in info["attention"]} >= {"mha", "gqa", "mqa"}
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


@pytest.mark.parametrize("overrides, message", [
    ({"n_embd": 768, "n_head": 7}, "n_embd=768 is not divisible by n_head=7"),
    ({"attention": "flash"}, "unknown plugin 'flash'; choose one of: gqa, mha, mqa"),
    ({"n_head": 4, "kv_groups": 3}, "kv_groups=3 must divide n_head=4"),
    ({"norm_position": "middle"}, "norm_position must be 'pre' or 'post'"),
    ({"n_layer": 0}, "n_layer must be positive"),
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
    with pytest.raises(ConfigError, match="temperature must be positive"):
        DecodeConfig.from_dict({"temperature": 0})


def test_json_round_trip_and_set_overrides(tmp_path):
    cfg = tiny_config(attention="gqa", kv_groups=2)
    path = tmp_path / "c.json"
    path.write_text(cfg.to_json())
    assert ModelConfig.from_json(path) == cfg
    m, t = split_overrides(["n_head=6", "lr=3e-4", "shuffle=false"], ModelConfig, TrainConfig)
    assert ModelConfig().replace(**m).n_head == 6
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
    from lab.ui.train import MODEL_FIELDS, _form_values
    values = _form_values(["kv_groups", "max_train_captions", "n_head"], [0, 0, 4])
    assert values == {"kv_groups": None, "max_train_captions": None, "n_head": 4}
    assert set(MODEL_FIELDS) >= {"kv_groups", "n_head"}
    with pytest.raises(ConfigError, match="max_train_captions must be at least 1"):
        TrainConfig.from_dict({"max_train_captions": 0})
