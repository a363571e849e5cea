"""The task contract: what a task plugin provides, and the parts of the lab it may build on. A task
package imports this module and nothing else of the lab (docs/plugins.md, "Writing a task", walks
through one; examples/tasks/ holds a complete package written from it).

A task is what a run learns from: its examples, the tokenizer of a model trained from scratch on
them, what the loss counts and how a model scores on its dev examples. Everything else is the
lab's: turning an epoch into steps, packing, the optimizer and its schedule, when to evaluate,
which checkpoint to keep, progress lines, saving and resuming, jobs, and the views (attention,
the logit lens, head ablation and patching read any model).

It registers a factory that returns its object (called with `settings`, the defaults, when it
declares settings; a run reads its own with `settings_of(cfg)`) and declares, at its registration:

    @TASKS.register("reverse", "one line: what it learns and how it is scored",
                    objectives=("lm",),            # what a run may train on; the first by default
                    keep_best={"exact_match": {"score": "dev_exact_match", "higher": True,
                                               "label": "dev exact match", "percent": True}},
                    settings=ReverseSettings)      # optional: a dataclass of its own settings

keep_best lists its dev scores by name, in order: `score` is the key of the dict its
`evaluate` returns, `higher` whether bigger is better, `label` the words a progress line and
`evaluate` print, `percent` for a proportion, `count` the key of how many were right. A run keeps
its checkpoint by the first unless early_stop names another. Optional declarations, for what the
built-in tasks do: `unit` (the plural word for its texts, "texts" if none: what Compare,
Evaluate and sweeps call them), `tokenizers` (the scratch tokenizers the Train form offers),
`tabs` (the views its checkpoints go to: "generate" for text), `legacy_keys`, `commands`
and `train_view` (its own CLI commands and Train-tab section).

Its presets, if it has any, are builders of (ModelConfig, TrainConfig) registered with
`@preset(name, description)` (`fine_tunes=True` for one made for a stored checkpoint); the Train
form, `train --preset` and sweeps offer them beside the lab's.

The object the factory returns is a `Task`; what it lacks of `REQUIRED` is refused by name, with
its package, when the plugins load.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterator, Protocol, runtime_checkable

import torch

from lab.config import ConfigError, DecodeConfig, ModelConfig, TrainConfig
from lab.errors import Aborted
from lab.evaluation.metrics import wilson
from lab.inputs import tasks
from lab.inputs.data import Batch
from lab.inputs.tasks import Prepared
from lab.inputs.tokenizers import CharTokenizer
from lab.modeling.generate import generate
from lab.presets import DECODE_TO_ANSWER, preset
from lab.registry import TASKS

__all__ = ["TASKS", "Task", "REQUIRED", "Prepared", "Batch", "CharTokenizer", "ConfigError",
           "ModelConfig", "TrainConfig", "preset", "Aborted", "settings_of", "checkpoint_settings", "answer_batch", "epoch_batches", "masked_loss", "dev_loss",
           "greedy_answers", "exact_match"]

REQUIRED = TASKS.required


@runtime_checkable
class Task(Protocol):
    """What a task's object provides. `scratch_tokenizer` and `prepare` are required; the others
    are optional and say what a task can do beyond training."""

    def scratch_tokenizer(self, data_dir, cfg):
        """The tokenizer of a model trained from scratch on this task (data_dir: `data_dir()`'s
        answer; cfg: the run's TrainConfig). A fine-tune keeps its parent's tokenizer."""

    def prepare(self, objective: str, cfg, tok, model_cfg, data_dir=None) -> Prepared:
        """A run's examples, ready for the trainer (`Prepared`): its train and dev items, an
        epoch's batches, the loss and `evaluate(model, abort) -> dev scores`. The scores hold
        `dev_loss` and `dev_perplexity` (what a run falls back on) and the keys its keep_best
        names. Raise ConfigError for a model or settings the task cannot train (too short a
        context, a tokenizer it cannot read), before anything is trained."""

    # Optional:
    #   data_dir(path=None, store=None) -> where its data lives (given to scratch_tokenizer and
    #       prepare; default: None)
    #   check_stored(cfg, store) -> raise ConfigError when what a run names is not in the store,
    #       before its job is queued
    #   score(ck, split, n, seed) -> {"metrics": {name: {"value", "interval", "label",
    #       "percent"}}, "n": examples scored, "unit": their word, "samples": [...]}: what
    #       `evaluate` reports for its checkpoints on up to n examples of split drawn by seed (a
    #       task whose checkpoints write text may give texts(ck, split) instead)
    #   texts(ck, split, data_dir) -> (texts, {"split", "source"}): a split's texts as its model
    #       reads them, which head ablation and exposure bias score (and, with
    #       tabs=("generate",), perplexity and BLEU); without it those views say it gives none


def settings_of(cfg):
    """The run's own settings of its task (an instance of the task's settings dataclass)."""
    return cfg.plugin_settings("task")


def checkpoint_settings(ck):
    """The settings of its task a checkpoint's run recorded (an instance of the task's settings
    dataclass, its defaults where the run recorded none), or None for a task without settings."""
    entry = TASKS.get(tasks.of_checkpoint(ck))
    if entry.settings is None:
        return None
    recorded = ((ck.meta or {}).get("train") or {}).get("settings", {}).get("task", {})
    known = {f.name for f in dataclasses.fields(entry.settings)}
    return entry.settings(**{k: v for k, v in recorded.items() if k in known})


def answer_batch(pairs: list[tuple[str, str]], tok) -> Batch:
    """(prompt, answer) pairs as one batch: each row the start token (where the tokenizer has
    one), the prompt, the answer and end-of-text, padded with end-of-text; the loss counts the
    answer and its end only."""
    start = [] if tok.bos_id is None else [tok.bos_id]
    rows, firsts = [], []
    for prompt, answer in pairs:
        head = start + tok.encode(prompt)
        rows.append(head + tok.encode(answer) + [tok.eos_id])
        firsts.append(len(head) - 1)             # the input whose target is the answer's first
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), tok.eos_id, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1)
    for i, (row, first) in enumerate(zip(rows, firsts)):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, first:len(row) - 1] = 1.0
    return Batch(ids, mask)


def epoch_batches(items: list, batch_size: int, make: Callable[[list], Batch], shuffle: bool,
                  gen: torch.Generator) -> Iterator[Batch]:
    """An epoch's batches of `items`: in the order of the trainer's generator for the epoch
    (`gen`, so a resumed run sees the same batches) when shuffle, else in order; make(chunk)
    builds each."""
    order = torch.randperm(len(items), generator=gen).tolist() if shuffle else range(len(items))
    order = list(order)
    for i in range(0, len(order), batch_size):
        yield make([items[j] for j in order[i:i + batch_size]])


def masked_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Cross-entropy averaged over the batch's counted targets (its loss_mask), for a batch as
    answer_batch makes it and as the trainer packs it (targets apart)."""
    if batch.targets is None:
        logits, targets = logits[:, :-1], batch.input_ids[:, 1:]
    else:
        targets = batch.targets
    targets = targets.masked_fill(batch.loss_mask == 0, -100)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                                             targets.reshape(-1), ignore_index=-100)


