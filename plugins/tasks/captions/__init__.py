"""The captions task (the Tfmr assignment): MSCOCO captions with `<|endoftext|>` around each, the
assignment's loss, dev perplexity (per token and per word) and, when asked, dev harmonic BLEU;
after the run, the kept checkpoint on every dev caption (task.final_dev); scheduled sampling
(task.scheduled_sampling)."""
import functools
import time
from dataclasses import dataclass

from lab.storage import checkpoints
from lab.inputs import data, tasks, tokenizers
from lab.config import DecodeConfig
from lab.inputs.data import assignment_loss, batches
from lab.modeling.generate import sample_captions
from lab.evaluation.metrics import Aborted, bleu, perplexity
from lab.registry import TASKS
from lab.inputs.tasks import Prepared
from lab.errors import ConfigError
from lab.settings import setting
from plugins.tasks.captions import sampling

DECAYS = ("none", "linear", "exponential", "inverse_sigmoid")


@dataclass
class CaptionsSettings:
    bleu_samples: int = setting(500, "dev captions sampled at each evaluation for dev BLEU (when "
                                "early_stop or keep_also is bleu)", min=1, max=5000)
    final_dev: bool = setting(False, "at the end, score the kept checkpoint on every dev caption "
                              "(when max_dev scored only some)")
    scheduled_sampling: str = setting("none", "feed the model its own sampled tokens more often as "
                                      "training goes (Bengio et al. 2015)", choices=DECAYS)
    ss_k: float = setting(0.0, "the decay's constant", min=0.0, max=1e9,
                          blank="0: reach ss_floor (or 1%) at the last step")
    ss_floor: float = setting(0.0, "the lowest teacher-forcing probability", min=0.0, max=1.0,
                              blank="0: 1% at the end")

    def check(self, config) -> None:
        if self.scheduled_sampling == "exponential" and self.ss_k >= 1:
            raise ConfigError(f"task.ss_k of the exponential decay is a rate below 1 (e.g. 0.999), "
                              f"got {self.ss_k}")
        if self.scheduled_sampling == "inverse_sigmoid" and 0 < self.ss_k < 1:
            raise ConfigError(f"task.ss_k of the inverse-sigmoid decay is at least 1 (e.g. 100), "
                              f"got {self.ss_k}")


class CaptionsTask:
    name = "captions"

    def data_dir(self, path=None, store=None):
        return data.resolve_data_dir(path)

    def scratch_tokenizer(self, data_dir, cfg):
        return tokenizers.for_scratch(cfg.tokenizer, data.load_split("train", data_dir))

    def prepare(self, objective: str, cfg, tok, model_cfg, data_dir=None) -> Prepared:
        own = cfg.plugin_settings("task")
        train_caps = data.load_split("train", data_dir)[: cfg.max_train]
        dev_caps = data.load_split("dev", data_dir)[: cfg.max_dev]
        train_seqs = data.encode_captions(train_caps, tok, model_cfg.n_positions)
        dev_seqs = data.encode_captions(dev_caps, tok, model_cfg.n_positions)
        dev_words = [len(c.split()) for c in dev_caps]
        dev_bleu = _dev_bleu_fn(tok, dev_caps, cfg.seed, own.bleu_samples) \
            if "bleu" in (cfg.early_stop, cfg.keep_also) else None

        def evaluate(model, abort) -> dict:
            device = next(model.parameters()).device
            ppl = perplexity(model, dev_seqs, tok.eos_id, cfg.eval_batch_size, device,
                             n_words=dev_words, abort=abort)
            scores = {"dev_loss": ppl["loss"], "dev_perplexity": ppl["perplexity"],
                      "dev_token_perplexity": ppl["token_perplexity"]}
            if "word_perplexity" in ppl:
                scores["dev_word_perplexity"] = ppl["word_perplexity"]
            if dev_bleu is not None:          # early_stop or keep_also is bleu
                scores["dev_harmonic_bleu"] = dev_bleu(model, abort=abort)
            return scores

        def epoch_batches(gen):
            return batches(train_seqs, cfg.batch_size, tok.eos_id, cfg.shuffle, gen)

        # a subset was scored per epoch: the kept checkpoint on every dev caption at the end
        final = functools.partial(_final_dev, tok=tok, root=data_dir) \
            if own.final_dev and cfg.max_dev is not None else None
        forcing = functools.partial(sampling.teacher_forcing, own) \
            if own.scheduled_sampling != "none" else None
        return Prepared(tok, train_seqs, dev_seqs, epoch_batches, assignment_loss, evaluate,
                        unit="captions", final=final, packs=True, teacher_forcing=forcing)


    def texts(self, ck, split: str, data_dir=None) -> tuple[list[str], dict]:
        """The caption corpus' split, for any checkpoint of this task."""
        return data.load_split(split, data_dir), {"split": split,
                                                  "source": str(data.resolve_data_dir(data_dir))}

    def sweep_check(self, objective, score: dict, where: str) -> None:
        """Every caption model is scored by a sweep (perplexity, BLEU)."""

    sweep_score = tasks.SCORED_AS_TEXT      # perplexity and the decoders' BLEU (lab/sweeps/texts.py)


