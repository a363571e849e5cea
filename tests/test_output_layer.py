"""lab.modeling.model.OutputLayer: logits computed in tiles of rows by vocabulary entries (faster on the
CPU, benchmarks/output_layer.py) are the logits of one product over the whole matrix."""
import threading

import torch
import torch.nn.functional as F

from lab.modeling.model import OutputLayer, build, recycled_logits
from tests.conftest import tiny_config


def _spy(monkeypatch, name):
    """Record the vocabulary rows of each torch.mm / torch.addmm block the layer multiplies."""
    calls, real = [], getattr(torch, name)

    def spy(*args, **kw):
        calls.append(args[-1].size(1))              # w[i:j].t(): (n_embd, block)
        return real(*args, **kw)
    monkeypatch.setattr(torch, name, spy)
    return calls


def test_blocked_logits_equal_one_product_with_bias_and_a_short_last_block(monkeypatch):
    torch.manual_seed(0)
    layer = OutputLayer(48, 50257)                  # 49 full blocks and one of 81 entries
    h = torch.randn(3, 7, 48)
    calls = _spy(monkeypatch, "addmm")
    with torch.no_grad():
        got = layer(h)
    assert calls == [1024] * 49 + [81]
    want = F.linear(h, layer.weight, layer.bias)
    assert got.shape == (3, 7, 50257)
    assert torch.allclose(got, want, rtol=0, atol=1e-5)
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_training_and_small_vocabularies_take_one_product_and_many_rows_come_in_tiles(monkeypatch):
    torch.manual_seed(0)
    layer = OutputLayer(16, 9000, bias=False)
    linear = []
    real_linear = F.linear
    monkeypatch.setattr(F, "linear", lambda *a: linear.append(a[1].size(0)) or real_linear(*a))
    calls = _spy(monkeypatch, "mm")
    h = torch.randn(4, 16, requires_grad=True)
    out = layer(h)                                  # gradients on: nn.Linear's one product
    out.sum().backward()
    assert h.grad is not None and layer.weight.grad is not None
    assert linear == [9000] and calls == []
    blocks = [1024] * 8 + [808]
    with torch.no_grad():
        big = torch.randn(513, 16)                  # two tiles of rows: 512 and 1
        assert torch.allclose(layer(big), real_linear(big, layer.weight), atol=1e-5)
        assert calls == blocks * 2
        layer(torch.randn(4, 16))                   # a decoding step
        assert calls == blocks * 3
        small = OutputLayer(16, 100, bias=False)    # under 4 blocks: one product
        assert torch.allclose(small(big), real_linear(big, small.weight), atol=1e-5)
        assert small(torch.randn(0, 16)).shape == (0, 100)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert layer(torch.randn(4, 16)).dtype == torch.bfloat16    # autocast: nn.Linear's
    assert calls == blocks * 3 + [100]
    assert linear == [9000, 9000]


def test_recycled_logits_overwrite_the_last_calls_in_this_thread_only():
    torch.manual_seed(0)
    layer = OutputLayer(16, 9000, bias=False)
    a, b = torch.randn(5, 16), torch.randn(3, 1, 16)
    with torch.no_grad():
        fresh = [layer(a), layer(a)]
        assert fresh[0].data_ptr() != fresh[1].data_ptr()
        with recycled_logits():
            first = layer(a)
            assert torch.allclose(first, F.linear(a, layer.weight), atol=1e-5)
            other = []
            worker = threading.Thread(target=lambda: other.append(layer(a)))   # outside the context
            worker.start()
            worker.join()
            second = layer(b)                       # fewer rows: the buffer's first 3 x 9000
            assert second.data_ptr() == first.data_ptr() and second.shape == (3, 1, 9000)
            assert torch.allclose(second, F.linear(b, layer.weight), atol=1e-5)
            assert other[0].data_ptr() != first.data_ptr()
            assert torch.allclose(other[0], fresh[0])
        after = layer(a)
    assert after.data_ptr() != first.data_ptr()
    assert torch.allclose(after, fresh[0])


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
