"""The web lab in a real browser: Playwright driving Debian's Chromium against the app on loopback.

Every request for another machine is recorded and cannot leave (the browser resolves no host but
localhost and 127.0.0.1); the attention views must draw without any. Set LAB_SCREENSHOTS=DIR to
save a screenshot of each tab (the pictures in README.md and docs/)."""
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch

from lab.storage import checkpoints
from lab.inputs import tokenizers
from lab.modeling.model import build
from tests.conftest import CHROMIUM, SERVED, new_page, serving, tiny_config, wait_job

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make test installs it)")
SHOTS = os.environ.get("LAB_SCREENSHOTS")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = tmp_path_factory.mktemp("ui-store")
    tok = tokenizers.gpt2()
    for seed, name in ((0, "scratch-a"), (1, "scratch-b")):
        torch.manual_seed(seed)
        checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tok, name, store,
                         provenance={"source": "scratch"})
    with serving(store) as url:
        yield url, store


@pytest.fixture
def page(browsing, server):
    url, _ = server
    with new_page(browsing) as page:
        page.left_machine = []

        def watch(request):     # seen, not intercepted: routing each of a page's 110 requests
            host = urlparse(request.url).hostname   # through Playwright costs about 0.4 s a load
            if not request.url.startswith(("data:", "blob:", "about:")) and host not in ("127.0.0.1",
                                                                                          "localhost"):
                page.left_machine.append(request.url)
        browsing.on("request", watch)       # the context's: a popup's requests too
        try:
            page.goto(url)
            page.get_by_role("tab", name="Compare").wait_for()
            yield page
        finally:
            browsing.remove_listener("request", watch)


def _tab(page, name):
    page.get_by_role("tab", name=name).click()


def _shot(page, name):
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def test_compare_two_checkpoints_side_by_side(page, server):
    second = _second(page, server[1], "#compare-checkpoints")
    page.locator("#compare-go").click()
    table = page.locator("#compare-out table.lab-compare")
    table.wait_for(timeout=60_000)
    headers = table.locator("thead th").all_inner_texts()
    assert any("scratch-a" in h for h in headers) and any(second in h for h in headers)
    assert table.locator("tbody tr").count() == 8
    assert table.locator("span.tok").count() > 0       # tokens shaded by probability
    _shot(page, "compare")
    assert page.left_machine == []


def test_a_long_comparison_shows_its_progress_and_stops_on_stop(page, server):
    """Beam search over 200 captions a checkpoint streams a progress line, with a Stop button
    beside Generate; Stop ends it, the page says so, and the next comparison runs at once."""
    from playwright.sync_api import expect
    _choose(page, "#compare-decoder", "beam")
    n = page.locator("#compare-n input")
    n.fill("200")
    n.press("Tab")
    page.locator("#compare-go").click()
    out, stop = page.locator("#compare-out"), page.locator("#compare-stop")
    expect(out.locator(".lab-progress-text")).to_contain_text("of 200 captions", timeout=60_000)
    expect(stop).to_be_visible()
    stop.click()
    expect(out).to_contain_text("Stopped", timeout=30_000)
    expect(stop).to_be_hidden()
    n.fill("2")
    n.press("Tab")
    page.locator("#compare-go").click()
    expect(out.locator("table.lab-compare tbody tr")).to_have_count(2, timeout=120_000)
    expect(stop).to_be_hidden(timeout=30_000)


def test_a_decoder_per_checkpoint_lists_the_chosen_ones(page, server):
    """The per-checkpoint decoder table appears with a row for each chosen checkpoint."""
    from playwright.sync_api import expect
    second = _second(page, server[1], "#compare-checkpoints")
    page.get_by_text("a different decoder for each checkpoint").click()
    table = page.locator("#compare-per-model")
    expect(table).to_contain_text("scratch-a", timeout=30_000)
    expect(table).to_contain_text(second)


def test_head_view_draws_with_the_network_blocked(page):
    _tab(page, "Inside the model")
    page.locator("#attention-go").click()
    frame = page.frame_locator("#attention-head-view iframe")
    # bertviz's head view draws one text element per token on each side, with d3, in SVG
    frame.locator("svg text").first.wait_for(timeout=60_000)
    assert frame.locator("svg text").count() >= 2 * 10
    page.get_by_role("tab", name="Layer x head grid").click()
    page.locator("#attention-grid .js-plotly-plot").wait_for(timeout=30_000)
    _shot(page, "attention")
    page.get_by_role("tab", name="Head view").click()
    assert page.left_machine == [], f"requests tried to leave the machine: {page.left_machine}"
    # what a request for another machine meets here: recorded, and never answered
    said = page.evaluate("fetch('http://cdn.example.org/d3.js').then(() => 'answered', () => 'refused')")
    assert said == "refused" and page.left_machine == ["http://cdn.example.org/d3.js"]


