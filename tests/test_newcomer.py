"""The newcomer's whole path, timed: from an empty store to a scratch model and a fine-tuned SmolLM2
side by side, through the getting-started panel only, in Chromium. It trains for minutes, so it is
not part of `make test`: `make newcomer` runs it and prints the time (docs/results.md's figure)."""
import time

import pytest

from tests.test_browser import CHROMIUM
from tests.test_browser_from_empty import empty_server  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.newcomer,
              pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason="no chromium")]


def test_a_newcomer_compares_scratch_and_finetuned_smollm2_within_minutes(blank_page, empty_server):
    from playwright.sync_api import expect
    url, store = empty_server
    page = blank_page
    page.goto(url)
    t0 = time.time()
    page.locator("#start-all").click()
    expect(page.locator("#start-message")).to_contain_text("Queued job 2", timeout=180_000)
    marks = {"queued": time.time() - t0}
    # the step's done mark (its progress line says "... dev batches done" while it evaluates)
    expect(page.locator("#start-status-2")).to_contain_text("✓ done", timeout=1200_000)
    marks["scratch done"] = time.time() - t0
    expect(page.locator("#start-status-3")).to_contain_text("✓ done", timeout=1200_000)
    marks["fine-tune done"] = time.time() - t0
    page.locator("#start-step-4").click()
    table = page.locator("#compare-out table.lab-compare")
    expect(table).to_contain_text("quick-scratch", timeout=180_000)
    expect(table).to_contain_text("smollm2-captions")
    marks["side by side"] = time.time() - t0
    page.screenshot(path=str(store / "newcomer-compare.png"), full_page=True)
    print("\nnewcomer path (s): " + ", ".join(f"{k} {v:.0f}" for k, v in marks.items()))
    assert table.locator("tbody tr").count() == 8