def _dev_bleu_fn(tok, dev_caps, seed: int, samples: int):
    """Dev harmonic BLEU (GPT-2 tokens, random sampling at tau=1) on a fixed seeded subset."""
    idx = data.subset_indices(len(dev_caps), samples, seed)
    refs = tok.encode_batch([dev_caps[i] for i in idx])

    def score(model, abort=None) -> float:
        gen = sample_captions(model, tok, len(refs), DecodeConfig(decoder="random", seed=seed),
                              abort=abort)
        return bleu([g.tokens for g in gen], refs)["harmonic"]
    return score


def _final_dev(name: str, trainer, store=None, *, tok, root):
    """The kept checkpoint scored on every dev caption; the figures join its metrics."""
    dev_caps = data.load_split("dev", root)
    ck = checkpoints.load(name, store)
    yield {**trainer.progress(ck.metrics.get("epoch", 1), "evaluating", dev_items=len(dev_caps),
                              unit="captions", final=True), "time": time.time()}
    seqs = data.encode_captions(dev_caps, tok, ck.config.n_positions)
    try:
        ppl = perplexity(ck.model.to(trainer.device), seqs, tok.eos_id, trainer.cfg.eval_batch_size,
                         trainer.device, n_words=[len(c.split()) for c in dev_caps],
                         abort=trainer.abort_eval)
    except Aborted:
        yield {"event": "final_aborted", "time": time.time(),
               "text": "the evaluation on all dev captions was cut short by a stop request"}
        return
    summary = f"perplexity {ppl['perplexity']:.2f} on all {len(dev_caps):,} dev captions"
    extra = {"final_dev_captions": len(dev_caps), "final_dev_perplexity": ppl["perplexity"],
             "final_dev_token_perplexity": ppl["token_perplexity"],
             "final_dev_word_perplexity": ppl["word_perplexity"], "final_summary": summary}
    checkpoints.add_metrics(name, extra, store)
    yield {"event": "final", "time": time.time(), **extra,
           "text": f"the kept checkpoint on all {len(dev_caps):,} dev captions: perplexity "
                   f"{ppl['perplexity']:.3f} (token-weighted {ppl['token_perplexity']:.3f}, per word "
                   f"{ppl['word_perplexity']:.3f})"}


@TASKS.register("captions", "MSCOCO captions: language modelling, perplexity and BLEU (Tfmr)",
                objectives=("lm",),
                keep_best={"perplexity": {"score": "dev_perplexity", "higher": False,
                                          "label": "dev perplexity"},
                           "bleu": {"score": "dev_harmonic_bleu", "higher": True,
                                    "label": "dev harmonic BLEU"}},
                tabs=("generate",), sweep_figures="text", unit="captions",
                score_split="test", tokenizers=tokenizers.SCRATCH_KINDS, settings=CaptionsSettings,
                # older configs kept these at the top, before the task had settings
                legacy_keys={k: k for k in ("bleu_samples", "final_dev", "scheduled_sampling",
                                            "ss_k", "ss_floor")})
def captions(settings: CaptionsSettings):     # a run reads its own from its config
    return CaptionsTask()
