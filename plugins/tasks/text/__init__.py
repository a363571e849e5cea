"""The text task: causal language modelling on a person's own corpus, a dataset in the store
(`python -m lab data import FILE --name NAME`, read and tokenized through `datasets`: corpora.py).
A run names it with `--set task=text --set task.dataset=NAME`. Each text is an example framed by
end-of-text as the captions are (packed, no compute on padding), or the texts are joined and cut
into blocks of the model's context (`task.examples=blocks`). Dev scores: perplexity per example
(the assignment's), per token and per word, and bits per byte (lm-evaluation-harness's: the summed
NLL in bits over the UTF-8 bytes the targets cover, so models with different tokenizers compare)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from lab.config import ConfigError
from lab.evaluation.metrics import perplexity, sentence_nlls
from lab.inputs import data, tasks, tokenizers
from lab.inputs.data import assignment_loss
from lab.inputs.tasks import Prepared
from lab.registry import TASKS
from plugins.tasks.text import corpora

DEV_DEFAULT = 2000          # dev examples scored at each evaluation unless max_dev says
SCRATCH_VOCAB_BYTES = 200 * 10 ** 6   # a words or char vocabulary is built from the train texts in memory
BLEU_MAX_WORDS = 30         # bleu=auto scores BLEU on texts of at most this many words on average


@dataclass
class TextSettings:
    dataset: str = field(default="", metadata={
        "help": "the dataset in the store to train on (python -m lab data list)",
        "store_choices": corpora.names})
    examples: str = field(default="lines", metadata={
        "help": "lines: each text one example, framed by end-of-text and cut to the context; "
                "blocks: the texts joined and cut into blocks of the whole context",
        "choices": ("lines", "blocks")})
    bleu: str = field(default="auto", metadata={
        "help": f"whether Evaluate scores BLEU of generated texts against the dataset's (the "
                f"captions' forward, backward and harmonic BLEU-4): auto when its texts average at "
                f"most {BLEU_MAX_WORDS} words (sentences; MSCOCO's captions average 12.8 split on spaces), yes, or "
                f"no (perplexity and bits per byte only, and nothing generated)",
        "choices": ("auto", "yes", "no")})

    def check(self, config) -> None:
        if not self.dataset:
            raise ConfigError("task=text trains on a dataset in the store: --set task.dataset=NAME "
                              "(python -m lab data list shows them; data import adds one)")
        corpora.check_name(self.dataset)


class TextTask:
    name = "text"

    def data_dir(self, path=None, store=None):
        """The store's datasets (a run's data_dir names the caption corpus: not this task's)."""
        return corpora.root(store)

    def check_stored(self, cfg, store=None) -> None:
        """Before a job is queued: the dataset it names is in the store."""
        corpora.path_of(cfg.plugin_settings("task").dataset, store)

    def sweep_check(self, objective, score: dict, where: str) -> None:
        """Every model of a dataset is scored by a sweep (perplexity, BLEU), on its dataset."""

    sweep_score = tasks.SCORED_AS_TEXT      # perplexity and the decoders' BLEU (lab/sweeps/texts.py)

    def texts(self, ck, split: str, data_dir=None) -> tuple[list[str], dict]:
        """The texts a checkpoint of this task is scored on: its dataset's split (in the store the
        checkpoint is in); a dataset without a test split is scored on dev, and says so."""
        name, store = _settings_of(ck).get("dataset"), ck.path.parent
        if not name or name not in corpora.names(store):
            raise ConfigError(f"{ck.name} trained on dataset {name!r}, which is no longer in the "
                              f"store: import it again under that name to score it")
        have = corpora.info(name, store)["splits"]
        which = split if split in have else "dev" if split == "test" else None
        if which is None:
            raise ConfigError(f"dataset {name!r} has no {split} split; its splits are {', '.join(have)}")
        note = {} if which == split else {"note": f"dataset {name} has no test split: scored on dev"}
        return list(corpora.split(name, which, store)[corpora.TEXT]), \
            {"split": which, "source": f"dataset {name}", "named": f"dataset {name}", **note}

    def bleu_skipped(self, ck, texts: list[str]) -> str:
        """Why BLEU is not scored for this checkpoint on `texts` (its task.bleu setting), or ""."""
        chosen = _settings_of(ck).get("bleu", "auto")
        if chosen == "no":
            return f"{ck.name} was trained with task.bleu=no"
        mean = sum(len(t.split()) for t in texts) / max(len(texts), 1)
        if chosen == "auto" and mean > BLEU_MAX_WORDS:
            return (f"the texts average {mean:.1f} words, over the {BLEU_MAX_WORDS} that "
                    f"task.bleu=auto scores BLEU on (train with task.bleu=yes to score it)")
        return ""

    def scratch_tokenizer(self, data_dir, cfg):
        s = cfg.plugin_settings("task")
        if cfg.tokenizer == "gpt2":
            return tokenizers.gpt2()
        meta = corpora.info(s.dataset, data_dir.parent)
        size = meta["splits"]["train"]["bytes"]
        if size > SCRATCH_VOCAB_BYTES:
            raise ConfigError(f"tokenizer={cfg.tokenizer} builds its vocabulary from the train texts "
                              f"in memory; {s.dataset}'s are {size / 1e6:,.0f} MB, over "
                              f"{SCRATCH_VOCAB_BYTES / 1e6:,.0f} MB: use tokenizer=gpt2")
        return tokenizers.for_scratch(cfg.tokenizer,
                                      corpora.split(s.dataset, "train", data_dir.parent)[corpora.TEXT])

    def prepare(self, objective: str, cfg, tok, model_cfg, data_dir=None) -> Prepared:
        s, store = cfg.plugin_settings("task"), data_dir.parent
        train, dev, dev_total = _examples(s, cfg, tok, model_cfg.n_positions, store)
        frame = _framer(tok, model_cfg.n_positions) if s.examples == "lines" else list

        def evaluate(model, abort) -> dict:
            return _dev_scores(model, dev, tok, cfg.eval_batch_size, abort)

        def epoch_batches(gen):
            # the order as one int32 tensor, read a batch at a time (a list of Python ints for a
            # corpus of tens of millions of texts would be gigabytes); the rows are read from the
            # memory-mapped Arrow files batch by batch
            order = torch.randperm(len(train), generator=gen, dtype=torch.int32) if cfg.shuffle \
                else torch.arange(len(train), dtype=torch.int32)
            for i in range(0, len(order), cfg.batch_size):
                rows = train[order[i:i + cfg.batch_size].tolist()]["ids"]
                yield data.collate([frame(r) for r in rows], tok.eos_id)

        info = {"dataset": s.dataset, "examples": s.examples, "dev_scored": len(dev[0]),
                "dev_total": dev_total, "split_from": corpora.info(s.dataset, store)["split_from"]}
        return Prepared(tok, train, dev[0], epoch_batches, assignment_loss, evaluate, info=info,
                        unit="blocks" if s.examples == "blocks" else "texts",
                        packs=s.examples == "lines",
                        unpacked_because="every block fills the context: no padding to drop")


