"""Attention across tokenizers: tokens matched to words, word x word attention, head distances;
bertviz numbered from 1 and sized to its tokens; the Attention tab's callbacks for a pair."""
import pytest
import torch

from lab.evaluation import attention_maps
from lab.storage import checkpoints
from lab.inputs import tokenizers
from plugins.tasks.birthplace import core as bp
from lab.config import ModelConfig
from lab.evaluation.attention_maps import Capture
from lab.modeling.model import build
from tests.conftest import tiny_config

TEXT = "A man riding a wave on top of a surfboard ."


class Pieces(tokenizers.Tokenizer):
    """A tokenizer with splits chosen by hand: token i is the string pieces[i]."""
    kind = "pieces"

    def __init__(self, pieces):
        self.pieces, self.eos_id = pieces, 0

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


def _model(vocab_size, seed=0, **kw):
    torch.manual_seed(seed)
    return build(tiny_config(vocab_size=vocab_size, n_positions=64, **kw)).eval()


def _words(model, tok, text=TEXT):
    return attention_maps.by_words(attention_maps.capture(model, tok, text), tok, text)


def test_tokens_go_to_the_word_of_their_first_character():
    tok = Pieces(["", "A", " sur", "f", "board", " .", " ", "  b"])
    assert attention_maps.token_words(tok, [1, 2, 3, 4, 5], "A surfboard .") == [0, 1, 1, 1, 2]
    # a token of spaces goes with the next word
    assert attention_maps.token_words(tok, [1, 6, 7], "A   b") == [0, 1, 1]


def test_gpt2_subwords_and_split_utf8_characters_go_to_their_word():
    tok = tokenizers.gpt2()
    assert attention_maps.token_words(tok, tok.encode(TEXT), TEXT) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 10]
    text = "naïve 日本 cat"
    ids = tok.encode(text)      # na ïve, then 日本 as five tokens of bytes (no whole character), cat
    assert tok.token_strings(ids)[2:7] == [" \ufffd"] + ["\ufffd"] * 4
    assert attention_maps.token_words(tok, ids, text) == [0, 0, 1, 1, 1, 1, 1, 2]


def test_text_a_tokenizer_cannot_give_back_is_refused():
    tok = Pieces(["", "a", "b"])
    with pytest.raises(attention_maps.AttentionError, match="does not decode the text back"):
        attention_maps.token_words(tok, [1, 2], "a c")


def test_word_attention_by_hand():
    """<bos>, A, sur, fboard -> <bos>, A, surfboard: rows averaged over sub-tokens, keys summed."""
    att = torch.tensor([[[1.0, 0.0, 0.0, 0.0],
                         [0.5, 0.5, 0.0, 0.0],
                         [0.2, 0.3, 0.5, 0.0],
                         [0.1, 0.2, 0.3, 0.4]]])
    words = attention_maps.word_attention(att, [0, 1, 1], n_words=2)
    expected = torch.tensor([[[1.0, 0.0, 0.0],
                              [0.5, 0.5, 0.0],
                              [0.15, 0.25, 0.6]]])
    assert torch.allclose(words, expected)


def _by_hand(tok, text, head, bos=True):
    """A capture whose one head is built by `head(T)` over the tokens of `text` (after BOS)."""
    ids = [tok.eos_id] * bos + tok.encode(text)
    return attention_maps.by_words(Capture(tokens=[""] * len(ids), ids=ids, attentions=[head(len(ids))[None]],
                                      n_prompt=len(ids), n_head=1, kv_heads=1, bos=bos), tok, text)


def test_the_same_head_reads_the_same_across_tokenizers():
    """A head that attends to its own token is 'each word attends to itself' with any tokenizer,
    and one that attends to BOS is 'every word attends to <bos>': distance 0 between GPT-2 BPE
    and characters, 1 between the two kinds of head. A word matched to the wrong tokens breaks it."""
    gpt2, chars = tokenizers.gpt2(), tokenizers.CharTokenizer.from_text(TEXT)
    itself = torch.eye

    def bos(T):
        return torch.zeros(T, T).index_fill_(1, torch.tensor([0]), 1.0)
    a, b = _by_hand(gpt2, TEXT, itself), _by_hand(chars, TEXT, itself)
    assert torch.allclose(a.attentions, torch.eye(12)) and torch.allclose(b.attentions, torch.eye(12))
    assert attention_maps.head_distances(a, b).item() == pytest.approx(0.0, abs=1e-6)
    assert attention_maps.head_distances(a, _by_hand(chars, TEXT, bos)).item() == pytest.approx(1.0)


