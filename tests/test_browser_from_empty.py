"""The web lab from an empty store, in a real browser (Playwright driving Debian's Chromium): each
test starts an app of its own on a store it fills as the person's first hour would (the
getting-started panel, checkpoints arriving while the page is open, a birth-place model from the
Train form alone). Apart from tests/test_browser.py, whose tests share one app, so the two run on
two workers."""
import os

import pytest
import torch

from lab import presets
from lab.inputs import tokenizers
from lab.modeling.model import build
from lab.storage import checkpoints
from tests.conftest import ROOT, serving, tiny_config
from tests.test_browser import (CHROMIUM, _choose, _shot, _tab,
                                train_from_the_form)

pytestmark = pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(),
                                reason="Debian's chromium is not installed (make test installs it)")


@pytest.fixture(scope="module")
def empty_server(tmp_path_factory):
    """The app on an empty store; the machine's load as the app reads it comes from a file the
    test writes (a module the app imports first replaces the reading), so the panel's load note
    can be watched following it."""
    store, site = tmp_path_factory.mktemp("empty-store"), tmp_path_factory.mktemp("load-site")
    load = site / "load"
    (site / "sitecustomize.py").write_text(
        "import os\nfrom lab.training import estimate\n"
        "def _load():\n"
        "    try:\n        return float(open(os.environ['LAB_TEST_LOAD']).read()), 2\n"
        "    except (OSError, ValueError):\n        return 0.0, 2\n"
        "estimate.load = _load\n")
    with serving(store, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]), LAB_TEST_LOAD=str(load)) as url:
        yield url, store, load


def test_an_empty_lab_guides_the_first_visit(blank_page, empty_server):
    """Every tab says what to do on an empty store; the getting-started panel queues the quick
    scratch model once, shows its progress, and a reload shows the job's own settings."""
    url, store, load = empty_server
    from playwright.sync_api import expect
    from lab.worker import jobs
    page = blank_page
    page.goto(url)
    expect(page.locator("#start")).to_contain_text("New here?", timeout=60_000)
    # the load note follows the machine while the page is open, not only as it loads
    expect(page.locator("#start")).not_to_contain_text("the machine is busy")
    load.write_text("9.0")
    expect(page.locator("#start")).to_contain_text("Now the machine is busy (load 9.0 on 2 cores): "
                                                   "expect longer.", timeout=30_000)
    load.write_text("0.1")
    expect(page.locator("#start")).not_to_contain_text("the machine is busy", timeout=30_000)
    for tab in ("Compare", "Inside the model", "Evaluate", "Train", "Checkpoints"):
        _tab(page, tab)
        expect(page.get_by_text("The store has no checkpoints yet.").locator("visible=true")).to_have_count(1)
    _shot(page, "getting-started")
    page.locator("#start-step-2").click()
    expect(page.locator("#start-message")).to_contain_text("Queued job 1", timeout=60_000)
    expect(page.locator("#start-status-2 .lab-progress")).to_be_visible(timeout=30_000)
    page.locator("#start-step-2").click()
    expect(page.locator("#start-message")).to_contain_text("already making", timeout=60_000)
    page.locator("#start-step-4").click()                          # too early: it says what is missing
    expect(page.get_by_text("not in the store yet").first).to_be_visible(timeout=30_000)
    page.locator("#start-status-2 .lab-progress[data-status='running']").wait_for(timeout=120_000)
    page.reload()
    _tab(page, "Train")
    expect(page.locator("#train-parent-note")).to_contain_text("settings of job 1", timeout=30_000)
    expect(page.locator("#train-name textarea, #train-name input").first).to_have_value("quick-scratch")
    expect(page.locator("#train-preset input")).to_have_value("quick")
    jobs.request_stop(1, "now", store)
    expect(page.locator("#start-status-2")).to_contain_text("Press the button again", timeout=120_000)
    assert len(jobs.list_jobs(store)) == 1


def test_compare_moves_to_the_scratch_model_and_the_fine_tune_as_they_arrive(blank_page, tmp_path):
    """Checkpoints arriving while the page is open (the getting-started order: the import, the
    scratch model, the fine-tune): Compare, still on the lab's pick, ends on the scratch model
    next to the fine-tune, not on the untrained import; a reload opens on the same pair."""
    from playwright.sync_api import expect
    store = tmp_path / "store"
    store.mkdir()
    tok = tokenizers.gpt2()

    def save(name, **provenance):
        torch.manual_seed(len(name))
        checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tok, name, store,
                         provenance=provenance)
    with serving(store) as url:
        page = blank_page
        page.goto(url)
        expect(page.locator("#start")).to_contain_text("New here?", timeout=60_000)
        chosen = page.locator("#compare-checkpoints")
        save("a-import", source="import")
        expect(chosen).to_contain_text("a-import", timeout=30_000)
        save("b-scratch", source="scratch")
        expect(chosen).to_contain_text("b-scratch", timeout=30_000)
        expect(chosen).to_contain_text("a-import")
        save("c-tuned", source="finetune", parent="a-import")
        for _ in range(2):
            expect(chosen).to_contain_text("c-tuned", timeout=30_000)
            expect(chosen).not_to_contain_text("a-import")
            page.locator("#compare-go").click()
            headers = page.locator("#compare-out table.lab-compare thead th")
            expect(headers).to_have_count(3, timeout=60_000)      # the row number, then the two
            assert "b-scratch" in headers.nth(1).inner_text() and "c-tuned" in headers.nth(2).inner_text()
            page.reload()


