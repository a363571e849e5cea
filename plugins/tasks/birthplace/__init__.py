"""The birth-place task (the minGPT assignment): span-corruption pretraining on wiki.txt
(objective `span`) and birth-place question answering (objective `qa`), on characters. Its data,
tokenizer, answers and their scores are in `core`."""
import math
import time

import torch

from lab.inputs import data
from lab.config import ConfigError
from lab.inputs.data import pack
from lab.evaluation.metrics import Aborted
from lab.registry import TASKS
from lab.inputs.tasks import Prepared
from lab.task import epoch_batches
from lab.modeling.generate import kv_bytes_per_token
from plugins.tasks.birthplace import answers, core as bp, presets  # noqa: F401  (registers them)

ANSWER_CHUNK = 100            # questions answered between two looks at a stop request

DEV_DOCS = 256            # span objective: documents corrupted once (a fixed seed) for the dev curve


class BirthplaceTask:
    name = "birthplace"
    answers_view = answers        # the Evaluate tab's view of its questions

    @staticmethod
    def recognizes(tokenizer) -> bool:
        """A checkpoint of this task, known by its tokenizer (one saved without provenance)."""
        return bp.is_task_tokenizer(tokenizer)

    @staticmethod
    def continue_text(model, tokenizer, text: str, limit: int) -> tuple[str, int]:
        """What a view shows when the model is asked to go on from `text`: the question, its ⁇
        and the greedy answer (read as the task evaluates: no BOS, up to the closing ⁇), cut at
        `limit` characters; and how many of them are the question's."""
        if not text:
            raise ConfigError("type a question, e.g. 'Where was Ada Lovelace born?'")
        prompt = text if text.endswith(bp.MASK) else text + bp.MASK
        n_prompt = len(tokenizer.encode(prompt))
        if n_prompt >= limit:
            raise ConfigError(f"the question is {n_prompt} characters with its {bp.MASK}; a "
                              f"question of at most {limit - 1} leaves room for the answer")
        said = bp.answer(model, tokenizer, [prompt[:-1]])[0]
        return (prompt + said)[:limit], n_prompt

    def data_dir(self, caption_dir=None, store=None):
        """The task's own folder (LAB_BIRTHPLACE_DIR, which its CLI's --data-dir sets, or the
        default): a run's data_dir names the caption corpus (the worker's, the app's)."""
        return bp.data_dir(None)

    def check_stored(self, cfg, store=None) -> None:
        """Before a job is queued: the task's data is where LAB_BIRTHPLACE_DIR (or the default)
        says, so a missing folder is said at once, not by the job that fails in the worker."""
        bp.data_dir(None)

    def texts(self, ck, split: str, data_dir=None) -> tuple[list[str], dict]:
        """Its questions with their places as a fine-tuned model reads them (question, ⁇, place,
        ⁇); test has no places, so its questions alone. data_dir names the caption corpus."""
        root = bp.data_dir(None)
        said = [q + bp.MASK + (p + bp.MASK if p is not None else "") for q, p in bp.questions(split)]
        return said, {"split": split, "source": str(root / bp.SPLITS[split])}

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
            return _prepare_span(cfg, tok, data_dir)
        return _prepare_qa(cfg, tok, data_dir)

    def sweep_check(self, objective, score: dict, where: str) -> None:
        """A sweep scores answers (objective qa, or a stored checkpoint), on dev, without
        exposure bias."""
        if objective not in (None, "qa"):
            raise ConfigError(f"{where}: a sweep scores caption models (perplexity, BLEU) and birth-place "
                              f"answers (accuracy, objective qa); objective={objective} of task "
                              f"birthplace has nothing to score: pretrain one at a time (Start "
                              f"training, or `python -m lab birthplace pretrain`), then sweep "
                              f"fine-tunes of it (preset birthplace-finetune, grid parent=NAME1,NAME2)")
        if score["split"] != "dev":
            raise ConfigError(f"{where}: birth-place answers are scored on dev (the {score['split']} "
                              f"questions have no places to score against): set the split to dev")
        if score["exposure"]:
            raise ConfigError(f"{where}: exposure bias is measured on captions; a birth-place sweep "
                              f"scores accuracy: leave exposure off")

    def sweep_score(self, ck, sc, *, data_dir=None, abort=None, t0: float = 0.0):
        """A sweep's figures for a birth-place checkpoint: its greedy answers to a seeded subset
        of the dev questions, and which of them are right (a generator of progress events that
        returns the figures)."""
        pairs = bp.questions(sc.split)
        if not pairs or pairs[0][1] is None:
            raise ConfigError(f"the birth-place {sc.split} questions have no places to score against; "
                              f"score on dev")
        subset = [pairs[i] for i in data.subset_indices(len(pairs), sc.n, sc.seed)]
        yield {"event": "scoring", "what": f"{ck.name}: greedy answers to {len(subset):,} {sc.split} "
               f"questions", "elapsed_s": time.time() - t0, "time": time.time()}
        got, g0 = [], time.time()
        for k in range(0, len(subset), ANSWER_CHUNK):
            if abort and abort():
                raise Aborted()
            got += bp.answer(ck.model, ck.tokenizer, [q for q, _ in subset[k:k + ANSWER_CHUNK]])
        gen_s = time.time() - g0
        part = {"n": len(subset), "subset_hash": data.subset_hash([q for q, _ in subset]),
                "correct": [int(a == p) for a, (_, p) in zip(got, subset)],
                "decoders": [{"decode": {"decoder": "greedy"}, "label": "greedy (to the next \u2047)",
                              "generate_s": gen_s,
                              "tokens_per_s": sum(len(a) + 1 for a in got) / max(gen_s, 1e-9),
                              "samples": [f"{q} {a}" for (q, _), a in zip(subset[:5], got)]}]}
        return {"checkpoint": ck.name, "tokenizer": ck.tokenizer.kind, "task": self.name,
                "params": sum(p.numel() for p in ck.model.parameters()),
                "kv_bytes_per_token": kv_bytes_per_token(ck.model), "epoch": ck.metrics.get("epoch"),
                "dev_perplexity": ck.metrics.get("dev_perplexity"), "dev_harmonic_bleu": None,
                "splits": {sc.split: part}}


