"""Corpora, encoding, batching, per-epoch shuffle, seeded subsets.

The assignment's handling: `<|endoftext|>` before each caption and again as its end; CRLF and
trailing spaces stripped; batches padded only to the longest caption in the batch, the loss masked
so that the result equals the assignment's fixed padding to 36 (tests prove it).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from lab.errors import LabError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = PROJECT_ROOT.parent / "shared" / "data" / "coco-captions-hw3"
SPLITS = ("train", "dev", "test")


class DataError(LabError):
    pass


def resolve_data_dir(data_dir: str | Path | None = None) -> Path:
    """--data-dir, else $LAB_DATA_DIR, else ../shared/data/coco-captions-hw3 when it exists."""
    chosen = data_dir or os.environ.get("LAB_DATA_DIR")
    if chosen:
        path = Path(chosen).expanduser()
        if not path.exists():
            raise DataError(f"caption corpus not found at {path} "
                            f"(from {'--data-dir' if data_dir else 'LAB_DATA_DIR'}); give a directory "
                            f"holding train.txt/dev.txt/test.txt or MSCOCO captions_*.json")
        return path
    if DEFAULT_DATA_DIR.is_dir():
        return DEFAULT_DATA_DIR
    raise DataError(f"no caption corpus: pass --data-dir DIR or set LAB_DATA_DIR=DIR "
                    f"(the default {DEFAULT_DATA_DIR} does not exist)")


def read_text(path: Path) -> str:
    """A UTF-8 text file, or one message saying why it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from None


def read_lines(path: Path) -> list[str]:
    """One caption per line; CRLF, trailing spaces and empty lines dropped."""
    return [line.strip() for line in read_text(path).splitlines() if line.strip()]


def read_hypotheses(path: Path) -> list[str]:
    """Generated captions, one per line, kept as they are: an empty line is an empty caption (it
    scores 0 and counts, as in nltk), not a line to skip. Only the end-of-line and trailing
    spaces go, and the empty piece after a final newline."""
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip() for line in lines]


def read_coco_json(path: Path) -> list[str]:
    """Captions from an MSCOCO caption annotation file (captions_*.json)."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return [" ".join(a["caption"].split()) for a in doc["annotations"]]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{path} is not an MSCOCO caption annotation file "
                        f"(expected {{'annotations': [{{'caption': ...}}]}}): {e}") from None


def load_split(split: str, data_dir: str | Path | None = None) -> list[str]:
    """A split's captions from a directory (`{split}.txt` or `captions_{split}*.json`) or a file."""
    root = resolve_data_dir(data_dir)
    if root.is_file():
        files = [root]
    else:
        files = sorted(root.glob(f"{split}.txt")) or sorted(root.glob(f"captions_{split}*.json"))
        if not files:
            present = ", ".join(sorted(p.name for p in root.iterdir())) or "nothing"
            raise DataError(f"split {split!r} not found in {root}: expected {split}.txt or "
                            f"captions_{split}*.json (the directory holds: {present})")
    captions = []
    for f in files:
        captions += read_coco_json(f) if f.suffix == ".json" else read_lines(f)
    if not captions:
        raise DataError(f"{files[0]} holds no captions (it is empty)")
    return captions


def encode_captions(captions: list[str], tokenizer, max_len: int) -> list[list[int]]:
    """[eos] + tokens + [eos] per caption, cut to max_len tokens."""
    eos = tokenizer.eos_id
    return [([eos] + ids + [eos])[:max_len] for ids in tokenizer.encode_batch(captions)]


def subset_indices(n_total: int, n: int, seed: int) -> list[int]:
    """A seeded sample of n indices (all of them, in order, when n >= n_total)."""
    if n >= n_total:
        return list(range(n_total))
    g = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(n_total, generator=g)[:n].tolist())


def subset_hash(items: list[str]) -> str:
    """A short fingerprint of a subset, so two figures can be checked to share it."""
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:12]