def test_an_idle_page_asks_for_no_animation_frames_and_sends_no_events(page, server):
    """Gradio's status-tracker clock asked for a frame 60 times a second on an idle page, always
    (about 180 in 3 s); calmed (lab/ui/first_script.py), a quiet window asks for next to none. The
    page's pulse asks the app a plain question every 2 s and sends an event only when the store
    or a job changed (or every 20 s all the same): a quiet window sends none, and a checkpoint
    written beside the page is offered within seconds. The quietest of three windows counts."""
    page.context.add_init_script("""
        window.__frames = 0;
        const frame = window.requestAnimationFrame.bind(window);
        window.requestAnimationFrame = (callback) => { window.__frames++; return frame(callback); };""")
    asked, events = [], []
    page.on("request", lambda r: asked.append(r.url) if r.url.endswith("/lab/pulse") else
            events.append(r.url) if "/queue/join" in r.url else None)
    page.reload()
    page.get_by_role("tab", name="Compare").wait_for()
    page.wait_for_timeout(2500)                 # the first question, answered by a first event
    frames, sent, questions = [], [], []
    for _ in range(3):
        before = page.evaluate("window.__frames"), len(events), len(asked)
        page.wait_for_timeout(3000)
        frames.append(page.evaluate("window.__frames") - before[0])
        sent.append(len(events) - before[1])
        questions.append(len(asked) - before[2])
    assert min(frames) < 30, frames
    assert min(sent) == 0 and sum(questions) >= 3, (sent, questions)
    torch.manual_seed(2)
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tokenizers.gpt2(),
                     "written-beside", server[1], provenance={"source": "scratch"})
    box = page.locator("#compare-checkpoints input")
    box.click()
    from playwright.sync_api import expect
    expect(page.get_by_role("option", name="written-beside")).to_be_visible(timeout=10_000)
    checkpoints.delete("written-beside", server[1])


def test_bad_form_value_shows_its_message(page, server):
    _tab(page, "Train")
    page.locator("#train-name textarea, #train-name input").first.fill("bad-heads")
    heads = page.locator("#train-n_head input")
    from playwright.sync_api import expect
    expect(heads).to_have_value("4", timeout=30_000)               # the page has loaded its values
    page.wait_for_timeout(1000)                 # the on-load events have settled: none overwrites
    heads.fill("5")
    heads.press("Tab")
    expect(heads).to_have_value("5")
    page.locator("#train-start").click()
    expect(page.locator("#train-message")).to_contain_text("Not queued: n_embd=64 is not divisible "
                                                           "by n_head=5", timeout=60_000)
    from lab.worker import jobs
    assert jobs.list_jobs(server[1]) == []                          # nothing was queued


def _choose(page, field_id, option):
    box = page.locator(f"{field_id} input")
    box.click()
    box.fill(option)
    page.get_by_role("option", name=option, exact=True).click()


def test_a_plugins_settings_show_beside_it_only_while_it_is_chosen(page, server):
    """The sliding window's `window` appears once sliding attention is chosen, and its bounds are
    checked on Start; choosing the llama family fills its parts and shows gqa's kv_groups."""
    from playwright.sync_api import expect
    from lab.worker import jobs
    before = jobs.list_jobs(server[1])
    _tab(page, "Train")
    window, groups = page.locator("#train-attention-window"), page.locator("#train-attention-kv_groups")
    expect(page.locator("#train-attention input")).to_have_value("mha", timeout=30_000)
    expect(window).to_be_hidden()
    _choose(page, "#train-attention", "sliding")
    expect(window).to_be_visible(timeout=30_000)
    expect(window).to_contain_text("tokens each query sees")
    expect(groups).to_be_hidden()
    _refused_on_start(page, "#train-attention-window", "0", "slide",
                      "Not queued: attention.window must be between 1 and 32768, got 0")
    _choose(page, "#train-model", "llama")
    expect(page.locator("#train-norm input")).to_have_value("rmsnorm", timeout=30_000)
    expect(page.locator("#train-attention input")).to_have_value("gqa")
    expect(page.locator("#train-positional input")).to_have_value("rotary")
    expect(page.locator("#train-tie_embeddings input")).to_be_checked()
    expect(groups).to_be_visible()
    expect(page.locator("#train-positional-theta")).to_be_visible()
    expect(window).to_be_hidden()
    _shot(page, "train-plugin-settings")
    assert jobs.list_jobs(server[1]) == before                      # nothing was queued


