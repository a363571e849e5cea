"""The CUDA path: bf16 autocast with float32 weights, fused Adam, torch.compile, MFU in the events.
Skipped without a CUDA GPU (CI has none); run on a GPU with `pytest tests/test_gpu.py`."""
import math

import pytest
import torch

from lab.storage import checkpoints
from lab.training import runs
from lab.config import ModelConfig, TrainConfig
from lab.modeling.model import build
from lab.training.parameters import make_optimizer
from lab.training.train import autocast

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MODEL = ModelConfig(model="gpt2", n_layer=2, n_head=4, n_embd=64, n_positions=48)


def _run(name, **train):
    cfg = TrainConfig(epochs=1, lr=1e-3, max_train=320, max_dev=60, device="cuda",
                      **train)
    return list(runs.train(name, MODEL, cfg))


def test_a_cuda_run_trains_in_bf16_keeps_float32_weights_and_reports_mfu(corpus_dir):
    events = _run("gpu")
    start = next(e for e in events if e["event"] == "start")
    assert start["device"].startswith("cuda") and start["precision"] == "bf16"
    steps = [e for e in events if e["event"] == "step"]
    assert all(math.isfinite(e["train_loss"]) and e["tokens_per_s"] > 0 for e in steps)
    if start["peak_flops"] is not None:
        assert all(0 < e["mfu"] < 1 for e in steps)
    dev = next(e for e in events if e["event"] == "eval")["dev_perplexity"]
    assert math.isfinite(dev) and dev < 97_000
    weights = checkpoints.load("gpu").model.state_dict().values()
    assert all(w.dtype == torch.float32 for w in weights if w.is_floating_point())


def test_compiled_training_runs_and_saves(corpus_dir):
    events = _run("compiled", compile=True)
    assert next(e for e in events if e["event"] == "start")["compiled"] is True
    assert math.isfinite(next(e for e in events if e["event"] == "eval")["dev_perplexity"])
    assert "compiled" in checkpoints.names()


def test_bf16_loss_is_float32_loss_to_bf16_rounding():
    torch.manual_seed(0)
    model = build(MODEL.replace(vocab_size=97, dropout=0.0)).cuda().eval()
    idx = torch.randint(0, 97, (8, 40), device="cuda")
    with torch.no_grad():
        exact = model(idx, labels=idx).loss
        with autocast(torch.device("cuda"), "bf16"):
            fast = model(idx, labels=idx).loss
    assert fast.dtype == torch.float32            # cross-entropy runs in float32 under autocast
    assert abs(fast.item() - exact.item()) / exact.item() < 1e-2


def test_the_optimizer_is_fused_on_cuda():
    p = [torch.nn.Parameter(torch.zeros(3, device="cuda"))]
    assert make_optimizer(p, TrainConfig(), torch.device("cuda")).defaults["fused"] is True
    assert make_optimizer(p, TrainConfig(weight_decay=0.1), torch.device("cuda")).defaults["fused"] is True


def test_packed_rows_give_the_padded_loss_on_cuda_in_float32_and_bf16():
    """Packing's masks and per-row positions on the GPU: equal to the padded batch in float32,
    within bf16 rounding under autocast (SDPA takes another kernel with a mask)."""
    from lab.inputs.data import collate, pack
    from lab.training.train import shard_loss
    torch.manual_seed(0)
    model = build(MODEL.replace(vocab_size=97, dropout=0.0)).cuda().eval()
    g = torch.Generator().manual_seed(0)
    seqs = [[0] + torch.randint(1, 97, (n,), generator=g).tolist() + [0] for n in (3, 17, 9, 30, 5, 12)]
    batch = collate(seqs, 0).to("cuda")
    assert pack(batch).segments.is_cuda
    with torch.no_grad():
        padded, packed = shard_loss(model, batch), shard_loss(model, batch, packed=True)
        torch.testing.assert_close(packed, padded, atol=1e-5, rtol=1e-5)
        with autocast(torch.device("cuda"), "bf16"):
            fast = shard_loss(model, batch, packed=True)
    assert abs(fast.item() - padded.item()) / padded.item() < 1e-2
