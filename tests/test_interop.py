"""HF GPT-2 interop with real HF checkpoints that `transformers` itself creates (random weights),
and uploads of them: bounded by what their config.json says the weights can need."""
import os
import subprocess
import sys
import zipfile

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from lab.storage import checkpoints, interop, uploads
from lab.storage.checkpoints import CheckpointError
from lab.config import ConfigError, DecodeConfig, ModelConfig
from lab.modeling.generate import generate
from tests.conftest import bytes_written, zip_bomb


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
    interop.import_hf_upload([archive], "from-zip", [1, 3])
    interop.import_hf_upload([hf_dir / "config.json", hf_dir / "model.safetensors"], "from-files")
    with torch.no_grad():
        assert (checkpoints.load("from-zip").model(IDS).logits - _hf(hf_dir, [1, 3])(IDS).logits).abs().max() < 1e-5
        assert (checkpoints.load("from-files").model(IDS).logits - _hf(hf_dir)(IDS).logits).abs().max() < 1e-5
    assert not any((store / ".lab" / "uploads").iterdir())              # the scratch folder went


def test_a_hostile_or_wrong_upload_gets_one_message_and_writes_nothing_outside(hf_dir, tmp_path, store,
                                                                                monkeypatch):
    import zipfile
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as z:
        z.write(hf_dir / "config.json", "../../outside/config.json")
        z.write(hf_dir / "model.safetensors", "/abs/model.safetensors")
        z.writestr("../../outside/run.sh", "echo owned")
    before = {p for p in store.rglob("*")} | {p for p in tmp_path.rglob("*")}
    interop.import_hf_upload([evil], "evil")                         # only the base names count
    after = {p for p in store.rglob("*")} | {p for p in tmp_path.rglob("*")}
    new = {p.relative_to(store) for p in after - before if p.is_file()}
    # the checkpoint, its name's lock, and the verdict on the weights the import wrote
    assert all(p.parts[0] == "evil" or p.parts[:2] == (".lab", "locks")
               or p.parts == (".lab", "health", "evil.json") for p in new), new
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
                            ([other], "not a file of an HF GPT-2 or Llama checkpoint"), ([], "upload the"),
                            ([twice], "holds two config.json"),
                            ([hf_dir / "config.json", hf_dir / "config.json"], "two files named config.json")):
        with pytest.raises(CheckpointError, match=expected):
            interop.import_hf_upload(files, "bad")
    assert "bad" not in checkpoints.names()
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 1000)              # too large: refused unread
    with pytest.raises(CheckpointError, match="evil.zip is .* unpacked, more than an upload may hold "
                                              r"\(1,000 bytes\)"):
        interop.import_hf_upload([evil], "bomb")
    with pytest.raises(CheckpointError, match="'evil' already exists"):     # refused before unpacking
        interop.import_hf_upload([not_zip], "evil")


def _files(store) -> dict:
    """The store's files (not the lab's lock files) with their sizes."""
    return {p.relative_to(store).as_posix(): p.stat().st_size for p in store.rglob("*")
            if p.is_file() and not p.relative_to(store).as_posix().startswith(".lab/locks")}


def _import_measured(archive, store) -> tuple[str, int]:
    """An upload's import that must be refused: (its one line, bytes this process wrote meanwhile)."""
    before = bytes_written(os.getpid())
    with pytest.raises(CheckpointError) as refused:
        interop.import_hf_upload([archive], "bomb")
    return str(refused.value), bytes_written(os.getpid()) - before


def test_a_zip_bomb_is_refused_before_it_fills_the_disk(hf_dir, tmp_path, store):
    """A 1 GiB model.safetensors of zeros (a 1 MB .zip) beside the config.json of a model whose
    weights take 10 MB: refused by its header, with next to nothing written, the store as it was."""
    bomb = zip_bomb(tmp_path / "bomb.zip", hf_dir / "config.json", 2 ** 30)
    assert bomb.stat().st_size < 2 * 2 ** 20
    before = _files(store)
    said, written = _import_measured(bomb, store)
    assert said.startswith("model.safetensors in bomb.zip is 1,073.7 MB unpacked, more than a GPT-2 "
                           "of its config.json (4 blocks of width 48, vocabulary 50257, 64 positions) "
                           "can need (10.4 MB)") and "\n" not in said
    assert written < 2 ** 20, written              # config.json, the ledger's lines
    assert _files(store) == before and not any((store / ".lab" / "uploads").iterdir())


