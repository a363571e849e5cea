"""A training run as one operation, shared by the CLI and the job worker: read the corpus,
build (or load) the model, train, keep the best checkpoint in the store."""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Iterator

import torch

from lab import checkpoints, data, distributed, tasks, tokenizers
from lab import store as lab_store
from lab.config import ConfigError, ModelConfig, TrainConfig, parse_blocks
from lab.model import build
from lab.train import Trainer


def run_dir_for(name: str, store=None) -> Path:
    return checkpoints.store_dir(store) / lab_store.RUNS / checkpoints.check_name(name)


def last_dir(name: str, store=None) -> Path:
    """Where a stopped run keeps its state (weights, optimizer, random states) to go on from."""
    return run_dir_for(name, store) / "last"


def train(name: str, model_cfg: ModelConfig | None, train_cfg: TrainConfig, *,
          parent: str | None = None, preset: str | None = None, data_dir=None, store=None,
          should_stop=None, resume: bool = False) -> Iterator[dict]:
    """Train a new model (model_cfg), fine-tune a stored checkpoint (parent), or go on with the
    run `name` where it stopped (resume: weights, optimizer moments, epoch and step, best dev
    score, random states; the same shuffling as an uninterrupted run). Yields the trainer's events.
    The process holds checkpoint `name`'s lock from start to end: no other process writes it."""
    checkpoints.check_name(name)
    train_cfg.validate()
    if distributed.rank() != 0:       # under torchrun rank 0 alone saves, so rank 0 alone locks
        yield from _train(name, model_cfg, train_cfg, parent, preset, data_dir, store, should_stop, resume)
        return
    # a run that just ended may still be leaving: wait a moment for its lock
    with lab_store.hold(lab_store.name_lock(name, store), f"checkpoint {name!r}", wait_s=10):
        yield from _train(name, model_cfg, train_cfg, parent, preset, data_dir, store, should_stop, resume)


def _train(name, model_cfg, train_cfg, parent, preset, data_dir, store, should_stop, resume):
    if distributed.rank() == 0:
        checkpoints.recover(store, only=name)     # a save of this name a crash left unfinished
    state, source_dir = resume_state(name, train_cfg, store) if resume else (None, None)
    if not resume:
        checkpoints.refuse_existing(name, store)
        if train_cfg.keep_bleu_best:
            checkpoints.refuse_existing(bleu_name(name), store)
        if distributed.rank() == 0:
            shutil.rmtree(run_dir_for(name, store), ignore_errors=True)   # an old run's leftovers
    task = tasks.get(train_cfg.task)            # None: captions, the trainer's own path
    if task is None:
        root = data.resolve_data_dir(data_dir)
        train_caps = data.load_split("train", root)[: train_cfg.max_train_captions]
        dev_caps = data.load_split("dev", root)[: train_cfg.max_dev_captions]
    else:
        # data_dir names the caption corpus (the worker's, the app's): a task finds its own
        # folder (its default or its environment variable, which its CLI sets from --data-dir)
        root = task.data_dir(None)
    torch.manual_seed(train_cfg.seed)
    if resume:
        ck = checkpoints.load_dir(source_dir)
        model, tok, model_cfg = ck.model, ck.tokenizer, ck.config
        # still the same run: keep where the model came from
        source = {k: v for k, v in ck.meta.items() if k in ("source", "parent", "layers", "pretrained")}
        source["resumed_at_step"] = state["step"]
    elif parent:
        if train_cfg.tokenizer != "gpt2":
            raise ConfigError(f"tokenizer={train_cfg.tokenizer} is for a model trained from scratch; "
                              f"a fine-tune keeps its parent's tokenizer: leave tokenizer at gpt2")
        model, tok, meta = load_parent(parent, store)
        model_cfg = model.config
        source = {"source": "finetune", "parent": parent, **{k: v for k, v in meta.items()
                                                             if k in ("layers", "pretrained")}}
    else:
        model_cfg.validate()
        tok = task.scratch_tokenizer(root) if task is not None else \
            tokenizers.for_scratch(train_cfg.tokenizer, data.load_split("train", root))
        if model_cfg.vocab_size != tok.vocab_size:
            model_cfg = model_cfg.replace(vocab_size=tok.vocab_size)
        model = build(model_cfg)
        source = {"source": "scratch"}
    prepared = None
    if task is None:
        max_len = model_cfg.n_positions
        train_seqs = data.encode_captions(train_caps, tok, max_len)
        dev_seqs = data.encode_captions(dev_caps, tok, max_len)
    else:
        prepared = task.prepare(tasks.objective_of(train_cfg), train_cfg, tok, model_cfg, root)
        train_seqs, dev_seqs, dev_caps = prepared.train_items, prepared.dev_items, []
    run_dir = run_dir_for(name, store)
    provenance = {**source, "preset": preset, "train": train_cfg.to_dict(), "task": train_cfg.task,
                  "objective": tasks.objective_of(train_cfg),
                  "data_dir": str(root), "run_dir": str(run_dir), "tokenizer": tok.kind}

    def save_best(record: dict, train_state: dict):
        checkpoints.save(model, tok, name, store, provenance={**provenance, "epoch": record["epoch"]},
                         metrics={k: v for k, v in record.items() if k.startswith("dev_")}
                         | {"epoch": record["epoch"]}, overwrite=True, train_state=train_state)

    def save_last(train_state: dict):
        checkpoints.write_dir(last_dir(name, store), model, tok,
                              provenance={**provenance, "stopped_at_step": train_state["step"]},
                              metrics={"step": train_state["step"]}, train_state=train_state)

    def save_best_bleu(record: dict, train_state: dict):
        """The epoch with the best dev harmonic BLEU so far, as NAME-bleu (keep_bleu_best)."""
        checkpoints.save(model, tok, bleu_name(name), store,
                         provenance={**provenance, "epoch": record["epoch"], "run": name,
                                     "kept_by": "dev harmonic BLEU"},
                         metrics={k: v for k, v in record.items() if k.startswith("dev_")}
                         | {"epoch": record["epoch"]}, overwrite=True)

    dev_bleu = None
    if task is None and (train_cfg.early_stop == "bleu" or train_cfg.keep_bleu_best):
        dev_bleu = _dev_bleu_fn(tok, dev_caps, train_cfg)
    trainer = Trainer(model, train_seqs, dev_seqs, tok.eos_id, train_cfg, run_dir,
                      on_best=save_best, on_stop=save_last, dev_bleu=dev_bleu, should_stop=should_stop,
                      on_best_bleu=save_best_bleu if train_cfg.keep_bleu_best else None,
                      dev_words=[len(c.split()) for c in dev_caps] if task is None else None,
                      resume=state, task=prepared)
    if distributed.rank() == 0:
        yield {"event": "data", "train_captions": len(train_seqs), "dev_captions": len(dev_seqs),
               "params": sum(p.numel() for p in model.parameters()), "run_dir": str(run_dir),
               **(prepared.info if prepared else {}), "time": time.time()}
    ended = None
    for ended in trainer.run():
        yield ended
    if task is None and train_cfg.final_dev and train_cfg.max_dev_captions is not None \
            and distributed.rank() == 0 \
            and ended and ended["event"] == "done" and name in checkpoints.names(store):
        yield from _final_dev(name, tok, root, trainer, store)


