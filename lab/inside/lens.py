"""The logit lens (nostalgebraist 2020): each layer's residual stream read through the final norm
and the output layer, as if the model stopped there. Per layer and position: the top tokens with
their probabilities, and the rank and probability of the token that actually comes next. The
last layer's lens is the model's own output."""
from __future__ import annotations

import torch

from lab.evaluation.attention_maps import sequence
from lab.inside.hooks import hooked, residual_names, unembed


@torch.no_grad()
def logit_lens(model, tokenizer, text: str, top: int = 5) -> dict:
    """{"tokens", "layers" (embeddings, block 1..L), "top": [layer][position] -> [[token, p], ...],
    "next": the tokens that come next (None at the last position), "next_rank" / "next_prob":
    [layer][position] (rank 1 = the lens's first choice alone; tied tokens rank below it),
    "first_layer": per position, the first layer whose lens ranks the next token first (None if
    none does)."""
    ids, shown = sequence(model, tokenizer, text)
    logp = lens_logits(model, ids).float().log_softmax(-1)
    return lens_table(logp, ids, shown, tokenizer, top)


@torch.no_grad()
def lens_logits(model, ids: list[int]) -> torch.Tensor:
    """(layers, T, V): the logits each residual state would give (embeddings, each block)."""
    was = model.training
    model.eval()
    names = residual_names(model)
    try:
        x = torch.tensor([ids], device=next(model.parameters()).device)
        with hooked(model, read=names) as seen:
            model(x)
        return torch.stack([unembed(model, seen[n])[0] for n in names])
    finally:
        model.train(was)


def lens_table(logp: torch.Tensor, ids: list[int], shown: list[str], tokenizer, top: int) -> dict:
    """logp (layers, T, V) -> the lens's figures (logit_lens's dict)."""
    L, T, _ = logp.shape
    p_top, i_top = logp.exp().topk(min(top, logp.size(-1)), dim=-1)        # (L, T, k)
    nxt = ids[1:] + [None]
    rank, prob = [], []
    for layer in range(L):
        r_row, p_row = [], []
        for t in range(T):
            if nxt[t] is None:
                r_row.append(None); p_row.append(None)
                continue
            lp = logp[layer, t]
            r_row.append(int((lp >= lp[nxt[t]]).sum()))      # a tie ranks below: all equal is rank V
            p_row.append(float(lp[nxt[t]].exp()))
        rank.append(r_row); prob.append(p_row)
    first = [next((layer for layer in range(L) if rank[layer][t] == 1), None) if nxt[t] is not None
             else None for t in range(T)]
    strings = tokenizer.token_strings
    return {"tokens": shown, "ids": ids,
            "layers": ["embeddings"] + [f"block {i}" for i in range(1, L)],
            "top": [[[[s, float(p)] for s, p in zip(strings(i_top[layer, t].tolist()),
                                                   p_top[layer, t].tolist())]
                     for t in range(T)] for layer in range(L)],
            "next": [None if n is None else strings([n])[0] for n in nxt],
            "next_rank": rank, "next_prob": prob, "first_layer": first}
