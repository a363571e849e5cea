"""Attention capture for a prompt and its continuation; views (bertviz, Plotly) and head diffs.

bertviz's views load d3, jQuery and require.js from a CDN; here they load local copies that the
app serves (vendored from the npm registry by the Makefile), so the views work with no network.
Layers and heads are numbered from 1 in every view.

Two models with different tokenizers are compared word by word: each model's tokens are matched
to the whitespace words of the text, and each head's token x token attention becomes word x word
attention (a word's row is the mean of its sub-tokens' rows, summed over the key word's sub-tokens).
"""
from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab.errors import LabError
from lab.modeling.generate import GenerationError, check_prompt
from lab.modeling.model import kv_heads

VENDOR_DIR = Path(__file__).resolve().parents[1] / "ui" / "static" / "vendor"
CDN = {
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js": "require.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min": "d3.min",
    "https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min": "jquery.min",
}


class AttentionError(LabError):
    pass


@dataclass
class Capture:
    tokens: list[str]               # token strings, BOS included (when the tokenizer has one)
    ids: list[int]
    attentions: list[torch.Tensor]  # per layer: (n_head, T, T)
    n_prompt: int                   # tokens before the generated part (BOS + prompt)
    n_head: int
    kv_heads: int
    per_token: dict = field(default_factory=dict)   # name -> a value per token (ACT's steps)
    bos: bool = True                # the first token is a BOS the text does not hold

    @property
    def n_layer(self) -> int:
        return len(self.attentions)


def sequence(model, tokenizer, text: str = "", ids: list[int] | None = None,
             max_tokens: int | None = None) -> tuple[list[int], list[str]]:
    """The ids a view reads for a text (BOS + text, or the text alone for a tokenizer without BOS:
    a birth-place model reads a question from its first character) and their strings; refused
    past the model's context (or max_tokens)."""
    body = ids if ids is not None else tokenizer.encode(check_prompt(text))
    bos = tokenizer.bos_id
    seq = ([] if bos is None else [bos]) + list(body)
    limit = min(model.config.n_positions, max_tokens or model.config.n_positions)
    if len(seq) > limit:
        raise GenerationError(f"the text is {len(seq)} tokens{'' if bos is None else ' with BOS'}; "
                              f"at most {limit} can be shown")
    return seq, ([] if bos is None else ["<bos>"]) + tokenizer.token_strings(list(body))


@torch.no_grad()
def capture(model, tokenizer, text: str = "", ids: list[int] | None = None, n_prompt: int | None = None,
            max_tokens: int | None = None) -> Capture:
    """Attention of every layer and head over BOS + text (or BOS + ids); over the text alone for a
    tokenizer without BOS (a birth-place model reads a question from its first character)."""
    seq, shown = sequence(model, tokenizer, text, ids, max_tokens)
    bos = tokenizer.bos_id
    was_training = model.training
    model.eval()
    out = model(torch.tensor([seq], device=next(model.parameters()).device), output_attentions=True)
    model.train(was_training)
    c = model.config
    return Capture(tokens=shown, ids=seq,
                   attentions=[a[0].float().cpu() for a in out.attentions],
                   n_prompt=len(seq) if n_prompt is None else n_prompt,
                   n_head=c.n_head, kv_heads=kv_heads(c), bos=bos is not None,
                   per_token={k: v[0].float().cpu().tolist() for k, v in (out.per_token or {}).items()})


def head_groups(n_head: int, kv_heads: int) -> list[list[int]]:
    """Which query heads share each key/value head (grouped-query attention): contiguous groups."""
    size = n_head // kv_heads
    return [list(range(g * size, (g + 1) * size)) for g in range(kv_heads)]


