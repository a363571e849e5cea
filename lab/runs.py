"""A training run as one operation, shared by the CLI and the job worker: read the corpus,
build (or load) the model, train, keep the best checkpoint in the store."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import torch

from lab import checkpoints, data, distributed, tokenizers
from lab.config import ConfigError, ModelConfig, TrainConfig
from lab.model import build
from lab.train import Trainer


def run_dir_for(name: str, store=None) -> Path:
    return checkpoints.store_dir(store) / "_runs" / name


def train(name: str, model_cfg: ModelConfig | None, train_cfg: TrainConfig, *,
          parent: str | None = None, preset: str | None = None, data_dir=None, store=None,
          should_stop=None, resume: bool = False) -> Iterator[dict]:
    """Train a new model (model_cfg), fine-tune a stored checkpoint (parent), or go on with the
    checkpoint `name` where its training stopped (resume: weights, optimizer moments, epoch, best
    dev score; the same shuffling as an uninterrupted run). Yields the trainer's events."""
    checkpoints.check_name(name)
    train_cfg.validate()
    state = resume_state(name, train_cfg, store) if resume else None
    if resume:
        parent = name
    root = data.resolve_data_dir(data_dir)
    train_caps = data.load_split("train", root)[: train_cfg.max_train_captions]
    dev_caps = data.load_split("dev", root)[: train_cfg.max_dev_captions]
    torch.manual_seed(train_cfg.seed)
    if parent:
        ck = checkpoints.load(parent, store)
        model, tok, model_cfg = ck.model, ck.tokenizer, ck.config
        source = {"source": "finetune", "parent": parent, **{k: v for k, v in ck.meta.items()
                                                             if k in ("layers", "pretrained")}}
        if resume:      # still the same run: keep where the model came from
            source = {k: v for k, v in ck.meta.items() if k in ("source", "parent", "layers", "pretrained")}
            source["resumed_after_epoch"] = state["epoch"]
    else:
        model_cfg.validate()
        tok = tokenizers.gpt2()
        if model_cfg.vocab_size != tok.vocab_size:
            model_cfg = model_cfg.replace(vocab_size=tok.vocab_size)
        model = build(model_cfg)
        source = {"source": "scratch"}
    max_len = model_cfg.n_positions
    train_seqs = data.encode_captions(train_caps, tok, max_len)
    dev_seqs = data.encode_captions(dev_caps, tok, max_len)
    run_dir = run_dir_for(name, store)
    provenance = {**source, "preset": preset, "train": train_cfg.to_dict(),
                  "data_dir": str(root), "run_dir": str(run_dir), "tokenizer": tok.kind}

    def save_best(record: dict, train_state: dict):
        checkpoints.save(model, tok, name, store, provenance={**provenance, "epoch": record["epoch"]},
                         metrics={k: v for k, v in record.items() if k.startswith("dev_")}
                         | {"epoch": record["epoch"]}, overwrite=True, train_state=train_state)

    dev_bleu = None
    if train_cfg.early_stop == "bleu":
        dev_bleu = _dev_bleu_fn(tok, dev_caps, train_cfg)
    trainer = Trainer(model, train_seqs, dev_seqs, tok.eos_id, train_cfg, run_dir,
                      on_best=save_best, dev_bleu=dev_bleu, should_stop=should_stop,
                      dev_words=[len(c.split()) for c in dev_caps], resume=state)
    if distributed.rank() == 0:
        yield {"event": "data", "train_captions": len(train_seqs), "dev_captions": len(dev_seqs),
               "params": sum(p.numel() for p in model.parameters()), "run_dir": str(run_dir),
               "time": time.time()}
    yield from trainer.run()


def resume_state(name: str, train_cfg: TrainConfig, store) -> dict:
    """The checkpoint's train state, or one message saying why training cannot go on from it."""
    state = checkpoints.load_train_state(name, store)
    if state is None:
        raise ConfigError(f"checkpoint {name!r} holds no training state (it was imported, or saved "
                          f"before checkpoints kept one); fine-tune from it with a new name instead")
    if state["epoch"] >= train_cfg.epochs:
        raise ConfigError(f"checkpoint {name!r} has already trained {state['epoch']} of "
                          f"{train_cfg.epochs} epochs; set epochs above {state['epoch']} to go on")
    return state


def _dev_bleu_fn(tok, dev_caps, cfg: TrainConfig):
    """Dev harmonic BLEU (GPT-2 tokens, random sampling at tau=1) on a fixed seeded subset."""
    from lab.config import DecodeConfig
    from lab.generate import sample_captions
    from lab.metrics import bleu
    idx = data.subset_indices(len(dev_caps), cfg.bleu_samples, cfg.seed)
    refs = tok.encode_batch([dev_caps[i] for i in idx])

    def score(model) -> float:
        gen = sample_captions(model, tok, len(refs), DecodeConfig(decoder="random", seed=cfg.seed))
        return bleu([g.tokens for g in gen], refs)["harmonic"]
    return score