def _refused_on_start(page, field_id: str, value: str, name: str, said: str) -> None:
    """A setting typed into the Train form, then Start: the form says `said` under it."""
    from playwright.sync_api import expect
    page.locator(f"{field_id} input").fill(value)
    page.locator(f"{field_id} input").press("Tab")
    page.locator("#train-name textarea, #train-name input").first.fill(name)
    page.locator("#train-start").click()
    expect(page.locator("#train-message")).to_contain_text(said, timeout=60_000)


def test_the_captions_tasks_own_settings_show_beside_it_and_are_checked_on_start(page, server):
    """The captions task's settings (scheduled sampling, final_dev, ...) sit beside the task
    while it is chosen, go with another task, and a bad one is refused on Start in one line."""
    from playwright.sync_api import expect
    from lab.worker import jobs
    before = jobs.list_jobs(server[1])
    _tab(page, "Train")
    decay, final = page.locator("#train-task-scheduled_sampling"), page.locator("#train-task-final_dev")
    expect(page.locator("#train-task input")).to_have_value("captions", timeout=30_000)
    expect(decay).to_be_visible()
    expect(final).to_be_visible()
    assert final.bounding_box()["width"] >= 150              # a tick box's label and hint unclipped
    _choose(page, "#train-task", "birthplace")
    expect(decay).to_be_hidden(timeout=30_000)
    _choose(page, "#train-task", "captions")
    expect(decay).to_be_visible(timeout=30_000)
    decay.get_by_text("exponential").click()
    _refused_on_start(page, "#train-task-ss_k", "2", "decay",
                      "Not queued: task.ss_k of the exponential decay is a rate below 1")
    decay.get_by_text("none").click()
    page.locator("#train-task-ss_k input").fill("0")
    page.locator("#train-task-ss_k input").press("Tab")
    assert jobs.list_jobs(server[1]) == before                      # nothing was queued


def _tokenizer_kept(page, parent):
    """A fine-tune's tokenizer field: locked, nothing chosen, naming the parent's tokenizer."""
    from playwright.sync_api import expect
    field = page.locator("#train-tokenizer")
    expect(field).to_contain_text(f"kept from {parent}: its own tokenizer (gpt2", timeout=30_000)
    expect(field.locator("input[type=radio]:checked")).to_have_count(0)
    for radio in field.locator("input[type=radio]").all():
        expect(radio).to_be_disabled()


def test_a_preset_for_a_new_model_clears_the_parent_a_fine_tune_s_keeps_it(page, server):
    """With a parent chosen, a fine-tune's preset keeps it (the model section stays the
    parent's); a preset that trains a new model clears it and gives the model section back."""
    from playwright.sync_api import expect
    _tab(page, "Train")
    _choose(page, "#train-parent", "scratch-a")
    expect(page.locator("#train-parent-note")).to_contain_text("Fine-tuning scratch-a", timeout=30_000)
    _choose(page, "#train-preset", "smollm2-quick")
    expect(page.locator("#train-lr input")).to_have_value("0.0002", timeout=30_000)
    expect(page.locator("#train-parent input")).to_have_value("scratch-a")
    expect(page.locator("#train-n_embd input")).to_be_disabled()
    _choose(page, "#train-preset", "tiny")
    expect(page.locator("#train-parent-note")).to_contain_text(
        "Preset tiny trains a new model, so the parent scratch-a is cleared", timeout=30_000)
    expect(page.locator("#train-parent input")).to_have_value("")
    expect(page.locator("#train-n_embd input")).to_have_value("64")
    expect(page.locator("#train-n_embd input")).to_be_enabled()
    expect(page.locator("#train-tokenizer input[type=radio]:checked")).to_have_count(1)


