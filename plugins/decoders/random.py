"""Random (ancestral) sampling from softmax(logits / temperature); the weights and the draw are
lab.modeling.sampling's."""
from dataclasses import dataclass, field

from lab.registry import DECODERS
from lab.modeling.sampling import draw, weights


@dataclass
class SamplingSettings:
    """The setting every sampling decoder has (top_k and top_p extend it)."""
    temperature: float = field(default=1.0, metadata={"short": "t",
        "help": "divides the logits before sampling: below 1 sharper, above 1 flatter",
        "min": 0.01, "max": 100.0})


def sample(logits, temperature, generator):
    """Sample one token per row from softmax(logits / temperature); -inf logits are never drawn."""
    return draw(weights(logits, temperature), generator)


class RandomSampling:
    def __init__(self, temperature: float):
        self.temperature = temperature

    def __call__(self, logits, generator=None):
        return sample(logits, self.temperature, generator)


@DECODERS.register("random", "Sample from the whole distribution, sharpened or flattened by temperature",
                   settings=SamplingSettings)
def random(settings: SamplingSettings):
    return RandomSampling(settings.temperature)