def _prepare_span(cfg, tok, data_dir) -> Prepared:
    """Span-corruption pretraining on wiki.txt's documents; dev: a fixed corruption of the first."""
    docs = bp.wiki(data_dir)
    train = docs[:cfg.max_train]
    g = torch.Generator().manual_seed((10 ** 6 + cfg.seed) % 2 ** 64)     # torch's seeds are below 2**64
    dev_docs = docs[:cfg.max_dev or DEV_DOCS]
    dev = [bp.span_batch(dev_docs[i:i + cfg.eval_batch_size], tok, g)
           for i in range(0, len(dev_docs), cfg.eval_batch_size)]

    def batches(gen):
        return epoch_batches(train, cfg.batch_size, lambda chunk: bp.span_batch(chunk, tok, gen),
                             cfg.shuffle, gen)

    return Prepared(tok, train, dev_docs, batches, bp.token_loss,
                    lambda model, abort: _dev_loss(model, dev, abort, tok),
                    unit="documents", packs=True)


def _prepare_qa(cfg, tok, data_dir) -> Prepared:
    """Birth-place questions; dev scores the loss and the answers' accuracy."""
    pairs = bp.questions("train", data_dir)[:cfg.max_train]
    dev_pairs = bp.questions("dev", data_dir)[:cfg.max_dev]
    dev = [bp.qa_batch(dev_pairs[i:i + cfg.eval_batch_size], tok)
           for i in range(0, len(dev_pairs), cfg.eval_batch_size)]

    def qa_batches(gen):
        return epoch_batches(pairs, cfg.batch_size, lambda chunk: bp.qa_batch(chunk, tok),
                             cfg.shuffle, gen)

    def evaluate(model, abort):
        scores = _dev_loss(model, dev, abort, tok)
        if abort():
            raise Aborted()
        got = bp.answer(model, tok, [q for q, _ in dev_pairs])
        right = bp.score(got, [p for _, p in dev_pairs])
        return scores | {"dev_accuracy": right["accuracy"], "dev_correct": right["correct"]}

    return Prepared(tok, pairs, dev_pairs, qa_batches, bp.token_loss, evaluate,
                    unit="questions", packs=True)


@torch.no_grad()
def _dev_loss(model, dev_batches, abort, tok) -> dict:
    """minGPT's loss over the dev examples (every counted target alike), packed into rows where
    the model takes them (the same loss, without the padding's compute), and its bits per byte
    (over the UTF-8 bytes of the counted characters)."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    total, count, nbytes = 0.0, 0.0, 0
    try:
        for b in dev_batches:
            if abort():
                raise Aborted()
            nbytes += bp.counted_bytes(tok, b)
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
    return {"dev_loss": loss, "dev_perplexity": math.exp(loss), "dev_token_perplexity": math.exp(loss),
            "dev_bits_per_byte": total / math.log(2) / max(nbytes, 1)}


@TASKS.register("birthplace", "Birth places (minGPT): character span-corruption pretraining on "
                              "wiki.txt, then question answering; accuracy", objectives=("span", "qa"), unit="questions",
                keep_best={"perplexity": {"score": "dev_perplexity", "higher": False,
                                          "label": "dev perplexity"},
                           "accuracy": {"score": "dev_accuracy", "higher": True, "label": "dev accuracy",
                                        "percent": True, "count": "dev_correct"}},     # qa only
                tabs=("answers",), sweep_figures="answers",
                score_split="dev",     # the test split has no answers
                commands="plugins.tasks.birthplace.cli")    # python -m lab birthplace ...
def birthplace():
    return BirthplaceTask()
