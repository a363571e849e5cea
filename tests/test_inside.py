"""Inside the model: named points on every model the registries build (or a reason they have
none), the logit lens, head ablation and activation patching, with known answers: the lens's last
layer is the model's output, patching nothing restores 0 and the last block's output 1, and a
model built by hand whose one head copies the previous token."""
import json
import re
import string
import subprocess
import sys

import pytest
import torch

from lab.config import ConfigError, TrainConfig
from lab.inputs.tokenizers import CharTokenizer
from lab.inside import ablation, lens, patching
from lab.inside.hooks import hooked
from lab.modeling.generate import GenerationError
from lab.modeling.model import build
from lab.modeling.points import points
from lab.storage import checkpoints
from lab.training import runs
from tests.conftest import ROOT, tiny_config
from tests.test_plugin_contracts import _cases, _model

TOK97 = CharTokenizer(string.printable[:96])           # 97 ids with its end-of-text: tiny_config's


def _expected(n_layer: int) -> list[str]:
    per = ["resid_pre", "attn.z", "attn_out", "resid_mid", "mlp_out", "resid_post"]
    return ["embed"] + [f"blocks.{i}.{p}" for i in range(n_layer) for p in per] + ["final_norm"]


@pytest.mark.parametrize("overrides", _cases())
def test_every_model_has_its_named_points_or_says_why_not(overrides):
    """A new plugin either provides the points (the lens's last layer is then the model's own
    logits, bit for bit, and patching nothing or the last block's output restores 0 or 1) or its
    family declares them absent with a reason."""
    model = _model(overrides)
    absent = getattr(model, "points_absent", None)
    if absent:
        assert isinstance(absent, str) and len(absent) > 20 and points(model) == {}
        with pytest.raises(ConfigError, match=f"the {model.config.model} family has no named points"):
            lens.logit_lens(model, TOK97, "abc")
        return
    assert list(points(model)) == _expected(model.config.n_layer)
    ids = [0] + TOK97.encode("a cat sat on")
    with torch.no_grad():
        own = model(torch.tensor([ids])).logits[0]
    assert torch.equal(lens.lens_logits(model, ids)[-1], own)
    clean, corrupt = "the cat", "the cab"         # the last token differs: every window sees it
    right, other = TOK97.encode("o")[0], TOK97.encode("e")[0]
    assert patching.restored(model, TOK97, clean, corrupt, [], right, other) == pytest.approx(0.0, abs=1e-6)
    last = f"blocks.{model.config.n_layer - 1}.resid_post"
    assert patching.restored(model, TOK97, clean, corrupt, [last], right, other) == pytest.approx(1.0, abs=1e-4)
    assert patching.restored(model, TOK97, clean, corrupt, ["embed"], right, other) == pytest.approx(1.0, abs=1e-4)


def _previous_token_model(norm_position="pre"):
    """One block whose head 1 copies the previous token and head 2 does nothing; the MLP is off.
    Residual dims: 0-7 the token, 8-23 the position, 24-31 the copied token, read by the output
    layer. Characters a-g, ids 1-7 (0 is end-of-text)."""
    tok = CharTokenizer("abcdefg")
    model = build(tiny_config(vocab_size=8, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                              norm_position=norm_position)).eval()
    h, S = model.transformer, 30.0
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for ln in (h.h[0].ln_1, h.h[0].ln_2, h.ln_f):
            if hasattr(ln, "weight"):           # post-norm: no final norm
                ln.weight.fill_(1.0)
        h.wte.weight[:, :8] = torch.eye(8)
        h.wpe.weight[:, 8:24] = torch.eye(16)
        W = h.h[0].attn.c_attn.weight          # (3 * 32, 32): rows q, k, v; head 1 = dims 0-15
        for p in range(1, 16):
            W[p - 1, 8 + p] = S                  # position p's query looks for key p - 1
        for p in range(16):
            W[32 + p, 8 + p] = S                 # a key is its position
        W[64:72, 0:8] = torch.eye(8)             # head 1's value: the token
        h.h[0].attn.c_proj.weight[24:32, 0:8] = torch.eye(8) * 10
        model.lm_head.weight[:, 24:32] = torch.eye(8)
    return model, tok


