"""The logit lens (nostalgebraist 2020): each layer's residual stream read through the final norm
and the output layer, as if the model stopped there. Per layer and position: the top tokens with
their probabilities, and the rank and probability of the token that actually comes next. The
last layer's lens is the model's own output."""
from __future__ import annotations

import torch

from lab.errors import Aborted
from lab.evaluation.attention_maps import sequence
from lab.inside import memory
from lab.inside.hooks import hooked, residual_names, unembed


@torch.no_grad()
def logit_lens(model, tokenizer, text: str, top: int = 5, abort=None,
               max_tokens: int | None = None) -> dict:
    """{"tokens", "layers" (embeddings, block 1..L), "top": [layer][position] -> [[token, p], ...],
    "next": the tokens that come next (None at the last position), "next_rank" / "next_prob":
    [layer][position] (rank 1 = the lens's first choice alone; tied tokens rank below it),
    "first_layer": per position, the first layer whose lens ranks the next token first (None if
    none does)}. One layer's (T, V) log-probabilities are held at a time, so memory grows with
    the text as one output layer's does, not as every layer's; abort() is asked before each layer
    (True raises Aborted); max_tokens: the most a text may have (default: the context)."""
    ids, shown = sequence(model, tokenizer, text, max_tokens=max_tokens)
    memory.check_lens(model.config, len(ids))        # refused before it starts, not part way
    states = residual_states(model, ids)
    nxt = ids[1:] + [None]
    layers = []
    for state in states:
        if abort is not None and abort():
            raise Aborted()
        layers.append(_layer_figures(unembed(model, state)[0].float().log_softmax(-1), nxt, top))
    return _table(layers, ids, shown, nxt, tokenizer)


@torch.no_grad()
def residual_states(model, ids: list[int]) -> list[torch.Tensor]:
    """Each residual state (embeddings, each block), (1, T, C): what the lens reads."""
    was = model.training
    model.eval()
    names = residual_names(model)
    try:
        x = torch.tensor([ids], device=next(model.parameters()).device)
        with hooked(model, read=names) as seen:
            model(x)
        return [seen[n] for n in names]
    finally:
        model.train(was)


@torch.no_grad()
def lens_logits(model, ids: list[int]) -> torch.Tensor:
    """(layers, T, V): the logits each residual state would give (embeddings, each block)."""
    return torch.stack([unembed(model, s)[0] for s in residual_states(model, ids)])


def _layer_figures(logp: torch.Tensor, nxt: list, top: int) -> dict:
    """One layer's (T, V) log-probabilities -> its top tokens, and the next token's rank and
    probability at each position (None at the last)."""
    p_top, i_top = logp.exp().topk(min(top, logp.size(-1)), dim=-1)          # (T, k)
    known = [t for t, n in enumerate(nxt) if n is not None]
    at = torch.tensor(known, dtype=torch.long)
    lp_next = logp[at, torch.tensor([nxt[t] for t in known], dtype=torch.long)]        # (T-1,)
    ranks = (logp[at] >= lp_next[:, None]).sum(-1)      # a tie ranks below: all equal is rank V
    rank, prob = [None] * len(nxt), [None] * len(nxt)
    for t, r, lp in zip(known, ranks.tolist(), lp_next.exp().tolist()):
        rank[t], prob[t] = int(r), float(lp)
    return {"p": p_top.tolist(), "i": i_top.tolist(), "rank": rank, "prob": prob}


def _table(layers: list[dict], ids: list[int], shown: list[str], nxt: list, tokenizer) -> dict:
    """The layers' figures -> the lens's dict (logit_lens)."""
    L, T = len(layers), len(ids)
    rank = [f["rank"] for f in layers]
    first = [next((layer for layer in range(L) if rank[layer][t] == 1), None) if nxt[t] is not None
             else None for t in range(T)]
    strings = tokenizer.token_strings
    return {"tokens": shown, "ids": ids,
            "layers": ["embeddings"] + [f"block {i}" for i in range(1, L)],
            "top": [[[[s, float(p)] for s, p in zip(strings(f["i"][t]), f["p"][t])] for t in range(T)]
                    for f in layers],
            "next": [None if n is None else strings([n])[0] for n in nxt],
            "next_rank": rank, "next_prob": [f["prob"] for f in layers], "first_layer": first}
