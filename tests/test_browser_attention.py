"""The Attention tab for a pair in Chromium (network blocked): a GPT-2 BPE model beside a character
model (other tokenizer, other layer and head counts), both views drawn offline, layers numbered
from 1, views cleared when a checkpoint changes, head differences across the two tokenizers.
Screenshots go to LAB_SCREENSHOTS (if set) as attention-pair-*.png."""
import re
import string
from pathlib import Path

import pytest
import torch
from playwright.sync_api import expect

from lab.storage import checkpoints
from lab.inputs import tokenizers
from plugins.tasks.birthplace import core as birthplace
from lab.modeling.model import build
from tests.conftest import serving, tiny_config
from tests.test_browser import CHROMIUM, _shot, _tab, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make test installs it)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """scratch-a: GPT-2 BPE, 2 layers x 4 heads; chars: a character tokenizer, 3 layers x 2 heads."""
    store = tmp_path_factory.mktemp("attention-store")
    chars = tokenizers.CharTokenizer.from_text(string.ascii_letters + string.digits + " .,'")
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)).eval(), tokenizers.gpt2(),
                     "scratch-a", store, provenance={"source": "scratch"})
    checkpoints.save(build(tiny_config(vocab_size=chars.vocab_size, n_positions=64, n_layer=3,
                                       n_head=2)).eval(), chars, "chars", store,
                     provenance={"source": "scratch"})
    bp = birthplace.tokenizer()     # a birth-place model: reads a question with no BOS before it
    checkpoints.save(build(tiny_config(vocab_size=bp.vocab_size, n_positions=128, n_layer=1,
                                       n_head=2)).eval(), bp, "bp", store,
                     provenance={"source": "scratch", "task": "birthplace", "objective": "qa"})
    # SmolLM2-135M's geometry (30 layers x 9 heads, llama family) at a tiny width: the views'
    # size depends on layers, heads and tokens only
    checkpoints.save(build(tiny_config(model="llama", vocab_size=50257, n_positions=64, n_layer=30,
                                       n_head=9, n_embd=72)).eval(), tokenizers.gpt2(), "deep", store,
                     provenance={"source": "scratch"})
    with serving(store) as url:
        yield url, store


def _choose(page, elem_id, name):
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(name)
    page.locator(f"#{elem_id}").get_by_role("option", name=name, exact=True).click()
    expect(box).to_have_value(name)


def test_attention_of_two_checkpoints_side_by_side(page, server):
    _tab(page, "Inside the model")
    _choose(page, "attention-checkpoint", "scratch-a")
    _choose(page, "attention-other", "chars")
    page.locator("#attention-go").click()
    views = {}
    for side, elem in (("scratch-a", "attention-head-view"), ("chars", "attention-other-head-view")):
        frame = views[side] = page.frame_locator(f"#{elem} iframe")
        frame.locator("svg text").first.wait_for(timeout=60_000)
        expect(frame.locator("body")).to_contain_text(side)               # each view names its checkpoint
    # bertviz draws one text per token on each side: 13 GPT-2 tokens, 44 characters (BOS included)
    assert views["scratch-a"].locator("svg text").count() == 2 * 13
    assert views["chars"].locator("svg text").count() == 2 * 44
    # layers from 1, as in the grid
    assert views["scratch-a"].locator("select#layer option").all_inner_texts() == ["1", "2"]
    assert views["chars"].locator("select#layer option").all_inner_texts() == ["1", "2", "3"]
    # the frame is tall enough for the last token (bertviz: 22.5 px a token under a 30 px header)
    frame_height = page.locator("#attention-other-head-view iframe").bounding_box()["height"]
    assert frame_height >= views["chars"].locator("svg").first.bounding_box()["height"] + 40
    _shot(page, "attention-pair-head")

    page.get_by_role("tab", name="Model view").click()
    for elem, layers, heads in (("attention-model-view", 2, 4), ("attention-other-model-view", 3, 2)):
        frame = page.frame_locator(f"#{elem} iframe")
        frame.locator("svg text").first.wait_for(timeout=30_000)
        labels = frame.locator("svg > text").all_text_contents()
        assert labels == ["Heads", *map(str, range(1, heads + 1)), "Layers", *map(str, range(1, layers + 1))]
    _shot(page, "attention-pair-model")

    page.get_by_role("tab", name="Layer x head grid").click()
    for elem, title in (("attention-grid", "L2 H4"), ("attention-other-grid", "L3 H2")):
        expect(page.locator(f"#{elem} .js-plotly-plot")).to_contain_text(title, timeout=30_000)
    _shot(page, "attention-pair-grid")
    assert page.left_machine == [], f"requests tried to leave the machine: {page.left_machine}"


