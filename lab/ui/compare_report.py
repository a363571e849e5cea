"""The Compare tab's report: the last comparison as one self-contained HTML file (its captions,
settings, provenance, scores of the same checkpoints, each checkpoint's attention and logit lens
of one row)."""
from __future__ import annotations

from lab.config import ConfigError, DecodeConfig
from lab.evaluation import attention_maps, report
from lab.inside import lens
from lab.modeling.generate import GenerationError
from lab.storage import checkpoints, exports
from lab.ui.attention import MAX_TOKENS as MAX_ATTENTION_TOKENS
from lab.ui.common import LOADED, whole


def save(record, scores, row, store=None, inside: dict | None = None) -> str:
    """The last comparison as one self-contained HTML file; scores only when they are of the same
    checkpoints; Inside the model's last results (`inside`) only those of compared checkpoints."""
    if not isinstance(record, dict):        # none yet, or one under way (RUNNING)
        raise ConfigError("generate captions side by side first; the report holds that comparison")
    names = list(record["captions"])
    k = whole(row, "row", 1, record["n"]) - 1
    views = []
    for name in names:
        ck = LOADED.get(name, store)
        caption = record["captions"][name][k]
        try:
            cap = attention_maps.capture(ck.model, ck.tokenizer, caption, max_tokens=MAX_ATTENTION_TOKENS)
        except GenerationError as e:
            raise ConfigError(f"{name}, row {k + 1}: {e}; choose a shorter row or prefix") from None
        doc = attention_maps.bertviz_html(cap, "head", REPORT_ASSETS, title=name)
        views.append((name, f"row {k + 1}: {caption}", report.self_contained(doc, REPORT_ASSETS),
                      attention_maps.view_height(cap, "head")))
    same = bool(scores) and scores["provenance"]["checkpoints"] == names
    settings = {"seed": record["seed"], "prefix": record["prefix"] or "(none)",
                **({"prompts": f"the first {record['held_out']} words of held-out texts"}
                   if record.get("held_out") else {}),
                f"{record.get('unit') or 'rows'} per checkpoint": record["n"],
                **{f"decoder of {n}": DecodeConfig.from_dict(d).label()
                   for n, d in record["decoders"].items()}}
    lenses, left_out = _lenses(names, record, k, store)
    if not same:
        left_out.insert(0, _no_scores(scores, names))
    document = report.comparison(record["html"], settings, {n: _shareable(checkpoints.info(n, store))
                                                            for n in names},
                                 scores if same else None, views, lenses,
                                 _of_these(inside or {}, names), left_out)
    return exports.write_html(document, "comparison-" + "-vs-".join(names), store)


def _no_scores(scores, names: list[str]) -> str:
    """Why the report has no 'Which is better?' scores, and how to get them in."""
    if scores:
        other = " vs ".join(scores["provenance"]["checkpoints"])
        return (f"Which is better? scores: the last ones are of {other}, not of these checkpoints; "
                f"press Which is better? in Compare, then save the report again.")
    return ("Which is better? scores: none were computed for these checkpoints since the captions "
            "were made; press Which is better? in Compare, then save the report again.")


def _lenses(names: list[str], record: dict, k: int, store) -> tuple[list[dict], list[str]]:
    """Each checkpoint's logit lens of its own row k, and why any is left out (a family without
    named points: inside.md says why; a row the tokenizer cannot read)."""
    out, left_out = [], []
    for name in names:
        ck = LOADED.get(name, store)
        absent = getattr(ck.model, "points_absent", None)
        if absent:
            left_out.append(f"the logit lens of {name}: its model family names no points to read "
                            f"the residual stream at")
            continue
        try:
            out.append({"checkpoint": name,
                        **lens.logit_lens(ck.model, ck.tokenizer, record["captions"][name][k], top=3)})
        except (ConfigError, GenerationError) as e:
            left_out.append(f"the logit lens of {name}, row {k + 1}: {e}")
    return out, left_out


def _of_these(inside: dict, names: list[str]) -> dict:
    """Each compared checkpoint's last results in Inside the model ({kind: {checkpoint: result}}),
    as {kind: [result, in the comparison's order]}."""
    out = {kind: [by_name[n] for n in names if n in by_name] for kind, by_name in inside.items()}
    return {kind: results for kind, results in out.items() if results}


def _shareable(info: dict) -> dict:
    """A checkpoint's details without the server's folders (the report is for sharing)."""
    return {k: v for k, v in info.items() if k not in ("directory", "run_dir", "data_dir")}


REPORT_ASSETS = "/lab-report-assets"     # a placeholder the report replaces by the scripts themselves