def test_a_zip_whose_header_lies_unpacks_no_further_than_the_header_says(hf_dir, tmp_path, store):
    """The same bomb with its headers saying 1 MiB: refused as the lie shows (Python's zipfile reads
    no further than the header says, then finds the mismatch), with next to nothing written; and
    the lab's own count refuses a member whose bytes pass its limit, whatever its header says."""
    liar = zip_bomb(tmp_path / "liar.zip", hf_dir / "config.json", 2 ** 30, lie=2 ** 20)
    before = _files(store)
    said, written = _import_measured(liar, store)
    assert said == "liar.zip is not a readable .zip (Bad CRC-32 for file 'gpt2/model.safetensors')"
    assert written < 2 ** 20, written
    assert _files(store) == before and not any((store / ".lab" / "uploads").iterdir())
    dest = tmp_path / "unpacked"
    dest.mkdir()
    with zipfile.ZipFile(zip_bomb(tmp_path / "honest.zip", hf_dir / "config.json", 8 * 2 ** 20)) as z:
        member = z.getinfo("gpt2/model.safetensors")
        with pytest.raises(CheckpointError, match=r"model.safetensors in x.zip is more than its header "
                                                  r"says \(8.4 MB\) unpacked, more than the test's "
                                                  r"limit \(3.0 MB\)"):
            uploads._unpack(z, member, dest, "x.zip", {"model.safetensors": (3_000_000, "the test's limit")},
                            room=2 ** 40)
    assert (dest / "model.safetensors").stat().st_size <= 3_000_000


def test_an_upload_takes_its_tokenizer_files_up_to_a_small_limit(hf_dir, tmp_path, store):
    archive = tmp_path / "big-vocab.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for f in hf_dir.iterdir():
            z.write(f, f"gpt2/{f.name}")
        z.writestr("gpt2/vocab.json", b" " * (interop.SMALL_FILE_LIMIT[0] + 1))
    with pytest.raises(CheckpointError, match=r"^vocab.json in big-vocab.zip is 33.6 MB unpacked, more "
                                              r"than a tokenizer or settings file may hold \(33.6 MB\)$"):
        interop.import_hf_upload([archive], "big")
    (tmp_path / "files").mkdir()
    big = tmp_path / "files" / "model.safetensors"
    big.write_bytes(bytes(11 * 10 ** 6))
    with pytest.raises(CheckpointError, match=r"^the uploaded model.safetensors is 11.0 MB, more than a "
                                              r"GPT-2 of its config.json .* can need \(10.4 MB\)$"):
        interop.import_hf_upload([hf_dir / "config.json", big], "big")
    assert "big" not in checkpoints.names() and not any((store / ".lab" / "uploads").iterdir())


def test_the_weights_limit_holds_real_gpt2_files_with_little_room(tmp_path):
    """The limit from config.json is at least the file save_pretrained writes, and within 3% of it;
    for GPT-2 small, the hub's model.safetensors (548,105,171 bytes, masks included) fits too."""
    for kw in (dict(n_embd=48, n_layer=4, n_head=4, n_positions=64),
               dict(n_embd=32, n_layer=2, n_head=4, n_positions=64, tie_word_embeddings=False)):
        folder = tmp_path / str(len(kw))
        GPT2LMHeadModel(GPT2Config(**kw)).save_pretrained(folder)
        hf = interop._read_hf_config(folder)
        limit = interop.weights_limit(interop._imported_config(folder, hf, None)[1], hf)
        assert 1 <= limit / (folder / "model.safetensors").stat().st_size < 1.03
    small = dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    limit = interop.weights_limit(ModelConfig.from_dict({"model": "gpt2", "tie_embeddings": True,
                                                         **small}), small)
    assert 548_105_171 <= limit < 1.02 * 548_105_171


