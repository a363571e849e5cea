"""A person's own corpus from the browser alone: upload a file written by `datasets`, train a
small model on it from the Train form, fine-tune that model on it, continue a prompt with both
side by side in Compare, and score them in Evaluate on the dataset's held-out texts."""
import random
from pathlib import Path

import pytest

from lab.storage import checkpoints
from tests.conftest import serving
from tests.test_browser import (CHROMIUM, _choose, _shot, _tab,
                                train_from_the_form)

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make test installs it)")
WORDS = "a lighthouse keeper counts gulls over grey water while ferries cross the sound".split()


def test_own_corpus_from_upload_to_compare_and_evaluate(blank_page, tmp_path):
    from datasets import Dataset
    from playwright.sync_api import expect
    rng = random.Random(0)
    body = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))) for _ in range(600)]
    Dataset.from_dict({"id": list(range(600)), "body": body}).to_json(str(tmp_path / "harbour.jsonl"))
    store = tmp_path / "store"
    store.mkdir()

    with serving(store) as url:
        page = blank_page
        page.goto(url)
        _tab(page, "Train")
        page.locator("#data-upload input[type=file]").set_input_files(str(tmp_path / "harbour.jsonl"))
        page.locator("#data-name textarea, #data-name input").first.fill("harbour")
        page.locator("#data-import-upload").click()
        expect(page.locator("#data-message")).to_contain_text("Imported harbour: train 570 texts, dev 30 "
                                                              "texts (text column body)", timeout=60_000)
        expect(page.locator("#data-table")).to_contain_text("harbour.jsonl")
        expect(page.locator("#data-table")).to_contain_text("not yet tokenized")
        _choose(page, "#train-preset", "tiny")
        _choose(page, "#train-task", "text")
        # the dataset imported a moment ago is offered in the list (it follows the store)
        expect(page.locator("#train-task-dataset input")).to_be_visible()
        _choose(page, "#train-task-dataset", "harbour")
        for field, value in (("epochs", "1"), ("max_dev", "20")):
            f = page.locator(f"#train-{field} input")
            f.fill(value)
            f.press("Tab")
        train_from_the_form(page, store, "own-scratch")
        train_from_the_form(page, store, "own-tuned", parent="own-scratch")
        tuned = checkpoints.load("own-tuned", store)
        assert tuned.meta["parent"] == "own-scratch"
        assert tuned.meta["train"]["settings"]["task"]["dataset"] == "harbour"
        # the run tokenized the dataset: the table says so without a reload
        expect(page.locator("#data-table")).not_to_contain_text("not yet tokenized", timeout=20_000)
        _shot(page, "text-trained")

        _tab(page, "Compare")
        chosen = page.locator("#compare-checkpoints")
        expect(chosen).to_contain_text("own-scratch", timeout=30_000)
        expect(chosen).to_contain_text("own-tuned")
        expect(page.locator("#compare-n")).to_contain_text("texts")   # not captions: text models
        _choose(page, "#compare-decoder", "greedy")
        page.get_by_label("prefix (optional)").fill("a lighthouse keeper")
        page.locator("#compare-go").click()
        out = page.locator("#compare-out")
        expect(out.locator("td").filter(has_text="a lighthouse keeper")).to_have_count(16, timeout=120_000)
        page.get_by_label("prefix (optional)").fill("")
        held = page.locator("#compare-held-out input")
        held.fill("3")
        held.press("Tab")
        page.locator("#compare-go").click()
        expect(out.locator("th").filter(has_text="held-out text")).to_have_count(1, timeout=120_000)
        cells = out.locator("tbody tr").first.locator("td")
        start = " ".join(cells.last.inner_text().split()[:3])
        expect(cells.nth(1)).to_contain_text(start)
        expect(cells.nth(2)).to_contain_text(start)
        _shot(page, "text-compare-held-out")
        page.locator("#compare-score").click()
        verdicts = page.locator("#compare-verdicts")
        expect(verdicts).to_contain_text("Verdicts", timeout=180_000)
        expect(verdicts).to_contain_text("of dataset harbour (dataset harbour has no test split: scored on dev)")
        _shot(page, "text-compare")

        _tab(page, "Evaluate")
        _choose(page, "#evaluate-decoder", "greedy")
        page.locator("#evaluate-n").get_by_text("100", exact=True).click()
        page.locator("#evaluate-go").click()
        prov = page.locator("#evaluate-provenance")
        expect(prov).to_contain_text("30 / 30", timeout=120_000)
        expect(prov).to_contain_text("texts scored")
        expect(page.locator("#evaluate-table")).to_contain_text("own-tuned")
        _shot(page, "text-evaluate")
