"""The Inside-the-model tab's views beside Attention: the logit lens, head ablation (a set of
heads, or each in turn with progress and a Stop) and activation patching, for the checkpoints the
store holds; each result as a figure, a table to download (CSV, JSON) and an API endpoint that
returns the figures as JSON (lab.inside's dicts)."""
from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict

import gradio as gr

from lab.config import SEED_MAX, ConfigError
from lab.errors import Aborted
from lab.evaluation import report
from lab.inside import ablation, lens, patching
from lab.inside.figures import lens_figure, patch_figure, scan_figure
from lab.modeling.generate import MAX_PROMPT_CHARS, GenerationError
from lab.storage import exports
from lab.training.progress import format_duration
from lab.ui.common import (LOADED, Context, api, beside_dropdown, checkpoint_dropdown, checkpoint_meta,
                           friendly, need_checkpoint, stoppable, whole)
from lab.ui.common import text as bounded_text
from lab.ui.fields import Dataframe, Number, Radio, Textbox
from lab.ui.work import progress_bar, streamed

# the most tokens the page's logit lens and patching read: the lens holds a layer's (tokens x
# vocabulary) log-probabilities at a time, patching runs (blocks x tokens) passes of the prompt
MAX_LENS_TOKENS = 256
MAX_PATCH_TOKENS = 64


def _loaded(name, what: str, store):
    return LOADED.get(need_checkpoint(name, what, store), store)


def working(compute, doing: str, shown):
    """compute(abort) in a thread the request's end stops (work.streamed): yields shown(doing)
    at least every half second while it runs, returns its result."""
    return (yield from streamed(lambda work: compute(work.stop_asked), lambda said: shown(doing)))


def api_streamed(compute, doing: str):
    """An endpoint's work that stops when its caller leaves: {"doing"} updates, then the result."""
    result = yield from working(compute, doing, lambda said: {"doing": said})
    yield result


# ---------------------------------------------------------------- the logit lens

def lens_of(name, text, top, store=None, abort=None) -> dict:
    text = bounded_text(text, "the text", MAX_PROMPT_CHARS).strip()
    if not text:
        raise ConfigError("type a text to read through the lens")
    ck = _loaded(name, "a checkpoint", store)
    try:
        return {"checkpoint": ck.name, "text": text,
                **lens.logit_lens(ck.model, ck.tokenizer, text, whole(top, "top", 1, 20), abort,
                                  max_tokens=MAX_LENS_TOKENS)}
    except ConfigError as e:
        raise ConfigError(f"{ck.name}: {e}") from None


def lens_rows(r: dict) -> list[list]:
    return [[r["checkpoint"], layer, t, tok, r["next"][t], r["next_rank"][i][t], r["next_prob"][i][t],
             r["top"][i][t][0][0], r["top"][i][t][0][1]]
            for i, layer in enumerate(r["layers"]) for t, tok in enumerate(r["tokens"])]


LENS_HEADERS = ["checkpoint", "layer", "position", "token", "next token", "rank of the next",
                "p(next)", "top token", "p(top)"]


def _first_said(r: dict) -> str:
    firsts = [(t, r["first_layer"][t]) for t in range(len(r["tokens"])) if r["next"][t] is not None]
    found = [f"`{r['next'][t]!r}` at {r['layers'][f]}" for t, f in firsts if f is not None]
    return (f"**{r['checkpoint']}**: {len(found)} of {len(firsts)} next tokens ranked first by "
            f"some layer's lens" + (f" (first: {', '.join(found[:6])}{' …' if len(found) > 6 else ''})"
                                    if found else "") + ".")


