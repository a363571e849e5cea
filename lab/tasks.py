"""Tasks: what a run learns from. A task plugin brings its data, the tokenizer of a model trained
from scratch, its objective(s) (the batches and the loss) and its dev scores, so the trainer,
jobs, sweeps and checkpoints serve every task the same way.

Every task's `prepare` returns a `Prepared`: the trainer knows no task by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

from lab.config import ConfigError
from lab.registry import TASKS, load_plugins


def check_task(name: str, objective: str) -> None:
    load_plugins()
    if name not in TASKS:
        raise ConfigError(f"task must be one of {', '.join(TASKS.names())}, got {name!r}"[:300])
    objectives = TASKS.get(name).meta["objectives"]
    if objective and objective not in objectives:
        raise ConfigError(f"the {name} task's objectives are {', '.join(objectives)}; "
                          f"got objective={objective!r}"[:300])


def objective_of(train_cfg) -> str:
    load_plugins()
    return train_cfg.objective or TASKS.get(train_cfg.task).meta["objectives"][0]


def get(name: str):
    load_plugins()
    return TASKS.build(name)


@dataclass
class Prepared:
    """A task's run, ready for the trainer: train_items (an epoch is one pass over them; their
    count sets the steps), dev_items (counted in progress lines), batches(generator) for an epoch
    (the trainer seeds the generator per epoch, so a resume sees the same batches), loss(logits,
    batch), evaluate(model, abort) -> dev scores with dev_loss and dev_perplexity (under the
    run's autocast; raises metrics.Aborted when abort() says stop). unit: what the items are, for
    progress lines ("captions", "documents", "questions"). final(name, trainer, store): events
    of a last step once the run is done and its checkpoint kept (captions: every dev caption).
    packs: its batches are separate texts padded after their end, which the trainer may pack
    into rows (data.pack) with the same loss."""
    tokenizer: object
    train_items: list
    dev_items: list
    batches: Callable[..., Iterator]
    loss: Callable
    evaluate: Callable[..., dict]
    info: dict = field(default_factory=dict)
    unit: str = "examples"
    final: Callable[..., Iterator[dict]] | None = None
    packs: bool = False