def test_an_upload_larger_than_the_free_disk_is_refused_before_unpacking(hf_dir, tmp_path, store,
                                                                         monkeypatch):
    archive = _zipped(hf_dir, tmp_path / "gpt2.zip")
    real = uploads.shutil.disk_usage
    monkeypatch.setattr(uploads.shutil, "disk_usage", lambda p: real(p)._replace(free=10 ** 6))
    with pytest.raises(CheckpointError, match=r"^gpt2.zip unpacks to 10.1 MB and the store's disk has "
                                              r"1.0 MB free; free some space first$"):
        interop.import_hf_upload([archive], "full")
    assert "full" not in checkpoints.names() and not any((store / ".lab" / "uploads").iterdir())


def _zipped(folder, archive):
    """An HF folder as a browser would upload it: a .zip holding it under gpt2/."""
    with zipfile.ZipFile(archive, "w") as z:
        for f in folder.iterdir():
            z.write(f, f"gpt2/{f.name}")
    return archive


def test_uploads_in_flight_together_stay_within_the_free_disk(hf_dir, tmp_path, store, monkeypatch):
    """An upload that has said it will unpack 8 MB and written none yet keeps them, and as much
    again for the checkpoint its import saves: a 10.1 MB one beside it on a disk of 24 MB free is
    refused, saying why; what the first writes is no longer owed; once it ends the second goes in."""
    archive = _zipped(hf_dir, tmp_path / "gpt2.zip")
    real = uploads.shutil.disk_usage
    monkeypatch.setattr(uploads.shutil, "disk_usage", lambda p: real(p)._replace(free=24 * 10 ** 6))
    with uploads.scratch() as first:
        uploads._check_room("first.zip", 8 * 10 ** 6, first)         # claimed, nothing written yet
        with pytest.raises(CheckpointError, match=r"^gpt2.zip unpacks to 10.1 MB and the store's disk "
                                                  r"has 24.0 MB free, 16.0 MB of it kept for 1 other "
                                                  r"upload\(s\) in progress; free some space first, or "
                                                  r"try again when they are done$"):
            interop.import_hf_upload([archive], "second")
        (first / "model.safetensors").write_bytes(bytes(7 * 10 ** 6))   # written: no longer owed,
        monkeypatch.setattr(uploads.shutil, "disk_usage",                 # the disk has less free
                            lambda p: real(p)._replace(free=24 * 10 ** 6 - 7 * 10 ** 6))
        with pytest.raises(CheckpointError, match=r"has 17.0 MB free, 9.0 MB of it kept for 1 other"):
            interop.import_hf_upload([archive], "second")
    monkeypatch.setattr(uploads.shutil, "disk_usage", lambda p: real(p)._replace(free=24 * 10 ** 6))
    interop.import_hf_upload([archive], "second")
    assert "second" in checkpoints.names() and not [f for f in uploads.uploads_dir().iterdir() if f.is_dir()]


def test_an_upload_in_another_process_is_kept_and_a_killed_one_frees_its_claim(hf_dir, tmp_path, store,
                                                                              monkeypatch):
    """Claims are the store's, not a process's: an upload that another process (a second app, a
    command) has claimed 8 MB for is counted here; killed with -9, its claim counts no more, and
    the next app start clears its folder but leaves one whose process still runs."""
    archive = _zipped(hf_dir, tmp_path / "gpt2.zip")
    real = uploads.shutil.disk_usage
    monkeypatch.setattr(uploads.shutil, "disk_usage", lambda p: real(p)._replace(free=24 * 10 ** 6))
    other = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom lab.storage import uploads\n"
        "with uploads.scratch(sys.argv[1]) as f:\n"
        "    uploads._check_room('other.zip', 8 * 10 ** 6, f)\n    print('claimed', flush=True)\n"
        "    time.sleep(600)\n"), str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "claimed"
        with pytest.raises(CheckpointError, match=r"16.0 MB of it kept for 1 other upload\(s\) in progress"):
            interop.import_hf_upload([archive], "second")
        mine = uploads.uploads_dir()
        with uploads.scratch() as running:        # this process's own, still running
            uploads.clear()                       # an app starting now: both folders in use stay
            assert running.is_dir() and len([f for f in mine.iterdir() if f.is_dir()]) == 2
            other.kill()
            other.wait()
            uploads.clear()                       # the killed one's goes, this one's stays
            assert [f for f in mine.iterdir() if f.is_dir()] == [running]
    finally:
        other.kill()
        other.wait()
    interop.import_hf_upload([archive], "second")            # its claim gone: room again
    assert "second" in checkpoints.names()