def show_lens(name, other, text, top, store=None):
    """Progress while the lens (of one checkpoint, or two) is read, then its maps and downloads."""
    names = [name] + ([other] if other else [])
    results = yield from working(lambda abort: [lens_of(n, text, top, store, abort) for n in names],
                                 "reading each layer through the lens",
                                 lambda said: (progress_bar(0.5, said), *(gr.skip(),) * 3))
    first = results[0]
    figs = [lens_figure(r, r["checkpoint"], r["text"]) for r in results]
    rows = [row for r in results for row in lens_rows(r)]
    files = exports.write_table(LENS_HEADERS, rows, "lens-" + "-vs-".join(r["checkpoint"] for r in results),
                                store, {"text": first["text"], "top": int(top)})
    note = "\n\n".join(_first_said(r) for r in results)
    yield (note, gr.update(value=figs[0], visible=True),
           gr.update(value=figs[1] if other else None, visible=bool(other)),
           gr.update(value=files, visible=True))


def _lens_view(ctx: Context):
    gr.Markdown("Each layer's residual stream read through the final norm and the output layer, "
                "as if the model stopped there (the logit lens): where along the depth the next "
                "token becomes the model's first choice. The last row is the model's own output. "
                "Hover a cell for its top tokens.")
    with gr.Row():
        name = checkpoint_dropdown(ctx, "checkpoint", task="generate", only=False, elem_id="lens-checkpoint")
        other = beside_dropdown(ctx, "lens-other")
        text = Textbox("A man riding a wave on top of a surfboard .", label="text", scale=2,
                       elem_id="lens-text")
        top = Number(5, label="top tokens kept", step=1, elem_id="lens-top")
    go = gr.Button("Show the lens", variant="primary", elem_id="lens-go")
    note = gr.Markdown(elem_id="lens-note")
    with gr.Row():
        fig_a = gr.Plot(show_label=False, elem_id="lens-figure", visible=False)
        fig_b = gr.Plot(show_label=False, elem_id="lens-other-figure", visible=False)
    files = gr.File(label="download the lens (CSV, JSON)", file_count="multiple", interactive=False,
                    visible=False, elem_id="lens-files")
    go.click(lambda: ("", *[gr.update(visible=False)] * 3), None, [note, fig_a, fig_b, files],
             queue=False, api_visibility="private").then(
        friendly(lambda *v: (yield from show_lens(*v, store=ctx.store)), note=(0, 4)),
        [name, other, text, top], [note, fig_a, fig_b, files], api_visibility="private")

    def lens_api(checkpoint: str, text: str, top: int = 5) -> dict:      # streamed
        """The logit lens of a checkpoint over a text (at most 256 tokens), streamed: {"doing"}
        updates, then per layer (embeddings, block 1..L) and position the top tokens with their
        probabilities, the rank and probability of the next token, and the first layer ranking
        it first. It stops when its caller leaves."""
        yield from api_streamed(lambda abort: lens_of(checkpoint, text, top, ctx.store, abort),
                                "reading each layer through the lens")
    api(lens_api, "lens", returns="the lens")


# ---------------------------------------------------------------- head ablation

def _subset_args(split, n, seed, most: int) -> tuple[str, int, int]:
    if split not in ("train", "dev", "test"):
        raise ConfigError(f"split must be train, dev or test, got {split!r}")
    return split, whole(n, "texts", 1, most), whole(seed, "seed", 0, SEED_MAX)


def ablate_set(name, heads, mode, split, n, seed, store=None, data_dir=None) -> dict:
    ck = _loaded(name, "a checkpoint", store)
    split, n, seed = _subset_args(split, n, seed, ablation.MAX_TEXTS)
    chosen = ablation.parse_heads(heads or "", len(ck.model.transformer.h), ck.model.config.n_head)
    return ablation.ablate(ck, chosen, mode, split, n, seed, data_dir=data_dir)