@torch.no_grad()
def dev_loss(model, batches: list[Batch], abort: Callable[[], bool]) -> dict:
    """The loss over dev batches (every counted target alike) and its perplexity: the scores
    every task's `evaluate` returns. Asks abort() before each batch (raises Aborted)."""
    device = next(model.parameters()).device
    total, count = 0.0, 0.0
    for b in batches:
        if abort():
            raise Aborted()
        b = b.to(device)
        n = float(b.loss_mask.sum())
        total += float(masked_loss(model(b.input_ids).logits, b)) * n
        count += n
    loss = total / max(count, 1.0)
    return {"dev_loss": loss, "dev_perplexity": math.exp(loss)}


def greedy_answers(model, tok, prompts: list[str], max_new: int, abort=None) -> list[str]:
    """Each prompt continued greedily to end-of-text (or max_new tokens, or the context's end),
    as text: what the model answers."""
    start = [] if tok.bos_id is None else [tok.bos_id]
    room = model.config.n_positions
    encoded = [(start + tok.encode(p))[:room - 1] for p in prompts]
    made = generate(model, encoded, DecodeConfig(**DECODE_TO_ANSWER, max_new_tokens=max_new),
                    tok.eos_id, abort=abort)
    return [tok.decode(new) for new, _, _ in made]


def exact_match(answers: list[str], truths: list[str]) -> dict:
    """How many answers equal their truth: the proportion, the count and its 95% Wilson interval."""
    right = sum(a == t for a, t in zip(answers, truths))
    return {"value": right / max(len(truths), 1), "correct": right, "n": len(truths),
            "interval": wilson(right, len(truths))}