@pytest.mark.parametrize("value, kind", [(float("nan"), "NaN"), (float("inf"), "inf")])
def test_weights_holding_nan_or_inf_are_refused_at_import(hf_dir, tmp_path, store, value, kind):
    """The store never takes them in: the import names the tensor and writes nothing (the folder
    from transformers, one value poisoned)."""
    import shutil
    from safetensors.torch import load_file, save_file
    bad = tmp_path / "poisoned"
    shutil.copytree(hf_dir, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    tensors["transformer.h.1.mlp.c_fc.weight"].view(-1)[7] = value
    save_file(tensors, str(bad / "model.safetensors"), metadata={"format": "pt"})
    before = _files(store) if store.exists() else {}
    with pytest.raises(CheckpointError) as e:
        interop.import_hf(bad, "poisoned", store=store)
    assert str(e.value) == (f"{bad}: the weights file holds {kind} in transformer.h.1.mlp.c_fc.weight (1 of "
                            f"{48 * 4 * 48:,} values); nothing imported")
    assert (_files(store) if store.exists() else {}) == before and "poisoned" not in checkpoints.names(store)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_an_export_reads_and_writes_through_the_plain_hf_api_as_in_the_lab(tmp_path, family):
    """From the exported folder alone: AutoTokenizer adds the start token the lab reads every text
    after; config.json, generation_config.json and the tokenizer name the same start, end and
    padding tokens; generate() and pipeline("text-generation"), greedy, write the lab's greedy
    continuation token for token (a model with each family's defaults and GPT-2's tokenizer)."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    from lab.inputs import tokenizers
    from lab.modeling.generate import sample_captions
    from lab.modeling.model import build
    from tests.conftest import tiny_config
    torch.manual_seed(1)
    tok = tokenizers.gpt2()
    model = build(ModelConfig.from_dict({**tiny_config(vocab_size=50257).to_dict(), "model": family,
                                         **({} if family == "gpt2" else {"norm": None, "attention": None,
                                            "positional": None, "mlp": None, "bias": None,
                                            "tie_embeddings": None, "settings": {}})})).eval()
    checkpoints.save(model, tok, "made-here", tmp_path / "store")
    out = interop.export_hf("made-here", tmp_path / "out", tmp_path / "store")
    text, n = "A man riding a", 12
    ours = sample_captions(model, tok, 1, DecodeConfig(decoder="greedy", max_new_tokens=n),
                           prompt=text)[0]

    hf_tok = AutoTokenizer.from_pretrained(out)
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = hf_tok(text, return_tensors="pt").input_ids
    assert ids[0, 0].item() == 50256 and ids[0, 1:].tolist() == tok.encode(text)
    gen = json.loads((out / "generation_config.json").read_text())
    said = {(hf.config.bos_token_id, hf.config.eos_token_id, hf.config.pad_token_id),
            (gen["bos_token_id"], gen["eos_token_id"], gen["pad_token_id"]),
            (hf_tok.bos_token_id, hf_tok.eos_token_id, hf_tok.pad_token_id)}
    assert said == {(50256, 50256, 50256)}
    new = hf.generate(ids, max_new_tokens=n, do_sample=False)[0, ids.size(1):].tolist()
    if 50256 in new:
        new = new[:new.index(50256)]
    assert tok.encode(text) + new == ours.tokens, (new, ours.tokens)
    piped = pipeline("text-generation", model=str(out), device="cpu")(text, max_new_tokens=n,
                                                                      do_sample=False)
    assert piped[0]["generated_text"] == text + tok.decode(new)