def _next_ids(model, ids, replace=None):
    with hooked(model, replace=replace), torch.no_grad():
        return model(torch.tensor([ids])).logits[0].argmax(-1).tolist()


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_a_head_built_to_copy_the_previous_token(norm_position):
    """Ablating the copying head breaks the copy; ablating the other head changes nothing;
    patching the copying head's output restores the clean answer entirely, and the residual
    stream restores it only at the position where the prompts differ."""
    model, tok = _previous_token_model(norm_position)
    ids = [0] + tok.encode("abcfgde")
    assert _next_ids(model, ids)[1:] == ids[:-1][:7]                  # each position: the token before
    copy = ablation.ablations([(0, 0)], "zero", None)
    other = ablation.ablations([(0, 1)], "zero", None)
    assert _next_ids(model, ids, other) == _next_ids(model, ids)
    broken = _next_ids(model, ids, copy)
    assert sum(a == b for a, b in zip(broken[1:], ids[:-1])) <= 1
    r = patching.patch(model, tok, "abcd", "abed")
    assert (r["answer"], r["wrong"]) == ("c", "e")                    # at 'd': the token before it
    assert r["heads"][0][0] == pytest.approx(1.0, abs=1e-4)
    assert r["heads"][0][1] == pytest.approx(0.0, abs=1e-4)
    assert r["resid"][0][3] == pytest.approx(1.0, abs=1e-4)           # <bos> a b [c|e] d: position 3
    assert all(abs(v) < 1e-4 for t, v in enumerate(r["resid"][0]) if t != 3)
    lensed = lens.logit_lens(model, tok, "abcd")
    assert lensed["first_layer"][1:4] == [None, None, None]    # the next letter is never the token before
    with pytest.raises(ConfigError, match="equal length in tokens"):
        patching.patch(model, tok, "abcd", "abc")


def test_patching_and_the_lens_in_pieces_give_what_they_give_whole(monkeypatch):
    """Patched runs a few tokens a pass (the server's memory bounded by the pass, not by the
    prompt's square) restore what one pass restores; an abort stops either between pieces; a
    prompt over the limit it is given is refused before any work."""
    from lab.errors import Aborted
    model, tok = _previous_token_model("pre")
    whole = patching.patch(model, tok, "abgfcd", "abgfed")
    monkeypatch.setattr(patching, "ROW_TOKENS", 8)                  # one copy of 7 tokens a pass
    pieces = patching.patch(model, tok, "abgfcd", "abgfed")
    for key in ("resid", "heads"):
        assert [v for row in pieces[key] for v in row] == \
            pytest.approx([v for row in whole[key] for v in row], abs=1e-5)
    assert whole["resid"][0][5] == pytest.approx(1.0, abs=1e-4)      # <bos> a b g f [c|e] d
    asked = []
    with pytest.raises(Aborted):
        patching.patch(model, tok, "abgfcd", "abgfed", abort=lambda: asked.append(1) or len(asked) > 2)
    assert len(asked) == 3
    with pytest.raises(Aborted):
        lens.logit_lens(model, tok, "abcd", abort=lambda: True)
    with pytest.raises(GenerationError, match="at most 4 can be shown"):
        patching.patch(model, tok, "abgfcd", "abgfed", max_tokens=4)
    with pytest.raises(GenerationError, match="at most 4 can be shown"):
        lens.logit_lens(model, tok, "abgfcd", max_tokens=4)


@pytest.fixture
def captioner(corpus_dir):
    list(runs.train("cap", tiny_config(n_positions=48), TrainConfig(
        epochs=1, lr=1e-3, max_train=640, max_dev=60, tokenizer="words")))
    return checkpoints.load("cap")


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_the_scan_of_every_head_is_the_ablation_of_each(captioner, mode):
    """The scan (the stream below each layer reused, a layer's heads batched) gives each head
    the change its own ablation gives, with a paired interval and a verdict."""
    scan = ablation.scan(captioner, mode=mode, n=40, n_ref=30)
    assert len(scan["change"]) == 2 and len(scan["change"][0]) == 4 and len(scan["most"]) == 5
    one = ablation.ablate(captioner, [(1, 2)], mode=mode, n=40, n_ref=30, n_captions=2)
    assert scan["change"][1][2] == pytest.approx(one["change"], rel=1e-4, abs=1e-3 * one["perplexity"] * 1e-2)
    lo, hi = one["change_ci"]
    assert lo <= one["change"] <= hi and one["verdict"]
    assert len(one["continuations"]) == 2 and all(c["intact"] and c["ablated"] for c in one["continuations"])


