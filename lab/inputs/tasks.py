"""Tasks: what a run learns from. A task plugin brings its data, the tokenizer of a model trained
from scratch, its objective(s) (the batches and the loss) and its dev scores, so the trainer,
jobs, sweeps and checkpoints serve every task the same way.

Every task's `prepare` returns a `Prepared`: the trainer knows no task by name. The contract a
task package writes to is lab/task.py (docs/plugins.md, "Writing a task"); this module is the
lab's side of it.

A task's registration declares, beside `objectives`:
  keep_best            {metric: {"score": dev-score key, "higher": bool, "label": words,
                       "percent": bool, "count": key}}, in order; the first is what a run keeps
                       its best checkpoint by unless early_stop names another; keep_also
                       keeps a second, by another of them
  unit                 the plural word for the texts its checkpoints are scored on ("texts"
                       unless it says; the captions task's "captions")
  tabs                 the UI's views that offer its checkpoints (lab/ui: "generate", "answers");
                       a task offering "answers" gives its object an `answers_view` (ABOUT,
                       LABEL, SPLITS, SPLITS_INFO, COLUMNS, NONE_YET, answer(names, split,
                       store)), as plugins/tasks/birthplace/answers.py does
  commands             the module whose add_parsers(sub) adds the task's CLI commands
  train_view           the module whose build(ctx) adds the task's section to the Train tab
Its object may also define check_stored(train_cfg, store) (what it checks against the store
before a job is queued), and sweep_check(objective, score) and sweep_score(checkpoint, score, ...)
(lab/sweeps), or set sweep_score = SCORED_AS_TEXT: its checkpoints write text, scored by perplexity
and the decoders' BLEU on its texts() (lab/sweeps/texts.py); a task without them is not scored by
sweeps.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Callable, Iterator

from lab.config import TrainConfig
from lab.inputs import data
from lab.errors import ConfigError
from lab.registry import TASKS, load_plugins

SCORED_AS_TEXT = "texts"     # a task's sweep_score: lab/sweeps/texts.py scores its checkpoints


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


def check_stored(train_cfg, store=None) -> None:
    """What the run's task checks against the store before a job is queued (its object's
    check_stored(train_cfg, store), where it has one: e.g. that the dataset it names is there)."""
    check = getattr(get(train_cfg.task), "check_stored", None)
    if check is not None:
        check(train_cfg, store)


def meta(name: str) -> dict:
    """What the task declares at its registration (see above)."""
    load_plugins()
    return TASKS.get(name).meta


def data_settings(name: str) -> list[str]:
    """The task's settings that name what in the store it trains on (a setting whose choices are
    the store's: `store_choices`): two runs with the same values of these trained on the same data."""
    load_plugins()
    cls = TASKS.get(name).settings
    return [f.name for f in dataclasses.fields(cls) if "store_choices" in f.metadata] if cls else []


def offering(view: str) -> list[str]:
    """The tasks whose checkpoints go to `view` (their `tabs`)."""
    load_plugins()
    return [name for name in TASKS.names() if view in TASKS.get(name).meta.get("tabs", ())]


def of_checkpoint(ck) -> str:
    """The task a loaded checkpoint serves: the one its provenance names, else one whose plugin
    `recognizes` its tokenizer (a checkpoint saved without provenance), else the default."""
    if (ck.meta or {}).get("task"):
        return task_of(ck.meta)
    load_plugins()
    for name in TASKS.names():
        plugin = TASKS.build(name)
        if getattr(plugin, "recognizes", None) and plugin.recognizes(ck.tokenizer):
            return name
    return task_of(None)


def check_view(ck, view: str, what: str) -> None:
    """Refuse a loaded checkpoint whose task does not offer `view` ("generate", "answers"; its
    `tabs`) for `what` the person asked, saying which task it is and what it offers instead."""
    task = of_checkpoint(ck)
    tabs = meta(task).get("tabs", ())
    if view not in tabs:
        raise ConfigError(f"{what}: not for {ck.name}, a {task} model (its task's checkpoints go "
                          f"to the {' and '.join(tabs) or 'no'} view)"[:300])


def texts(cks: list, split: str, data_dir=None) -> tuple[list[str], dict]:
    """The texts checkpoints `cks` are scored on together, and where they come from ({"split",
    "source"}): each one's task's (its object's `texts(ck, split, data_dir)`; captions: the caption
    corpus' split). A checkpoint whose provenance names no task (an import) is scored on the
    others' texts; checkpoints of different corpora are refused, naming them."""
    load_plugins()
    found: dict = {}
    for ck in cks:
        if not (ck.meta or {}).get("task") and len(cks) > 1:
            continue                    # an import: scored on what the others are scored on
        got = _task_texts(ck, split, data_dir)
        found.setdefault(json.dumps(got[1], sort_keys=True), (got, []))[1].append(ck.name)
    if not found:                       # imports only: the task their tokenizer says, else the default
        return _task_texts(cks[0], split, data_dir)
    if len(found) > 1:
        raise ConfigError("these checkpoints were trained on different corpora, so no texts score "
                          "them alike: " + "; ".join(f"{', '.join(names)}: {got[1]['source']}"
                                                     for got, names in found.values())[:300])
    return next(iter(found.values()))[0]


def own_score(ck):
    """The `score(ck, split, n, seed)` of a checkpoint's task, where it scores its checkpoints
    itself (lab/task.py), else None."""
    return getattr(get(of_checkpoint(ck)), "score", None)


