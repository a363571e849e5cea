"""The captions task's presets: the Tfmr assignment's scratch model and fine-tune, and the
smaller ones a first visit and the tests train (tiny, quick, small, smollm2-quick)."""
from lab.task import ModelConfig, TrainConfig, preset


@preset("tfmr-scratch", "The assignment's Tfmr-scratch: 3 layers, 12 heads, width 768, Adam 1e-4, "
                        "batch 32, up to 20 epochs, early stop on dev perplexity")
def tfmr_scratch():
    return ModelConfig(model="gpt2", n_layer=3, n_head=12, n_embd=768), TrainConfig()


@preset("tiny", "A tiny model on 2,000 captions: two epochs")
def tiny():
    return (ModelConfig(model="gpt2", n_layer=2, n_head=4, n_embd=64, n_positions=64),
            TrainConfig(epochs=2, lr=1e-3, max_train=2000, max_dev=500))


@preset("quick", "A first scratch model: 2 layers, width 128, one epoch over the first 12,000 "
                 "training captions; it writes readable captions")
def quick():
    return (ModelConfig(model="gpt2", n_layer=2, n_head=4, n_embd=128, n_positions=64),
            TrainConfig(epochs=1, lr=1e-3, max_train=12000, max_dev=500, log_every=50))


@preset("small", "A small 4-layer model on the full corpus")
def small():
    return (ModelConfig(model="gpt2", n_layer=4, n_head=4, n_embd=256, n_positions=64),
            TrainConfig(epochs=5, lr=5e-4))


@preset("tfmr-finetune", "The assignment's fine-tuning settings (Adam 1e-4, batch 32, up to 20 epochs); "
                         "choose the checkpoint to fine-tune; 500 dev captions an evaluation, all "
                         "5,000 at the end", fine_tunes=True)
def tfmr_finetune():
    return ModelConfig(model="llama"), TrainConfig(max_dev=500, settings={"task": {"final_dev": True}})


@preset("smollm2-quick", "A quick fine-tune of a stored checkpoint such as SmolLM2: one pass over the "
                         "first 800 training captions, 200 dev captions scored (all 30 SmolLM2 "
                         "blocks)", fine_tunes=True)
def smollm2_quick():
    return (ModelConfig(model="llama"),
            TrainConfig(epochs=1, lr=2e-4, max_train=800, max_dev=200, log_every=5))