def _settings_of(ck) -> dict:
    """A checkpoint's task settings as its run recorded them."""
    return ((ck.meta or {}).get("train") or {}).get("settings", {}).get("task", {})


def _examples(s: TextSettings, cfg, tok, length: int, store):
    """(the train examples, a memory-mapped Dataset of `ids`; the dev examples scored, with the
    words and bytes their targets cover; how many dev examples there are)."""
    key = corpora.tokenizer_key(tok)                 # once: it saves and hashes the tokenizer
    make = (lambda split: corpora.blocks(s.dataset, split, tok, length, store, key)) \
        if s.examples == "blocks" else (lambda split: corpora.tokenized(s.dataset, split, tok, store, key))
    train, dev = make("train"), make("dev")
    if cfg.max_train is not None and cfg.max_train < len(train):
        train = train.select(range(cfg.max_train))
    n_dev = min(len(dev), cfg.max_dev or DEV_DEFAULT)
    if s.examples == "blocks":
        rows = dev[:n_dev]
        return train, (rows["ids"], rows["words"], rows["bytes"]), len(dev)
    texts = corpora.split(s.dataset, "dev", store)[:n_dev][corpora.TEXT]
    return train, _framed_dev(dev[:n_dev]["ids"], texts, tok, length), len(dev)


def _dev_scores(model, dev, tok, batch_size: int, abort) -> dict:
    """Perplexity per example (the assignment's), per token and per word, and bits per byte."""
    seqs, words, nbytes = dev
    nll, n = sentence_nlls(model, seqs, tok.eos_id, batch_size, next(model.parameters()).device, abort)
    ppl = perplexity(model, seqs, tok.eos_id, nll_counts=(nll, n))
    total = nll.sum().item()
    return {"dev_loss": ppl["loss"], "dev_perplexity": ppl["perplexity"],
            "dev_token_perplexity": ppl["token_perplexity"],
            "dev_word_perplexity": math.exp(total / max(sum(words), 1)),
            "dev_bits_per_byte": total / math.log(2) / max(sum(nbytes), 1)}


def _framer(tok, length: int):
    """A text's tokens as an example: end-of-text before and after, cut to the context."""
    eos = tok.eos_id

    def frame(ids):
        return ([eos, *ids, eos])[:length]
    return frame


def _framed_dev(ids: list, texts: list[str], tok, length: int):
    """Dev examples, and the words and UTF-8 bytes their targets cover: the whole text and one
    more (the newline its end-of-text stands for), or of a text cut to the context, the text its
    kept tokens spell."""
    frame, seqs, words, nbytes = _framer(tok, length), [], [], []
    for toks, text in zip(ids, texts):
        seq = frame(toks)
        if len(seq) < len(toks) + 2:              # cut: the targets are the first length-1 tokens
            text, end = tok.decode(toks[:length - 1]), 0
        else:
            end = 1
        seqs.append(seq)
        words.append(len(text.split()) + end)
        nbytes.append(len(text.encode("utf-8")) + end)
    return seqs, words, nbytes


@TASKS.register("text", "Your own corpus (a dataset in the store, read with datasets): language "
                        "modelling, perplexity per token and word, bits per byte",
                settings=TextSettings, objectives=("lm",),
                keep_best={"perplexity": {"score": "dev_perplexity", "higher": False,
                                          "label": "dev perplexity"}},
                tabs=("generate",), sweep_figures="text", score_split="test",
                tokenizers=tokenizers.SCRATCH_KINDS,
                commands="plugins.tasks.text.cli",      # python -m lab data ...
                train_view="plugins.tasks.text.view")   # the Train tab's data section
def text(settings: TextSettings):        # a run reads its own from its config
    return TextTask()
