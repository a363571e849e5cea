"""lab.model.OutputLayer: a decoding step's logits through the vocabulary in blocks (faster on
the CPU, benchmarks/output_layer.py) are the logits of one product over the whole matrix."""
import torch
import torch.nn.functional as F

from lab.model import OutputLayer, build
from tests.conftest import tiny_config


def test_blocked_logits_equal_one_product_with_bias_and_a_short_last_block(monkeypatch):
    torch.manual_seed(0)
    layer = OutputLayer(48, 50257)                  # 24 full blocks and one of 1,105 entries
    h = torch.randn(3, 7, 48)
    calls = []
    linear = F.linear
    monkeypatch.setattr(F, "linear", lambda *a: calls.append(a[1].size(0)) or linear(*a))
    with torch.no_grad():
        got = layer(h)
    assert calls == [2048] * 24 + [1105]
    want = linear(h, layer.weight, layer.bias)
    assert got.shape == (3, 7, 50257)
    assert torch.allclose(got, want, rtol=0, atol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_training_and_large_batches_take_one_product(monkeypatch):
    torch.manual_seed(0)
    layer = OutputLayer(16, 9000, bias=False)
    calls = []
    linear = F.linear
    monkeypatch.setattr(F, "linear", lambda *a: calls.append(a[1].size(0)) or linear(*a))
    h = torch.randn(4, 16, requires_grad=True)
    out = layer(h)                                  # gradients on: nn.Linear's one product
    out.sum().backward()
    assert h.grad is not None and layer.weight.grad is not None
    with torch.no_grad():
        layer(torch.randn(257, 16))                 # more rows than a decoding step
        layer(torch.randn(4, 16))                   # a decoding step: in blocks
    assert calls == [9000, 9000, 2048, 2048, 2048, 2048, 808]


def test_every_model_family_decodes_through_it_and_its_hooks_run():
    from lab.registry import MODELS
    for family in MODELS.names():
        assert type(build(tiny_config(model=family, vocab_size=64)).lm_head) is OutputLayer, family
    model = build(tiny_config(vocab_size=50257)).eval()
    seen = []
    model.lm_head.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    with torch.no_grad():
        model(torch.tensor([[50256, 40]]))
    assert seen == [(1, 2, 50257)]
