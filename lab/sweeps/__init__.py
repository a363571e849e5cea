"""Sweeps: a named set of training runs over a grid of config keys times seeds, under one budget.

Every run is a job in the ledger (so liveness, one writer per name and exact resume hold for each)
and is scored the same way when its training ends, inside the same job: perplexity of a seeded
subset of a split, and forward / backward / harmonic BLEU-4 of the captions each chosen decoder
writes for it. The per-caption figures are kept, so the table can give every figure a bootstrap
interval and every row a paired difference against a baseline row (same captions, same seeds).

    STORE/.lab/sweeps/NAME/RUN.json    what scoring RUN found (written whole, by its job alone)

A sweep's definition and its runs live in the ledger (tables `sweeps` and `sweep_runs`); a run's
status is that of the newest job with its name and the sweep's. Recipes (experiments/recipes/*.json)
are sweep definitions with two budgets, `cpu` and `full`.

The package owns, by role: the definition and its checks (spec), the runs of a sweep (plan), its
tables in the job ledger and serving its runs (ledger), the step `score` a run's job runs after
training (scoring, registered with lab.worker.steps when this package is imported), the results
table and its exports (table), recipes (recipes), BLEU between the corpus's splits (splits), and
the figures of a checkpoint that writes text (texts).
May import everything below it (lab.worker and the floors under it); never lab.cli or lab.ui.
What the faces above use is named here. No task plugin imports it: a task whose checkpoints write
text says so (sweep_score = tasks.SCORED_AS_TEXT) and texts scores them.
"""
from lab.sweeps.ledger import (all_ended, check, get, list_sweeps, resume, run_status, start,
                               stop, wait)
from lab.sweeps.plan import Run
from lab.sweeps.recipes import recipe, recipe_info, recipe_names
from lab.modeling.generate import kv_bytes_per_token
from lab.sweeps.scoring import read_results, results_path, summary_line
from lab.sweeps.texts import best_decoder
from lab.sweeps.spec import (DEFAULT_DECODER, MAX_SCORE_N, Score, SweepSpec, check_sweep_name,
                             decoder_label, describe_run, parse_grid, parse_seeds, value_text)
from lab.sweeps.splits import split_bleu
from lab.sweeps.table import budget_text, curves, runs_text, display, export, how_text, markdown, table
from lab.sweeps.texts import score_texts

__all__ = ["DEFAULT_DECODER", "MAX_SCORE_N", "Run", "Score", "SweepSpec", "all_ended",
           "best_decoder", "budget_text", "check", "check_sweep_name", "curves", "decoder_label",
           "describe_run", "display", "export", "get", "how_text", "kv_bytes_per_token",
           "list_sweeps", "markdown", "parse_grid", "parse_seeds", "read_results", "recipe",
           "recipe_info", "recipe_names", "results_path", "resume", "run_status", "runs_text", "score_texts", "split_bleu",
           "start", "stop", "summary_line", "table", "value_text", "wait"]
