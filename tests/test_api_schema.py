"""The API's schema tells the truth and names everything: every endpoint's parameters are named
for what they are, it says what it does, and what it returns has labels; what the store holds
(checkpoints, jobs, datasets, sweeps) is never frozen into the schema when the app starts."""
import re

import pytest
import torch

from lab.modeling.model import build
from lab.storage import checkpoints
from lab.ui import build_app
from plugins.tasks.text import corpora
from tests.conftest import tiny_config

UNNAMED = re.compile(r"^(param_\d+|value_\d+|parameter_\d+|\d+(st|nd|rd|th)|[a-z])$")


def _schema(store) -> dict:
    return build_app(store=str(store)).get_api_info()["named_endpoints"]


@pytest.fixture(scope="module")
def empty(tmp_path_factory) -> dict:
    """The schema of the app on an empty store."""
    return _schema(tmp_path_factory.mktemp("empty"))


def _fill(store, tmp_path) -> None:
    """A checkpoint, a dataset, a sweep and the job it queues."""
    from lab import sweeps
    from lab.inputs.tokenizers import CharTokenizer
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config()).eval(), CharTokenizer.from_text("a dog on a couch ."), "kept",
                     store, provenance={"source": "scratch"})
    corpus = tmp_path / "mine.txt"
    corpus.write_text("a first text\na second text\na third one\n", encoding="utf-8")
    corpora.import_source(corpus, "mine", "", 0.34, store=store)
    sweeps.start({"name": "scored", "checkpoints": ["kept"],
                  "score": {"n": 5, "split": "test", "decoders": ["greedy"]}}, store)


def test_every_endpoint_names_its_values_and_says_what_it_does(empty):
    unnamed = []
    for name, endpoint in empty.items():
        if not endpoint["description"].strip():
            unnamed.append(f"{name}: no description")
        for p in endpoint["parameters"]:
            if UNNAMED.match(p["parameter_name"]) and p["parameter_name"] != "n":
                unnamed.append(f"{name}: parameter {p['parameter_name']}")
        for r in endpoint["returns"]:
            if UNNAMED.match(r["label"] or ""):
                unnamed.append(f"{name}: returns {r['label']}")
    assert not unnamed, "\n".join(unnamed)


def test_the_schema_is_the_same_whatever_the_store_holds(empty, store, tmp_path):
    _fill(store, tmp_path)
    filled = _schema(store)
    assert set(empty) == set(filled)
    differ = [name for name in empty if empty[name] != filled[name]]
    assert not differ, {name: (empty[name], filled[name]) for name in differ[:2]}
