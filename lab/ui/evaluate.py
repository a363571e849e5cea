"""Evaluate tab: perplexity and forward/backward/harmonic BLEU on a seeded test subset, updating
live as samples accumulate, with bootstrap 95% intervals and paired differences between models."""
from __future__ import annotations

from pathlib import Path

import gradio as gr

from lab.inputs import tasks
from lab.storage import checkpoints
from lab.evaluation import exposure as eb, report
from lab.storage import exports
from lab.ui.fields import Number, Radio
from lab.config import SEED_MAX, ConfigError, DecodeConfig
from lab.presets import DECODE_TO_SCORE
from lab.evaluation.evaluate import bleu_skipped, chunk_bounds, evaluate_live, verdicts
from lab.ui.work import Work, streamed, within_budget
from lab.ui.common import (LOADED, Context, api, clicked, offers, checkpoint_dropdown, checkpoint_meta,
                           friendly, names_list, stop_button, stoppable, unit_of, whole)
from lab.ui.decoding import decode_of, decoder_inputs, decoders_of, form_decode

COLUMNS = ["checkpoint", "n", "perplexity ↓", "per-word perplexity ↓", "bits per byte ↓",
           "forward BLEU ↑", "backward BLEU (N) ↑", "harmonic BLEU (N) ↑"]
WIDTHS = ["10%", "4%", "13%", "14%", "13%", "13%", "16%", "17%"]      # every column in view at 1400 px
FIRST_CHUNK = 10          # captions per model before the first figures (seconds, not minutes)