# Edits of bertviz's scripts: layers and heads numbered from 1, as in the grid; model-view
# thumbnails about as tall as wide at most (bertviz gives a token 84 / n_head px: 1,850 px a layer
# for 2 heads and 44 tokens). Each must match once: a bertviz that changed fails loudly, in the tests.
EDITS = {
    "head": [(".val(layer).text(layer)", ".val(layer).text(layer + 1)")],
    "model": [(".text(config.layers[i])", ".text(config.layers[i] + 1)"),
              (".text(config.heads[i])", ".text(config.heads[i] + 1)"),
              ("'Layer ' + config.layers[layerIndex] + \", Head \" + config.heads[headIndex]",
               "'Layer ' + (config.layers[layerIndex] + 1) + \", Head \" + (config.heads[headIndex] + 1)"),
              ("config.thumbnailBoxHeight = 7 * (12 / config.totalHeads);",
               "config.thumbnailBoxHeight = Math.min(7 * (12 / config.totalHeads), "
               "900 / config.totalHeads / Math.max(config.leftText.length, config.rightText.length));")],
}


def _edited(body: str, view: str) -> str:
    for old, new in EDITS[view]:
        if body.count(old) != 1:
            raise RuntimeError(f"bertviz's {view} view changed: {old!r} found {body.count(old)} times")
        body = body.replace(old, new)
    return body


TITLE_PX = 28         # the checkpoint's name above a view (view_height leaves room for it)


ASSET_URL = re.compile(r"(https?://[^\s'\"<>]+|[^\s:'\"<>]+)")


def check_asset_url(url: str) -> None:
    """Where a page loads d3, jQuery and require.js from: an http(s) address or a path (a folder
    or a server's); anything else (javascript:, data:, quotes) is refused."""
    if not isinstance(url, str) or len(url) > 2000 or not ASSET_URL.fullmatch(url):
        raise LabError(f"asset URL {str(url)[:100]!r}: give an http(s) address or a folder, e.g. "
                       f"{VENDOR_DIR}")


def bertviz_html(cap: Capture, view: str = "head", asset_url: str = "/lab-static",
                 title: str = "") -> str:
    """A complete HTML document with bertviz's head or model view, assets loaded from asset_url,
    layers and heads numbered from 1; `title` (a checkpoint name) heads the page."""
    from bertviz import head_view, model_view
    check_asset_url(asset_url)
    attention = [a[None] for a in cap.attentions]          # bertviz wants (1, heads, T, T) per layer
    fn = {"head": head_view, "model": model_view}.get(view)
    if fn is None:
        raise ValueError(f"view must be 'head' or 'model', got {view!r}")
    body = _script_safe(_edited(fn(attention, cap.tokens, html_action="return").data, view))
    for cdn, local in CDN.items():
        body = body.replace(cdn, f"{asset_url}/{local}")
    heading = (f"<div style='font:bold 15px sans-serif;height:{TITLE_PX - 6}px;margin-bottom:6px'>"
               f"{html.escape(title)}</div>" if title else "")
    return ("<!doctype html><html><head><meta charset='utf-8'></head>"
            "<body style='background:white;color:black;margin:8px'>" + heading + body + "</body></html>")


def _script_safe(body: str) -> str:
    """bertviz writes the tokens as JSON into its last <script>; a token holding '</script' would
    end it early and run as HTML. Inside that script '</' becomes '<\\/', the same to JavaScript."""
    start = body.rindex('<script type="text/javascript">') + len('<script type="text/javascript">')
    end = body.rindex("</script>")
    return body[:start] + body[start:end].replace("</", "<\\/") + body[end:]


def view_height(cap: Capture, view: str) -> int:
    """The iframe height (px) that shows a whole bertviz view, from bertviz's layout constants."""
    T = len(cap.tokens)
    if view == "head":          # title, layer menu, margins; head_view.js: TEXT_TOP + BOXHEIGHT a token
        return TITLE_PX + 70 + 30 + round(22.5 * T)
    thumbnails = T * min(84 / cap.n_head, 900 / cap.n_head / T) + 10   # one layer's row (EDITS)
    detail = T * 18 + 55                       # the detail panel a click on a thumbnail opens
    return TITLE_PX + 50 + round(max(cap.n_layer * thumbnails + 38, detail))   # margins, the drawing


