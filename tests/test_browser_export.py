"""A model out of the lab and back, from the browser alone: the Checkpoints tab exports a llama
checkpoint (grouped-query attention) as a .zip the browser downloads, `transformers` loads what
it holds as a LlamaForCausalLM with the lab's logits, the same checkpoint goes out as a GGUF file
with its Ollama Modelfile, and the .zip uploaded back with a block selection is a checkpoint
again."""
import re
import shutil
from pathlib import Path

import pytest
import torch

from lab.inputs import tokenizers
from lab.modeling.model import build
from lab.storage import checkpoints
from tests.conftest import serving
from tests.test_browser import CHROMIUM, _choose, _shot, _tab
from tests.test_hf_llama import IDS, _tiny_llama

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make test installs it)")


def test_a_llama_goes_out_as_a_zip_download_and_comes_back_cut(blank_page, tmp_path, monkeypatch):
    from playwright.sync_api import expect
    from transformers import AutoModelForCausalLM, LlamaForCausalLM
    monkeypatch.delenv("LAB_ALLOWED_DIRS", raising=False)
    store = tmp_path / "store"
    store.mkdir()
    torch.manual_seed(3)
    model = build(_tiny_llama()).eval()
    checkpoints.save(model, tokenizers.gpt2(), "mine", store, provenance={"source": "scratch"})

    with serving(store) as url:
        page = blank_page
        page.goto(url)
        _tab(page, "Checkpoints")
        _choose(page, "#checkpoints-chosen", "mine")
        expect(page.locator("#export-name input")).to_have_value("mine")      # follows the pick above
        page.locator("#export-go").click()
        expect(page.locator("#export-message")).to_contain_text("Exported mine: download the .zip below",
                                                                timeout=60_000)
        link = page.locator("#export-file a").first
        expect(link).to_have_attribute("download", re.compile(r"^mine-hf-.*\.zip$"))
        _shot(page, "export-zip")
        with page.expect_download() as got:
            link.click()
        archive = tmp_path / "mine-hf.zip"
        got.value.save_as(archive)
        shutil.unpack_archive(archive, tmp_path / "unzipped")
        hf = AutoModelForCausalLM.from_pretrained(tmp_path / "unzipped").eval()
        assert isinstance(hf, LlamaForCausalLM) and hf.config.num_key_value_heads == 2
        with torch.no_grad():
            assert (model(IDS).logits - hf(IDS, use_cache=False).logits).abs().max().item() < 1e-4

        # the same checkpoint as GGUF for llama.cpp: the file and its Ollama Modelfile, both downloads
        page.locator("#export-gguf-type").get_by_label("q8_0").check()
        page.locator("#export-gguf-go").click()
        expect(page.locator("#export-message")).to_contain_text("Exported mine as GGUF (q8_0): download "
                                                                "both files below", timeout=60_000)
        links = page.locator("#export-gguf-files a")
        expect(links).to_have_count(2)
        gguf_file, modelfile = tmp_path / "mine.gguf", tmp_path / "Modelfile"
        for link, to in zip(links.all(), (gguf_file, modelfile)):
            with page.expect_download() as got:
                link.click()
            got.value.save_as(to)
        _shot(page, "export-gguf")
        import gguf
        read = gguf.GGUFReader(gguf_file)
        assert read.fields["general.architecture"].contents() == "llama"
        assert read.fields["tokenizer.ggml.add_bos_token"].contents() is True
        assert {t.tensor_type.name for t in read.tensors if t.name.endswith("attn_q.weight")} == {"Q8_0"}
        name = links.first.get_attribute("download")
        assert re.fullmatch(r"mine-q8_0-.*\.gguf", name) and modelfile.read_text().startswith(f"FROM ./{name}\n")
        expect(page.locator("#export-file a")).to_have_count(0)      # the .zip of the HF export went
        outdir = page.locator("#export-outdir textarea, #export-outdir input").first
        outdir.fill("/tmp/not-allowed")
        page.locator("#export-gguf-go").click()                        # refused: no files stand beside it
        expect(page.locator("#export-message")).to_contain_text("Not done:", timeout=30_000)
        expect(page.locator("#export-gguf-files a")).to_have_count(0)
        outdir.fill("")

        # the same .zip back in, blocks 1 and 3 only
        page.locator("#gpt2-upload input[type=file]").set_input_files(str(archive))
        page.locator("#hf-layers textarea, #hf-layers input").first.fill("1,3")
        page.locator("#gpt2-name textarea, #gpt2-name input").first.fill("mine-back")
        page.locator("#gpt2-import-upload").click()
        expect(page.locator("#checkpoints-message")).to_contain_text("Imported mine-back", timeout=60_000)
        expect(page.locator("#checkpoints-table")).to_contain_text("mine-back")
        _shot(page, "export-back")
    back = checkpoints.load("mine-back", store)
    assert back.config.n_layer == 2 and checkpoints.info("mine-back", store)["layers"] == [1, 3]
    with torch.no_grad():
        assert torch.allclose(back.model(IDS).logits, checkpoints.keep_blocks(model, [1, 3])(IDS).logits,
                              atol=1e-5)