def test_finetune_job_from_the_form_survives_a_reload_and_stops(page, server):
    url, store = server
    _tab(page, "Train")
    page.locator("#train-name textarea, #train-name input").first.fill("ui-job")
    parent = page.locator("#train-parent input")
    parent.click()
    parent.fill("scratch-a")
    page.get_by_role("option", name="scratch-a").click()      # fine-tune a stored checkpoint
    from playwright.sync_api import expect
    expect(page.locator("#train-parent-note")).to_contain_text("Fine-tuning scratch-a", timeout=30_000)
    expect(page.locator("#train-n_embd input")).to_have_value("32", timeout=30_000)
    expect(page.locator("#train-n_embd input")).to_be_disabled()
    expect(page.locator("#train-n_layer input")).to_have_value("2")
    _tokenizer_kept(page, "scratch-a")
    # a run that cannot end by itself before the Stop below (no early stop either), however slow
    # the machine: only the Stop ends it
    for field, value in (("epochs", "5000"), ("patience", "5000"), ("max_train", "200"),
                         ("max_dev", "50")):
        box = page.locator(f"#train-{field} input")
        box.fill(value)
        box.press("Tab")
    page.locator("#train-start").click()
    page.get_by_text("Queued job").first.wait_for(timeout=30_000)
    # the worker writes the first checkpoint after epoch 1; it becomes visible on the page
    page.get_by_text("Checkpoint ui-job").first.wait_for(timeout=240_000)
    assert "ui-job" in checkpoints.names(store)
    assert checkpoints.info("ui-job", store)["parent"] == "scratch-a"
    page.locator("#train-progress .lab-progress[data-status='running']").wait_for(timeout=30_000)
    _shot(page, "train")
    page.reload()                                                   # closing / reopening the page
    _tab(page, "Train")
    page.locator("#train-progress .lab-progress[data-status='running']").wait_for(timeout=30_000)
    assert "ui-job" in page.locator("#train-job").inner_text() or \
        "ui-job" in page.locator("#train-job input").input_value()
    # the form shows the running job's own settings, not the defaults
    expect(page.locator("#train-parent-note")).to_contain_text("settings of job", timeout=30_000)
    expect(page.locator("#train-name textarea, #train-name input").first).to_have_value("ui-job")
    expect(page.locator("#train-parent input")).to_have_value("scratch-a")
    expect(page.locator("#train-max_train input")).to_have_value("200")
    expect(page.locator("#train-epochs input")).to_have_value("5000")
    _tokenizer_kept(page, "scratch-a")
    page.locator("#train-stop-now").click()
    page.locator("#train-progress .lab-progress[data-status='stopped']").wait_for(timeout=60_000)
    # the status line itself says where the run stopped and how to go on
    expect(page.locator("#train-progress .lab-progress-text")).to_contain_text(
        re.compile(r"stopped (before its first step|at epoch \d+, step \d+\b.*Resume)"), timeout=30_000)


def test_import_smollm2_from_the_checkpoints_tab(page, server):
    """Flow 3 starts in the browser: SmolLM2 with a block selection, imported from the page."""
    _, store = server
    _tab(page, "Checkpoints")
    from playwright.sync_api import expect
    # the section is open with the page (its fields mounted from the start, so nothing resets
    # them after a person typed: lab.ui.common.section); type as a person does, and see it stays
    expect(page.locator("#smollm2-import")).to_be_enabled(timeout=30_000)
    for field, value in (("#smollm2-layers", "1,30"), ("#smollm2-name", "smol-1-30")):
        box = page.locator(f"{field} textarea, {field} input").first
        expect(box).to_be_editable()
        box.click()
        box.fill("")
        box.press_sequentially(value)
    for field, value in (("#smollm2-layers", "1,30"), ("#smollm2-name", "smol-1-30")):
        expect(page.locator(f"{field} textarea, {field} input").first).to_have_value(value)
    page.locator("#smollm2-import").click()
    expect(page.locator("#checkpoints-message")).to_contain_text("Imported smol-1-30", timeout=180_000)
    expect(page.locator("#checkpoints-message")).to_contain_text("writes garbage until it is fine-tuned")
    expect(page.locator("#checkpoints-table")).to_contain_text("smol-1-30", timeout=30_000)
    info = checkpoints.info("smol-1-30", store)
    assert info["layers"] == [1, 30] and info["model"]["model"] == "llama"


def _second(page, store, dropdown):
    """The second checkpoint a caption tab opens on, once the page shows it: scratch-b, or, after
    the fine-tune test wrote ui-job (a fine-tune of scratch-a), ui-job beside scratch-a."""
    from playwright.sync_api import expect
    second = "ui-job" if "ui-job" in checkpoints.names(store) else "scratch-b"
    expect(page.locator(dropdown)).to_contain_text(second, timeout=30_000)
    expect(page.locator(dropdown)).to_contain_text("scratch-a")
    return second


def test_compare_says_which_checkpoint_is_better(page, server):
    _tab(page, "Compare")
    second = _second(page, server[1], "#compare-checkpoints")
    # greedy: random weights give top-p a nucleus as wide as the vocabulary, a full sort each step
    _choose(page, "#compare-decoder", "greedy")
    page.locator("#compare-score").click()
    from playwright.sync_api import expect
    verdicts = page.locator("#compare-verdicts")
    expect(verdicts).to_contain_text("100 / 100", timeout=180_000)
    expect(verdicts).to_contain_text("Verdicts")
    expect(verdicts).to_contain_text("harmonic BLEU")
    expect(page.locator("#compare-scores")).to_contain_text(second)


def test_checkpoints_tab_lists_the_store(page):
    _tab(page, "Checkpoints")
    from playwright.sync_api import expect
    table = page.locator("#checkpoints-table")
    expect(table).to_contain_text("scratch-a", timeout=30_000)
    expect(table).to_contain_text("gpt2")
    page.locator("#checkpoints-download").click()
    expect(page.locator("#checkpoints-files")).to_contain_text(".json", timeout=30_000)
    _shot(page, "checkpoints")


