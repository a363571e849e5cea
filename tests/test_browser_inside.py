"""The Inside-the-model tab's lens, ablation and patching views in Chromium (network blocked), on
a caption model trained in the fixture and a second of another family and tokenizer: the lens of
two side by side, a set of heads ablated with its verdict and captions, every head scanned with
progress and a Stop, patching's two maps (and in Compare's report), and one-line refusals. Screenshots go to
LAB_SCREENSHOTS (if set) as inside-*.png."""
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from lab.config import TrainConfig
from lab.modeling.model import build
from lab.storage import checkpoints
from lab.training import runs
from tests.conftest import serving, tiny_config
from tests.test_browser import CHROMIUM, _shot, _tab, page  # noqa: F401 (fixtures)
from tests.test_browser_attention import _choose

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make test installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory, corpus_dir):
    """words: gpt2 family, the training captions' words; bpe: llama family, GPT-2 BPE;
    words-deep: words' vocabulary in 8 blocks of 4 heads of width 64, untrained (a scan of it
    lasts long enough to stop after its first batch of texts: at width 32 a head, one ran its
    whole second batch between two looks of the page; named to sort after the two, which
    Compare then opens on)."""
    store = tmp_path_factory.mktemp("inside-store")
    import os
    old = os.environ.get("LAB_STORE")
    os.environ["LAB_STORE"] = str(store)
    try:
        cfg = TrainConfig(epochs=1, lr=2e-3, max_train=1500, max_dev=60)
        list(runs.train("words", tiny_config(n_positions=48), cfg.replace(tokenizer="words")))
        # GPT-2's 50,257-token output layer is most of a step: 320 captions (10 steps) make the
        # trained BPE model the lens and the scans compare with, in a fifth of 1,500's CPU
        list(runs.train("bpe", tiny_config(n_positions=48, model="llama", vocab_size=50257),
                        cfg.replace(max_train=320)))
        tok = checkpoints.load("words", store).tokenizer
        checkpoints.save(build(tiny_config(n_positions=48, n_layer=8, n_embd=256,
                                           vocab_size=tok.vocab_size)),
                         tok, "words-deep", store, provenance={"source": "scratch"})
    finally:
        os.environ["LAB_STORE"] = old or ""
    with serving(store) as url:
        yield url, store


def _sub(page, name):
    _tab(page, "Inside the model")
    page.get_by_role("tab", name=name).click()


def test_the_lens_of_two_checkpoints_side_by_side(page, server):
    _sub(page, "Logit lens")
    _choose(page, "lens-checkpoint", "words")
    _choose(page, "lens-other", "bpe")
    page.locator("#lens-go").click()
    for elem in ("lens-figure", "lens-other-figure"):
        expect(page.locator(f"#{elem} .js-plotly-plot")).to_contain_text("Logit lens of", timeout=60_000)
    expect(page.locator("#lens-note")).to_contain_text("next tokens ranked first by some layer's lens")
    expect(page.locator("#lens-figure .js-plotly-plot")).to_contain_text("python -m lab lens")
    expect(page.locator("#lens-figure .js-plotly-plot")).to_contain_text("block 2")
    expect(page.locator("#lens-files")).to_contain_text(".csv")
    _shot(page, "inside-lens")
    page.locator("#lens-text textarea, #lens-text input").first.fill("   ")
    page.locator("#lens-go").click()
    expect(page.locator("#lens-note")).to_contain_text("type a text to read through the lens", timeout=30_000)
    expect(page.locator("#lens-figure")).to_be_hidden()              # the last lens went with it
    assert page.left_machine == [], f"requests tried to leave the machine: {page.left_machine}"


