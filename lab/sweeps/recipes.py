"""Recipes: the sweep definitions of experiments/recipes/*.json, each with its budgets (`cpu`,
`full`), read as a sweep's definition at one budget.
"""
from __future__ import annotations

import json
from pathlib import Path

from lab.config import ConfigError

RECIPES_DIR = Path(__file__).resolve().parents[2] / "experiments" / "recipes"


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.json"))


def recipe(name: str, budget: str = "cpu") -> dict:
    """A recipe's sweep definition at a budget (without the sweep's name)."""
    if name not in recipe_names():
        raise ConfigError(f"unknown recipe {name!r}; the recipes are: {', '.join(recipe_names())}")
    doc = json.loads((RECIPES_DIR / f"{name}.json").read_text(encoding="utf-8"))
    budgets = doc.pop("budgets", {})
    if budget not in budgets:
        raise ConfigError(f"recipe {name!r} has the budgets {', '.join(budgets)}, not {budget!r}")
    doc.pop("seed_table", None)
    over = dict(budgets[budget])
    doc["budget"] = over.pop("set", [])
    doc.pop("note", None), over.pop("note", None)
    doc["score"] = {**doc.get("score", {}), **over.pop("score", {})}
    doc.update(over)
    doc["recipe"] = f"{name} ({budget})"
    return doc


def recipe_info(name: str) -> dict:
    if name not in recipe_names():
        raise ConfigError(f"unknown recipe {name!r}; the recipes are: {', '.join(recipe_names())}")
    return json.loads((RECIPES_DIR / f"{name}.json").read_text(encoding="utf-8"))
