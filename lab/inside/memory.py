"""What a look inside a model may allocate, checked before it starts: the memory a request needs,
from the model's sizes and the text's length, against what this process can still get (the
machine's available memory, or less under an address-space limit such as `ulimit -v`). A request
that would not fit is refused in one line that says how long a text would fit, instead of ending
in "can't allocate memory" part way through."""
from __future__ import annotations

import resource
from pathlib import Path

from lab.config import ConfigError

# what an estimate leaves aside for what it does not count (Python's objects, the allocator's
# slack, the results being built)
HEADROOM = 1.25


class MemoryRefused(ConfigError):
    """A request refused for the memory it would need (a ConfigError: the pages and commands
    say it as they say any refused setting)."""


def free_bytes() -> int | None:
    """What this process can still allocate: the machine's available memory (MemAvailable), less
    under an address-space limit (the limit less what the process maps now); None where the
    system does not say (not Linux)."""
    said = []
    meminfo = _kib(Path("/proc/meminfo"), "MemAvailable:")
    if meminfo is not None:
        said.append(meminfo)
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    mapped = _kib(Path("/proc/self/status"), "VmSize:")
    if limit != resource.RLIM_INFINITY and mapped is not None:
        said.append(max(limit - mapped, 0))
    return min(said) if said else None


def _kib(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def lens_bytes(config, tokens: int) -> int:
    """The logit lens of `tokens` tokens: every layer's residual state, one block's forward pass
    (its attention scores and MLP), and one layer's read through the output layer (the logits,
    their log-probabilities, probabilities, the next tokens' rows and a comparison: about 17
    bytes per token and vocabulary entry), in float32."""
    c, v, h = config.n_embd, config.vocab_size, config.n_head
    inner = getattr(config, "n_inner", None) or 4 * c
    states = (config.n_layer + 1) * tokens * c * 4
    block = 3 * h * tokens * tokens * 4 + 3 * tokens * inner * 4
    read = 17 * tokens * v
    return states + block + read


def check_lens(config, tokens: int) -> None:
    """Refuse a lens that would not fit in what this process can still allocate."""
    free = free_bytes()
    need = HEADROOM * lens_bytes(config, tokens)
    if free is None or need <= free:
        return
    fits = _longest(lambda t: HEADROOM * lens_bytes(config, t) <= free, tokens)
    raise MemoryRefused(
        f"the logit lens of {tokens:,} tokens needs about {_gb(need)} of memory and "
        f"{_gb(free)} is free for it here: "
        + (f"use a text of at most {fits:,} tokens" if fits else "free some memory first"))


def _longest(fits, upto: int) -> int:
    """The most tokens (below upto) for which fits(tokens) holds; 0 if none does."""
    lo, hi = 0, upto
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"