def test_heads_ablated_then_every_head_scanned_with_a_stop(page, server):
    _sub(page, "Head ablation")
    _choose(page, "ablate-checkpoint", "words")
    page.locator("#ablate-heads textarea, #ablate-heads input").first.fill("1.1,2.3")
    page.locator("#ablate-go").click()
    note = page.locator("#ablate-note")
    expect(note).to_contain_text("with heads 1.1, 2.3 zero-ablated", timeout=60_000)
    expect(note).to_contain_text("paired 95% bootstrap")
    expect(page.locator("#ablate-captions")).to_contain_text("heads ablated (greedy)")
    _shot(page, "inside-ablate")

    _choose(page, "ablate-checkpoint", "words-deep")       # the limit for its heads beside the field
    expect(page.locator("#ablate-n")).to_contain_text("each head in turn (32 heads here): at most 312")
    page.locator("#ablate-n input").fill("300")       # 32 heads x 300 texts: long enough to stop
    page.locator("#ablate-scan-go").click()
    expect(page.locator("#ablate-stop")).to_be_visible(timeout=10_000)
    running = note.locator(".lab-progress-text")
    expect(running).to_contain_text(re.compile(r"texts (?!1-)\d+-\d+"), timeout=60_000)  # a batch scored
    expect(running).to_contain_text(re.compile(r"words-deep: \d+% of 32 heads, each alone on every "
                                               r"text .* about \dm\d\ds left"))
    _shot(page, "inside-scan-running")
    page.locator("#ablate-stop").click()                  # the map of the texts scored by then
    expect(note).to_contain_text(re.compile(r"Stopped: words-deep's map of the \d+ texts scored before "
                                            r"the Stop"), timeout=30_000)
    expect(page.locator("#ablate-figure .js-plotly-plot")).to_contain_text("alone", timeout=10_000)
    expect(page.locator("#ablate-stop")).to_be_hidden()
    _shot(page, "inside-scan-stopped")

    _choose(page, "ablate-checkpoint", "words")
    page.locator("#ablate-n input").fill("60")
    _choose(page, "ablate-other", "bpe")
    page.locator("#ablate-scan-go").click()
    for elem in ("ablate-figure", "ablate-other-figure"):
        expect(page.locator(f"#{elem} .js-plotly-plot")).to_contain_text("alone, 60 test texts",
                                                                          timeout=120_000)
    expect(note).to_contain_text("the heads that matter most")
    expect(note).to_contain_text("Attribution patching's estimate")
    expect(page.locator("#ablate-stop")).to_be_hidden()
    expect(page.locator("#ablate-files")).to_contain_text("ablate-each-words-vs-bpe")
    _shot(page, "inside-scan")

    page.locator("#ablate-n input").fill("9999")                   # refused before it starts:
    page.locator("#ablate-scan-go").click()                         # the Stop button goes too
    expect(note).to_contain_text("texts must be a whole number from 1 to 500", timeout=30_000)
    expect(page.locator("#ablate-stop")).to_be_hidden(timeout=10_000)
    page.locator("#ablate-n input").fill("60")

    page.locator("#ablate-heads textarea, #ablate-heads input").first.fill("7.1")
    page.locator("#ablate-go").click()
    expect(note).to_contain_text("head 7.1 out of range: this model has blocks 1 to 2", timeout=30_000)
    assert page.left_machine == [], f"requests tried to leave the machine: {page.left_machine}"


def test_patching_draws_both_maps_and_refuses_unequal_prompts(page, server):
    _sub(page, "Patching")
    _choose(page, "patch-checkpoint", "words")
    page.locator("#patch-go").click()
    expect(page.locator("#patch-figure .js-plotly-plot")).to_contain_text("each head's output", timeout=60_000)
    expect(page.locator("#patch-note")).to_contain_text("logit difference")
    expect(page.locator("#patch-files")).to_contain_text(".json")
    _shot(page, "inside-patch")
    page.locator("#patch-corrupted textarea, #patch-corrupted input").first.fill("A very tall woman riding")
    page.locator("#patch-go").click()
    expect(page.locator("#patch-note")).to_contain_text("patching needs prompts of equal length in tokens",
                                                        timeout=30_000)
    expect(page.locator("#patch-figure")).to_be_hidden()
    # Compare's report holds the last patching of a compared checkpoint (the refused one left none)
    _tab(page, "Compare")
    page.locator("#compare-go").click()
    page.locator("#compare-files").get_by_text(".csv").first.wait_for(timeout=120_000)
    page.locator("#compare-report").click()
    page.locator("#compare-report-file").get_by_text(".html").first.wait_for(timeout=120_000)
    report = max((server[1] / ".lab" / "exports").glob("comparison-*.html"), key=lambda p: p.stat().st_mtime)
    text = report.read_text(encoding="utf-8")
    assert "<h2>Activation patching</h2>" in text and "<h3>words</h3><p>clean “A man riding a horse on a”" in text
    assert page.left_machine == [], f"requests tried to leave the machine: {page.left_machine}"
