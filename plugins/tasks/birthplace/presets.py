"""The birth-place task's presets: the assignment's GPT pretrained with span corruption (vanilla
and HW5's Perceiver) and its fine-tune on the questions."""
from lab.task import ModelConfig, TrainConfig, preset

# the birth-place pretraining budget: the assignment's 650 epochs, batch 128, lr 6e-3
_PRETRAIN = dict(epochs=650, batch_size=128, lr=6e-3, warmup_steps=10, log_every=10)


@preset("birthplace-vanilla", "The birth-place task's vanilla GPT (4 layers, 8 heads, width 256, "
                              "block 128) pretrained with span corruption: the assignment's 650 "
                              "epochs, batch 128, lr 6e-3 with warm-up and cosine decay to 10%, "
                              "minGPT's AdamW (betas 0.9/0.95, biases not decayed) and its plain "
                              "initialisation")
def birthplace_vanilla():
    m, t = _birthplace("span", **_PRETRAIN)
    return m.replace(init="plain"), t.replace(adam_beta2=0.95, decay_biases=False)


def _birthplace(objective: str, **train):
    """The assignment's GPT (minGPT: dropout 0.1, AdamW 0.1, clipping 1.0, warm-up then cosine)."""
    return (ModelConfig(model="gpt2", n_layer=4, n_head=8, n_embd=256, n_positions=128, dropout=0.1),
            TrainConfig(task="birthplace", objective=objective, lr_schedule="warmup_cosine",
                        weight_decay=0.1, grad_clip=1.0, early_stop="none", **train))


HW5_PERCEIVER = {"bottleneck_dim": 32, "cross_norm": "bottleneck"}   # run.py's default, its hints


@preset("birthplace-perceiver", "The birth-place task's Perceiver variant as HW5 builds it (a "
                                "basis of 32 rows; cross-attention normalising only the "
                                "bottleneck's side), otherwise as birthplace-vanilla but with "
                                "GPT-2's scaled initialisation and torch's AdamW betas (0.9/0.999, "
                                "biases decayed), which answered more questions for it than minGPT's")
def birthplace_perceiver():
    m, t = _birthplace("span", **_PRETRAIN)
    return m.replace(model="perceiver", settings={"model": dict(HW5_PERCEIVER)}), t


@preset("birthplace-finetune", "Birth-place questions: batch 256, lr 6e-4 with warm-up and cosine "
                               "decay; 10 epochs from a pretrained model (the assignment's; 75 "
                               "without pretraining)", fine_tunes=True)
def birthplace_finetune():
    return _birthplace("qa", epochs=10, batch_size=256, lr=6e-4, warmup_steps=2, log_every=4)