def chunks(n: int) -> tuple[int, int]:
    """The live evaluation's first chunk and its largest: the first figures after 10 captions,
    then chunks doubling up to a third of the subset, at most 500 (500: 10, 30, 70, 150, 310,
    476, 500), so a large subset still shows new figures every few minutes."""
    chunk = min(500, max(50, n // 3))
    return min(FIRST_CHUNK, chunk), chunk


def _ci(v, ci, digits=3):
    return f"{v:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def table(snap: dict) -> list[list]:
    rows = []
    per_word = snap["provenance"]["perplexity_shown"] == "per word"
    for name, r in snap["models"].items():
        ppl = "— (tokenizers differ)" if per_word else _ci(r["perplexity"], r["perplexity_ci"], 2)
        bleus = [_ci(r["forward_bleu"], r["forward_bleu_ci"], 4),
                 f"({r['backward_n']}) " + _ci(r["backward_bleu"], r["backward_bleu_ci"], 4),
                 f"({r['backward_n']}) " + _ci(r["harmonic_bleu"], r["harmonic_bleu_ci"], 4)] \
            if "forward_bleu" in r else ["— (not scored)"] * 3
        rows.append([name, r["n"], ppl, _ci(r["word_perplexity"], r["word_perplexity_ci"], 2),
                     _ci(r["bits_per_byte"], r["bits_per_byte_ci"], 4) if "bits_per_byte" in r else "—",
                     *bleus])
    return rows


def _decoder_words(d: dict) -> str:
    settings = ", ".join(f"{k} {v}" for k, v in d.get("settings", {}).items())
    return f"{d['decoder']}{f' ({settings})' if settings else ''}"


def decoders_md(p: dict) -> str:
    """The decoder the captions were drawn with: the shared one, or each checkpoint's."""
    own = p.get("decoders") or {}
    if len({_decoder_words(d) for d in own.values()}) > 1:
        return "decoders " + "; ".join(f"**{name}** {_decoder_words(d)}" for name, d in own.items())
    return "decoder " + _decoder_words(next(iter(own.values()), p["decode"]))


def provenance_md(snap: dict) -> str:
    p = snap["provenance"]
    of = f" of {p['named']}" if p.get("named") else ""
    note = f" ({p['note']})" if p.get("note") else ""
    unit = p.get("unit", "texts")
    bleu = (f"BLEU not scored: {p['bleu_skipped']}" if p.get("bleu_skipped") else
            f"{decoders_md(p)}; BLEU on **{p['bleu_tokens']}** tokens")
    lines = [f"**{snap['done']} / {snap['total']}** {unit} scored. Every "
             f"model on the same subset: {p['split']} split{of}{note}, n={p['n']}, seed {p['seed']}, "
             f"subset hash `{p['subset_hash']}`; {bleu}; perplexity shown: {p['perplexity_shown']}. "
             f"↓ lower is better, ↑ higher is better."]
    if not p.get("bleu_skipped"):
        lines.append(f"Forward BLEU scores each generated {unit[:-1]} against all references "
                     f"(unbiased for the full figure); backward and harmonic BLEU depend on N and "
                     f"are labelled with it; their intervals resample the per-{unit[:-1]} scores "
                     f"with the generated set held fixed.")
    verdict_lines = verdicts(snap)
    if verdict_lines:
        lines.append(f"**Verdicts** (paired bootstrap by {unit[:-1]}, 95%; the first checkpoint is "
                     f"the baseline):")
        lines += [f"- {v}" for v in verdict_lines]
    return "\n".join(lines)


BLEU_TOKENS = ("auto", "gpt2", "words")


def scores(names, decode: dict, n=500, seed=0, bleu_tokens="auto", store=None, data_dir=None,
           per_checkpoint: dict | None = None):
    """Live scores of the chosen checkpoints on one seeded test subset, `decode` the decoder by
    name ({"decoder": "random", "temperature": 1.0}), `per_checkpoint` a checkpoint's own
    settings over it ({"scratch": {"decoder": "greedy"}}): yields (rows, summary, the scores'
    record) at least every POLL_S, the summary saying which captions are under way (before the
    first figures: no rows, no record), and last the whole scores. Closed early, scoring stops."""
    names = names_list(names, "checkpoints to evaluate", store=store)
    n = whole(n, "subset size", 1, 5000)
    seed = whole(seed, "seed", 0, SEED_MAX)
    cfgs = dict(zip(names, decoders_of(names, decode, per_checkpoint, seed)))
    if bleu_tokens not in BLEU_TOKENS:
        raise ConfigError(f"bleu_tokens must be 'auto', 'gpt2' or 'words', got {bleu_tokens!r}"[:200])
    shared = decode_of(decode, seed)
    models = {name: LOADED.get(name, store) for name in names}
    if not bleu_skipped(models, data_dir=data_dir):         # nothing generated: no token-steps
        within_budget("this evaluation", n, list(cfgs.values()),
                      "a smaller subset, fewer checkpoints or beams")
    first, chunk = chunks(n)

    def score(work: Work):
        for snap in evaluate_live(models, n, shared, bleu_tokens=bleu_tokens, data_dir=data_dir,
                                  chunk=chunk, first=first, own=cfgs, abort=work.stop_asked):
            work.say(snap)
        return work.said
    unit = unit_of(names, store)
    last = yield from streamed(score, lambda snap: shown(snap, under_way(snap, n, chunk, first, unit)))
    yield shown(last)


UNDER_WAY = "*Scoring "        # how the summary's line of the rows under way begins


def under_way(snap: dict | None, n: int, chunk: int, first: int, unit: str = "texts") -> str:
    """The line saying which rows (captions, or texts) are being scored now."""
    done = snap["done"] if snap else 0
    end = next((e for s, e in chunk_bounds(n, chunk, first) if s == done), n)
    return f"{UNDER_WAY}{unit} {done + 1} to {end} of {n} of each checkpoint …*"


def shown(snap: dict | None, doing: str = "") -> tuple:
    """(rows, summary, record) of a snapshot, the summary ending with `doing`."""
    if snap is None:
        return [], doing, None
    rows = table(snap)
    return rows, provenance_md(snap) + (f"\n\n{doing}" if doing else ""), {
        "headers": COLUMNS, "rows": rows, "verdicts": verdicts(snap),
        "provenance": snap["provenance"], "done": snap["done"], "snapshot": snap}


def run(names, decoder, *rest, store=None, data_dir=None):
    """The page's form: rest is the decoder settings' fields (DecodeConfig.setting_names()), then
    n, seed and bleu_tokens; scored as scores() scores them."""
    k = len(DecodeConfig.setting_names())
    values, (n, seed, bleu_tokens) = rest[:k], rest[k:]
    yield from scores(names, form_decode(decoder, values), n, seed, bleu_tokens, store, data_dir)


FIGURES = ("perplexity", "word_perplexity", "bits_per_byte", "forward_bleu", "backward_bleu", "harmonic_bleu")


def numeric_table(snap: dict) -> tuple[list[str], list[list]]:
    """The scores as numbers, one a cell: each figure with its interval's low and high columns
    (what a spreadsheet or pandas reads; the page's cells join them as text)."""
    headers = ["checkpoint", "n", "backward_n"] + [f"{f}{end}" for f in FIGURES
                                                   for end in ("", "_low", "_high")]
    hidden = {"perplexity"} if snap["provenance"]["perplexity_shown"] == "per word" else set()
    rows = [[name, r["n"], r.get("backward_n")] + [None if f in hidden or f not in r else v for f in FIGURES
                                                for v in (r.get(f), *r.get(f"{f}_ci", (None, None)))]
            for name, r in snap["models"].items()]      # (per-sentence perplexity: not across tokenizers)
    return headers, rows


def score_files(scores, store=None):
    """The last scores as CSV and JSON, a number per cell (the JSON also holds the verdicts, the
    raw figures and provenance), and as a report to read or share (HTML, no network)."""
    if not scores:
        return None
    about = {"verdicts": scores["verdicts"], "provenance": scores["provenance"],
             "figures": scores["snapshot"]["models"], "differences": scores["snapshot"]["differences"]}
    headers, rows = numeric_table(scores["snapshot"])
    stem = "-vs-".join(scores["provenance"]["checkpoints"])
    shared = {k: Path(v).name if k == "texts" and isinstance(v, str) else v    # no server folders
              for k, v in scores["provenance"].items()}
    document = report.evaluation(COLUMNS, table(scores["snapshot"]), scores["verdicts"], shared)
    return exports.write_table(headers, rows, "scores-" + stem, store, about) + \
        [exports.write_html(document, "evaluation-" + stem, store)]


STOPPED = "**Stopped before the end**: the figures are of what was scored before the stop."


def stopped_summary(said):
    """The summary once scoring ended: a line of rows still under way says it stopped."""
    if not isinstance(said, str) or UNDER_WAY not in said:
        return gr.skip()
    return said.split(UNDER_WAY)[0] + STOPPED


def wire(button, stop, inputs, shown: list, ctx: Context, api_name: str, form=run) -> gr.State:
    """Scores stream into `shown` (table, notes); at the end the CSV/JSON downloads appear.
    stop: the Stop button beside `button`; form: reads `inputs` into scores (the Evaluate tab's
    `run`, or Compare's). Returns the state holding the last scores."""
    last = gr.State(None)
    files = gr.File(label="download the scores (CSV, JSON) and the report (HTML)", file_count="multiple", interactive=False,
                    elem_id=f"{api_name}-files", visible=False)     # shown once there are scores

    def downloads(scores):
        paths = score_files(scores, ctx.store)
        return gr.update(value=paths, visible=bool(paths))
    # a new evaluation hides the last one's downloads until its own scores are in
    button.click(lambda: gr.update(visible=False), None, files, queue=False, api_visibility="private")
    score = friendly(lambda *a: (yield from form(*a, store=ctx.store, data_dir=ctx.data_dir)))
    scoring = stoppable(button, stop, lambda: button.click(score, inputs, shown + [last],
                                                           api_visibility="private"),
                        shown[1], [shown[1]], lambda said: [stopped_summary(said)])
    scoring.success(friendly(downloads), last, files, api_visibility="private")

    def scores_api(checkpoints: list[str], decode: dict, n: int = 500, seed: int = 0,
                   bleu_tokens: str = "auto", per_checkpoint: dict | None = None) -> dict:
        """Perplexity and BLEU with 95% intervals on a seeded test subset, streamed as samples
        accumulate. decode: the decoder by name, e.g. {"decoder": "random", "temperature": 1.0};
        per_checkpoint: a checkpoint's own decoder settings over it. Each update (at least every
        half second): {"headers", "rows", "summary", "verdicts", "provenance", "done"}; before
        the first figures no rows, provenance None and done 0."""
        for rows, summary, record in scores(checkpoints, decode, n, seed, bleu_tokens,
                                            ctx.store, ctx.data_dir, per_checkpoint):
            yield {"headers": COLUMNS, "rows": rows, "summary": summary,
                   "verdicts": record["verdicts"] if record else [],
                   "provenance": record["provenance"] if record else None,
                   "done": record["done"] if record else 0}
    api(scores_api, api_name, returns="scores, streamed")
    return last


def answers(task: str, names, split, store=None):
    """A task's answers view (its plugin's `answers_view`): each checkpoint's accuracy, a note,
    every question's answers, and the downloads."""
    view = tasks.get(task).answers_view
    if not names and not any(offers(checkpoint_meta(n, store), task) for n in checkpoints.names(store)):
        raise ConfigError(view.NONE_YET)
    names = names_list(names, view.LABEL, store=store)
    result = view.answer(names, split, store)
    ans = result["answers"]
    files = exports.write_table(ans["headers"], ans["rows"], f"{task}-{split}-" + "-vs-".join(names),
                                store, result["record"])
    return (gr.update(value=result["rows"], visible=bool(result["rows"])), result["said"],
            gr.update(value={"headers": ans["headers"], "data": ans["rows"]}, visible=True),
            gr.update(value=files, visible=True))


def _answers_section(ctx: Context, task: str):
    """The answers view of a task that offers one: its checkpoints answer its questions."""
    view = tasks.get(task).answers_view
    gr.Markdown(view.ABOUT)
    with gr.Row():
        names = checkpoint_dropdown(ctx, view.LABEL, multiselect=True, task=task, fill="task",
                                    elem_id=f"{task}-checkpoints", scale=3)
        split = Radio(list(view.SPLITS), value=view.SPLITS[0], label="questions",
                      info=view.SPLITS_INFO, elem_id=f"{task}-split")
    go = gr.Button("Answer the questions", elem_id=f"{task}-go")
    acc = gr.Dataframe(headers=view.COLUMNS, label="accuracy", elem_id=f"{task}-table", visible=False)
    said = gr.Markdown(elem_id=f"{task}-said", label="note", show_label=False)
    table = gr.Dataframe(label="every question: the answer expected and each checkpoint's",
                         elem_id=f"{task}-answers", max_height=360, wrap=True, visible=False)
    files = gr.File(label="download the answers (CSV, JSON)", file_count="multiple",
                    interactive=False, elem_id=f"{task}-files", visible=False)

    def accuracy(checkpoints: list, split: str):
        """The checkpoints answer every question of the split: each one's accuracy with its 95%
        interval (beside the task's baseline), a note, every question's answers, the downloads."""
        return answers(task, checkpoints, split, ctx.store)
    clicked(go, accuracy, [names, split], [acc, said, table, files], f"{task}_accuracy", note=1)


EXPOSURE_COLUMNS = ["own tokens m", "captions", "loss after the gold prefix",
                    "loss after its own prefix", "gap [95%]"]


def exposure(name, n, store=None, data_dir=None):
    """A captions checkpoint's exposure bias on a seeded subset of dev captions."""
    name = names_list(name, "a captions checkpoint", limit=1, store=store)[0]
    n = whole(n, "dev captions", 1, 5000)
    ck = LOADED.get(name, store)
    tasks.check_view(ck, "generate", "exposure bias of generated captions")
    rows, used = eb.on_split(ck, "dev", n, 0, data_dir)
    shown = [[r["prefix"], r["captions"], f"{r['teacher_forced']:.4f}", f"{r['own_prefix']:.4f}",
              f"{r['gap']:+.4f} [{r['gap_ci'][0]:+.4f}, {r['gap_ci'][1]:+.4f}]"] for r in rows]
    return gr.update(value=shown, visible=True), (
        f"**{name}** on {used} dev captions (seed 0): the per-token loss of each caption's "
        f"gold continuation after its first m gold tokens, and after m tokens {name} sampled "
        f"itself. The gap is what writing after its own history costs the model; scheduled "
        f"sampling (Train form) is meant to close it.")


def _exposure_section(ctx: Context):
    gr.Markdown("### Exposure bias (captions models)")
    with gr.Row():
        name = checkpoint_dropdown(ctx, "checkpoint", task="generate", elem_id="eb-checkpoint", scale=3)
        n = Radio([100, 500, 1000], value=500, label="dev captions", elem_id="eb-n")
    go = gr.Button("Measure exposure bias", elem_id="eb-go")
    table = gr.Dataframe(headers=EXPOSURE_COLUMNS, label="exposure bias", elem_id="eb-table",
                         visible=False)
    said = gr.Markdown(elem_id="eb-said", label="note", show_label=False)

    def exposure_bias(checkpoint: str, n: int):
        """A captions checkpoint's exposure bias on n seeded dev captions: the loss after the
        gold prefix against after its own, per prefix length, as a table and a note."""
        return exposure(checkpoint, n, ctx.store, ctx.data_dir)
    clicked(go, exposure_bias, [name, n], [table, said], "exposure_bias", note=1)


def build(ctx: Context):
    ctx.empty_note("Use *Getting started* above, or import or train a checkpoint; then evaluate it here.")
    gr.Markdown("Perplexity and BLEU-4 on a seeded subset of the test split, updating as samples "
                "accumulate. Every model is scored on the same subset with the same seeds.")
    names = checkpoint_dropdown(ctx, "checkpoints", multiselect=True, task="generate",
                                elem_id="evaluate-checkpoints")
    dec = decoder_inputs(DECODE_TO_SCORE, elem_id="evaluate-decoder")
    with gr.Row():
        n = Radio([100, 500, 1000, 5000], value=500, label="subset size", elem_id="evaluate-n")
        seed = Number(0, label="seed", step=1)
        bleu_tokens = Radio(["auto", "gpt2", "words"], value="auto", label="BLEU tokens",
                               info="auto: GPT-2 tokens when every model uses GPT-2 BPE, words otherwise")
    with gr.Row():
        go = gr.Button("Evaluate", variant="primary", elem_id="evaluate-go")
        stop = stop_button("evaluate-stop")
    out = gr.Dataframe(headers=COLUMNS, label="results (live): each value with its 95% interval",
                       elem_id="evaluate-table", wrap=True, column_widths=WIDTHS)
    prov = gr.Markdown(elem_id="evaluate-provenance")
    wire(go, stop, [names, *dec.components(), n, seed, bleu_tokens], [out, prov], ctx, "evaluate")
    _exposure_section(ctx)
    for task in tasks.offering("answers"):
        _answers_section(ctx, task)