def test_a_pulse_that_never_comes_back_delays_the_page_and_never_freezes_it(browsing, store):
    """The page's first press of the pulse hangs in the app (as a part that never returns would,
    or an answer lost on its way): the page presses again once it has waited STUCK_S, and a
    checkpoint written meanwhile still shows; the hung press is no reason to stop asking."""
    from playwright.sync_api import expect
    from lab.ui.pulse import PATH, STUCK_S
    store.mkdir()
    with serving(store, LAB_FAULTS="sleep@pulse.tick#2=60") as url, new_page(browsing) as page:
        page.goto(url)                                  # the page opening: the first tick
        _tab(page, "Checkpoints")
        page.wait_for_function(f"() => performance.getEntriesByType('resource')"
                               f".some(e => e.name.endsWith('{PATH}'))")      # asked: the press follows
        page.wait_for_timeout(500)
        try:
            checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)), tokenizers.gpt2(),
                             "arrived", store, provenance={"source": "scratch"})
            table = page.locator("#checkpoints-table")
            page.wait_for_timeout((STUCK_S - 8) * 1000)        # held back while the press is out
            assert "arrived" not in table.inner_text()
            expect(table).to_contain_text("arrived", timeout=(STUCK_S + 15) * 1000)
        finally:
            SERVED[url].kill()      # not a stop: a stopping app waits for the hung press's thread


def test_evaluate_streams_results(page, server):
    _tab(page, "Evaluate")
    second = _second(page, server[1], "#evaluate-checkpoints")
    _choose(page, "#evaluate-decoder", "greedy")     # random weights: sampling costs, not the point
    page.locator("#evaluate-n").get_by_text("100", exact=True).click()
    page.locator("#evaluate-go").click()
    page.locator("#evaluate-provenance").get_by_text("100 / 100").wait_for(timeout=120_000)
    from playwright.sync_api import expect
    expect(page.locator("#evaluate-table")).to_contain_text(second)
    expect(page.locator("#evaluate-provenance")).to_contain_text("lower is better")
    expect(page.locator("#evaluate-provenance")).to_contain_text("Verdicts")
    expect(page.locator("#evaluate-provenance")).to_contain_text("per-word perplexity")
    files = page.locator("#evaluate-files")          # hidden while scores stream, then the downloads
    expect(files).to_contain_text(".csv", timeout=30_000)
    expect(files).to_contain_text(".json")
    expect(files).to_contain_text(".html")                      # the report, to read or share
    report = max((server[1] / ".lab" / "exports").glob("evaluation-*.html"), key=lambda p: p.stat().st_mtime)
    assert "Verdicts" in report.read_text() and second in report.read_text()
    _shot(page, "evaluate")
    # exposure bias of one checkpoint: five prefix lengths, no gap without a prefix
    expect(page.locator("#eb-checkpoint input")).to_have_value("scratch-a")   # chosen for the person
    _choose(page, "#eb-checkpoint", "scratch-a")
    page.locator("#eb-n").get_by_text("100", exact=True).click()
    page.locator("#eb-go").click()
    table = page.locator("#eb-table")
    expect(table).to_contain_text("+0.0000 [+0.0000, +0.0000]", timeout=120_000)
    expect(page.locator("#eb-said")).to_contain_text("on 100 dev captions")
    expect(page.locator("#eb-said")).to_contain_text("scheduled sampling")


def test_named_endpoints_through_gradio_client(server):
    """What the page does, a script can do: the named endpoints answer gradio_client, and a bad
    value comes back as the same one-line message, without a traceback."""
    from gradio_client import Client
    url, _ = server
    client = Client(url, verbose=False)
    named = set(client.view_api(return_format="dict", print_info=False)["named_endpoints"])
    assert {"/compare", "/decoder_matrix", "/attention", "/head_differences", "/evaluate",
            "/start_job", "/job_status", "/stop_job", "/resume_job", "/checkpoints",
            "/checkpoint_info", "/import_hf", "/export_hf", "/delete_checkpoint"} <= named
    html = client.predict(["scratch-a", "scratch-b"], {"decoder": "greedy"}, 0, "A man", 3,
                          api_name="/compare")
    assert "scratch-a" in html and "scratch-b" in html and html.count("A man") >= 6
    info = client.predict("scratch-a", api_name="/checkpoint_info")
    assert info["source"] == "scratch" and info["model"]["n_layer"] == 2
    with pytest.raises(Exception) as refused:
        client.predict(["scratch-a"], {"decoder": "greedy"}, 0, "", 500, api_name="/compare")
    assert "from 1 to 200, got 500" in str(refused.value)
    assert "Traceback" not in str(refused.value)


