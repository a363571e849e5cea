"""Hugging Face Llama both ways: a `LlamaForCausalLM` folder that `transformers` itself writes
imports with any block selection and equal logits; a lab `llama` checkpoint (a model built here,
SmolLM2 and a cut of it) exports to a folder that `AutoModelForCausalLM.from_pretrained` loads,
with the lab's logits and the same greedy text through `pipeline`; what HF cannot represent, or
the lab cannot compute, is refused naming it."""
import json
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, pipeline

from lab.config import DecodeConfig, ModelConfig
from lab.inputs import tokenizers
from lab.modeling.generate import generate
from lab.modeling.model import build
from lab.storage import checkpoints, interop, smollm2
from lab.storage.checkpoints import CheckpointError
from tests.conftest import ROOT

IDS = torch.randint(0, 50257, (3, 19), generator=torch.Generator().manual_seed(0))


def _hf_llama(tie: bool) -> LlamaForCausalLM:
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=50257, hidden_size=48, intermediate_size=80, num_hidden_layers=4,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": 5000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=tie, bos_token_id=50256, eos_token_id=50256)).eval()


def _saved(tie: bool, tmp_path_factory):
    """A folder as `save_pretrained` writes it, with GPT-2's tokenizer files."""
    path = tmp_path_factory.mktemp("hf-llama")
    _hf_llama(tie).save_pretrained(path)
    tokenizers.gpt2().hf.save_pretrained(str(path))
    return path


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def hf_dir(request, tmp_path_factory):
    return _saved(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def tied_dir(tmp_path_factory):
    return _saved(True, tmp_path_factory)


def _cut(model: LlamaForCausalLM, keep):
    model.model.layers = torch.nn.ModuleList([model.model.layers[i - 1] for i in keep])
    model.config.num_hidden_layers = len(keep)
    return model


@pytest.mark.parametrize("layers", [None, [1, 3], [4, 2, 1]])
def test_import_gives_equal_logits(hf_dir, layers):
    interop.import_hf(hf_dir, "imp", layers)
    ck = checkpoints.load("imp")
    assert ck.config.model == "llama" and ck.meta["format"] == "hf-llama"
    assert ck.config.settings == {"attention": {"kv_groups": 2}, "positional": {"theta": 5000.0}}
    hf = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    hf = _cut(hf, layers) if layers else hf
    with torch.no_grad():
        diff = (ck.model(IDS).logits - hf(IDS, use_cache=False).logits).abs().max().item()
    assert diff < 1e-4
    assert ck.tokenizer.kind.startswith("hf-") and ck.tokenizer.eos_id == 50256


def _tiny_llama(**over) -> ModelConfig:
    return ModelConfig.from_dict({"model": "llama", "vocab_size": 50257, "n_positions": 64,
                                  "n_embd": 32, "n_layer": 3, "n_head": 4, "n_inner": 48,
                                  "attention.kv_groups": 2, **over})


@pytest.mark.parametrize("tie, groups", [(True, 2), (False, 2), (True, "family default")])
def test_a_llama_made_here_exports_and_comes_back(tmp_path, tie, groups):
    """Tied or not; its key/value heads set, or left to the family (blank: read from its weights)."""
    torch.manual_seed(1)
    cfg = _tiny_llama(tie_embeddings=tie) if groups != "family default" else ModelConfig.from_dict(
        {k: v for k, v in _tiny_llama(tie_embeddings=tie).to_dict().items() if k != "settings"})
    model = build(cfg).eval()
    checkpoints.save(model, tokenizers.gpt2(), "made")
    out = interop.export_hf("made", tmp_path / "out")
    assert {"config.json", "model.safetensors", "tokenizer.json", "lab_tokenizer.json"} <= \
        {p.name for p in out.iterdir()}
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    assert isinstance(hf, LlamaForCausalLM)
    with torch.no_grad():
        assert (model(IDS).logits - hf(IDS, use_cache=False).logits).abs().max().item() < 1e-4
    # greedy decoding agrees token for token
    prompt = [50256] + IDS[0, :4].tolist()
    (new, _, _), = generate(model, [prompt], DecodeConfig(decoder="greedy", max_new_tokens=12), 50256)
    theirs = hf.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=12,
                         eos_token_id=50256, pad_token_id=50256)[0, len(prompt):].tolist()
    assert new == theirs[:theirs.index(50256)] if 50256 in theirs else new == theirs
    # and back, at several block selections, with its tokenizer's kind
    for i, layers in enumerate(([1, 2, 3], [3, 1], [2])):
        interop.import_hf(out, f"back{i}", layers)
        back = checkpoints.load(f"back{i}")
        assert back.tokenizer.kind == "gpt2"
        cut = checkpoints.keep_blocks(model, layers)
        with torch.no_grad():
            assert (back.model(IDS).logits - cut(IDS).logits).abs().max().item() < 1e-5