def test_a_scan_asks_at_most_its_work_through_every_door(capsys):
    """The page, the API and the command line refuse the same scans in the same words: a model
    of 24 heads may scan 416 texts, not 417."""
    from lab.cli import main
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    said = ("wide's 24 heads alone on 417 texts is 10,008 head-texts; one scan may ask at most "
            "10,000: ask for at most 416 texts")
    with pytest.raises(ConfigError, match=said):
        ablation.check_scan("wide", 24, 417)
    ablation.check_scan("wide", 24, 416)
    checkpoints.save(build(tiny_config(n_layer=6, vocab_size=50257)), tokenizers.gpt2(), "wide")
    assert main(["ablate", "--checkpoint", "wide", "--each", "--n", "417"]) == 2
    assert said in capsys.readouterr().err


def test_a_scan_stopped_after_a_batch_maps_the_texts_it_scored(captioner):
    """Progress counts every head alone on every text; a Stop after the first batch of texts
    keeps what that batch scored (a map of its texts, no estimate); one before it, nothing."""
    from lab.errors import Aborted
    seen = []
    batch_done = lambda: bool(seen) and seen[-1]["block"] == seen[-1]["blocks"]    # noqa: E731
    scan = ablation.scan(captioner, n=40, n_ref=10, batch_size=16, abort=batch_done,
                         progress=seen.append)
    assert scan["stopped"] and scan["n"] == 16 and scan["estimate"] is None
    assert len(scan["change"]) == 2 and len(scan["change"][0]) == 4 and len(scan["most"]) == 5
    assert [p["done"] for p in seen] == [16, 32] and {p["of"] for p in seen} == {80}
    assert seen[0]["texts"] == (1, 16)
    with pytest.raises(Aborted):
        ablation.scan(captioner, n=40, n_ref=10, batch_size=16, abort=lambda: True)
    whole = ablation.scan(captioner, n=40, n_ref=10, batch_size=16, estimated=False)
    assert not whole["stopped"] and whole["n"] == 40


def test_the_compare_report_holds_what_was_last_run_inside_the_compared_checkpoints(captioner):
    """Compare's report takes Inside the model's last results of the checkpoints it compares (a
    result of another checkpoint is left out): heads ablated with their continuations, each
    head in turn as a blocks x heads table with intervals in the tooltips, and a patching as two
    tables; every text escaped."""
    from lab.evaluation import report
    from lab.ui import inside as tab
    from lab.ui.compare_report import _of_these
    scan = ablation.scan(captioner, n=20, n_ref=10)
    one = ablation.ablate(captioner, [(0, 1)], n=20, n_ref=10, n_captions=2)
    one["continuations"][0]["intact"] = "<script>alert(1)</script>"
    patched = {"checkpoint": "cap", **patching.patch(captioner.model, captioner.tokenizer,
                                                     "a man riding a horse", "a woman riding a horse")}
    last = tab.kept(None, "scan", [scan, {**scan, "checkpoint": "elsewhere"}])
    last = tab.kept(tab.kept(last, "ablation", [one]), "patch", [{**patched, "checkpoint": "elsewhere"}])
    chosen = _of_these(last, ["cap", "other"])
    assert chosen == {"scan": [scan], "ablation": [one]}
    page = report.comparison("<table class='lab-compare'></table>", {"seed": 0}, {"cap": {}},
                             inside={**chosen, "patch": [patched]})
    assert "<h2>Heads ablated</h2>" in page and "cap with heads 1.2 zero-ablated, on 20 test texts" in page
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<h2>Each head ablated in turn</h2>" in page
    lo, hi = scan["change_ci"][1][3]
    assert f"head 2.4: {scan['change'][1][3]:+.3f} [{lo:+.3f}, {hi:+.3f}]" in page
    assert "<h2>Activation patching</h2>" in page and "<th>block 2</th>" in page
    assert report.comparison("<table></table>", {"seed": 0}, {"cap": {}}, inside={}).count("<h2>") == 3


def test_bad_heads_and_models_without_texts_are_refused_in_one_line():
    for text, said in [("3.1", "out of range"), ("1", "BLOCK.HEAD"), ("1.1,1.1", "named twice"),
                       ("", "name the heads"), ("0.1", "out of range")]:
        with pytest.raises(ConfigError, match=said):
            ablation.parse_heads(text, 2, 4)


