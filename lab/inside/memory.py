"""What the logit lens may allocate, checked before it starts: the memory it needs, from the
model's sizes and the text's length, against what this process can still get (the machine's
available memory, a container's memory limit, or an address-space limit such as `ulimit -v`). A
lens that would not fit is refused in one line that says how long a text would fit, instead of
ending in "can't allocate memory" part way through. (Attention and patching are bounded by the
lengths the page allows and by patching's rows of ROW_TOKENS tokens: benchmarks/request_memory.py
measures each; the lens alone reads every layer through the whole vocabulary.)"""
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


def _bounds() -> list[tuple[int, str]]:
    """What this process can still allocate, as (bytes, what bounds them) for each bound the
    system states: the machine's available memory (MemAvailable), its container's (cgroup v2:
    memory.max less memory.current) and, under an address-space limit, the limit less what the
    process maps now; none where the system says none of them (not Linux). Requests running at
    once are each checked against the same."""
    said = []
    meminfo = _kib(Path("/proc/meminfo"), "MemAvailable:")
    if meminfo is not None:
        said.append((meminfo, "the machine's available memory"))
    group = _cgroup_room(Path("/sys/fs/cgroup"))
    if group is not None:
        said.append((group, "this container's memory limit"))
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    mapped = _kib(Path("/proc/self/status"), "VmSize:")
    if limit != resource.RLIM_INFINITY and mapped is not None:
        said.append((max(limit - mapped, 0), "this process's address-space limit"))
    return said


def _cgroup_room(root: Path) -> int | None:
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((root / "memory.current").read_text()), 0)
    except (OSError, ValueError):
        return None


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
    bounds = _bounds()
    need = HEADROOM * lens_bytes(config, tokens)
    if not bounds or need <= min(n for n, _ in bounds):
        return
    free, bound = min(bounds)
    fits = _longest(lambda t: HEADROOM * lens_bytes(config, t) <= free, tokens)
    raise MemoryRefused(
        f"the logit lens of {tokens:,} tokens needs about {_gb(need)} of memory and {_gb(free)} "
        f"is free for it here ({bound}): "
        + (f"use a text of at most {fits:,} tokens as the lens reads it (the start token "
           f"counted, where the model reads one)" if fits > 1 else "there is no room for it now"))


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