def test_smollm2_and_a_cut_of_it_export_with_the_same_logits_and_text(smollm2_hf, tmp_path):
    hf_model, hf_tok = smollm2_hf
    tok = tokenizers.HFTokenizer(hf_tok, "smollm2")
    text = "A man riding a wave on top of a surfboard ."
    ids = torch.tensor([[tok.eos_id] + tok.encode(text)])
    for layers in ([1, 15, 30], None):
        name = "smol-cut" if layers else "smol-all"
        model, _ = smollm2.to_lab(hf_model, layers)
        checkpoints.save(model, tok, name)
        out = interop.export_hf(name, tmp_path / name)
        exported = AutoModelForCausalLM.from_pretrained(out).eval()
        assert AutoTokenizer.from_pretrained(out)(text).input_ids == ids[0].tolist()   # its start
        with torch.no_grad():
            diff = (model(ids).logits - exported(ids, use_cache=False).logits).abs().max().item()
        assert diff < 1e-4, (name, diff)
        if layers is None:      # the whole model writes text: the same greedy words through pipeline
            gen = pipeline("text-generation", model=str(out), tokenizer=str(out), device="cpu")
            said = gen("A dog", do_sample=False, max_new_tokens=8, return_tensors=True)[0]
            prompt = gen.tokenizer("A dog")["input_ids"]
            assert prompt == [tok.eos_id] + tok.encode("A dog")
            (new, _, _), = generate(model, [prompt], DecodeConfig(decoder="greedy", max_new_tokens=8),
                                    tok.eos_id)
            assert said["generated_token_ids"] == prompt + new
    assert checkpoints.info("smol-all")["model"]["n_layer"] == 30