def test_the_cli_reads_lens_ablation_and_patching_as_json(captioner, store):
    def lab(*args):
        return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True,
                              cwd=ROOT, env={"LAB_STORE": str(store), "PATH": "/usr/bin:/bin"})
    got = lab("lens", "--checkpoint", "cap", "--checkpoint", "cap", "--text", "A man riding a horse", "--json")
    assert got.returncode == 0, got.stderr
    two = json.loads(got.stdout)
    assert len(two) == 2 and two[0]["layers"] == ["embeddings", "block 1", "block 2"]
    got = lab("ablate", "--checkpoint", "cap", "--heads", "1.1", "--n", "20", "--json")
    assert got.returncode == 0 and json.loads(got.stdout)["heads"] == ["1.1"]
    got = lab("patch", "--checkpoint", "cap", "--clean", "A man riding a horse", "--corrupted",
              "A woman riding a bike", "--answer", "on", "--wrong", "in", "--json")
    assert got.returncode == 0 and len(json.loads(got.stdout)["resid"]) == 2
    for args, said in [(("ablate", "--checkpoint", "cap", "--heads", "9.9"), "head 9.9 out of range"),
                       (("patch", "--checkpoint", "cap", "--clean", "A man", "--corrupted", "A tall man"),
                        "equal length in tokens"),
                       (("lens", "--checkpoint", "cap", "--text", "  "), "type a text")]:
        got = lab(*args)
        assert got.returncode == 2 and said in got.stderr and "Traceback" not in got.stderr


def test_attribution_patching_is_the_first_order_change(captioner):
    """Attribution patching's estimate for a head equals the slope of the perplexity along a small
    step towards its ablation (a central difference: the scoring's logits are float32, so the
    step cannot be tiny)."""
    from lab.inside.ablation import _losses, subsets
    import math
    captioner.model.double()
    est = ablation.attribution(captioner, "zero", n=30)["change"]
    _, seqs, _, _ = subsets(captioner, "test", 30, 0, 200)
    pad = captioner.tokenizer.eos_id

    def towards_zero(step):
        def scaled(z):
            z = z.clone()
            z[:, 2] = z[:, 2] * (1 - step)
            return z
        return _losses(captioner.model, seqs, pad, {"blocks.1.attn.z": scaled}).mean().item()
    base = _losses(captioner.model, seqs, pad).mean().item()
    step = 1e-2
    slope = (towards_zero(step) - towards_zero(-step)) / (2 * step) * math.exp(base)
    assert slope == pytest.approx(est[1][2], rel=0.03)
    assert ablation.rank_agreement([[1, 2], [3, 4]], [[10, 20], [30, 40]]) == pytest.approx(1.0)
    assert ablation.rank_agreement([[1, 2], [3, 4]], [[4, 3], [2, 1]]) == pytest.approx(-1.0)