def iframe(document: str, height: int = 620) -> str:
    """Gradio's HTML component does not run scripts; an iframe with srcdoc does."""
    # sandboxed: its scripts run, but in an origin of their own, never the lab's
    return (f'<iframe class="lab-attention-frame" sandbox="allow-scripts" '
            f'style="width:100%;height:{height}px;border:0" '
            f'srcdoc="{html.escape(document, quote=True)}"></iframe>')


def grid_row_px(n_layer: int) -> int:
    """A layer's row in the grid: 150 px for a shallow model, down to 80 px for a deep one, so
    SmolLM2's 30 layers fit in 2,400 px (and every head of every layer is drawn)."""
    return max(80, min(150, 1800 // max(n_layer, 1)))


def heatmap_grid(cap: Capture, title: str = ""):
    """A Plotly grid of heatmaps, layer by head, every one of them; axes labelled with the tokens."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    heads = cap.n_head
    groups = head_groups(cap.n_head, cap.kv_heads)
    group_of = {h: g for g, hs in enumerate(groups) for h in hs}
    titles = []
    for layer in range(cap.n_layer):
        for h in range(heads):
            kv = f" kv{group_of[h] + 1}" if cap.kv_heads != cap.n_head else ""
            titles.append(f"L{layer + 1} H{h + 1}{kv}")
    height = max(260, grid_row_px(cap.n_layer) * cap.n_layer)
    fig = make_subplots(rows=cap.n_layer, cols=heads, subplot_titles=titles,
                        horizontal_spacing=0.01, vertical_spacing=min(0.3, 24 / height))
    labels = [f"{i}:{t}" for i, t in enumerate(cap.tokens)]
    for layer in range(cap.n_layer):
        for h in range(heads):
            fig.add_trace(go.Heatmap(z=cap.attentions[layer][h].numpy(), x=labels, y=labels,
                                     coloraxis="coloraxis",
                                     hovertemplate="query %{y}<br>key %{x}<br>%{z:.3f}<extra></extra>"),
                          row=layer + 1, col=h + 1)
    fig.update_xaxes(showticklabels=False)
    fig.update_yaxes(showticklabels=False, autorange="reversed")
    above = 30 if title else 0
    fig.update_annotations(font_size=10)                 # the subplot titles
    fig.update_layout(coloraxis=dict(colorscale="Blues", cmin=0, cmax=1), height=height + above,
                      margin=dict(l=10, r=10, t=30 + above, b=10), font=dict(size=9, color="#8a8f98"),
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",   # either theme
                      title=dict(text=f"<b>{html.escape(title)}</b>", font=dict(size=14)) if title else None)
    return fig


def summary(cap: Capture) -> dict:
    return {"tokens": cap.tokens, "n_layer": cap.n_layer, "n_head": cap.n_head,
            "kv_heads": cap.kv_heads, "head_groups": head_groups(cap.n_head, cap.kv_heads)}


def to_json(cap: Capture) -> str:
    return json.dumps({**summary(cap), "attentions": [a.tolist() for a in cap.attentions]})


# ---------------------------------------------------------------- word alignment across tokenizers

def word_spans(text: str) -> list[tuple[int, int]]:
    """Where each whitespace word of the text starts and ends."""
    return [m.span() for m in re.finditer(r"\S+", text)]


def token_words(tokenizer, ids: list[int], text: str) -> list[int]:
    """For each token of `ids` (the tokens of `text`, no BOS), the index of the word it belongs to.
    A token starts where decoding the tokens before it ends; its word is the one holding its first
    non-space character (a token of spaces only, or of part of a UTF-8 character, goes with the
    next word)."""
    spans = word_spans(text)
    if not spans:
        raise AttentionError("the text has no words to align")
    if tokenizer.decode(ids) != text:
        raise AttentionError(f"the {tokenizer.kind} tokenizer does not decode the text back as it "
                             f"was written, so its tokens cannot be matched to words")
    owner, w = [], 0                           # owner[p]: the word at or after character p
    for p in range(len(text)):
        while w < len(spans) - 1 and spans[w][1] <= p:
            w += 1
        owner.append(w)
    result, end = [], 0
    for k in range(len(ids)):
        start = end
        result.append(owner[start] if start < len(text) else len(spans) - 1)
        end = max(end, _common_prefix(tokenizer.decode(ids[:k + 1]), text))
    lost = sorted(set(range(len(spans))) - set(result))
    if lost:
        raise AttentionError(f"the {tokenizer.kind} tokenizer joins the word "
                             f"{text[slice(*spans[lost[0]])]!r} to the one before it, so its tokens "
                             f"cannot be matched to words")
    return result


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def word_attention(att: torch.Tensor, token_word: list[int], n_words: int,
                   bos: bool = True) -> torch.Tensor:
    """(H, T, T) token attention, BOS first -> (H, W, W) word attention with W = 1 + n_words,
    word 0 being <bos>. A word's row is the mean of its sub-tokens' rows (as queries), each column
    the sum over the key word's sub-tokens, so every row still sums to 1. Without a BOS (bos=False:
    the tokens are the text's alone) word 0's row and column are zero: models with and without a
    BOS compare over the same words, attention to a BOS counting as attention to no word."""
    group = torch.tensor(([0] if bos else []) + [1 + w for w in token_word])
    member = torch.nn.functional.one_hot(group, 1 + n_words).to(att.dtype)   # (T, W)
    mean = member.T / member.sum(0).clamp(min=1)[:, None]                      # (W, T)
    return mean @ att @ member


@dataclass
class WordAttention:
    words: list[str]            # "<bos>", then the text's whitespace words
    attentions: torch.Tensor    # (n_layer, n_head, W, W); each row sums to 1 over the words


def by_words(cap: Capture, tokenizer, text: str) -> WordAttention:
    """A capture of `text` (BOS + its tokens, or its tokens alone) seen word by word."""
    token_word = token_words(tokenizer, cap.ids[1:] if cap.bos else cap.ids, text)
    words = ["<bos>"] + [text[s:e] for s, e in word_spans(text)]
    return WordAttention(words, torch.stack([word_attention(a, token_word, len(words) - 1, cap.bos)
                                             for a in cap.attentions]))


def head_distances(a: WordAttention, b: WordAttention) -> torch.Tensor:
    """(heads of a, heads of b), heads counted layer by layer: the mean over the text's words of
    the total-variation distance between two heads' rows (0 = identical, 1 = disjoint). The <bos>
    row is left out: it attends to itself alone in every causal head."""
    if a.words != b.words:
        raise ValueError("the two word attentions must be over the same text")
    A = a.attentions[:, :, 1:].flatten(0, 1)          # (La * Ha, W - 1, W)
    B = b.attentions[:, :, 1:].flatten(0, 1)          # (Lb * Hb, W - 1, W)
    return torch.stack([0.5 * (x - B).abs().sum(-1).mean(-1) for x in A])


def head_differences(a: WordAttention, b: WordAttention, top: int = 12) -> list[dict]:
    """For each head of a: its distance to the head of b with the same layer and number (None if b
    has no such head) and to b's closest head. The heads of a that b matches least come first."""
    d = head_distances(a, b)
    (La, Ha), (Lb, Hb) = a.attentions.shape[:2], b.attentions.shape[:2]
    rows = []
    for i in range(La * Ha):
        layer, head = divmod(i, Ha)
        j = int(d[i].argmin())
        same = d[i, layer * Hb + head].item() if layer < Lb and head < Hb else None
        rows.append({"layer": layer + 1, "head": head + 1,
                     "distance": None if same is None else round(same, 4),
                     "closest": f"L{j // Hb + 1} H{j % Hb + 1}",
                     "closest_distance": round(d[i, j].item(), 4)})
    return sorted(rows, key=lambda r: -r["closest_distance"])[:top]