def test_parts_hf_has_not_are_refused_by_name(tmp_path):
    checkpoints.save(build(_tiny_llama(positional="alibi")).eval(), tokenizers.gpt2(), "alibi")
    with pytest.raises(CheckpointError, match=r"cannot be exported as HF Llama: it uses \{'positional': 'alibi'\}"):
        interop.export_hf("alibi", tmp_path / "o")
    checkpoints.save(build(ModelConfig.from_dict({"model": "perceiver", "vocab_size": 50257,
                                                  "n_positions": 64, "n_embd": 32, "n_layer": 2,
                                                  "n_head": 4})).eval(), tokenizers.gpt2(), "perc")
    with pytest.raises(CheckpointError, match="is a perceiver model; Hugging Face export takes the gpt2 and llama"):
        interop.export_hf("perc", tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("change,said", [
    (lambda c: c.update(model_type="mistral", architectures=["MistralForCausalLM"]),
     r"holds a 'mistral' model \(MistralForCausalLM\); the lab imports gpt2 \(GPT2LMHeadModel\) and llama"),
    (lambda c: c.update(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
     "does not compute: rope_scaling of type 'linear'"),
    (lambda c: c.update(hidden_act="gelu"), "does not compute: hidden_act='gelu'"),
    (lambda c: c.update(attention_bias=True), "does not compute: attention_bias=True"),
    (lambda c: c.pop("hidden_size"), "is not an HF Llama config: it lacks hidden_size"),
    (lambda c: c.update(num_hidden_layers=0), "num_hidden_layers"),
])
def test_a_folder_the_lab_cannot_compute_is_refused_by_name(tied_dir, tmp_path, change, said):
    folder = tmp_path / "odd"
    shutil.copytree(tied_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=said):
        interop.import_hf(folder, "odd")
    assert "odd" not in checkpoints.names()


def test_missing_weights_and_tokenizer_are_named(hf_dir, tmp_path):
    from safetensors.torch import load_file, save_file
    folder = tmp_path / "lacking"
    shutil.copytree(hf_dir, folder)
    state = load_file(str(folder / "model.safetensors"))
    state.pop("model.layers.1.mlp.up_proj.weight")
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError, match="the weights lack model.layers.1.mlp.up_proj.weight"):
        interop.import_hf(folder, "x")
    interop.import_hf(folder, "x", [1])              # the blocks kept are whole
    for f in ("tokenizer.json", "vocab.json"):
        (folder / f).unlink(missing_ok=True)
    with pytest.raises(CheckpointError, match="has no tokenizer files"):
        interop.import_hf(folder, "y", [1])


def test_an_uploaded_llama_zip_imports_like_its_folder(tied_dir, tmp_path):
    hf_dir = tied_dir
    archive = shutil.make_archive(str(tmp_path / "llama"), "zip", root_dir=hf_dir)
    interop.import_hf_upload([archive], "up", [2, 4])
    folder = checkpoints.load("up")
    interop.import_hf(hf_dir, "direct", [2, 4])
    with torch.no_grad():
        assert torch.equal(folder.model(IDS).logits, checkpoints.load("direct").model(IDS).logits)
    assert checkpoints.info("up")["pretrained"] == "upload: llama.zip"


def test_the_cli_imports_and_exports_hf(tied_dir, tmp_path, store):
    hf_dir = tied_dir
    env_run = dict(cwd=ROOT, capture_output=True, text=True, timeout=300)
    done = subprocess.run([sys.executable, "-m", "lab", "import", "hf", str(hf_dir), "--name", "cli",
                           "--layers", "1,4"], **env_run)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "exported"
    done = subprocess.run([sys.executable, "-m", "lab", "export", "hf", "cli", str(out)], **env_run)
    assert done.returncode == 0 and "AutoModelForCausalLM" in done.stdout, done.stderr
    assert AutoModelForCausalLM.from_pretrained(out).config.num_hidden_layers == 2
    done = subprocess.run([sys.executable, "-m", "lab", "import", "hf", str(tmp_path), "--name", "z"],
                          **env_run)
    assert done.returncode != 0 and done.stderr.startswith("error: ") and "config.json is missing" \
        in done.stderr and "Traceback" not in done.stderr


def test_the_page_exports_a_llama_as_a_zip_that_uploads_back(tmp_path, monkeypatch):
    """The Checkpoints tab's Export (no folder: a .zip download) and its upload, as the page calls
    them: a llama cut goes out to LlamaForCausalLM and comes back with the same logits."""
    from lab.ui import checkpoints as tab
    monkeypatch.delenv("LAB_ALLOWED_DIRS", raising=False)
    torch.manual_seed(2)
    model = build(_tiny_llama()).eval()
    checkpoints.save(model, tokenizers.gpt2(), "page")
    message, archive = tab.export_hf("page", "")
    assert "AutoModelForCausalLM" in message
    shutil.unpack_archive(archive, tmp_path / "unzipped")
    assert isinstance(AutoModelForCausalLM.from_pretrained(tmp_path / "unzipped"), LlamaForCausalLM)
    message, _ = tab.import_hf_upload([archive], "1,3", "page-back")
    assert "Imported **page-back**" in message
    with torch.no_grad():
        assert torch.allclose(checkpoints.load("page-back").model(IDS).logits,
                              checkpoints.keep_blocks(model, [1, 3])(IDS).logits, atol=1e-5)


def test_export_with_no_checkpoint_chosen_says_what_to_do_next(tmp_path, monkeypatch):
    """An empty store: import or train one first; a store with checkpoints: choose one."""
    from lab.errors import LabError
    from lab.ui import checkpoints as tab
    from lab.ui.common import EMPTY_STORE
    with pytest.raises(LabError, match=EMPTY_STORE.split(":")[0]):
        tab.export_hf("", "", store=str(tmp_path))
    checkpoints.save(build(_tiny_llama()).eval(), tokenizers.gpt2(), "one", str(tmp_path))
    with pytest.raises(LabError, match="choose the checkpoint to export in the list"):
        tab.export_hf(None, "", store=str(tmp_path))