def _final_dev(name: str, tok, root, trainer: Trainer, store=None) -> Iterator[dict]:
    """The kept checkpoint scored on every dev caption; the figures join its metrics."""
    from lab.metrics import Aborted, perplexity
    dev_caps = data.load_split("dev", root)
    ck = checkpoints.load(name, store)
    yield {**trainer.progress(ck.metrics.get("epoch", 1), "evaluating", dev_captions=len(dev_caps),
                              final=True), "time": time.time()}
    seqs = data.encode_captions(dev_caps, tok, ck.config.n_positions)
    try:
        ppl = perplexity(ck.model.to(trainer.device), seqs, tok.eos_id, trainer.cfg.eval_batch_size,
                         trainer.device, n_words=[len(c.split()) for c in dev_caps],
                         abort=trainer.abort_eval)
    except Aborted:
        yield {"event": "final_dev_aborted", "time": time.time()}
        return
    extra = {"final_dev_captions": len(dev_caps), "final_dev_perplexity": ppl["perplexity"],
             "final_dev_token_perplexity": ppl["token_perplexity"],
             "final_dev_word_perplexity": ppl["word_perplexity"]}
    checkpoints.add_metrics(name, extra, store)
    yield {"event": "final_dev", "time": time.time(), **extra}


def bleu_name(name: str) -> str:
    """Where a run with keep_bleu_best keeps its best-BLEU epoch."""
    return checkpoints.check_name(f"{name}-bleu")


SMOLLM2 = "smollm2"          # a parent name that, unless the store has one, is the packaged SmolLM2
SMOLLM2_LAYERS = 30


def split_parent(parent: str) -> tuple[str, str | None]:
    """'NAME' or 'NAME:LAYERS' (LAYERS: 1-based blocks such as 1,15,30, or 'all'): the blocks of
    a parent a fine-tune starts from, chosen without importing anything into the store first.
    NAME is a stored checkpoint, or smollm2 for the packaged SmolLM2 when no checkpoint has
    that name."""
    if not isinstance(parent, str):
        raise ConfigError(f"parent must be a checkpoint name, got {type(parent).__name__}")
    name, _, layers = parent.partition(":")
    return name, (layers or None) if ":" in parent else None


