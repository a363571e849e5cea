"""Random (ancestral) sampling from softmax(logits / temperature)."""
import torch

from lab.registry import DECODERS


def sample(logits, temperature, generator):
    """Sample one token per row from softmax(logits / temperature); -inf logits are never drawn."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class RandomSampling:
    def __init__(self, temperature: float):
        self.temperature = temperature

    def __call__(self, logits, generator=None):
        return sample(logits, self.temperature, generator)


@DECODERS.register("random", "Sample from the whole distribution, sharpened or flattened by temperature",
                   uses=("temperature",))
def random(cfg):
    return RandomSampling(cfg.temperature)