@dataclass
class Batch:
    input_ids: torch.Tensor     # (B, L) padded with eos
    loss_mask: torch.Tensor     # (B, L-1) 1 where target t+1 counts: the caption and its first eos
    # or, for a task whose examples fill the model's context (birth places), the targets apart:
    # input_ids (B, L) are the model's whole input, targets (B, L) the next characters, and
    # loss_mask (B, L) says which count
    targets: torch.Tensor | None = None
    # packed rows (pack()): several texts per row, targets apart; positions (B, L) restart at 0
    # for each text, segments (B, L) say which of the batch's `texts` a token belongs to (a pad:
    # a negative number of its own)
    positions: torch.Tensor | None = None
    segments: torch.Tensor | None = None
    texts: int = 0

    def to(self, device):
        def move(t):
            return None if t is None else t.to(device)
        return Batch(self.input_ids.to(device), self.loss_mask.to(device), move(self.targets),
                     move(self.positions), move(self.segments), self.texts)

    def rows(self, sl: slice) -> "Batch":
        assert self.segments is None, "packed rows are made per process, after the split"
        return Batch(self.input_ids[sl], self.loss_mask[sl],
                     None if self.targets is None else self.targets[sl])

    def model_inputs(self) -> dict:
        """What the model reads besides the token ids: a packed batch's positions and segments."""
        if self.segments is None:
            return {}
        return {"positions": self.positions, "segments": self.segments}


PACK_ROW = 128     # tokens a packed row aims at: longer rows waste less, their masked attention more


def packable(batch: Batch) -> bool:
    """Texts one per row from its first position, anything after a text's last counted target
    being padding: packing them drops only that padding, which a causal model's counted positions
    never see. Every unpacked batch the tasks make is so (captions, birth places); the trainer
    still reads scheduled sampling's batches padded (Trainer._packing)."""
    return batch.segments is None


def pack(batch: Batch, row: int = PACK_ROW) -> Batch:
    """The same texts and counted targets with no compute on padding. Each text is cut after its
    last counted target's input (what follows is padding, or a last token that predicts nothing:
    in a causal model no counted position sees it) and goes whole into one of
    ceil(tokens / row) rows (row: at least the longest text), longest first into the emptiest
    row (never more rows than texts), so the rows come out nearly equal. Positions restart at 0
    for each text and segments keep attention within it; inputs before a text's first counted
    target (a question before its answer) stay, uncounted. The loss per text and its gradient
    equal the padded batch's (tests/test_packing.py)."""
    mask = batch.loss_mask
    counted = mask != 0
    through = torch.arange(1, mask.size(1) + 1, device=mask.device)
    lengths = (counted * through).amax(1).tolist()        # inputs per text: to its last counted
    targets = batch.targets if batch.targets is not None else batch.input_ids[:, 1:]
    row = max(row, max(lengths))                            # a text longer than a row: rows that long
    n_rows = max(1, min(sum(n > 0 for n in lengths), math.ceil(sum(lengths) / row)))
    fill = [0] * n_rows
    place = [0] * len(lengths)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        r = min(range(n_rows), key=fill.__getitem__)
        place[i], fill[r] = (r, fill[r]), fill[r] + lengths[i]
    B, L = n_rows, max(max(fill), 1)
    dev = batch.input_ids.device
    ids = torch.zeros(B, L, dtype=torch.long, device=dev)
    packed_targets = torch.full((B, L), -100, dtype=torch.long, device=dev)
    packed_mask = torch.zeros(B, L, dtype=mask.dtype, device=dev)
    positions = torch.zeros(B, L, dtype=torch.long, device=dev)
    segments = -1 - torch.arange(B * L, device=dev).view(B, L)    # a pad sees only itself
    for i, n in enumerate(lengths):
        r, at = place[i]
        ids[r, at:at + n] = batch.input_ids[i, :n]
        packed_targets[r, at:at + n] = targets[i, :n].masked_fill(~counted[i, :n], -100)
        packed_mask[r, at:at + n] = mask[i, :n]
        positions[r, at:at + n] = torch.arange(n, device=dev)
        segments[r, at:at + n] = i
    return Batch(ids, packed_mask, packed_targets, positions, segments, texts=len(lengths))