def test_compare_downloads_and_a_report_that_opens_offline(page, server, browser):
    """The captions as CSV and JSON, then the whole comparison as one HTML file: opened from disk
    with every request blocked, its attention views draw and each checkpoint's logit lens of the
    same row is there."""
    _, store = server
    _tab(page, "Compare")
    page.locator("#compare-go").click()
    files = page.locator("#compare-files")
    files.get_by_text(".csv").first.wait_for(timeout=120_000)
    assert files.get_by_text(".json").count() >= 1
    page.locator("#compare-report").click()
    page.locator("#compare-report-file").get_by_text(".html").first.wait_for(timeout=120_000)
    report = max((store / ".lab" / "exports").glob("comparison-*.html"), key=lambda p: p.stat().st_mtime)
    offline = browser.new_context(viewport={"width": 1400, "height": 1000}, offline=True)
    tried = []
    offline.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file:", "data:", "about:"))
                  else (tried.append(r.request.url), r.abort()))
    view = offline.new_page()
    view.goto(report.as_uri())
    assert view.locator("table.lab-compare td").count() >= 16                # 8 rows x 2 checkpoints
    frames = [f for f in view.frames if f != view.main_frame]
    assert len(frames) == 2
    for frame in frames:
        frame.locator("svg").first.wait_for(timeout=30_000)
        assert frame.locator("text").count() > 4                              # tokens drawn
    assert view.locator("table.lens").count() == 2                           # each one's logit lens
    assert view.locator("table.lens tbody tr").count() == 2 * 3              # embeddings, 2 blocks
    assert "rank" in view.locator("table.lens td[title]").first.get_attribute("title")
    # no "Which is better?" was run: the report says it is left out, and how to get it in
    assert "press Which is better? in Compare, then save the report again" in \
        view.locator("h2:has-text('Not in this report') + ul").inner_text()
    if SHOTS:
        view.screenshot(path=str(Path(SHOTS) / "report.png"), full_page=True)
    offline.close()
    assert tried == [], f"the report reached for: {tried}"


def test_decoder_matrix_shows_progress_and_labels_stay_in_their_column(page):
    _tab(page, "Compare")
    page.locator("#compare-matrix").click()
    out = page.locator("#compare-matrix-out")
    out.get_by_text("row ", exact=False).first.wait_for(timeout=60_000)       # which row is under way
    from playwright.sync_api import expect
    expect(out.locator(".lab-progress")).to_have_count(0, timeout=180_000)     # done
    labels = out.locator("table.lab-matrix tbody th")
    assert labels.count() >= 8
    for i in range(labels.count()):
        fits = labels.nth(i).evaluate("e => e.scrollWidth <= e.clientWidth + 1")
        assert fits, f"label {labels.nth(i).inner_text()!r} overflows into the captions"


def test_a_message_is_dismissed_when_the_tab_changes(page):
    """An error said in one tab does not follow the person to the next."""
    from playwright.sync_api import expect
    from lab.modeling.generate import MAX_PROMPT_CHARS
    _tab(page, "Inside the model")
    page.locator("#attention-text textarea, #attention-text input").first.fill("x" * (MAX_PROMPT_CHARS + 1))
    page.locator("#attention-go").click()
    toast = page.get_by_test_id("toast-body")
    expect(toast.first).to_contain_text("text", timeout=30_000)
    _tab(page, "Evaluate")
    expect(toast).to_have_count(0, timeout=5_000)


def test_dark_theme_keeps_attention_and_charts_readable(blank_page, server):
    """In Gradio's dark theme bertviz's white drawing is inverted (hue turned back) and the Plotly
    charts are transparent, so no white panel sits in a dark page."""
    url, _ = server
    page = blank_page
    page.emulate_media(color_scheme="dark")
    page.goto(url + "?__theme=dark")
    _tab(page, "Inside the model")
    page.locator("#attention-go").click()
    frame = page.locator("#attention-head-view iframe")
    frame.wait_for(timeout=60_000)
    assert page.evaluate("document.body.classList.contains('dark')")
    assert "invert" in frame.evaluate("e => getComputedStyle(e).filter")
    page.get_by_role("tab", name="Layer x head grid").locator("visible=true").first.click()
    background = page.locator("#attention-grid .main-svg").first
    background.wait_for(timeout=30_000)
    assert background.evaluate("e => getComputedStyle(e).backgroundColor") == "rgba(0, 0, 0, 0)"
    assert page.locator("#attention-grid .main-svg rect.bg").first.evaluate(
        "e => getComputedStyle(e).fillOpacity") == "0"
    _shot(page, "attention-dark")