def test_the_points_ablation_patching_and_lens_equal_transformer_lens_on_the_same_gpt2(tmp_path):
    """GPT-2 weights made by `transformers`, imported into the lab and wrapped by TransformerLens
    (its TransformerBridge over the same HF model): every named point holds TransformerLens's
    activation at its hook of the same name; a head zeroed at hook_z, a residual position patched
    at hook_resid_pre, and the lens read from hook_resid_post give the same logits."""
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module
    from lab.storage import interop
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(n_embd=48, n_layer=3, n_head=4, n_positions=64)).save_pretrained(tmp_path)
    interop.import_hf_gpt2(tmp_path, "g")
    ours = checkpoints.load("g").model.eval()
    hf = GPT2LMHeadModel.from_pretrained(tmp_path, attn_implementation="eager").eval()
    tl = build_bridge_from_module(hf, "GPT2LMHeadModel", hf_config=hf.config)
    gen = torch.Generator().manual_seed(1)
    ids, other = (torch.randint(0, 50257, (1, 9), generator=gen) for _ in range(2))
    close = dict(atol=2e-6, rtol=1e-5)

    tl_logits, cache = tl.run_with_cache(ids)
    names = list(points(ours))
    with hooked(ours, read=names) as seen, torch.no_grad():
        torch.testing.assert_close(ours(ids).logits, tl_logits, **close)
    for name in names:
        if name in ("embed", "final_norm"):
            key = {"embed": "blocks.0.hook_resid_pre", "final_norm": "ln_final.hook_normalized"}[name]
        else:
            _, layer, rest = name.split(".", 2)
            key = f"blocks.{layer}." + ("attn.hook_z" if rest == "attn.z" else f"hook_{rest}")
        theirs = cache[key].transpose(1, 2) if name.endswith("attn.z") else cache[key]
        torch.testing.assert_close(seen[name], theirs, **close, msg=name)

    def zero_head(z, hook):
        z = z.clone()
        z[:, :, 2] = 0.0          # TransformerLens's z: (B, T, n_head, head_dim)
        return z
    with torch.no_grad():
        torch.testing.assert_close(
            hooked_logits(ours, other, ablation.ablations([(1, 2)], "zero", None)),
            tl.run_with_hooks(other, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)]), **close)

    def patch_position(x, hook):
        x = x.clone()
        x[:, 4] = cache["blocks.2.hook_resid_pre"][:, 4]
        return x

    def ours_patched(x):
        x = x.clone()
        x[:, 4] = seen["blocks.2.resid_pre"][:, 4]
        return x
    with torch.no_grad():
        torch.testing.assert_close(
            hooked_logits(ours, other, {"blocks.2.resid_pre": ours_patched}),
            tl.run_with_hooks(other, fwd_hooks=[("blocks.2.hook_resid_pre", patch_position)]), **close)
        theirs = hf.lm_head(hf.transformer.ln_f(cache["blocks.1.hook_resid_post"]))[0]
        torch.testing.assert_close(lens.lens_logits(ours, ids[0].tolist())[2], theirs, **close)


def hooked_logits(model, ids, replace):
    with hooked(model, replace=replace):
        return model(ids).logits


def test_an_ablation_scores_bleu_with_paired_intervals(captioner):
    """BLEU-4 forward, backward and harmonic of texts sampled with the same seed: ablating nothing
    changes nothing (every interval is [0, 0]); ablating heads gives an interval around its
    change and a verdict."""
    from lab.inside.ablation import _bleu_change, subsets
    texts, _, _, _ = subsets(captioner, "test", 30, 0, 200)
    same = _bleu_change(captioner, texts, 30, 0, {}, None, "test")
    for name in ("forward", "backward", "harmonic"):
        assert same[name]["change"] == 0.0 and same[name]["change_ci"] == [0.0, 0.0]
        assert 0 < same[name]["intact"] < 1
    r = ablation.ablate(captioner, [(0, 0), (0, 1), (1, 0)], "zero", n=30, n_captions=1)
    h = r["bleu"]["harmonic"]
    assert h["change_ci"][0] <= h["change"] <= h["change_ci"][1] and h["verdict"]
    assert r["bleu"]["bleu_tokens"] == "words"          # a words model: BLEU on words


def test_the_page_bounds_the_lens_and_patching_before_any_work(store):
    """The lens and patching from the page or the API read at most MAX_LENS_TOKENS and
    MAX_PATCH_TOKENS tokens (a model's context may be far longer), refused in one line."""
    from lab.ui import inside as tab
    tok = CharTokenizer(string.ascii_lowercase)
    checkpoints.save(build(tiny_config(vocab_size=tok.vocab_size, n_positions=320)), tok, "long",
                     store)
    over = "a" * tab.MAX_LENS_TOKENS
    with pytest.raises(GenerationError, match=f"is {tab.MAX_LENS_TOKENS + 1} tokens with BOS; "
                                              f"at most {tab.MAX_LENS_TOKENS} can be shown"):
        tab.lens_of("long", over, 5, store)
    assert len(tab.lens_of("long", over[1:], 5, store)["tokens"]) == tab.MAX_LENS_TOKENS
    with pytest.raises(GenerationError, match=re.escape(
            f"the clean prompt: the text is 71 tokens with BOS; at most {tab.MAX_PATCH_TOKENS} can be "
            f"shown here; `python -m lab patch` reads prompts up to the model's context")):
        tab.patch_of("long", "a" * 70, "b" * 70, "", "", store)
    with pytest.raises(GenerationError, match="^the corrupted prompt: the text is 71 tokens"):
        tab.patch_of("long", "a" * 3, "b" * 70, "", "", store)