def check_parent(parent: str, store=None) -> int:
    """The number of blocks a fine-tune from `parent` starts with (no weights read)."""
    name, layers = split_parent(parent)
    if name == SMOLLM2 and name not in checkpoints.names(store):
        from lab.smollm2 import gguf_path
        gguf_path()                                  # the packaged weights are there
        if layers is None:
            raise ConfigError("parent 'smollm2' names the packaged SmolLM2: give its blocks, e.g. "
                              "smollm2:1,2,3 or smollm2:all (or import it under that name first)")
        n_layer = SMOLLM2_LAYERS
    else:
        n_layer = checkpoints.check_loadable(name, store).n_layer
    if layers is None or layers == "all":
        return n_layer
    return len(parse_blocks(layers, n_layer, f"the blocks of parent {parent!r}"))


def load_parent(parent: str, store=None):
    """(model, tokenizer, provenance) of the parent a fine-tune starts from: a stored checkpoint,
    or some of its blocks ('NAME:1,2,3'), or blocks of the packaged SmolLM2 ('smollm2:1,15,30').
    The blocks kept are named in the original model's numbering ('layers')."""
    name, layers = split_parent(parent)
    if name == SMOLLM2 and name not in checkpoints.names(store):
        from lab import smollm2
        check_parent(parent, store)
        hf_model, hf_tok = smollm2.load_hf()
        model, kept = smollm2.to_lab(hf_model, None if layers == "all" else parse_blocks(layers, 30))
        return model, tokenizers.HFTokenizer(hf_tok, "smollm2"), {
            "pretrained": smollm2.PRETRAINED, "layers": kept}
    ck = checkpoints.load(name, store)
    if layers is None:
        return ck.model, ck.tokenizer, ck.meta
    n = ck.config.n_layer
    chosen = list(range(1, n + 1)) if layers == "all" else parse_blocks(layers, n)
    model = checkpoints.keep_blocks(ck.model, chosen)
    before = ck.meta.get("layers") or list(range(1, n + 1))
    meta = {**ck.meta, "layers": [before[i - 1] for i in chosen]}
    return model, ck.tokenizer, meta


def resume_state(name: str, train_cfg: TrainConfig, store) -> tuple[dict, Path]:
    """Where the run `name` stands (see resume_point), checked against the epochs to train."""
    state, path = resume_point(name, store)
    if state["epoch"] >= train_cfg.epochs:
        raise ConfigError(f"run {name!r} has already trained {state['epoch']} of "
                          f"{train_cfg.epochs} epochs; set epochs above {state['epoch']} to go on")
    if train_cfg.max_steps is not None and state["step"] >= train_cfg.max_steps:
        raise ConfigError(f"run {name!r} has already trained {state['step']} steps, its budget "
                          f"max_steps={train_cfg.max_steps}; set max_steps higher to go on")
    if train_cfg.max_minutes is not None and state.get("trained_s", 0) >= train_cfg.max_minutes * 60:
        raise ConfigError(f"run {name!r} has already trained {state['trained_s'] / 60:.2f} "
                          f"minutes, its budget max_minutes={train_cfg.max_minutes:g}; set "
                          f"max_minutes higher to go on")
    return state, path


def resume_point(name: str, store=None) -> tuple[dict, Path]:
    """Where the run `name` stands, from the later of its best checkpoint and the state its last
    stop kept: (train state, folder to load the model from); or one message saying why training
    cannot go on."""
    candidates = []
    last = last_dir(name, store)
    if not last.is_dir() and name not in checkpoints.names(store):
        raise ConfigError(f"run {name!r} saved nothing to go on from (no checkpoint {name!r} in "
                          f"the store, no state kept by a stop); start it again")
    if last.is_dir():
        candidates.append((checkpoints.read_train_state(last), last))
    if name in checkpoints.names(store):
        candidates.append((checkpoints.load_train_state(name, store), checkpoints.resolve(name, store)))
    candidates = [(s, p) for s, p in candidates if s is not None]
    if not candidates:
        raise ConfigError(f"run {name!r} kept no training state to go on from (the checkpoint was "
                          f"imported, saved before checkpoints kept one, or the run ended before "
                          f"its first save); fine-tune from it with a new name, or start it again")
    return max(candidates, key=lambda c: c[0]["step"])


def _dev_bleu_fn(tok, dev_caps, cfg: TrainConfig):
    """Dev harmonic BLEU (GPT-2 tokens, random sampling at tau=1) on a fixed seeded subset."""
    from lab.config import DecodeConfig
    from lab.generate import sample_captions
    from lab.metrics import bleu
    idx = data.subset_indices(len(dev_caps), cfg.bleu_samples, cfg.seed)
    refs = tok.encode_batch([dev_caps[i] for i in idx])

    def score(model, abort=None) -> float:
        gen = sample_captions(model, tok, len(refs), DecodeConfig(decoder="random", seed=cfg.seed),
                              abort=abort)
        return bleu([g.tokens for g in gen], refs)["harmonic"]
    return score