def test_a_sweep_from_the_experiments_tab_runs_and_reads_as_a_table(page, server):
    """A recipe fills the form and Check lists its runs without queueing; a small sweep of our own
    runs in the worker, its line per run moves to done, its table and downloads appear."""
    from playwright.sync_api import expect
    from lab import sweeps
    _tab(page, "Experiments")
    _choose(page, "#sweep-recipe", "heads")
    expect(page.locator("#sweep-grid textarea")).to_have_value("n_head=1,3,6,12,24,48,96,192",
                                                              timeout=30_000)
    expect(page.locator("#sweep-note")).to_contain_text("Head count")
    page.locator("#sweep-check").click()
    expect(page.locator("#sweep-message")).to_contain_text("8 runs would be queued", timeout=60_000)
    assert sweeps.list_sweeps(server[1]) == []                       # checking queued nothing
    _choose(page, "#sweep-recipe", "(build your own)")          # the form's own values come back
    expect(page.locator("#sweep-grid textarea")).to_have_value("", timeout=30_000)   # nothing by surprise
    expect(page.locator("#sweep-preset input")).to_have_value("tiny")
    # the Train form's settings start a sweep: what differs from the preset is carried over
    _tab(page, "Train")
    page.locator("#train-epochs input").fill("1")
    page.locator("#train-max_train input").fill("60")
    page.locator("#train-max_dev input").fill("20")
    page.locator("#train-to-sweep").click()
    expect(page.locator("#sweep-set textarea")).to_have_value(
        "epochs=1\nmax_train=60\nmax_dev=20", timeout=30_000)
    expect(page.locator("#sweep-note")).to_contain_text("From the Train form")
    expect(page.locator("#sweep-grid textarea")).to_have_value("")
    page.locator("#sweep-name textarea, #sweep-name input").first.fill("ui-sweep")
    page.locator("#sweep-key input").fill("n_layer")
    page.get_by_role("option", name="n_layer", exact=True).click()
    page.locator("#sweep-values textarea, #sweep-values input").first.fill("1")
    page.locator("#sweep-add").click()
    expect(page.locator("#sweep-grid textarea")).to_have_value("n_layer=1\n", timeout=30_000)
    page.locator("#sweep-n input").fill("10")
    page.locator("#sweep-start").click()
    expect(page.locator("#sweep-message")).to_contain_text("Queued 1 run of sweep ui-sweep",
                                                           timeout=60_000)
    run = page.locator(".lab-sweep-run").first
    expect(run).to_have_attribute("data-status", "done", timeout=300_000)
    expect(page.locator("#sweep-table")).to_contain_text("random t=1", timeout=30_000)
    _shot(page, "experiments")
    page.locator("#sweep-export").click()
    files = page.locator("#sweep-files")
    for suffix in (".csv", ".json", ".md", ".html"):
        expect(files).to_contain_text(suffix, timeout=60_000)


def test_birth_place_accuracy_beside_the_london_baseline(page, server):
    """A birth-place checkpoint saved while the page is open joins the birth-place list by itself
    (caption models are not offered there); it answers the dev questions: its accuracy with an
    interval beside London's 25/500 and the paired difference, every question's answers, and the
    answers as downloads."""
    from playwright.sync_api import expect
    from plugins.tasks.birthplace import core as bp
    _, store = server
    tok = bp.tokenizer()
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=tok.vocab_size, n_positions=128, n_layer=1)).eval()
    _tab(page, "Evaluate")
    checkpoints.save(model, tok, "bp-random", store, provenance={"source": "scratch",
                                                                  "task": "birthplace"})
    chosen = page.locator("#birthplace-checkpoints")
    expect(chosen).to_contain_text("bp-random", timeout=30_000)     # picked for the person
    chosen.locator("input").click()
    expect(page.get_by_role("option", name="bp-random")).to_have_count(1)
    expect(page.get_by_role("option", name="scratch-a")).to_have_count(0)   # not offered
    page.keyboard.press("Escape")
    page.locator("#birthplace-go").click()
    table = page.locator("#birthplace-table")
    expect(table).to_contain_text("London (baseline)", timeout=120_000)
    expect(table).to_contain_text("25 / 500")
    expect(table).to_contain_text("bp-random")
    expect(table).to_contain_text("points [")                  # London's paired difference
    expect(page.locator("#birthplace-said")).to_contain_text("Wilson 95%")
    expect(page.locator("#birthplace-answers")).to_contain_text("Where was Bryan Dubreuiel born?")
    expect(page.locator("#birthplace-answers")).to_contain_text("Atlanta")
    files = page.locator("#birthplace-files")
    for suffix in (".csv", ".json"):
        expect(files).to_contain_text(suffix, timeout=30_000)
    _shot(page, "birthplace")


