"""Beam search: keep the `num_beams` likeliest partial captions, ranked by mean log-probability
per token (HF's length_penalty=1.0); a beam that emits end-of-text is finished."""
from dataclasses import dataclass, field

import torch

from lab.registry import DECODERS


@dataclass
class BeamSettings:
    num_beams: int = field(default=4, metadata={"short": "beams", "help": "partial captions kept at each step",
                                                "min": 1, "max": 16})


class BeamSearch:
    search = True   # drives the model itself instead of choosing one token per step

    def __init__(self, num_beams: int):
        self.num_beams = num_beams

    @torch.no_grad()
    def run(self, model, prompt, max_new_tokens: int, eos_id: int):
        """prompt: (T0,) ids. Returns the best continuation (list of ids, without end-of-text)."""
        nb = self.num_beams
        seqs = [[]]
        scores = torch.zeros(1, device=prompt.device)
        out = model(prompt[None], logits_to_keep=1)
        past, logits = out.past_key_values, out.logits[:, -1]
        finished = []                                    # (score, ids)
        for step in range(max_new_tokens):
            logp = torch.log_softmax(logits.float(), dim=-1)              # (nbeams, V)
            total = (scores[:, None] + logp).view(-1)
            top = torch.topk(total, min(2 * nb, total.numel()))
            keep_rows, keep_tokens, keep_scores = [], [], []
            for s, flat in zip(top.values.tolist(), top.indices.tolist()):
                row, tok = divmod(flat, logp.size(1))
                if tok == eos_id:
                    finished.append((s / (len(seqs[row]) + 1), seqs[row]))
                else:
                    keep_rows.append(row); keep_tokens.append(tok); keep_scores.append(s)
                if len(keep_rows) == nb:
                    break
            best_done = max((f[0] for f in finished), default=float("-inf"))
            if not keep_rows or (len(finished) >= nb and best_done >= max(keep_scores) / (len(seqs[0]) + 1)):
                break
            rows = torch.tensor(keep_rows, device=prompt.device)
            seqs = [seqs[r] + [t] for r, t in zip(keep_rows, keep_tokens)]
            scores = torch.tensor(keep_scores, device=prompt.device)
            past = past.select(rows)
            out = model(torch.tensor(keep_tokens, device=prompt.device)[:, None], past_key_values=past)
            past, logits = out.past_key_values, out.logits[:, -1]
        for s, seq in zip(scores.tolist(), seqs):
            finished.append((s / max(len(seq), 1), seq))
        return max(finished, key=lambda f: f[0])[1]


@DECODERS.register("beam", "Beam search: keep the likeliest partial captions; deterministic",
                   settings=BeamSettings)
def beam(settings: BeamSettings):
    return BeamSearch(settings.num_beams)
