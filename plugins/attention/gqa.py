"""Grouped-query attention (Ainslie et al. 2023, "GQA"): `kv_groups` key/value heads, each shared
by a group of query heads. kv_groups = n_head is multi-head attention; kv_groups = 1 is multi-query."""
from dataclasses import dataclass, field

from lab.config import ConfigError
from lab.registry import ATTENTION
from plugins.attention.mha import CausalSelfAttention


@dataclass
class GQASettings:
    kv_groups: int | None = field(default=None, metadata={
        "help": "key/value heads, dividing n_head; blank: half of n_head (rounded down to a divisor)",
        "min": 1, "max": 4096})

    def check(self, model) -> None:
        if self.kv_groups is not None and model.n_head % self.kv_groups:
            raise ConfigError(f"attention.kv_groups={self.kv_groups} must divide "
                              f"n_head={model.n_head}")


def default_groups(n_head: int) -> int:
    """The largest divisor of n_head up to half of it: grouped for any n_head above 1."""
    return max(d for d in range(1, max(1, n_head // 2) + 1) if n_head % d == 0)


@ATTENTION.register("gqa", "Grouped-query attention: kv_groups key/value heads shared by query groups",
                    settings=GQASettings,
                    # configs written before plugins had settings: kv_groups 0 or null meant n_head
                    legacy_keys={"kv_groups": ("kv_groups", lambda v, d: v or d.get("n_head", 12))})
def gqa(n_embd: int, n_head: int, bias: bool, dropout: float, settings: GQASettings):
    return CausalSelfAttention(n_embd, n_head, settings.kv_groups or default_groups(n_head), bias,
                               dropout)
