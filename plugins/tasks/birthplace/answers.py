"""The birth-place task's answers view, which the Evaluate tab shows for every task offering
"answers" (lab/inputs/tasks.py): checkpoints answer the same questions beside the London baseline,
with their accuracy and paired differences."""
from lab.errors import ConfigError
from plugins.tasks.birthplace import core as bp

ABOUT = ("### Birth places (the minGPT task)\nTrain a birth-place model in the Train tab: preset "
         "*birthplace-vanilla* (or *birthplace-perceiver*) pretrains on wiki.txt, then "
         "*birthplace-finetune* with that checkpoint as the parent teaches it the questions. "
         "Checkpoints chosen here answer the same questions, beside the London baseline.")
LABEL = "birth-place checkpoints"
SPLITS = ("dev", "test")
SPLITS_INFO = "test has no places: answers only"
COLUMNS = ["checkpoint", "correct", "accuracy [95%]", "difference vs the first [95%]"]
NONE_YET = ("the store has no birth-place checkpoints yet: in the Train tab, pretrain one with the "
            "birthplace-vanilla preset, then fine-tune it with birthplace-finetune (or run "
            "`python -m lab birthplace pretrain` and `finetune`)")


def _rows(result: dict) -> list[list]:
    rows = []
    for r in result["rows"]:
        lo, hi = r["accuracy_ci"]
        diff = (f"{100 * r['diff']:+.1f} points [{100 * r['diff_ci'][0]:+.1f}, "
                f"{100 * r['diff_ci'][1]:+.1f}]") if "diff" in r else "(baseline of the differences)"
        rows.append([r["checkpoint"], f"{r['correct']} / {r['total']}",
                     f"{100 * r['accuracy']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]", diff])
    return rows


def answer(names: list[str], split: str, store=None) -> dict:
    """{"rows": the accuracy table (COLUMNS), "answers": {"headers", "rows"} every question with
    each answer, "said": a note on how they were scored, "record": the figures as data}."""
    if split not in SPLITS:
        raise ConfigError(f"questions: 'dev' or 'test', got {split!r}"[:200])
    result = bp.compare(names, split, store)
    rows = _rows(result)
    said = (f"{len(result['answers']['rows'])} {split} questions answered greedily (up to the "
            f"next {bp.MASK}) by each checkpoint; exact match with the place. Intervals: Wilson 95% "
            f"for accuracy, a paired bootstrap over questions (1,000 resamples) for differences "
            f"against **{names[0]}**." if rows else
            f"The {split} split has no places: the answers are below and in the downloads.")
    return {"rows": rows, "answers": result["answers"], "said": said,
            "record": {"accuracy": result["rows"]}}
