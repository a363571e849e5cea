"""HF GPT-2 interop with real HF checkpoints that `transformers` itself creates (random weights)."""
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lab.storage import checkpoints, interop
from lab.storage.checkpoints import CheckpointError
from lab.config import ConfigError, DecodeConfig
from lab.modeling.generate import generate


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_embd=48, n_layer=4, n_head=4, n_positions=64)).eval()
    path = tmp_path_factory.mktemp("hf-gpt2")
    hf.save_pretrained(path)
    return path


def _hf(path, keep=None):
    model = GPT2LMHeadModel.from_pretrained(path).eval()
    if keep:
        model.transformer.h = torch.nn.ModuleList([model.transformer.h[i - 1] for i in keep])
    return model


IDS = torch.randint(0, 50257, (3, 17), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("layers", [None, [1, 3], [4, 1]])
def test_import_gives_equal_logits(hf_dir, layers):
    interop.import_hf_gpt2(hf_dir, "imp", layers)
    ck = checkpoints.load("imp")
    with torch.no_grad():
        diff = (ck.model(IDS).logits - _hf(hf_dir, layers)(IDS).logits).abs().max()
    assert diff < 1e-5
    assert ck.meta["layers"] == (layers or [1, 2, 3, 4])


def test_export_loads_in_transformers(hf_dir, tmp_path):
    interop.import_hf_gpt2(hf_dir, "imp", [2, 4])
    out = interop.export_hf_gpt2("imp", tmp_path / "exported")
    again = GPT2LMHeadModel.from_pretrained(out).eval()
    with torch.no_grad():
        assert (again(IDS).logits - _hf(hf_dir, [2, 4])(IDS).logits).abs().max() < 1e-5


def test_untied_scratch_model_exports(tmp_path):
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    from tests.conftest import tiny_config
    model = build(tiny_config(vocab_size=50257)).eval()     # the assignment's untied output layer
    checkpoints.save(model, tokenizers.gpt2(), "scratch")
    hf = GPT2LMHeadModel.from_pretrained(interop.export_hf_gpt2("scratch", tmp_path / "o")).eval()
    with torch.no_grad():
        assert (hf(IDS[:, :10]).logits - model(IDS[:, :10]).logits).abs().max() < 1e-5


def test_greedy_generation_equals_transformers_generate(hf_dir):
    interop.import_hf_gpt2(hf_dir, "imp")
    ck = checkpoints.load("imp")
    prompts = [[50256, 32, 3797], [50256, 317, 1862]]
    ours = generate(ck.model, prompts, DecodeConfig(decoder="greedy", max_new_tokens=12), 50256)
    hf = _hf(hf_dir)
    for prompt, (new, _, _) in zip(prompts, ours):
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                          eos_token_id=50256, pad_token_id=50256)[0, len(prompt):].tolist()
        if 50256 in out:
            out = out[: out.index(50256)]
        assert new == out


def test_bad_layer_selections(hf_dir):
    with pytest.raises(ConfigError, match=r"layers \[5\] out of range: this model has blocks 1 to 4"):
        interop.import_hf_gpt2(hf_dir, "x", [1, 5])
    with pytest.raises(ConfigError, match="repeats block"):
        interop.import_hf_gpt2(hf_dir, "x", [2, 2])
    with pytest.raises(ConfigError, match="block numbers"):
        interop.parse_layers("1,six")


def test_not_a_gpt2_directory(tmp_path):
    with pytest.raises(CheckpointError, match="config.json is missing"):
        interop.import_hf_gpt2(tmp_path, "x")


def test_export_refuses_non_standard_parts(tmp_path):
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    from tests.conftest import tiny_config
    checkpoints.save(build(tiny_config(vocab_size=50257, norm="rmsnorm")), tokenizers.gpt2(), "odd")
    with pytest.raises(CheckpointError, match="cannot be exported as HF GPT-2.*rmsnorm"):
        interop.export_hf_gpt2("odd", tmp_path / "o")


def test_an_uploaded_folder_or_zip_imports_like_the_folder(hf_dir, tmp_path, store):
    """The browser's upload: the files themselves, or one .zip of the folder save_pretrained wrote
    (here nested one folder down, as zipping a folder does)."""
    import zipfile
    archive = tmp_path / "gpt2.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in hf_dir.iterdir():
            z.write(f, f"my-gpt2/{f.name}")
    interop.import_hf_gpt2_upload([archive], "from-zip", [1, 3])
    interop.import_hf_gpt2_upload([hf_dir / "config.json", hf_dir / "model.safetensors"], "from-files")
    with torch.no_grad():
        assert (checkpoints.load("from-zip").model(IDS).logits - _hf(hf_dir, [1, 3])(IDS).logits).abs().max() < 1e-5
        assert (checkpoints.load("from-files").model(IDS).logits - _hf(hf_dir)(IDS).logits).abs().max() < 1e-5
    assert not any((store / ".lab" / "uploads").iterdir())              # the scratch folder went


def test_a_hostile_or_wrong_upload_gets_one_message_and_writes_nothing_outside(hf_dir, tmp_path, store):
    import zipfile
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.write(hf_dir / "config.json", "../../outside/config.json")
        z.write(hf_dir / "model.safetensors", "/abs/model.safetensors")
        z.writestr("../../outside/run.sh", "echo owned")
    before = {p for p in store.rglob("*")} | {p for p in tmp_path.rglob("*")}
    interop.import_hf_gpt2_upload([evil], "evil")                         # only the base names count
    after = {p for p in store.rglob("*")} | {p for p in tmp_path.rglob("*")}
    new = {p.relative_to(store) for p in after - before if p.is_file()}
    assert all(p.parts[0] == "evil" or p.parts[:2] == (".lab", "locks") for p in new), new
    assert not any((store / ".lab" / "uploads").iterdir())              # the scratch folder went
    assert not any(p.name == "run.sh" for p in after)
    assert checkpoints.info("evil")["pretrained"] == "upload: evil.zip"
    not_zip = tmp_path / "x.zip"
    not_zip.write_bytes(b"PK no zip")
    empty = tmp_path / "empty.zip"
    zipfile.ZipFile(empty, "w").close()
    other = tmp_path / "pytorch_model.bin"
    other.write_bytes(b"pickle")
    twice = tmp_path / "twice.zip"
    with zipfile.ZipFile(twice, "w") as z:
        z.write(hf_dir / "config.json", "a/config.json")
        z.write(hf_dir / "config.json", "b/config.json")
    for files, expected in (([not_zip], "not a readable .zip"), ([empty], "holds no config.json"),
                            ([other], "not a file of an HF GPT-2 checkpoint"), ([], "upload the"),
                            ([twice], "holds two config.json"),
                            ([hf_dir / "config.json", hf_dir / "config.json"], "two files named config.json")):
        with pytest.raises(CheckpointError, match=expected):
            interop.import_hf_gpt2_upload(files, "bad")
    assert "bad" not in checkpoints.names()
    import lab.storage.interop
    lab.storage.interop.MAX_UPLOAD_BYTES = 1000                                   # a bomb: refused unread
    try:
        with pytest.raises(CheckpointError, match="unpacks to more than"):
            interop.import_hf_gpt2_upload([evil], "bomb")
    finally:
        lab.storage.interop.MAX_UPLOAD_BYTES = 8 * 2 ** 30
    with pytest.raises(CheckpointError, match="'evil' already exists"):     # refused before unpacking
        interop.import_hf_gpt2_upload([not_zip], "evil")