def test_compare_them_shows_the_captions_and_says_it_is_done(blank_page, tmp_path):
    """The panel's last step, once both checkpoints exist: the Compare tab opens on the scratch
    model and the fine-tune, the page scrolls to their captions, and the step says it is done
    (not "press the button"). Attention opens on a model trained in the lab, not the import."""
    from playwright.sync_api import expect
    from lab.ui import start
    store = tmp_path / "store"
    store.mkdir()
    tok = tokenizers.gpt2()
    for name, source in ((start.SMOLLM2, "import"), (start.SCRATCH, "scratch"),
                         (start.FINETUNE, "finetune")):
        torch.manual_seed(len(name))
        checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tok, name, store,
                         provenance={"source": source})
    with serving(store) as url:
        page = blank_page
        page.goto(url)
        expect(page.locator("#compare-checkpoints")).to_contain_text(start.FINETUNE, timeout=60_000)
        page.locator("#start").get_by_text("Getting started").first.click()     # closed: a full store
        expect(page.locator("#start-status-4")).to_contain_text("ready: press the button", timeout=60_000)
        page.locator("#start-step-4").click()
        headers = page.locator("#compare-out table.lab-compare thead th")
        expect(headers).to_have_count(3, timeout=60_000)
        assert start.SCRATCH in headers.nth(1).inner_text() and start.FINETUNE in headers.nth(2).inner_text()
        expect(page.locator("#compare-out")).to_be_in_viewport()
        expect(page.locator("#start-status-4")).to_contain_text("done", timeout=30_000)
        expect(page.locator("#start-status-4")).not_to_contain_text("press the button")
        _shot(page, "compare-them")
        _tab(page, "Inside the model")
        expect(page.locator("#attention-checkpoint input")).to_have_value(start.SCRATCH)


def test_a_birth_place_model_from_the_browser_alone(blank_page, tmp_path):
    """Pretrain a birth-place model with the birthplace-vanilla preset and fine-tune it with
    birthplace-finetune, both from the Train form (a one-step budget on a model of one narrow
    block), then answer the questions in the Evaluate tab, whose list offers only birth-place
    checkpoints."""
    from playwright.sync_api import expect
    store = tmp_path / "store"
    store.mkdir()
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tokenizers.gpt2(),
                     "captions-model", store, provenance={"source": "scratch"})

    def train(name, preset, parent, items, *model):
        _choose(page, "#train-preset", preset)
        # the preset's own values first (they arrive after the choice shows), then the test's
        epochs = presets.get(preset)[1].epochs
        expect(page.locator("#train-epochs input")).to_have_value(str(epochs), timeout=30_000)
        given = (("epochs", "1"), ("max_train", str(items)), ("max_dev", "20"), *model)
        for field, value in given:
            box = page.locator(f"#train-{field} input")
            box.fill(value)
            box.press("Tab")
        for field, value in given:      # all still as typed when Start is pressed
            expect(page.locator(f"#train-{field} input")).to_have_value(value)
        train_from_the_form(page, store, name, parent)

    with serving(store) as url:
        page = blank_page
        page.goto(url)
        _tab(page, "Train")
        train("bp-pre", "birthplace-vanilla", "", 128, ("n_layer", "1"), ("n_embd", "32"))
        train("bp-tuned", "birthplace-finetune", "bp-pre", 256)
        assert checkpoints.info("bp-tuned", store)["parent"] == "bp-pre"
        pre = checkpoints.info("bp-pre", store)          # what the form said, not the preset's
        assert (pre["train"]["epochs"], pre["train"]["max_train"]) == (1, 128)
        assert (pre["model"]["n_layer"], pre["model"]["n_embd"]) == (1, 32)
        _tab(page, "Evaluate")
        chosen = page.locator("#birthplace-checkpoints")
        expect(chosen).to_contain_text("bp-tuned", timeout=30_000)
        chosen.locator("input").click()
        expect(page.get_by_role("option", name="captions-model")).to_have_count(0)
        page.keyboard.press("Escape")
        page.locator("#birthplace-go").click()
        table = page.locator("#birthplace-table")
        expect(table).to_contain_text("London (baseline)", timeout=180_000)
        expect(table).to_contain_text("bp-tuned")
        _shot(page, "birthplace-from-the-browser")