def test_a_model_that_reads_without_bos_is_compared_over_the_same_words():
    """A birth-place model reads a question from its first character (its tokenizer has a pad
    and no BOS): its capture starts with the text, and word by word it compares with a BOS model,
    attention to BOS counting as attention to no word of the text."""
    gpt2, task = tokenizers.gpt2(), bp.tokenizer()
    assert gpt2.bos_id == gpt2.eos_id and task.bos_id is None
    question = "Where was Ada Lovelace born?"
    model = build(ModelConfig(model="gpt2", n_layer=1, n_head=2, n_embd=32, n_positions=128,
                              vocab_size=task.vocab_size))
    cap = attention_maps.capture(model, task, question)
    assert not cap.bos and cap.tokens == list(question) and cap.ids == task.encode(question)
    assert cap.attentions[0].shape == (2, len(question), len(question))
    words = attention_maps.by_words(cap, task, question)
    assert torch.allclose(words.attentions[0, :, 1:].sum(-1), torch.ones(2, 5))
    assert torch.all(words.attentions[0, :, 0] == 0) and torch.all(words.attentions[0, :, :, 0] == 0)
    a, b = _by_hand(gpt2, question, torch.eye), _by_hand(task, question, torch.eye, bos=False)
    assert attention_maps.head_distances(a, b).item() == pytest.approx(0.0, abs=1e-6)
    # generation follows the same rule: the prompt alone goes in first; with no prompt, one message
    from lab.config import DecodeConfig
    from lab.modeling.generate import GenerationError, sample_captions
    greedy = DecodeConfig(decoder="greedy", max_new_tokens=4)
    out = sample_captions(model.eval(), task, 1, greedy, prompt="Where was")[0]
    with torch.no_grad():
        first = model(torch.tensor([task.encode("Where was")])).logits[0, -1].argmax().item()
    assert out.text.startswith("Where was") and out.tokens[len(task.encode("Where was"))] == first
    with pytest.raises(GenerationError, match="give a prompt"):
        sample_captions(model, task, 1, greedy)


def test_rows_sum_to_one_and_the_same_model_is_at_distance_zero():
    tok = tokenizers.gpt2()
    a = _words(_model(50257), tok)
    assert a.words == ["<bos>", "A", "man", "riding", "a", "wave", "on", "top", "of", "a", "surfboard", "."]
    assert a.attentions.shape == (2, 4, 12, 12)
    assert torch.allclose(a.attentions.sum(-1), torch.ones(2, 4, 12))
    rows = attention_maps.head_differences(a, _words(_model(50257), tok), top=100)
    assert len(rows) == 8
    assert all(r["distance"] == 0 and r["closest_distance"] == 0 for r in rows)
    assert {(r["layer"], r["head"]) for r in rows} == {(l, h) for l in (1, 2) for h in (1, 2, 3, 4)}


def test_gpt2_against_a_character_model_with_other_layers_and_heads():
    gpt2, chars = tokenizers.gpt2(), tokenizers.CharTokenizer.from_text(TEXT)
    a = _words(_model(50257), gpt2)
    b = _words(_model(chars.vocab_size, seed=1, n_layer=3, n_head=2), chars)
    assert b.words == a.words and torch.allclose(b.attentions.sum(-1), torch.ones(3, 2, 12))
    d = attention_maps.head_distances(a, b)
    assert d.shape == (8, 6) and 0 < d.min() and d.max() < 1
    assert torch.allclose(attention_maps.head_distances(b, a), d.T)
    rows = attention_maps.head_differences(a, b, top=100)
    assert [r["closest_distance"] for r in rows] == sorted((r["closest_distance"] for r in rows), reverse=True)
    for r in rows:
        i = (r["layer"] - 1) * 4 + r["head"] - 1
        assert r["closest_distance"] == pytest.approx(d[i].min().item(), abs=1e-4)
        assert (r["distance"] is None) == (r["head"] > 2)          # b has 2 heads per layer


def test_bertviz_views_number_layers_and_heads_from_one_and_fit_their_tokens():
    tok = tokenizers.gpt2()
    model = _model(50257)
    short, long = (attention_maps.capture(model, tok, t) for t in (TEXT, " ".join([TEXT] * 4)))
    head = attention_maps.bertviz_html(short, "head", title="scratch-a")
    assert ".text(layer + 1)" in head and ">scratch-a</div>" in head
    view = attention_maps.bertviz_html(short, "model")
    assert "config.layers[i] + 1" in view and "config.heads[i] + 1" in view
    assert "(config.layers[layerIndex] + 1)" in view
    for v in ("head", "model"):
        assert attention_maps.view_height(long, v) > attention_maps.view_height(short, v)
    # bertviz draws 22.5 px per token below a 30 px header; the frame holds all of it
    assert attention_maps.view_height(long, "head") >= 30 + 22.5 * len(long.tokens)


