"""Training FLOPs, the peak table and MFU, and how the trainer reports them (lab/modeling/flops.py); the
precision setting and the attention path that training takes. CPU only."""
import pytest
import torch

from lab.modeling import flops
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.modeling.model import build
from lab.training.progress import format_event
from lab.training.parameters import make_optimizer
from lab.training.train import autocast, resolve_precision


def _model(**overrides):
    base = dict(model="gpt2", vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=4, dropout=0.0)
    return build(ModelConfig(**{**base, **overrides}))


def test_matmul_params_leave_out_the_lookup_tables_and_count_a_tied_matrix_once():
    model = _model()
    blocks = sum(p.numel() for p in model.transformer.h.parameters())
    ln_f = sum(p.numel() for p in model.transformer.ln_f.parameters())
    assert flops.matmul_params(model) == blocks + ln_f + 97 * 32          # + the output layer
    assert model.num_params() - flops.matmul_params(model) == 97 * 32 + 32 * 32   # wte + wpe
    tied = _model(tie_embeddings=True)
    assert flops.matmul_params(tied) == blocks + ln_f + 97 * 32            # shared matrix, once


def test_flops_per_token_is_6n_plus_the_attention_term():
    # PaLM's estimate: 6N + 12 L H Q T with H Q = n_embd
    assert flops.per_token(1000, 3, 768, 20) == 6 * 1000 + 12 * 3 * 768 * 20
    # Tfmr-scratch: 3 blocks of width 768, GPT-2's vocabulary; about 0.36 GFLOP per token at T=20
    model = build(ModelConfig(model="gpt2", n_layer=3, n_head=12, n_embd=768))
    assert flops.matmul_params(model) == 59_862_528
    assert flops.per_token(flops.matmul_params(model), 3, 768, 20) == 359_728_128


def test_the_peak_table_is_keyed_by_device_name_and_says_when_it_does_not_know():
    assert flops.peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989e12
    assert flops.peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12
    assert flops.peak_flops("NVIDIA H200", "bf16") == 989e12
    assert flops.peak_flops("NVIDIA A100-SXM4-80GB", "bf16") == 312e12
    assert flops.peak_flops("NVIDIA L40S", "bf16") == 362e12               # not the L4's
    assert flops.peak_flops("NVIDIA H100 80GB HBM3", "fp32") == 67e12
    assert flops.peak_flops("cpu", "fp32") is None
    assert flops.peak_flops("Some Future GPU", "bf16") is None
    assert flops.device_name(torch.device("cpu")) == "cpu"


def test_mfu_is_achieved_flops_over_the_peak_of_every_process():
    assert flops.mfu(989e12, 2.0, 989e12) == pytest.approx(0.5)
    assert flops.mfu(989e12, 1.0, 989e12, processes=4) == pytest.approx(0.25)
    assert flops.mfu(1e12, 1.0, None) is None
    assert flops.format_mfu(0.1234) == "MFU 12.3%"
    assert flops.format_mfu(None) == "MFU unknown"


def _step_event(**more):
    return {"event": "step", "epoch": 1, "step": 20, "total_steps": 100, "train_loss": 3.5,
            "tokens_per_s": 123456.7, "elapsed_s": 10, "eta_s": 40, **more}


def test_the_step_line_says_tokens_per_second_and_mfu():
    line = format_event(_step_event(mfu=0.0427))
    assert "123,457 tok/s, MFU 4.3%" in line
    assert "123,457 tok/s, MFU unknown" in format_event(_step_event(mfu=None))
    progress = {"event": "progress", "phase": "training", "epoch": 1, "step": 3, "total_steps": 9,
                "eta_s": 5, "tokens_per_s": 900.0, "mfu": None}
    assert format_event(progress) == "epoch 1 step 3/9: training, 900 tok/s, MFU unknown, ETA 0m05s"
    start = {"event": "start", "device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3",
             "precision": "bf16", "compiled": True, "epochs": 20, "steps_per_epoch": 469}
    assert format_event(start) == ("training on cuda:0 (NVIDIA H100 80GB HBM3, bf16, compiled): "
                                   "20 epochs x 469 steps")


def test_precision_is_checked_and_auto_is_float32_on_the_cpu():
    with pytest.raises(ConfigError, match="precision must be 'auto', 'bf16' or 'fp32', got 'fp16'"):
        TrainConfig(precision="fp16").validate()
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu) == "fp32"
    assert resolve_precision("bf16", cpu) == "bf16"
    with autocast(cpu, "fp32"):
        assert not torch.is_autocast_enabled("cpu")
    with autocast(cpu, "bf16"):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")


def test_the_optimizer_is_fused_on_the_cpu_too():
    """torch's Adam loops over the parameters on the CPU unless asked for its fused kernel
    (0.44 s of a 1.9 s Tfmr-scratch step, fused 0.07 s)."""
    p = [torch.nn.Parameter(torch.zeros(3))]
    adam = make_optimizer(p, TrainConfig(), torch.device("cpu"))
    assert type(adam) is torch.optim.Adam and adam.defaults["fused"] is True
    adamw = make_optimizer(p, TrainConfig(weight_decay=0.1), torch.device("cpu"))
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 0.1
    assert adamw.defaults["fused"] is True


@pytest.mark.parametrize("attention", ["mha", "gqa", "mqa"])
def test_training_attention_goes_through_sdpa_and_weights_through_the_explicit_path(attention, monkeypatch):
    """scaled_dot_product_attention (its flash / memory-efficient kernels on a GPU) whenever no
    one asks for the weights; the Attention tab's weights come from the explicit softmax."""
    from torch.nn import functional as F
    calls = []
    real = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        calls.append(kwargs.get("is_causal"))
        return real(*args, **kwargs)
    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    model = _model(attention=attention,
                   settings={"attention": {"kv_groups": 2}} if attention == "gqa" else {})
    model.train()
    model(torch.randint(0, 97, (2, 9)))
    assert calls == [True, True]                  # one per block, the causal kernel
    calls.clear()
    out = model(torch.randint(0, 97, (2, 9)), output_attentions=True)
    assert calls == [] and out.attentions[0].shape == (2, 4, 9, 9)


def test_peaks_match_whole_words_of_the_device_name():
    assert flops.peak_flops("NVIDIA L4", "bf16") == 121e12
    assert flops.peak_flops("NVIDIA L40", "bf16") is None               # not an L4
    assert flops.peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12
