"""The Plotly figures of the three tools, each titled with what produced it (the checkpoint, the
text or the subset, and the CLI command that gives the same figures)."""
from __future__ import annotations

import html


def _go():
    import plotly.graph_objects as go
    return go


def _labels(tokens: list[str]) -> list[str]:
    """Unique x labels for positions (a repeated token stays distinct)."""
    return [f"{i}: {t}" for i, t in enumerate(tokens)]


def lens_figure(r: dict, checkpoint: str, text: str):
    """Layers x positions, coloured by the lens's probability of the token that comes next."""
    go = _go()
    x, layers = _labels(r["tokens"]), r["layers"]
    hover = [[_lens_hover(r, layer, t) for t in range(len(x))] for layer in range(len(layers))]
    fig = go.Figure(go.Heatmap(z=r["next_prob"], x=x, y=layers, customdata=hover, zmin=0, zmax=1,
                               colorscale="Viridis", colorbar=dict(title="p(next)"),
                               hovertemplate="%{customdata}<extra></extra>"))
    fig.update_layout(title=dict(text=f"Logit lens of {html.escape(checkpoint)}: each layer's "
                                      f"probability of the next token<br><sup>python -m lab lens "
                                      f"--checkpoint {html.escape(checkpoint)} --text "
                                      f"{html.escape(repr(text))}</sup>", font=dict(size=14)),
                      height=max(300, 140 + 28 * len(layers)), margin=dict(l=90, r=20, t=70, b=90),
                      xaxis=dict(tickangle=-45), yaxis=dict(autorange="reversed"))
    return fig


def _lens_hover(r: dict, layer: int, t: int) -> str:
    tops = ", ".join(f"{html.escape(repr(s))} {p:.2f}" for s, p in r["top"][layer][t][:3])
    head = f"{r['layers'][layer]}, after {html.escape(repr(r['tokens'][t]))}"
    if r["next"][t] is None:
        return f"{head}<br>top: {tops}"
    return (f"{head}<br>next {html.escape(repr(r['next'][t]))}: rank {r['next_rank'][layer][t]}, "
            f"p {r['next_prob'][layer][t]:.3f}<br>top: {tops}")


def scan_figure(r: dict):
    """Blocks x heads, coloured by the change in perplexity when that head alone is ablated."""
    go = _go()
    H = len(r["change"][0])
    heads, blocks = [f"head {h + 1}" for h in range(H)], [f"block {i + 1}" for i in range(len(r["change"]))]
    hover = [[f"{blocks[i]}, {heads[h]}: {c:+.3f} [{lo:+.3f}, {hi:+.3f}]"
              for h, (c, (lo, hi)) in enumerate(zip(row, cis))]
             for i, (row, cis) in enumerate(zip(r["change"], r["change_ci"]))]
    top = max(abs(c) for row in r["change"] for c in row) or 1.0
    fig = go.Figure(go.Heatmap(z=r["change"], x=heads, y=blocks, customdata=hover, zmid=0,
                               zmin=-top, zmax=top, colorscale="RdBu_r",
                               colorbar=dict(title="change in<br>perplexity"),
                               hovertemplate="%{customdata}<extra></extra>"))
    fig.update_layout(title=dict(text=f"{html.escape(r['checkpoint'])}: each head {r['mode']}-ablated "
                                      f"alone, {r['n']} {r['split']} texts (seed {r['seed']}), "
                                      f"perplexity {r['perplexity']:.2f}<br><sup>python -m lab ablate "
                                      f"--checkpoint {html.escape(r['checkpoint'])} --each --mode "
                                      f"{r['mode']} --split {r['split']} --n {r['n']} --seed "
                                      f"{r['seed']}</sup>", font=dict(size=14)),
                      height=max(280, 160 + 30 * len(blocks)), margin=dict(l=80, r=20, t=70, b=40),
                      yaxis=dict(autorange="reversed"))
    return fig


def patch_figure(r: dict, checkpoint: str):
    """Two heat maps: the residual stream entering each block at each position, and each head's
    output, coloured by the fraction of the clean answer's logit difference the patch restores."""
    go = _go()
    from plotly.subplots import make_subplots
    x = _labels(r["tokens"])
    heads = [f"head {h + 1}" for h in range(len(r["heads"][0]))]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.12,
                        subplot_titles=("residual stream entering each block, per position",
                                        "each head's output (all positions)"))
    common = dict(zmid=0, zmin=-1, zmax=1, colorscale="RdBu_r", coloraxis=None)
    fig.add_trace(go.Heatmap(z=r["resid"], x=x, y=r["layers"], colorbar=dict(title="restored", x=1.02),
                             hovertemplate="%{y}, position %{x}: %{z:.3f}<extra></extra>", **common),
                  row=1, col=1)
    fig.add_trace(go.Heatmap(z=r["heads"], x=heads, y=r["layers"], showscale=False,
                             hovertemplate="%{y}, %{x}: %{z:.3f}<extra></extra>", **common), row=1, col=2)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickangle=-45, row=1, col=1)
    fig.update_layout(title=dict(text=f"Patching {html.escape(checkpoint)}: the share of "
                                      f"{html.escape(repr(r['answer']))} over "
                                      f"{html.escape(repr(r['wrong']))} restored (clean "
                                      f"{r['clean']:+.2f}, corrupted {r['corrupted']:+.2f})",
                                 font=dict(size=14)),
                      height=max(340, 180 + 30 * len(r["layers"])), margin=dict(l=80, r=40, t=90, b=90))
    return fig