# ---------------------------------------------------------------- the tab's callbacks

@pytest.fixture
def pair(store):
    """A GPT-2 BPE checkpoint and a character one, in the test's store."""
    chars = tokenizers.CharTokenizer.from_text(TEXT + "xyz")
    checkpoints.save(_model(50257), tokenizers.gpt2(), "scratch", store)
    checkpoints.save(_model(chars.vocab_size, seed=1, n_layer=3, n_head=2), chars, "chars", store)
    return store


def test_views_side_by_side_and_differences_across_tokenizers(pair):
    from lab.ui import attention as tab
    *views, shown = tab.show("scratch", TEXT, False, 0, store=pair)
    assert shown == TEXT and "**scratch**" in views[0] and "13 tokens" in views[0]
    beside = tab.show_beside("chars", shown, False, store=pair)
    assert "**chars**" in beside[0] and f"{len(TEXT) + 1} tokens" in beside[0]
    assert "lab-attention-frame" in beside[1] and "scratch" not in beside[1]
    assert tab.show_beside("", shown, False, store=pair) == tab.NO_VIEWS
    table = tab.differences("scratch", "chars", TEXT, store=pair)
    assert table["headers"][3] == "closest head of chars"
    assert len(table["data"]) == 8 and all(len(r) == 5 for r in table["data"])


def test_errors_name_the_checkpoint_and_a_new_choice_clears_the_views(pair):
    from lab.config import ConfigError
    from lab.ui import attention as tab
    with pytest.raises(ConfigError, match=r"^chars: characters not in this tokenizer's alphabet: '!'"):
        tab.show_beside("chars", "A dog !", False, store=pair)
    with pytest.raises(ConfigError, match=r"^chars: the text is 66 tokens with BOS; at most 64"):
        tab.differences("scratch", "chars", "x" * 65, store=pair)
    out = tab.cleared("")     # the first column's five outputs, the second's, the table, its files
    assert "Press *Show attention*" in out[0] and out[1:5] == ("", "", None, "") and out[10] == []
    assert out[11] is None                                    # the last pair's downloads go too
    assert all(u["visible"] is False for u in out[5:10])
    assert all(u["visible"] is True for u in tab.cleared("chars")[5:10])


def test_a_selection_says_which_blocks_its_layers_are():
    from types import SimpleNamespace
    from lab.ui import attention as tab
    smol = SimpleNamespace(meta={"layers": [1, 15, 30], "pretrained": "SmolLM2-135M"})
    assert tab.blocks(smol) == "; its layers 1, 2, 3 are blocks 1, 15, 30 of SmolLM2-135M"
    assert tab.blocks(SimpleNamespace(meta={"layers": [1, 2, 3]})) == ""
    assert tab.blocks(SimpleNamespace(meta={})) == ""


def test_a_generated_caption_is_shown_by_both(pair):
    from lab.ui import attention as tab
    *views, shown = tab.show("chars", "A", True, 0, store=pair)
    assert shown.startswith("A") and "generated from token" in views[0]
    assert "the caption the first checkpoint wrote" in tab.show_beside("chars", shown, True, store=pair)[0]


def test_smollm2_against_a_gpt2_model(smollm2_hf):
    """The lab's main pair: a scratch GPT-2 BPE model and SmolLM2 (its own tokenizer, 9 heads)."""
    from lab.storage import smollm2
    hf_model, hf_tok = smollm2_hf
    smol, _ = smollm2.to_lab(hf_model, [1, 2])
    tok = tokenizers.HFTokenizer(hf_tok, "smollm2")
    text = "Two dogs play with a frisbee on the grass ."
    s = _words(smol, tok, text)
    assert s.attentions.shape == (2, 9, 11, 11)
    assert torch.allclose(s.attentions.sum(-1), torch.ones(2, 9, 11), atol=1e-5)
    rows = attention_maps.head_differences(_words(_model(50257), tokenizers.gpt2(), text), s, top=100)
    assert len(rows) == 8 and all(0 < r["closest_distance"] < 1 for r in rows)
    assert all(r["closest"].split()[1] in {f"H{h}" for h in range(1, 10)} for r in rows)