def collate(seqs: list[list[int]], pad_id: int, pad_to: int | None = None) -> Batch:
    """Pad to the longest sequence (or to pad_to); mask every target after the first end-of-text."""
    L = pad_to or max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)
    mask = torch.zeros(len(seqs), L - 1)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s) - 1] = 1.0
    return Batch(ids, mask)


def batches(seqs: list[list[int]], batch_size: int, pad_id: int, shuffle: bool = False,
            generator: torch.Generator | None = None):
    order = torch.randperm(len(seqs), generator=generator).tolist() if shuffle else range(len(seqs))
    order = list(order)
    for i in range(0, len(order), batch_size):
        yield collate([seqs[j] for j in order[i:i + batch_size]], pad_id)


def sentence_nll(logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sentence summed negative log-likelihood and target count: ((B,), (B,)), B the batch's
    texts (a packed batch's too: each row's tokens summed into their text).
    The logits are read in place: each position's target is the next token where the mask counts
    it and ignored elsewhere (no copy of the (B, L, V) logits without their last position)."""
    B, L, V = logits.shape
    if batch.targets is not None:           # targets apart (inputs not the targets shifted)
        targets = batch.targets.masked_fill(batch.loss_mask == 0, -100)
    else:
        targets = torch.full((B, L), -100, dtype=torch.long, device=logits.device)
        targets[:, :-1] = batch.input_ids[:, 1:].masked_fill(batch.loss_mask == 0, -100)
    nll = token_nll(logits.reshape(-1, V), targets.reshape(-1)).view(B, L)
    if batch.segments is None:
        return nll.sum(1), batch.loss_mask.sum(1)
    text = batch.segments.clamp(min=0).reshape(-1)          # pads count nothing (mask and nll 0)
    sums = nll.new_zeros(batch.texts).index_add(0, text, nll.reshape(-1))
    counts = batch.loss_mask.new_zeros(batch.texts).index_add(0, text, batch.loss_mask.reshape(-1))
    return sums, counts


ROWS = 32      # rows of logits whose exponentials token_nll keeps at once (6 MB of GPT-2's)


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """(N, V) logits, (N,) targets -> (N,) cross-entropy of each row's target, 0 where it is -100.
    Without gradients on the CPU, ROWS rows at a time in memory that stays in the cache, where
    cross_entropy writes all (N, V) log-probabilities to read back one of each row (slower:
    experiments/generation_cpu/sampling_and_scoring/, docs/benchmarks.md). Equal to
    cross_entropy to float rounding (tests/test_packing.py)."""
    if logits.requires_grad and torch.is_grad_enabled() or logits.device.type != "cpu":
        return torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")
    counted = targets != -100
    bad = counted & ((targets < 0) | (targets >= logits.size(1)))
    if bad.any():
        raise ValueError(f"target {targets[bad][0].item()} is outside the vocabulary of "
                         f"{logits.size(1)} (or -100, ignored)")
    x = logits.detach()
    picked = x.gather(1, targets.clamp(min=0)[:, None])[:, 0].float()
    lse = torch.empty(len(x), dtype=torch.float32)
    work = torch.empty(min(ROWS, len(x)), x.size(1))
    for i in range(0, len(x), ROWS):
        rows = x[i:i + ROWS].float()        # a block at a time: half-precision logits too
        w = work[:len(rows)]
        top = rows.amax(1, keepdim=True)
        torch.sub(rows, top, out=w)
        lse[i:i + ROWS] = w.exp_().sum(1).log_() + top[:, 0]
    return torch.where(counted, lse - picked, 0.0)


def assignment_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """The assignment's training loss: mean over sentences of each sentence's mean token loss."""
    nll, n = sentence_nll(logits, batch)
    return (nll / n.clamp_min(1)).mean()
