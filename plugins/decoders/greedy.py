"""Greedy decoding: always the likeliest token (temperature changes nothing)."""
from lab.registry import DECODERS


class Greedy:
    def __call__(self, logits, generator=None):   # logits: (B, V) -> (B,)
        return logits.argmax(dim=-1)


@DECODERS.register("greedy", "Always take the likeliest token")
def greedy():
    return Greedy()