def test_a_deep_model_is_drawn_whole(page, server):
    """SmolLM2's 30 layers x 9 heads: the model view's frame holds the whole drawing (its last
    layer's row included, nothing cut off at the bottom), and the grid draws every head of every
    layer (270 heatmaps) at a height a page scrolls through."""
    _tab(page, "Inside the model")
    _choose(page, "attention-checkpoint", "deep")
    page.locator("#attention-go").click()
    page.frame_locator("#attention-head-view iframe").locator("svg text").first.wait_for(timeout=60_000)
    page.get_by_role("tab", name="Model view").click()
    frame = page.frame_locator("#attention-model-view iframe")
    frame.locator("svg text").first.wait_for(timeout=30_000)
    labels = frame.locator("svg > text").all_text_contents()
    assert labels[-1] == "30" and labels[1:10] == list(map(str, range(1, 10)))
    drawn = frame.locator("body").evaluate("b => b.scrollHeight")
    box = page.locator("#attention-model-view iframe").bounding_box()
    assert box["height"] >= drawn, f"the frame ({box['height']} px) cuts the drawing ({drawn} px)"
    assert frame.locator("body").evaluate("b => b.scrollHeight <= window.innerHeight")
    _shot(page, "attention-deep-model")
    page.get_by_role("tab", name="Layer x head grid").click()
    grid = page.locator("#attention-grid .js-plotly-plot")
    expect(grid).to_contain_text("L30 H9", timeout=90_000)
    assert grid.evaluate("p => p.data.length") == 30 * 9
    assert grid.bounding_box()["height"] <= 2600
    _shot(page, "attention-deep-grid")


def test_a_birthplace_model_answers_the_question_it_is_shown(page, server):
    """Ticked 'generate', a birth-place model answers: the view is the question, its ⁇ and the
    answer, read from the first character (no BOS), as the evaluation reads it."""
    _tab(page, "Inside the model")
    _choose(page, "attention-checkpoint", "bp")
    page.locator("#attention-text textarea, #attention-text input").first.fill("Where was Ada Lovelace born?")
    page.get_by_label(re.compile("a birth-place model answers the question")).check()
    page.locator("#attention-go").click()
    frame = page.frame_locator("#attention-head-view iframe")
    frame.locator("svg text").first.wait_for(timeout=60_000)
    expect(page.locator("body")).to_contain_text("Where was Ada Lovelace born?\u2047")
    expect(page.locator("body")).to_contain_text("(generated from token 30 on)")
    assert frame.locator("svg text").first.text_content() == "W"       # the question's own first character
    _shot(page, "attention-birthplace-question")
    assert page.left_machine == []


def test_head_differences_across_tokenizers_and_views_cleared_on_a_new_choice(page, server):
    _tab(page, "Inside the model")
    _choose(page, "attention-checkpoint", "scratch-a")
    _choose(page, "attention-other", "chars")
    page.locator("#attention-go").click()
    page.frame_locator("#attention-other-head-view iframe").locator("svg text").first.wait_for(
        timeout=60_000)
    header = page.get_by_role("button", name=re.compile("Heads that differ most"))
    explained = page.locator("#attention-alignment")
    for _ in range(3):                 # a click while the views still lay out may miss the header
        if explained.is_visible():
            break
        header.click()
        try:
            explained.wait_for(state="visible", timeout=10_000)
        except Exception:              # playwright's TimeoutError: try the header again
            continue
    expect(explained).to_be_visible()
    expect(explained).to_contain_text("mean of its sub-tokens' rows, summed over the key word's sub-tokens")
    page.locator("#attention-differences-go").click()
    table = page.locator("#attention-differences")
    closest = re.compile(r"L[123] H[12]")                      # a head of the 3-layer, 2-head model
    expect(table).to_contain_text(closest, timeout=60_000)
    expect(table.get_by_role("row")).to_have_count(1 + 8)      # headers, every head of scratch-a: 2 x 4
    expect(page.locator("#attention-differences-files")).to_contain_text(".csv", timeout=30_000)
    _shot(page, "attention-pair-differences")
    # another checkpoint beside it: the views of the last pair go, the table too
    _choose(page, "attention-other", "scratch-a")
    expect(page.locator("#attention-other-head-view iframe")).to_have_count(0, timeout=30_000)
    expect(page.locator("#attention-head-view iframe")).to_have_count(0)
    expect(table).not_to_contain_text(closest)
    expect(page.locator("#attention-differences-files")).not_to_contain_text(".csv", timeout=30_000)
    assert page.left_machine == []


def test_the_attention_endpoints_keep_their_arguments(server):
    """/attention takes (checkpoint, text, generate, seed) as before; /head_differences takes the
    pair and a text, now across tokenizers."""
    from gradio_client import Client
    client = Client(server[0], verbose=False)
    note, head, model, grid, groups = client.predict("chars", "A dog .", False, 0, api_name="/attention")
    assert "**chars**" in note and "lab-attention-frame" in head
    table = client.predict("scratch-a", "chars", "A dog on a couch .", api_name="/head_differences")
    assert len(table["data"]) == 8 and table["headers"][3] == "closest head of chars"
    assert "Traceback" not in (server[1] / "app.log").read_text()