class StoppedScans:
    """The scans a Stop ended after some texts were scored, by the token of the request that
    started them, until the page that pressed Stop takes them (a few kept, the oldest dropped)."""

    def __init__(self, size: int = 8):
        self.size, self._items, self._ready = size, OrderedDict(), threading.Condition()

    def put(self, token: str, scans: list) -> None:
        with self._ready:
            self._items[token] = scans
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            self._ready.notify_all()

    def take(self, token: str, wait_s: float = 5.0) -> list | None:
        """The scans stopped under `token`, waiting up to wait_s for the stopped work to end."""
        with self._ready:
            self._ready.wait_for(lambda: token in self._items, timeout=wait_s)
            return self._items.pop(token, None)


STOPPED_SCANS = StoppedScans()


def scan_streamed(names: list, mode, split, n, seed, store=None, data_dir=None, token=None):
    """Each checkpoint's scan in turn, in a thread that Stop ends: yields progress lines (str),
    returns the scans. token: a Stop after some texts were scored leaves what they scored in
    STOPPED_SCANS under it."""
    split, n, seed = _subset_args(split, n, seed, ablation.MAX_SCAN_TEXTS)
    cks = [_loaded(x, "a checkpoint", store) for x in names]
    for ck in cks:
        ablation.check_scan(ck.name, len(ck.model.transformer.h) * ck.model.config.n_head, n)

    def compute(work):
        done = []
        try:
            for i, ck in enumerate(cks):
                work.say((i / len(cks), f"{ck.name}: reading its {n} texts (time left: estimating)"))
                done.append(ablation.scan(ck, mode, split, n, seed, data_dir=data_dir, abort=work.stop_asked,
                                          progress=_scan_progress(work, ck, i, len(cks), time.time())))
                if done[-1]["stopped"]:
                    break
        except Aborted:
            if not done:
                raise
        if token is not None and (len(done) < len(cks) or done[-1]["stopped"]):
            STOPPED_SCANS.put(token, done)
        return done
    return (yield from streamed(compute, lambda said: said or (0.0, "loading the checkpoints")))


def _scan_progress(work, ck, i: int, of: int, t0: float):
    """What a scan's progress says: each head alone on each text, the share done, where it is and
    the time left at the pace so far (the i-th of `of` checkpoints scanned)."""
    heads = len(ck.model.transformer.h) * ck.model.config.n_head

    def said(p: dict) -> None:
        share = p["done"] / p["of"]
        left = (time.time() - t0) * (1 - share) / share
        a, b = p["texts"]
        work.say(((i + share) / of, f"{ck.name}: {share:.0%} of {heads} heads, each alone on every "
                                    f"text (texts {a}-{b}: block {p['block']} of {p['blocks']}); "
                                    f"about {format_duration(left)} left"))
    return said


def _scan_said(r: dict) -> str:
    lines = [f"**{r['checkpoint']}**, perplexity {r['perplexity']:.3f} on {r['n']} {r['split']} texts "
             f"(seed {r['seed']}); the heads that matter most:"]
    if r.get("stopped"):
        lines[0] = (f"Stopped: **{r['checkpoint']}**'s map of the {r['n']} texts scored before the "
                    f"Stop (the shortest first). " + lines[0])
    for m in r["most"]:
        lo, hi = m["change_ci"]
        lines.append(f"- head {m['head']}: {m['change']:+.3f} [{lo:+.3f}, {hi:+.3f}], {m['verdict']}")
    e = r["estimate"]
    if e is None:
        return "\n".join(lines)
    lines.append(f"\nAttribution patching's estimate of every head (one forward and one backward pass, "
                 f"{e['elapsed_s']:.1f} s against the exact scan's {r['scan_s']:.1f} s) ranks the heads "
                 f"with Spearman {e['rank_agreement']:+.2f} against the scan; its figures are in the "
                 f"downloads.")
    return "\n".join(lines)


SCAN_HEADERS = ["checkpoint", "block", "head", "change in perplexity", "95% low", "95% high",
                "attribution patching's estimate"]