def test_a_lens_that_would_not_fit_is_refused_before_it_starts(monkeypatch):
    """The lens's memory is estimated from the model and the text before any work; one that
    needs more than this process can get is refused saying how long a text would fit."""
    from lab.config import ModelConfig
    from lab.inside import memory
    smol = ModelConfig(model="llama", n_layer=30, n_head=9, n_embd=576, vocab_size=49152,
                       n_positions=8192, n_inner=1536)
    monkeypatch.setattr(memory, "_bounds", lambda: [(2 * 10 ** 9, "the machine's available memory")])
    with pytest.raises(memory.MemoryRefused, match=r"^the logit lens of 8,192 tokens needs about "
                                                   r"[\d.]+ GB of memory and 2.0 GB is free for it "
                                                   r"here \(the machine's available memory\): use a "
                                                   r"text of at most ([\d,]+) tokens as the lens") as e:
        memory.check_lens(smol, 8192)
    fits = int(re.search(r"at most ([\d,]+) tokens", str(e.value)).group(1).replace(",", ""))
    assert memory.HEADROOM * memory.lens_bytes(smol, fits) <= 2e9 < \
        memory.HEADROOM * memory.lens_bytes(smol, fits + 1)
    memory.check_lens(smol, fits)                      # what it says fits, fits
    model = build(tiny_config(vocab_size=TOK97.vocab_size))
    monkeypatch.setattr(memory, "_bounds", lambda: [(1000, "this process's address-space limit")])
    with pytest.raises(ConfigError, match=r"the logit lens of 4 tokens needs .* \(this process's "
                                          r"address-space limit\): there is no room for it now"):
        lens.logit_lens(model, TOK97, "abc")
    cgroup = __import__("pathlib").Path(__import__("tempfile").mkdtemp())
    (cgroup / "memory.max").write_text("3000000000\n")
    (cgroup / "memory.current").write_text("1000000000\n")
    assert memory._cgroup_room(cgroup) == 2 * 10 ** 9              # a container's limit counts
    (cgroup / "memory.max").write_text("max\n")
    assert memory._cgroup_room(cgroup) is None


def test_the_longest_lens_on_smollm2_under_a_5_gb_limit_is_refused_in_one_line(store):
    """`lab lens` of the longest text the lab takes (4,000 characters, a token each: digits), on
    SmolLM2 in a process limited to 5 GB of address space: one line, refused before any work
    (never `internal error` part way)."""
    import resource
    from lab.storage import smollm2
    smollm2.import_smollm2("smollm2", store=store)
    text = "1" * 4000

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (5 * 2 ** 30, 5 * 2 ** 30))
    done = subprocess.run([sys.executable, "-m", "lab", "--store", str(store), "lens", "--checkpoint",
                           "smollm2", "--text", text], capture_output=True, text=True, cwd=ROOT,
                          preexec_fn=limited, timeout=300)
    said = done.stderr.strip()
    assert done.returncode == 2 and "\n" not in said, said
    # the room left depends on what the process maps: either way, one line before any work
    assert re.fullmatch(r"error: the logit lens of 4,001 tokens needs about [\d.]+ GB of memory and "
                        r"[\d.]+ GB is free for it here \([^)]*\): (use a text of at most [\d,]+ "
                        r"tokens as the lens reads it .*|there is no room for it now)", said), said
    assert "Traceback" not in done.stdout + said


def test_memory_the_machine_did_not_have_is_one_line_not_a_bug(capsys):
    """Should an allocation still fail (torch's RuntimeError, or MemoryError), the command and the
    page say so in one line, as a request to ask for less, never `internal error`."""
    import gradio as gr
    from lab.cli.output import run_command
    from lab.ui.common import friendly

    def alloc(_):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate "
                           "memory: you tried to allocate 39600000000 bytes")
    assert run_command(alloc, None) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and said.startswith("error: the machine ran out of memory for this; ask for less")
    with pytest.raises(gr.Error, match="ran out of memory for this; ask for less"):
        friendly(lambda: (_ for _ in ()).throw(MemoryError()))()
    for e in (OSError(12, "Cannot allocate memory"), RuntimeError("CUDA out of memory. Tried to allocate")):
        assert run_command(lambda _, e=e: (_ for _ in ()).throw(e), None) == 2
    capsys.readouterr()
    assert run_command(lambda _: 1 / 0, None) == 1                # a bug is still a bug
    assert "internal error (ZeroDivisionError" in capsys.readouterr().err
