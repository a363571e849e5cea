"""The captions task (the Tfmr assignment): MSCOCO captions, `<|endoftext|>` around each, the
assignment's loss, dev perplexity and BLEU. The trainer's own path: it needs no Prepared."""
from lab.registry import TASKS


@TASKS.register("captions", "MSCOCO captions: language modelling, perplexity and BLEU (Tfmr)",
                objectives=("lm",))
def captions():
    return None