def show_scan(name, other, mode, split, n, seed, last=None, store=None, data_dir=None):
    """The scan's progress, then its summary, maps and downloads; `last`: Inside the model's last
    results, which the scans join (for Compare's report). Its last output is the request's
    token, which a Stop's after-word (stopped_scan) finds its finished part by."""
    names = [need_checkpoint(name, "a checkpoint", store)] + ([other] if other else [])
    token = uuid.uuid4().hex
    waiting = (gr.skip(),) * 5
    scans = None
    stream = scan_streamed(names, mode, split, n, seed, store, data_dir, token)
    try:
        while True:
            frac, said = next(stream)
            yield (progress_bar(frac, said), *waiting, token)
    except StopIteration as end:
        scans = end.value
    shown = scan_shown(scans, mode, split, n, seed, store)
    yield (shown[0], gr.skip(), *shown[1:], kept(last, "scan", scans), None)


def scan_shown(scans: list[dict], mode, split, n, seed, store=None) -> tuple:
    """The scans' summary, their maps (the second hidden for one scan) and downloads."""
    rows = [row for r in scans for row in _scan_rows(r)]
    files = exports.write_table(SCAN_HEADERS, rows, "ablate-each-" + "-vs-".join(r["checkpoint"] for r in scans),
                                store, {"mode": mode, "split": split, "n": int(n), "seed": int(seed)})
    return ("\n\n".join(_scan_said(r) for r in scans),
            gr.update(value=scan_figure(scans[0]), visible=True),
            gr.update(value=scan_figure(scans[1]) if len(scans) > 1 else None, visible=len(scans) > 1),
            gr.update(value=files, visible=True))


def _scan_rows(r: dict) -> list[list]:
    """A scan's table: a row per head (its estimate blank for a stopped scan, which has none)."""
    estimate = (r["estimate"] or {}).get("change")
    return [[r["checkpoint"], i + 1, h + 1, c, lo, hi, estimate[i][h] if estimate else None]
            for i, (row, cis) in enumerate(zip(r["change"], r["change_ci"]))
            for h, (c, (lo, hi)) in enumerate(zip(row, cis))]


def stopped_scan(said, token, mode, split, n, seed, store=None) -> list:
    """After a scan's request ends: for one stopped mid-way, the map of the texts it finished (or
    that it finished none); the page as it is otherwise."""
    if not (said and "lab-progress" in said):
        return [gr.skip()] * 4
    scans = STOPPED_SCANS.take(token) if token else None
    if not scans:
        return ["Stopped before the end, before a batch of texts was scored: no map.",
                *[gr.skip()] * 3]
    return list(scan_shown(scans, mode, split, n, seed, store))


def kept(last: dict | None, kind: str, results: list[dict]) -> dict:
    """Inside the model's last results ({kind: {checkpoint: result}}, for Compare's report) with
    these of `kind` in place of the same checkpoints' earlier ones."""
    last = last or {}
    return {**last, kind: {**last.get(kind, {}), **{r["checkpoint"]: r for r in results}}}


def show_set(name, heads, mode, split, n, seed, last=None, store=None, data_dir=None):
    r = ablate_set(name, heads, mode, split, n, seed, store, data_dir)
    head, lines = report.ablation_words(r)
    said = head + "".join(f"\n- {line}" for line in lines)
    rows = [[c["intact"], c["ablated"]] for c in r["continuations"]]
    files = exports.write_table(["intact", "ablated"], rows, f"ablate-{r['checkpoint']}", store,
                                {k: v for k, v in r.items() if k != "continuations"})
    return (said, gr.update(value={"headers": ["intact (greedy)", "heads ablated (greedy)"], "data": rows},
                            visible=bool(rows)), gr.skip(), gr.skip(), gr.update(value=files, visible=True),
            kept(last, "ablation", [r]))


