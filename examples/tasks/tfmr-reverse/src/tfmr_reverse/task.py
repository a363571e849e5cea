"""String reversal: a word of lowercase letters, then "=", then the word reversed ("lab=bal").
The model learns to write the reversal; a run is scored by exact match on words it never saw."""
import random
from dataclasses import dataclass, field

from lab.task import (TASKS, CharTokenizer, ConfigError, ModelConfig, Prepared, TrainConfig, answer_batch,
                      checkpoint_settings, dev_loss, epoch_batches, exact_match, greedy_answers,
                      masked_loss, preset, settings_of)

LETTERS = "abcdefghijklmnopqrstuvwxyz"
SEP = "="
SEEDS = {"train": 0, "dev": 1, "test": 2}      # each split its own words


@dataclass
class ReverseSettings:
    min_len: int = field(default=3, metadata={"help": "the shortest word", "min": 1, "max": 30})
    max_len: int = field(default=8, metadata={"help": "the longest word", "min": 1, "max": 30})
    train_words: int = field(default=4000, metadata={"help": "training words", "min": 1,
                                                     "max": 1_000_000})
    dev_words: int = field(default=200, metadata={"help": "dev words scored at each evaluation",
                                                  "min": 1, "max": 100_000})

    def check(self, config) -> None:
        if self.min_len > self.max_len:
            raise ConfigError(f"task.min_len={self.min_len} is above task.max_len={self.max_len}")


def words(split: str, n: int, s: ReverseSettings) -> list[str]:
    """n words of the split, the same every time (the split's own seed), none in two splits."""
    rng, taken = random.Random(SEEDS[split]), set()
    for other in SEEDS:
        if other != split:
            taken |= set(_draw(random.Random(SEEDS[other]), 2000, s))
    return [w for w in _draw(rng, n + len(taken), s) if w not in taken][:n]


def _draw(rng: random.Random, n: int, s: ReverseSettings) -> list[str]:
    return ["".join(rng.choice(LETTERS) for _ in range(rng.randint(s.min_len, s.max_len)))
            for _ in range(n)]


def pairs(ws: list[str]) -> list[tuple[str, str]]:
    return [(w + SEP, w[::-1]) for w in ws]


class ReverseTask:
    def scratch_tokenizer(self, data_dir, cfg):
        return CharTokenizer(LETTERS + SEP)

    def prepare(self, objective, cfg, tok, model_cfg, data_dir=None) -> Prepared:
        s = settings_of(cfg)
        if model_cfg.n_positions < 2 * s.max_len + 3:
            raise ConfigError(f"words of {s.max_len} letters need a context of at least "
                              f"{2 * s.max_len + 3}; this model has n_positions={model_cfg.n_positions}")
        train, dev = pairs(words("train", s.train_words, s)), pairs(words("dev", s.dev_words, s))
        dev_batches = [answer_batch(dev[i:i + cfg.eval_batch_size], tok)
                       for i in range(0, len(dev), cfg.eval_batch_size)]

        def evaluate(model, abort) -> dict:
            scores = dev_loss(model, dev_batches, abort)
            said = greedy_answers(model, tok, [p for p, _ in dev], s.max_len + 1, abort)
            right = exact_match(said, [a for _, a in dev])
            return scores | {"dev_exact_match": right["value"], "dev_correct": right["correct"]}

        return Prepared(tok, train, dev,
                        lambda gen: epoch_batches(train, cfg.batch_size,
                                                  lambda chunk: answer_batch(chunk, tok),
                                                  cfg.shuffle, gen),
                        masked_loss, evaluate, unit="words", packs=True)

    def texts(self, ck, split, data_dir=None) -> tuple[list[str], dict]:
        """The split's words with their reversals, as the model reads them (head ablation)."""
        chosen = pairs(words(split, 200, checkpoint_settings(ck)))
        return [p + a for p, a in chosen], {"split": split, "source": f"reverse {split} words"}

    def score(self, ck, split, n, seed) -> dict:
        """Exact match of the checkpoint's greedy reversals of up to n words of the split."""
        if split not in SEEDS or split == "train":
            raise ConfigError(f"the reverse task scores dev or test, got split={split!r}")
        s = checkpoint_settings(ck)
        chosen = pairs(words(split, n, s))
        said = greedy_answers(ck.model, ck.tokenizer, [p for p, _ in chosen], s.max_len + 1)
        right = exact_match(said, [a for _, a in chosen])
        return {"metrics": {"exact_match": {"label": "exact match", "percent": True,
                                            "value": right["value"], "interval": right["interval"],
                                            "correct": right["correct"]}},
                "n": len(chosen), "unit": "words",
                "samples": [f"{p}{a}" for (p, _), a in zip(chosen[:5], said)]}


@TASKS.register("reverse", "String reversal: a word, '=', the word reversed; exact match",
                objectives=("lm",), settings=ReverseSettings, unit="words",
                keep_best={"exact_match": {"score": "dev_exact_match", "higher": True,
                                           "label": "dev exact match", "percent": True,
                                           "count": "dev_correct"},
                           "perplexity": {"score": "dev_perplexity", "higher": False,
                                          "label": "dev perplexity"}})
def reverse(settings: ReverseSettings):     # a run reads its own: settings_of(cfg)
    return ReverseTask()


@preset("reverse-small", "String reversal: 2 layers, width 64, three epochs at lr 3e-3")
def reverse_small():
    return (ModelConfig(n_layer=2, n_head=4, n_embd=64, n_positions=64),
            TrainConfig(task="reverse", epochs=3, lr=3e-3, batch_size=32))
