"""Hugging Face interop: import a local `GPT2LMHeadModel` or `LlamaForCausalLM` folder with a
block selection, or one uploaded from the browser (unpacked no further than its config.json says
its files can need); export a `gpt2` or `llama` checkpoint back to a folder that
`transformers.AutoModelForCausalLM.from_pretrained` loads.

GPT-2: our module names equal HF GPT-2's; only HF's Conv1D layers store their weight transposed
((in, out) instead of nn.Linear's (out, in)). Llama: lab/storage/hf_llama.py.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import torch

from lab.storage import checkpoints, hf_llama, lazy, uploads
from lab.inputs import tokenizers
from lab.storage.checkpoints import CheckpointError
from lab.config import ConfigError, ModelConfig, family_defaults, parse_blocks
from lab.errors import read_json
from lab.modeling.model import build

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def parse_layers(text: str | list, n_layer: int | None = None) -> list[int]:
    """'1,6,12' -> [1, 6, 12]: the blocks of a pretrained model to keep (lab.config.parse_blocks)."""
    return parse_blocks(text, n_layer, "layers")


def _read_hf_state(path: Path) -> lazy.Lazy:
    """The folder's weights, read one at a time as they are copied in (lab/storage/lazy.py), each
    refused when it holds NaN or infinity: the store never takes them in."""
    where = str(path)
    st = path / "model.safetensors"
    if st.is_file():
        return lazy.safetensors_files([st], where)
    index = path / "model.safetensors.index.json"
    if index.is_file():       # sharded: the index names the file of every weight
        shards = read_json(index, CheckpointError).get("weight_map", {})
        names = sorted({str(f) for f in shards.values()})
        if not names or any(Path(n).name != n for n in names):
            raise CheckpointError(f"{index} names no shard files in its folder")
        return lazy.safetensors_files([path / n for n in names], where)
    binf = path / "pytorch_model.bin"
    if binf.is_file():
        try:   # weights_only: a restricted unpickler that loads tensors and nothing executable
            try:
                state = torch.load(str(binf), map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:        # saved before the zip format: read whole
                state = torch.load(str(binf), map_location="cpu", weights_only=True)
            return lazy.tensors(state, where)
        except Exception as e:
            raise CheckpointError(f"{binf} cannot be read as weights ({e})") from None
    raise CheckpointError(f"{path} has no model.safetensors or pytorch_model.bin")


def _folder(path, what: str) -> Path:
    """A folder path given by a person, or one message (NUL, missing, a file, unreadable)."""
    if "\0" in str(path):
        raise CheckpointError(f"{what}: the path contains a NUL character")
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{what}: {path} does not exist")
    if not path.is_dir():
        raise CheckpointError(f"{what}: {path} is a file; give the folder holding config.json "
                              f"and the weights")
    return path


FAMILIES = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}     # HF model_type -> class


def _read_any_hf_config(path: Path, what: str = "an HF checkpoint folder") -> dict:
    hf = read_json(path / "config.json", CheckpointError,
                   f"{path} is not {what}: config.json is missing")
    if not isinstance(hf, dict):
        raise CheckpointError(f"{path}/config.json is not a JSON object")
    if isinstance(hf.get("model"), dict):
        raise CheckpointError(f"{path} is a tfmr-lab checkpoint, not {what}; copy it into a store "
                              f"instead (or export it to Hugging Face's format first)")
    return hf


def _hf_family(path: Path, hf: dict) -> str:
    """gpt2 or llama, from config.json's model_type (GPT-2's older configs have none); another
    architecture is refused by name."""
    kind = hf.get("model_type") or ("gpt2" if "n_embd" in hf else None)
    if kind not in FAMILIES:
        arch = ", ".join(hf.get("architectures") or []) or "no architectures named"
        raise CheckpointError(f"{path} holds a {kind!r} model ({arch}); the lab imports "
                              f"{' and '.join(f'{k} ({v})' for k, v in FAMILIES.items())} checkpoints")
    return kind


def _read_hf_config(path: Path) -> dict:
    hf = _read_any_hf_config(path, "an HF GPT-2 directory")
    if hf.get("model_type") not in (None, "gpt2"):
        raise CheckpointError(f"{path} holds a {hf.get('model_type')!r} model, not GPT-2")
    missing = [k for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head") if k not in hf]
    if missing:
        raise CheckpointError(f"{path}/config.json is not an HF GPT-2 config: it lacks {', '.join(missing)}")
    return hf


def import_hf(path: str | Path, name: str, layers: list[int] | None = None, store=None,
              label: str | None = None) -> Path:
    """Import a local HF folder, GPT-2 or Llama as its config.json says, with the chosen blocks."""
    checkpoints.check_name(name)
    checkpoints.refuse_existing(name, store)
    folder = _folder(path, "import hf")
    kind = _hf_family(folder, _read_any_hf_config(folder))
    return (import_hf_gpt2 if kind == "gpt2" else import_hf_llama)(folder, name, layers, store, label)


def import_hf_llama(path: str | Path, name: str, layers: list[int] | None = None, store=None,
                    label: str | None = None) -> Path:
    """Import an HF Llama folder into the store as a `llama` checkpoint with the chosen blocks."""
    checkpoints.check_name(name)
    checkpoints.refuse_existing(name, store)
    path = _folder(path, "import llama")
    layers, cfg = _llama_config(path, _read_any_hf_config(path, "an HF Llama directory"), layers)
    state = _read_hf_state(path)
    try:
        ours = hf_llama.llama_state(state, layers)
    except KeyError as e:
        raise CheckpointError(f"{path}: the weights lack {e.args[0]}, which an HF Llama of its "
                              f"config.json has") from None
    if cfg.tie_embeddings:
        ours.drop("lm_head.weight")
    model = build(cfg)
    checkpoints.load_state(model, ours, where=str(path))
    return checkpoints.save(model, _tokenizer_for(path, cfg.vocab_size, "llama"), name, store, provenance={
        "source": "import", "pretrained": label or str(path.resolve()), "layers": layers,
        "format": "hf-llama"})


def _llama_config(path: Path, hf: dict, layers: list[int] | None) -> tuple[list[int], ModelConfig]:
    """The blocks kept (all when None) and the `llama` config of the model they make."""
    if hf.get("model_type") != "llama":
        raise CheckpointError(f"{path} holds a {hf.get('model_type')!r} model, not Llama")
    odd = hf_llama.unsupported(hf)
    if odd:
        raise CheckpointError(f"{path}/config.json asks for what the lab's llama family does not "
                              f"compute: {'; '.join(odd)}")
    if "num_hidden_layers" not in hf:
        raise CheckpointError(f"{path}/config.json is not an HF Llama config: it lacks num_hidden_layers")
    try:
        n_layer = ModelConfig.from_dict({"n_layer": hf["num_hidden_layers"]}).n_layer
    except ConfigError as e:
        raise CheckpointError(f"{path}/config.json: num_hidden_layers: {e}") from None
    layers = parse_layers(layers if layers is not None else list(range(1, n_layer + 1)), n_layer)
    try:
        cfg = hf_llama.llama_config(hf, len(layers))
    except KeyError as e:
        raise CheckpointError(f"{path}/config.json is not an HF Llama config: it lacks {e.args[0]}") from None
    except (ConfigError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}/config.json: {e}") from None
    return layers, cfg


def import_hf_gpt2(path: str | Path, name: str, layers: list[int] | None = None, store=None,
                   label: str | None = None) -> Path:
    """Import an HF GPT-2 directory into the store as a `gpt2` checkpoint with the chosen blocks.
    label: what the provenance names as its source (default: the folder)."""
    checkpoints.check_name(name)
    checkpoints.refuse_existing(name, store)
    path = _folder(path, "import gpt2")
    hf = _read_hf_config(path)
    layers, cfg = _imported_config(path, hf, layers)
    ours = _renamed_state(path, _read_hf_state(path), layers)
    if cfg.tie_embeddings:
        ours.drop("lm_head.weight")
    model = build(cfg)
    checkpoints.load_state(model, ours, where=str(path))
    tok = _tokenizer_for(path, cfg.vocab_size)
    return checkpoints.save(model, tok, name, store, provenance={
        "source": "import", "pretrained": label or str(path.resolve()), "layers": layers,
        "format": "hf-gpt2"})


def _imported_config(path: Path, hf: dict, layers: list[int] | None) -> tuple[list[int], ModelConfig]:
    """The blocks kept (all when None) and the `gpt2` config of the model they make."""
    try:
        n_layer = ModelConfig.from_dict({"n_layer": hf["n_layer"]}).n_layer
    except ConfigError as e:
        raise CheckpointError(f"{path}/config.json: {e}") from None
    layers = parse_layers(layers if layers is not None else list(range(1, n_layer + 1)), n_layer)
    act = hf.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu_pytorch_tanh"):
        raise CheckpointError(f"activation {act!r} is not supported; the gelu MLP is GPT-2's tanh GELU")
    try:
        cfg = ModelConfig.from_dict(dict(
            model="gpt2", vocab_size=hf["vocab_size"], n_positions=hf["n_positions"],
            n_embd=hf["n_embd"], n_layer=len(layers), n_head=hf["n_head"], n_inner=hf.get("n_inner"),
            norm_eps=hf.get("layer_norm_epsilon", 1e-5), tie_embeddings=hf.get("tie_word_embeddings", True),
            dropout=hf.get("resid_pdrop", 0.1)))
    except ConfigError as e:
        raise CheckpointError(f"{path}/config.json: {e}") from None
    return layers, cfg


def _renamed_state(path: Path, state: lazy.Lazy, layers: list[int]) -> lazy.Lazy:
    """HF GPT-2's weights under our names: the kept blocks renumbered in the order given, Conv1D
    weights transposed, the causal-mask buffers left out (each still read when asked)."""
    ours = {}
    for hf_key in state:
        k = hf_key if hf_key.startswith(("transformer.", "lm_head.")) else f"transformer.{hf_key}"
        if k.endswith((".attn.bias", ".attn.masked_bias")):
            continue                                  # HF's causal-mask buffers, not weights
        if k.startswith("transformer.h."):
            if not k.split(".")[2].isdigit():
                raise CheckpointError(f"{path}: weight {k!r} is not an HF GPT-2 block weight")
            i = int(k.split(".")[2])
            if i + 1 not in layers:
                continue
            k = k.replace(f"transformer.h.{i}.", f"transformer.h.{layers.index(i + 1)}.", 1)
        shape, flip = state.shape(hf_key), k.endswith(CONV1D)
        ours[k] = (shape[::-1] if flip else shape,
                   lambda h=hf_key, f=flip: state[h].t() if f else state[h])
    return lazy.Lazy(ours)


UPLOAD_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt", "tokenizer.json",
                "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                "chat_template.jinja", tokenizers.TOKENIZER_META)
CONFIG_LIMIT = (uploads.MiB, "an HF config.json may hold")
SMALL_FILE_LIMIT = (32 * uploads.MiB, "a tokenizer or settings file may hold")


def import_hf_upload(files: list[str | Path], name: str, layers: list[int] | None = None,
                     store=None) -> Path:
    """An HF GPT-2 or Llama checkpoint uploaded from the browser: its files (config.json, model.safetensors
    and, if any, the tokenizer's), or one .zip holding them. Only those file names are taken, from
    any folder inside the .zip, config.json first: it says how large the weights can be, and no
    file is unpacked beyond what it may hold (lab/storage/uploads.py). Nothing is written outside
    a scratch folder of the store's, which goes when the import ends."""
    paths = [Path(f) for f in files or []]
    if not paths:
        raise CheckpointError("upload the checkpoint's files (config.json and model.safetensors) or "
                              "one .zip holding them")
    checkpoints.check_name(name)
    checkpoints.refuse_existing(name, store)      # before any unpacking
    label = "upload: " + ", ".join(p.name for p in paths)
    zipped = len(paths) == 1 and paths[0].suffix.lower() == ".zip"
    if not zipped:
        _check_upload_names(paths)
    with uploads.scratch(store) as folder:
        def take(limits):
            return uploads.unzip(paths[0], folder, limits) if zipped else \
                uploads.copy(paths, folder, limits)
        try:
            if not take({"config.json": CONFIG_LIMIT}):
                raise CheckpointError(f"{paths[0].name} holds no config.json; zip the folder that "
                                      f"save_pretrained wrote" if zipped else
                                      f"no config.json among the uploaded files; upload it with "
                                      f"model.safetensors")
            take(_upload_limits(folder))
            return import_hf(folder, name, layers, store, label=label)
        except CheckpointError as e:        # say the upload, not the scratch folder it lay in
            raise CheckpointError(str(e).replace(str(folder), label)) from None


def _check_upload_names(paths: list[Path]) -> None:
    for p in paths:
        if p.name not in UPLOAD_FILES:
            raise CheckpointError(f"{p.name}: not a file of an HF GPT-2 or Llama checkpoint; upload "
                                  f"{', '.join(UPLOAD_FILES[:2])} (and the tokenizer's files)")


def _upload_limits(folder: Path) -> uploads.Limits:
    """What each file of an uploaded GPT-2 or Llama may hold, by the config.json it came with."""
    hf = _read_any_hf_config(folder)
    gpt2 = _hf_family(folder, hf) == "gpt2"
    _, cfg = _imported_config(folder, hf, None) if gpt2 else _llama_config(folder, hf, None)
    limits = {n: SMALL_FILE_LIMIT for n in UPLOAD_FILES if n not in ("config.json", "model.safetensors")}
    limits["model.safetensors"] = (
        weights_limit(cfg, hf) if gpt2 else hf_llama.weights_limit(cfg, _width(hf)),
        f"a {'GPT-2' if gpt2 else 'Llama'} of its config.json ({cfg.n_layer} blocks of width "
        f"{cfg.n_embd}, vocabulary {cfg.vocab_size}, {cfg.n_positions} positions) can need")
    return limits


def _width(hf: dict) -> int:
    """Bytes a weight of this config.json's dtype (4, float32, unless it says float64)."""
    return 8 if str(hf.get("torch_dtype") or hf.get("dtype")) == "float64" else 4


def weights_limit(cfg: ModelConfig, hf: dict) -> int:
    """The most bytes an HF GPT-2's model.safetensors of this config can hold: every weight at
    the config's dtype (4 bytes, float32, unless it says float64), the causal-mask buffers older
    saves keep (n_positions^2 a block), the header (64 KiB and 256 bytes a tensor), and 1% slack."""
    C, P, V, L = cfg.n_embd, cfg.n_positions, cfg.vocab_size, cfg.n_layer
    inner = cfg.n_inner or 4 * C
    block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (C * inner + inner) + (inner * C + C) + P * P + 1
    values = V * C + P * C + L * block + 2 * C + (0 if cfg.tie_embeddings else V * C)
    width = _width(hf)
    return 64 * 1024 + 256 * (4 + 14 * L) + int(values * width * 1.01)


def _tokenizer_for(path: Path, vocab_size: int, family: str = "gpt2"):
    """The folder's own tokenizer (GPT-2's when a GPT-2 folder has none). Its kind: the one the lab
    wrote beside it when it exported the folder, else gpt2 for a GPT-2, else one named by its
    vocabulary (two tokenizers of one kind split text the same way)."""
    if any((path / f).is_file() for f in ("tokenizer.json", "vocab.json")):
        (AutoTokenizer,) = tokenizers.from_transformers("AutoTokenizer")
        try:
            hf = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception as e:       # transformers raises many kinds of error on damaged files
            raise CheckpointError(f"{path}: its tokenizer files cannot be read ({type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''})") from None
        own = path / tokenizers.TOKENIZER_META
        kind = read_json(own, CheckpointError).get("kind") if own.is_file() else None
        if not isinstance(kind, str) or not kind:
            vocab = json.dumps(sorted(hf.get_vocab().items())).encode()
            kind = "gpt2" if family == "gpt2" else f"hf-{hashlib.sha1(vocab).hexdigest()[:8]}"
        return tokenizers.HFTokenizer(hf, kind)
    if family == "gpt2" and vocab_size == 50257:
        return tokenizers.gpt2()
    raise CheckpointError(f"{path} has no tokenizer files (tokenizer.json or vocab.json) and its "
                          f"vocabulary of {vocab_size} is not GPT-2's 50257; add its tokenizer's files")


def _gpt2_parts() -> dict:
    """HF GPT-2's parts: the gpt2 family's own, as its plugin declares them."""
    parts = family_defaults("gpt2")
    return {"model": "gpt2", **{k: parts[k] for k in ("norm", "norm_position", "attention",
                                                       "positional", "mlp", "bias")}}


def export_hf(checkpoint: str, outdir: str | Path, store=None) -> Path:
    """Write a folder that `AutoModelForCausalLM.from_pretrained` loads (config, safetensors, the
    tokenizer's files): a `gpt2` checkpoint as GPT2LMHeadModel, a `llama` one as LlamaForCausalLM.
    Refuses a part Hugging Face's class does not have, and a non-empty outdir."""
    ck = checkpoints.load(checkpoint, store)
    return _write_export(ck, hf_model_of(checkpoint, ck), outdir)


def hf_model_of(checkpoint: str, ck, what: str = "Hugging Face export"):
    """The checkpoint `ck` (named `checkpoint`) as its transformers class, GPT2LMHeadModel or
    LlamaForCausalLM; refuses a family or a part that class does not have."""
    if ck.config.model not in FAMILIES:
        raise CheckpointError(f"{checkpoint} is a {ck.config.model} model; {what} takes "
                              f"the {' and '.join(FAMILIES)} families")
    gpt2 = ck.config.model == "gpt2"
    _check_exportable(checkpoint, ck.config, _gpt2_parts() if gpt2 else hf_llama.llama_parts())
    return _hf_model(ck) if gpt2 else hf_llama.hf_model(ck)


def export_hf_gpt2(checkpoint: str, outdir: str | Path, store=None) -> Path:
    """Write an HF GPT-2 directory (config, safetensors, tokenizer). Refuses a non-empty outdir."""
    ck = checkpoints.load(checkpoint, store)
    _check_exportable(checkpoint, ck.config, _gpt2_parts())
    return _write_export(ck, _hf_model(ck), outdir)


def _write_export(ck, hf, outdir) -> Path:
    """The HF model and the checkpoint's tokenizer, written to a scratch folder that then takes
    outdir's place (the lab's note of its tokenizer's kind beside the tokenizer's own files)."""
    outdir = _export_folder(outdir)
    tmp = outdir.parent / f".tmp-export-{uuid.uuid4().hex[:8]}"
    try:
        outdir.parent.mkdir(parents=True, exist_ok=True)
        hf.save_pretrained(str(tmp))
        if isinstance(ck.tokenizer, tokenizers.HFTokenizer):
            ck.tokenizer.save(tmp)
            _start_as_in_the_lab(tmp, ck.tokenizer)
        if outdir.exists():
            outdir.rmdir()
        os.replace(tmp, outdir)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise CheckpointError(f"export to {outdir} failed: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return outdir


def _start_as_in_the_lab(folder: Path, tok) -> None:
    """The exported tokenizer reads a text as the lab does: its start token (the lab's, end-of-text
    for GPT-2 and SmolLM2) added before it by AutoTokenizer and pipeline("text-generation") alike,
    and padding with end-of-text; its files then name the tokens config.json names."""
    (AutoTokenizer,) = tokenizers.from_transformers("AutoTokenizer")
    hf = AutoTokenizer.from_pretrained(str(folder))
    end = hf.convert_ids_to_tokens(tok.eos_id)
    hf.eos_token, hf.pad_token = end, end
    if tok.bos_id is not None:
        hf.bos_token = hf.convert_ids_to_tokens(tok.bos_id)
        hf.add_bos_token = True
    hf.save_pretrained(str(folder))


def _check_exportable(checkpoint: str, c: ModelConfig, standard: dict) -> None:
    """Only a model made of its Hugging Face class's own parts exports as that class."""
    odd = {k: getattr(c, k) for k, v in standard.items() if getattr(c, k) != v}
    if odd:
        name = "HF GPT-2" if standard["model"] == "gpt2" else "HF Llama"
        raise CheckpointError(f"{checkpoint} cannot be exported as {name}: it uses {odd}; "
                              f"only {name}'s own parts ({standard}) export")


def _export_folder(outdir) -> Path:
    """The folder to export to, given by a person: new, or empty."""
    if "\0" in str(outdir):
        raise CheckpointError("export: the output path contains a NUL character")
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise CheckpointError(f"export: {outdir} is a file; give a new or empty folder")
    if outdir.exists() and any(outdir.iterdir()):
        raise CheckpointError(f"{outdir} exists and is not empty; choose a new directory")
    return outdir


def _hf_model(ck):
    """The checkpoint as a transformers GPT2LMHeadModel, every weight in place."""
    GPT2Config, GPT2LMHeadModel = tokenizers.from_transformers("GPT2Config", "GPT2LMHeadModel")
    c = ck.config
    hf_cfg = GPT2Config(vocab_size=c.vocab_size, n_positions=c.n_positions, n_embd=c.n_embd,
                        n_layer=c.n_layer, n_head=c.n_head, n_inner=c.n_inner,
                        layer_norm_epsilon=c.norm_eps, activation_function="gelu_new",
                        tie_word_embeddings=c.tie_embeddings, **hf_llama.special_ids(ck.tokenizer))
    hf = GPT2LMHeadModel(hf_cfg)
    state = {k: (v.t() if k.endswith(CONV1D) else v) for k, v in ck.model.state_dict().items()}
    missing, unexpected = hf.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith(("attn.bias", "attn.masked_bias"))
               and not (c.tie_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise CheckpointError(f"export mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    return hf