def bleu_skipped(cks: list, texts_scored: list[str]) -> str:
    """Why BLEU of generated text is not scored for checkpoints `cks` on `texts_scored` (a task
    that says so for one of them: its object's `bleu_skipped(ck, texts)`), or "" when it is."""
    load_plugins()
    for ck in cks:
        own = getattr(TASKS.build(of_checkpoint(ck)), "bleu_skipped", None)
        if own and (why := own(ck, texts_scored)):
            return why
    return ""


MAX_PROMPT_WORDS = 50      # a held-out prompt's length, in words


def held_out_prompts(cks: list, n: int, seed: int, words: int,
                     data_dir=None) -> tuple[list[str], list[str], dict]:
    """Prompts that continue held-out texts: n texts of the checkpoints' dev split drawn by `seed`
    (all of them when it has fewer), and the first `words` words of each. Returns (prompts, the
    texts they start, where the texts come from)."""
    if isinstance(words, bool) or not isinstance(words, int) or not 1 <= words <= MAX_PROMPT_WORDS:
        raise ConfigError(f"held-out prompt words must be a whole number from 1 to "
                          f"{MAX_PROMPT_WORDS}, got {words!r}")
    pool, source = texts(cks, "dev", data_dir)
    chosen = [pool[i] for i in data.subset_indices(len(pool), n, seed)]
    if not chosen:
        raise ConfigError(f"{source['source']} has no dev texts to take prompts from")
    return [" ".join(t.split()[:words]) for t in chosen], chosen, source


def _task_texts(ck, split: str, data_dir=None) -> tuple[list[str], dict]:
    """Checkpoint `ck`'s task's texts of `split`; a task that gives none is said by name."""
    task = of_checkpoint(ck)
    own = getattr(TASKS.build(task), "texts", None)
    if own is None:
        raise ConfigError(f"{ck.name} is a {task} model, and its task gives no texts to score or "
                          f"read it on (a task's texts(): docs/plugins.md)"[:300])
    texts, source = own(ck, split, data_dir)
    return texts, {**source, "unit": unit(task)}


def unit(task: str) -> str:
    """The plural word for the texts a task's checkpoints are scored on (its `unit`)."""
    return meta(task).get("unit", "texts")


@dataclass(frozen=True)
class Metric:
    """A dev score a run keeps its best checkpoint by."""
    name: str           # as early_stop names it: "perplexity", "bleu", ...
    score: str          # the key of the task's dev scores: "dev_perplexity"
    higher: bool        # bigger is better
    label: str          # what chose a checkpoint, in words: "dev perplexity"
    percent: bool = False       # a proportion, shown as a percentage
    count: str | None = None    # the dev-score key of how many were right, shown beside it

    def shown(self) -> dict:
        """How a progress line shows it (carried in each evaluation's event)."""
        return {"key": self.score, "label": self.label, "percent": self.percent, "count": self.count}

    def better(self, record: dict, best: dict) -> bool:
        a, b = record[self.score], best[self.score]
        return a > b if self.higher else a < b


def metrics(task: str) -> dict[str, Metric]:
    """The task's keep_best, in order."""
    return {name: Metric(name, m["score"], m["higher"], m.get("label", m["score"].replace("_", " ")),
                         m.get("percent", False), m.get("count"))
            for name, m in meta(task)["keep_best"].items()}


def kept_by(train_cfg) -> Metric:
    """The metric a run keeps checkpoint NAME by: early_stop's, or the task's first."""
    declared = metrics(train_cfg.task)
    return declared.get(train_cfg.early_stop) or next(iter(declared.values()))


def also_kept(train_cfg) -> list[Metric]:
    """The metrics a run keeps a second checkpoint by, as NAME-METRIC (keep_also)."""
    declared = metrics(train_cfg.task)
    return [declared[train_cfg.keep_also]] if train_cfg.keep_also in declared else []


def task_of(meta_or_train: dict | None) -> str:
    """The task a checkpoint's provenance (or a train config's dict) names; checkpoints written
    before tasks existed were the default task's."""
    return (meta_or_train or {}).get("task") or TrainConfig.task


@dataclass
class Prepared:
    """A task's run, ready for the trainer: train_items (an epoch is one pass over them; their
    count sets the steps), dev_items (counted in progress lines), batches(generator) for an epoch
    (the trainer seeds the generator per epoch, so a resume sees the same batches), loss(logits,
    batch), evaluate(model, abort) -> dev scores with dev_loss and dev_perplexity (under the
    run's autocast; raises metrics.Aborted when abort() says stop). unit: what the items are, for
    progress lines ("captions", "documents", "questions"). final(name, trainer, store): events
    of a last step once the run is done and its checkpoint kept (captions: every dev caption):
    progress events while it works, then {"event": "final", "text": its line, ...} (with
    "final_summary", a few words for the job's page, where it adds that key to the checkpoint's
    metrics) or {"event": "final_aborted", "text": ...} when a stop request cut it short.
    packs: its batches are separate texts padded after their end, which the trainer may pack
    into rows (data.pack) with the same loss; unpacked_because: why not, when it is not that the
    padding is model input (full blocks have none). teacher_forcing(step, total_steps): scheduled
    sampling's probability of feeding the gold token at a step, when the task's run asks for it:
    the trainer feeds the model its own sampled tokens otherwise (its batches are then not
    packed)."""
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
    unpacked_because: str | None = None     # why a task's batches are not packed, when not padding
    teacher_forcing: Callable[[int, int], float] | None = None
