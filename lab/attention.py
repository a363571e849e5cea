"""Attention capture for a prompt and its continuation; views (bertviz, Plotly) and head diffs.

bertviz's views load d3, jQuery and require.js from a CDN; here they load local copies that the
app serves (vendored from the npm registry by the Makefile), so the views work with no network.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

import torch

VENDOR_DIR = Path(__file__).resolve().parent / "ui" / "static" / "vendor"
CDN = {
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js": "require.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min": "d3.min",
    "https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min": "jquery.min",
}


@dataclass
class Capture:
    tokens: list[str]               # token strings, BOS included
    ids: list[int]
    attentions: list[torch.Tensor]  # per layer: (n_head, T, T)
    n_prompt: int                   # tokens before the generated part (BOS + prompt)
    n_head: int
    kv_heads: int

    @property
    def n_layer(self) -> int:
        return len(self.attentions)


@torch.no_grad()
def capture(model, tokenizer, text: str = "", ids: list[int] | None = None, n_prompt: int | None = None,
            max_tokens: int | None = None) -> Capture:
    """Attention of every layer and head over BOS + text (or BOS + ids)."""
    from lab.generate import GenerationError, check_prompt
    body = ids if ids is not None else tokenizer.encode(check_prompt(text))
    seq = [tokenizer.eos_id] + list(body)
    limit = min(model.config.n_positions, max_tokens or model.config.n_positions)
    if len(seq) > limit:
        raise GenerationError(f"the text is {len(seq)} tokens with BOS; at most {limit} can be shown")
    was_training = model.training
    model.eval()
    out = model(torch.tensor([seq], device=next(model.parameters()).device), output_attentions=True)
    model.train(was_training)
    c = model.config
    return Capture(tokens=["<bos>"] + tokenizer.token_strings(body), ids=seq,
                   attentions=[a[0].float().cpu() for a in out.attentions],
                   n_prompt=len(seq) if n_prompt is None else n_prompt,
                   n_head=c.n_head, kv_heads=_kv_heads(model))


def _kv_heads(model) -> int:
    return model.transformer.h[0].attn.n_kv_head


def head_groups(n_head: int, kv_heads: int) -> list[list[int]]:
    """Which query heads share each key/value head (grouped-query attention): contiguous groups."""
    size = n_head // kv_heads
    return [list(range(g * size, (g + 1) * size)) for g in range(kv_heads)]


def head_differences(a: Capture, b: Capture, top: int = 10) -> list[dict]:
    """Heads whose attention differs most between two models on the same tokens: mean total
    variation distance between their attention rows (0 = identical, 1 = disjoint)."""
    if a.ids != b.ids:
        raise ValueError("the two captures must be over the same tokens (same tokenizer and text)")
    rows = []
    for layer in range(min(a.n_layer, b.n_layer)):
        for head in range(min(a.n_head, b.n_head)):
            tv = 0.5 * (a.attentions[layer][head] - b.attentions[layer][head]).abs().sum(-1).mean()
            rows.append({"layer": layer + 1, "head": head + 1, "distance": round(tv.item(), 4)})
    return sorted(rows, key=lambda r: -r["distance"])[:top]


def vendor_files_present() -> bool:
    return all((VENDOR_DIR / f).is_file() for f in ("require.min.js", "d3.min.js", "jquery.min.js"))


def bertviz_html(cap: Capture, view: str = "head", asset_url: str = "/lab-static") -> str:
    """A complete HTML document with bertviz's head or model view, assets loaded from asset_url."""
    from bertviz import head_view, model_view
    attention = [a[None] for a in cap.attentions]          # bertviz wants (1, heads, T, T) per layer
    fn = {"head": head_view, "model": model_view}.get(view)
    if fn is None:
        raise ValueError(f"view must be 'head' or 'model', got {view!r}")
    body = fn(attention, cap.tokens, html_action="return").data
    for cdn, local in CDN.items():
        body = body.replace(cdn, f"{asset_url}/{local}")
    return ("<!doctype html><html><head><meta charset='utf-8'></head>"
            "<body style='background:white;color:black'>" + body + "</body></html>")


def iframe(document: str, height: int = 620) -> str:
    """Gradio's HTML component does not run scripts; an iframe with srcdoc does."""
    return (f'<iframe class="lab-attention-frame" style="width:100%;height:{height}px;border:0" '
            f'srcdoc="{html.escape(document, quote=True)}"></iframe>')


def heatmap_grid(cap: Capture, max_heads: int = 16):
    """A Plotly grid of heatmaps, layer by head; axes labelled with the tokens."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    heads = min(cap.n_head, max_heads)
    groups = head_groups(cap.n_head, cap.kv_heads)
    group_of = {h: g for g, hs in enumerate(groups) for h in hs}
    titles = []
    for layer in range(cap.n_layer):
        for h in range(heads):
            kv = f" kv{group_of[h] + 1}" if cap.kv_heads != cap.n_head else ""
            titles.append(f"L{layer + 1} H{h + 1}{kv}")
    fig = make_subplots(rows=cap.n_layer, cols=heads, subplot_titles=titles,
                        horizontal_spacing=0.01, vertical_spacing=0.04)
    labels = [f"{i}:{t}" for i, t in enumerate(cap.tokens)]
    for layer in range(cap.n_layer):
        for h in range(heads):
            fig.add_trace(go.Heatmap(z=cap.attentions[layer][h].numpy(), x=labels, y=labels,
                                     coloraxis="coloraxis",
                                     hovertemplate="query %{y}<br>key %{x}<br>%{z:.3f}<extra></extra>"),
                          row=layer + 1, col=h + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    fig.update_layout(coloraxis=dict(colorscale="Blues", cmin=0, cmax=1),
                      height=max(260, 150 * cap.n_layer), margin=dict(l=10, r=10, t=30, b=10),
                      font=dict(size=9))
    return fig


def summary(cap: Capture) -> dict:
    return {"tokens": cap.tokens, "n_layer": cap.n_layer, "n_head": cap.n_head,
            "kv_heads": cap.kv_heads, "head_groups": head_groups(cap.n_head, cap.kv_heads)}


def to_json(cap: Capture) -> str:
    return json.dumps({**summary(cap), "attentions": [a.tolist() for a in cap.attentions]})