ABLATION_ABOUT = ("Zero a set of heads' outputs (before the output projection), or put their "
                  "mean over other texts of the split in their place, and compare the model with "
                  "itself intact: perplexity on a seeded subset and BLEU-4 of as many sampled "
                  "texts, each with a paired 95% interval, and continuations from the same "
                  "prompts. *Ablate each head in turn* draws a blocks x heads map of the change "
                  "(exact; the stream below each block is computed once). Blocks and heads are "
                  "numbered from 1.")


def texts_limit(name, store=None):
    """The `texts scored` field's note: how many texts each action takes for the chosen model."""
    info = checkpoint_meta(name, store) if name else None
    if not info or "model" not in info:
        return gr.update(info=f"ablating a set: at most {ablation.MAX_TEXTS:,}; each head in turn: "
                              f"at most {ablation.MAX_SCAN_TEXTS}, fewer for a model of many heads")
    heads = info["model"]["n_layer"] * info["model"]["n_head"]
    most = min(ablation.MAX_SCAN_TEXTS, ablation.MAX_SCAN_WORK // heads)
    return gr.update(info=f"ablating a set: at most {ablation.MAX_TEXTS:,}; each head in turn "
                          f"({heads} heads here): at most {most}")


def _ablation_view(ctx: Context):
    gr.Markdown(ABLATION_ABOUT)
    with gr.Row():
        name = checkpoint_dropdown(ctx, "checkpoint", task="generate", only=False, elem_id="ablate-checkpoint")
        other = beside_dropdown(ctx, "ablate-other", "scan side by side with (optional)")
        heads = Textbox("1.1", label="heads (block.head, e.g. 1.3,2.1)", elem_id="ablate-heads")
    with gr.Row():
        mode = Radio(list(ablation.MODES), value="zero", label="ablation", elem_id="ablate-mode")
        split = Radio(["test", "dev"], value="test", label="texts", elem_id="ablate-split")
        n = Number(200, label="texts scored", step=1, elem_id="ablate-n", info=texts_limit(None)["info"])
        seed = Number(0, label="seed", step=1, elem_id="ablate-seed")
    with gr.Row():
        go = gr.Button("Ablate these heads", variant="primary", elem_id="ablate-go")
        scan_go = gr.Button("Ablate each head in turn", elem_id="ablate-scan-go")
        stop = gr.Button("Stop", variant="stop", visible=False, elem_id="ablate-stop")
    said = gr.Markdown(elem_id="ablate-note")
    captions = Dataframe(headers=["intact (greedy)", "heads ablated (greedy)"], visible=False,
                         wrap=True, column_widths=["50%", "50%"], elem_id="ablate-captions")
    with gr.Row():
        fig_a = gr.Plot(show_label=False, elem_id="ablate-figure", visible=False)
        fig_b = gr.Plot(show_label=False, visible=False, elem_id="ablate-other-figure")
    files = gr.File(label="download (CSV, JSON)", file_count="multiple", interactive=False,
                    visible=False, elem_id="ablate-files")
    outs = [said, captions, fig_a, fig_b, files, ctx.inside]
    name.change(friendly(lambda c: texts_limit(c, ctx.store)), name, n, queue=False,
                api_visibility="private")
    hide = lambda: [gr.update(visible=False)] * 4             # noqa: E731  (the last result's)
    go.click(hide, None, [captions, fig_a, fig_b, files], queue=False, api_visibility="private").then(
        friendly(lambda *v: show_set(*v, store=ctx.store, data_dir=ctx.data_dir), note=(0, 6)),
        [name, heads, mode, split, n, seed, ctx.inside], outs, api_visibility="private")
    scan_go.click(hide, None, [captions, fig_a, fig_b, files], queue=False, api_visibility="private")
    scanning = gr.State(None)          # the running scan's token (show_scan)
    stoppable(scan_go, stop, lambda: scan_go.click(
        friendly(lambda *v: (yield from show_scan(*v, store=ctx.store, data_dir=ctx.data_dir)), note=(0, 7)),
        [name, other, mode, split, n, seed, ctx.inside], outs + [scanning], api_visibility="private"),
        [said, scanning, mode, split, n, seed], [said, fig_a, fig_b, files],
        lambda *v: stopped_scan(*v, store=ctx.store))

    _ablation_api(ctx)


def _ablation_api(ctx: Context):
    """The ablation's API endpoints: /ablate and the streamed /ablate_each."""
    def ablate_api(checkpoint: str, heads: str, mode: str = "zero", split: str = "test", n: int = 200,
                   seed: int = 0) -> dict:
        """Heads ablated (BLOCK.HEAD from 1, e.g. "1.3,2.1"; mode zero or mean): perplexity intact
        and ablated on a seeded subset, the change with its paired 95% interval, a verdict, and
        greedy captions of both from the same prompts."""
        return ablate_set(checkpoint, heads, mode, split, n, seed, ctx.store, ctx.data_dir)

    def ablate_each_api(checkpoint: str, mode: str = "zero", split: str = "test", n: int = 200,
                        seed: int = 0) -> dict:         # streamed: the annotation names the output
        """Each head ablated alone, streamed: {"progress", "doing"} updates, then the scan (the
        change per block and head with intervals, and the heads that matter most)."""
        stream = scan_streamed([checkpoint], mode, split, n, seed, ctx.store, ctx.data_dir)
        try:
            while True:
                frac, doing = next(stream)
                yield {"progress": frac, "doing": doing}
        except StopIteration as end:
            yield end.value[0]
    api(ablate_api, "ablate", returns="the ablation")
    api(ablate_each_api, "ablate_each", returns="the scan, streamed")


# ---------------------------------------------------------------- activation patching

def patch_of(name, clean, corrupted, answer, wrong, store=None, abort=None, progress=None) -> dict:
    ck = _loaded(name, "a checkpoint", store)
    clean = bounded_text(clean, "the clean prompt", MAX_PROMPT_CHARS).strip()
    corrupted = bounded_text(corrupted, "the corrupted prompt", MAX_PROMPT_CHARS).strip()
    try:
        patched = patching.patch(ck.model, ck.tokenizer, clean, corrupted, answer or None, wrong or None,
                                 abort, max_tokens=MAX_PATCH_TOKENS, progress=progress)
    except GenerationError as e:
        if f"at most {MAX_PATCH_TOKENS} " not in str(e):
            raise
        raise GenerationError(f"{e} here; `python -m lab patch` reads prompts up to the model's "
                              f"context") from None
    return {"checkpoint": ck.name, "prompts": [clean, corrupted], **patched}


def show_patch(name, clean, corrupted, answer, wrong, last=None, store=None):
    """Progress while the patched runs go, then the maps and downloads (Stop ends it)."""
    def compute(work):
        def said(done, of):
            work.say((done / of, f"patched {done} of {of}: each block's stream at each position, "
                                 f"then each block's heads"))
        return patch_of(name, clean, corrupted, answer, wrong, store, work.stop_asked, said)
    r = yield from streamed(compute, lambda said: (
        progress_bar(*(said or (0.0, "running the clean and corrupted prompts"))), *(gr.skip(),) * 3))
    said = (f"**{r['checkpoint']}**: logit difference {r['answer']!r} − {r['wrong']!r} at the last "
            f"position: clean {r['clean']:+.3f}, corrupted {r['corrupted']:+.3f}. A cell is the share "
            f"of that gap its patch restores (0 nothing, 1 all).")
    if r["warning"]:
        said += f"\n\n**Note**: {r['warning']}."
    rows = [[r["checkpoint"], "residual", layer, f"{t}: {tok}", v] for layer, row in zip(r["layers"], r["resid"])
            for t, (tok, v) in enumerate(zip(r["tokens"], row))]
    rows += [[r["checkpoint"], "head", layer, f"head {h + 1}", v] for layer, row in zip(r["layers"], r["heads"])
             for h, v in enumerate(row)]
    files = exports.write_table(["checkpoint", "patched", "block", "where", "restored"], rows,
                                f"patch-{r['checkpoint']}", store,
                                {"clean": clean, "corrupted": corrupted, "answer": r["answer"],
                                 "wrong": r["wrong"], "clean_difference": r["clean"],
                                 "corrupted_difference": r["corrupted"]})
    yield said, gr.update(value=patch_figure(r, r["checkpoint"]), visible=True), \
        gr.update(value=files, visible=True), kept(last, "patch", [r])


def _patching_view(ctx: Context):
    gr.Markdown("Run a corrupted prompt, put one activation of the clean prompt in its place, and "
                "see how much of the clean answer comes back: the residual stream entering each "
                "block at each position, and each head's output. The two prompts must be the same "
                "length in tokens. Left blank, the clean answer is the clean prompt's first choice "
                "and the corrupted one the corrupted prompt's first choice other than it. A "
                "birth-place model: *Where was Ákos Császár born?⁇* against *Where was René "
                "Renoult born?⁇* (the same length; it answers after the ⁇, so the first letter "
                "of the place is compared).")
    with gr.Row():
        name = checkpoint_dropdown(ctx, "checkpoint", only=False, elem_id="patch-checkpoint")
        clean = Textbox("A man riding a horse on a", label="clean prompt", elem_id="patch-clean", scale=2)
        corrupted = Textbox("A woman riding a bike on a", label="corrupted prompt",
                            elem_id="patch-corrupted", scale=2)
    with gr.Row():
        answer = Textbox("", label="clean answer (optional: its first token)", elem_id="patch-answer")
        wrong = Textbox("", label="corrupted answer (optional)", elem_id="patch-wrong")
        go = gr.Button("Patch", variant="primary", elem_id="patch-go")
        stop = gr.Button("Stop", variant="stop", visible=False, elem_id="patch-stop")
    said = gr.Markdown(elem_id="patch-note")
    fig = gr.Plot(show_label=False, elem_id="patch-figure", visible=False)
    files = gr.File(label="download (CSV, JSON)", file_count="multiple", interactive=False,
                    visible=False, elem_id="patch-files")
    go.click(lambda: ("", gr.update(visible=False), gr.update(visible=False)), None, [said, fig, files],
             queue=False, api_visibility="private")
    stoppable(go, stop, lambda: go.click(
        friendly(lambda *v: (yield from show_patch(*v, store=ctx.store)), note=(0, 4)),
        [name, clean, corrupted, answer, wrong, ctx.inside], [said, fig, files, ctx.inside],
        api_visibility="private"),
        said, [said], lambda s: ["Stopped before the end: no map." if s and "lab-progress" in s else gr.skip()])

    _patching_api(ctx)


def _patching_api(ctx: Context):
    """Patching's API endpoint: /patch, streamed."""
    def patch_api(checkpoint: str, clean: str, corrupted: str, answer: str = "",
                  wrong: str = "") -> dict:          # streamed
        """Activation patching from the clean prompt into the corrupted one (equal length in
        tokens, at most 64), streamed: {"doing"} updates, then the share of the clean answer's
        logit difference each patch restores, per block and position of the residual stream and
        per block and head. It stops when its caller leaves."""
        yield from api_streamed(lambda abort: patch_of(checkpoint, clean, corrupted, answer, wrong,
                                                       ctx.store, abort),
                                "patching each block's stream at each position, then each head")
    api(patch_api, "patch", returns="the patching maps")


def build(ctx: Context):
    """The three views, each a tab beside Attention's (the caller's gr.Tabs)."""
    with gr.Tab("Logit lens", id="lens", render_children=True):
        _lens_view(ctx)
    with gr.Tab("Head ablation", id="ablation", render_children=True):
        _ablation_view(ctx)
    with gr.Tab("Patching", id="patching", render_children=True):
        _patching_view(ctx)