def test_delete_picks_and_confirms_in_one_place(page, server):
    """The checkpoint to delete is chosen beside the box that confirms it, from nothing picked
    elsewhere on the page; the store and the lists lose it."""
    from playwright.sync_api import expect
    _, store = server
    torch.manual_seed(2)
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tokenizers.gpt2(),
                     "to-delete", store, provenance={"source": "scratch"})
    page.reload()
    _tab(page, "Checkpoints")
    _choose(page, "#checkpoints-delete-name", "to-delete")
    page.locator("#checkpoints-confirm textarea, #checkpoints-confirm input").first.fill("to-delete")
    page.locator("#checkpoints-delete-go").click()
    expect(page.locator("#checkpoints-message")).to_contain_text("Deleted to-delete.", timeout=30_000)
    assert "to-delete" not in checkpoints.names(store)
    expect(page.locator("#checkpoints-table")).not_to_contain_text("to-delete", timeout=30_000)
    _shot(page, "checkpoints-delete")


def train_from_the_form(page, store, name: str, parent: str = "") -> None:
    """Name the run (and its parent), start it from the Train form, wait until its job is done."""
    from playwright.sync_api import expect
    from lab.worker import jobs
    if parent:
        _choose(page, "#train-parent", parent)
        expect(page.locator("#train-parent-note")).to_contain_text(f"Fine-tuning {parent}", timeout=30_000)
    page.locator("#train-name textarea, #train-name input").first.fill(name)
    page.locator("#train-start").click()
    # this job's own line (the message of the job before it says "Queued job" too)
    expect(page.locator("#train-message")).to_contain_text(f"({name}).", timeout=60_000)
    job = max(j["id"] for j in jobs.list_jobs(store) if j["name"] == name)
    wait_job(job, ("done", "failed"), timeout=300, store=store)
    assert jobs.get(job, store)["status"] == "done", jobs.get(job, store)


def test_the_store_table_keeps_every_column_in_view(page, server):
    """A long checkpoint name folds inside its cell instead of pushing the last columns past the
    table's right edge (where there was no way to scroll to them); at 1400 px every header folds
    between its words, never inside one, and a checkpoint's time reads with its date and time apart."""
    from playwright.sync_api import expect
    _, store = server
    torch.manual_seed(5)
    name = "a-checkpoint-with-a-rather-long-name-indeed"
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tokenizers.gpt2(),
                     name, store, provenance={"source": "scratch"})
    _tab(page, "Checkpoints")
    table = page.locator("#checkpoints-table")
    expect(table).to_contain_text("rather-long-name", timeout=30_000)
    expect(table).to_contain_text("created")
    view = table.locator(".virtual-table-viewport").first
    assert view.evaluate("v => v.scrollWidth <= v.clientWidth + 1"), view.evaluate(
        "v => [v.scrollWidth, v.clientWidth]")
    # a word broken across lines is drawn as more than one box
    broken = table.evaluate("""t => [...t.querySelectorAll('thead th')].flatMap(th => {
        const walker = document.createTreeWalker(th, NodeFilter.SHOW_TEXT), out = [];
        for (let n = walker.nextNode(); n; n = walker.nextNode())
            for (const m of n.textContent.matchAll(/\\S+/g)) {
                const r = document.createRange();
                r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
                if (r.getClientRects().length > 1) out.push(m[0]);
            }
        return out; })""")
    assert broken == [], broken
    created = checkpoints.info(name, store)["created"]
    expect(table).to_contain_text(created[:16].replace("T", " "))
    checkpoints.delete(name, store)


def test_a_new_action_clears_the_last_ones_error_mark(page):
    """A failed Generate marks the caption table "Error" and says why; the page's own pulse leaves
    both, a new press replaces the message with its own, and the next action (here in another tab)
    clears the mark instead of leaving it over the table."""
    from playwright.sync_api import expect
    _tab(page, "Compare")
    box = page.get_by_label("captions").first
    box.fill("0")
    box.press("Tab")
    page.locator("#compare-go").click()
    mark = page.locator("#compare-out [data-testid=status-tracker] .error")
    expect(mark).to_have_count(1, timeout=30_000)
    said = page.get_by_test_id("toast-body")
    expect(said.filter(has_text="got 0")).to_have_count(1)
    page.evaluate("document.getElementById('lab-pulse').click()")      # as the page's pulse does
    page.wait_for_timeout(1500)
    expect(mark).to_have_count(1)
    expect(said.filter(has_text="got 0")).to_have_count(1)
    box.fill("10001")
    box.press("Tab")
    page.locator("#compare-go").click()
    expect(said.filter(has_text="got 10001")).to_have_count(1, timeout=30_000)
    expect(said.filter(has_text="got 0")).to_have_count(0)              # the last action's words go
    _tab(page, "Inside the model")
    page.locator("#attention-go").click()
    page.frame_locator("#attention-head-view iframe").locator("svg text").first.wait_for(timeout=60_000)
    _tab(page, "Compare")
    expect(mark).to_have_count(0)
