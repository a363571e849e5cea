"""The birth-place task (the minGPT assignment): span-corruption pretraining on wiki.txt
(objective `span`) and birth-place question answering (objective `qa`), on characters."""
import math

import torch

from lab import birthplace as bp
from lab.config import ConfigError
from lab.registry import TASKS
from lab.tasks import Prepared

DEV_DOCS = 256            # span objective: documents corrupted once (a fixed seed) for the dev curve


class BirthplaceTask:
    name = "birthplace"

    def data_dir(self, caption_dir=None):
        """The task's own folder (LAB_BIRTHPLACE_DIR, which its CLI's --data-dir sets, or the
        default): a run's data_dir names the caption corpus (the worker's, the app's)."""
        return bp.data_dir(None)

    def scratch_tokenizer(self, data_dir=None, cfg=None):
        return bp.tokenizer(data_dir)

    def prepare(self, objective: str, cfg, tok, model_cfg, data_dir=None) -> Prepared:
        if not bp.is_task_tokenizer(tok):
            raise ConfigError("the birthplace task needs a character model with the task's mask "
                              "character: pretrain one with `python -m lab birthplace pretrain`, "
                              f"or train from scratch (this one's tokenizer is {tok.kind!r})")
        if model_cfg.n_positions < bp.BLOCK:
            raise ConfigError(f"the birthplace task's block is {bp.BLOCK} characters; this model "
                              f"has n_positions={model_cfg.n_positions}")
        if objective == "span":
            docs = bp.wiki(data_dir)
            train = docs[:cfg.max_train_captions]
            g = torch.Generator().manual_seed(10 ** 6 + cfg.seed)
            dev_docs = docs[:cfg.max_dev_captions or DEV_DOCS]
            dev = [bp.span_batch(dev_docs[i:i + cfg.eval_batch_size], tok, g)
                   for i in range(0, len(dev_docs), cfg.eval_batch_size)]

            def batches(gen):
                for chunk in _chunks(train, cfg, gen):
                    yield bp.span_batch(chunk, tok, gen)

            return Prepared(tok, train, dev_docs, batches, bp.token_loss,
                            lambda model, abort: _dev_loss(model, dev, abort),
                            unit="documents", packs=True)
        pairs = bp.questions("train", data_dir)[:cfg.max_train_captions]
        dev_pairs = bp.questions("dev", data_dir)[:cfg.max_dev_captions]
        dev = [bp.qa_batch(dev_pairs[i:i + cfg.eval_batch_size], tok)
               for i in range(0, len(dev_pairs), cfg.eval_batch_size)]

        def qa_batches(gen):
            for chunk in _chunks(pairs, cfg, gen):
                yield bp.qa_batch(chunk, tok)

        def evaluate(model, abort):
            scores = _dev_loss(model, dev, abort)
            if abort():
                from lab.metrics import Aborted
                raise Aborted()
            got = bp.answer(model, tok, [q for q, _ in dev_pairs])
            right = bp.score(got, [p for _, p in dev_pairs])
            return scores | {"dev_accuracy": right["accuracy"], "dev_correct": right["correct"]}

        return Prepared(tok, pairs, dev_pairs, qa_batches, bp.token_loss, evaluate,
                        unit="questions", packs=True)


def _chunks(items: list, cfg, gen: torch.Generator):
    """An epoch's batches of items: shuffled by the epoch's generator (cfg.shuffle), in order."""
    order = torch.randperm(len(items), generator=gen).tolist() if cfg.shuffle else range(len(items))
    order = list(order)
    for i in range(0, len(order), cfg.batch_size):
        yield [items[j] for j in order[i:i + cfg.batch_size]]


@torch.no_grad()
def _dev_loss(model, dev_batches, abort) -> dict:
    """minGPT's loss over the dev examples (every counted target alike), packed into rows where
    the model takes them (the same loss, without the padding's compute)."""
    from lab.data import pack
    from lab.metrics import Aborted
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0.0
    try:
        for b in dev_batches:
            if abort():
                raise Aborted()
            if getattr(model, "packable", False):
                b = pack(b)
            b = b.to(device)
            logits = model(b.input_ids, **b.model_inputs()).logits
            n = float(b.loss_mask.sum())
            total += float(bp.token_loss(logits, b)) * n
            count += n
    finally:
        model.train(was)
    loss = total / max(count, 1.0)
    return {"dev_loss": loss, "dev_perplexity": math.exp(loss), "dev_token_perplexity": math.exp(loss)}


@TASKS.register("birthplace", "Birth places (minGPT): character span-corruption pretraining on "
                              "wiki.txt, then question answering; accuracy", objectives=("span", "qa"),
                scheduled_sampling=False,
                keep_best={"perplexity": {"score": "dev_perplexity", "higher": False}})
def birthplace():
    return BirthplaceTask()
