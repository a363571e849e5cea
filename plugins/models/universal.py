"""The Universal Transformer (Dehghani et al. 2019): the same block(s) applied again and again,
with a learned embedding of the step, and per-position Adaptive Computation Time (Graves 2016)
deciding how many steps each token's output takes.

Each step every position emits a halting probability; a position halts once their running sum
passes `threshold` (or at `max_steps`), and its output is the mix of its states weighted by those
probabilities (the remainder on its last step). The ponder cost, steps plus remainder averaged
over positions and times `ponder_cost`, is added to the training loss. A halted position's state
keeps being updated, as in the reference implementation, so later tokens can still attend to it;
its output no longer changes. Attention views: one layer per step and block.
"""
from dataclasses import dataclass, field

import torch
from torch import nn

from lab.modeling.model import Block, OutputLayer, PrefixLM, _init_weights, offered, part
from lab.registry import MODELS
from plugins.models.gpt2 import DEFAULTS as GPT2_PARTS


@dataclass
class UniversalSettings:
    max_steps: int = field(default=6, metadata={
        "help": "the most times the block is applied to a token (at least 2: with one there is "
                "nothing to halt)", "min": 2, "max": 64})
    threshold: float = field(default=0.99, metadata={
        "help": "halting sum at which a token stops (ACT's 1 - epsilon)", "min": 0.01, "max": 1.0})
    ponder_cost: float = field(default=0.01, metadata={
        "help": "weight of the steps taken in the training loss", "min": 0.0, "max": 10.0})


class UniversalLM(PrefixLM):
    points_absent = ("one block applied again and again, each position halting at its own step: "
                     "it has no fixed stack of layers to name (lab.modeling.points)")
    def __init__(self, config, wte, wpe, blocks, ln_f, lm_head, settings: UniversalSettings):
        super().__init__(config, wte, wpe, blocks, ln_f, lm_head)
        self.max_steps, self.threshold, self.ponder_weight = (
            settings.max_steps, settings.threshold, settings.ponder_cost)
        self.step_emb = nn.Parameter(torch.zeros(settings.max_steps, config.n_embd))
        self.halt = nn.Linear(config.n_embd, 1)
        nn.init.constant_(self.halt.bias, 1.0)   # start by pondering a few steps, not one

    def run(self, idx, output_attentions):
        B, T = idx.size()
        h = self.transformer
        pos = torch.arange(T, device=idx.device)
        state = h.drop(h.wpe.embed(h.wte(idx), pos))                     # (B, T, C)
        halted_sum = torch.zeros(B, T, device=idx.device)                # running halting sum
        remainder = torch.zeros(B, T, device=idx.device)
        steps = torch.zeros(B, T, device=idx.device)
        output = torch.zeros_like(state)
        attentions = []
        for step in range(self.max_steps):
            p = torch.sigmoid(self.halt(state).squeeze(-1).float())      # (B, T)
            running = (halted_sum < 1.0).float()
            if step == self.max_steps - 1:                               # the last step halts all
                halts = running
            else:
                halts = ((halted_sum + p * running) > self.threshold).float() * running
            goes_on = running - halts
            halted_sum = halted_sum + p * goes_on
            remainder = remainder + halts * (1.0 - halted_sum)
            halted_sum = halted_sum + halts * (1.0 - halted_sum)
            steps = steps + running
            weight = (p * goes_on + halts * remainder).to(state.dtype)   # this step's share
            state = state + self.step_emb[step]
            for block in h.h:
                state, _, w = block(state, pos, h.wpe, None, output_attentions)
                attentions.append(w)
            output = output + weight[..., None] * state
            if not bool(goes_on.any()):
                break
        ponder = self.ponder_weight * (steps + remainder).mean()
        return output, attentions if output_attentions else None, \
            {"aux_loss": ponder, "per_token": {"steps": steps}}


@MODELS.register("universal", "Universal Transformer: one block applied recurrently, Adaptive "
                              "Computation Time per token (Dehghani et al. 2019)",
                 settings=UniversalSettings, defaults=GPT2_PARTS)
def universal(config, settings: UniversalSettings):
    """n_layer blocks make one step (the paper: one); the step is applied up to max_steps times."""
    c, offer = config, offered(config)

    def norm():
        return part(c, "norm", **offer["norm"])

    blocks = [Block(norm(), part(c, "attention", **offer["attention"]), norm(),
                    part(c, "mlp", **offer["mlp"]), c.norm_position) for _ in range(c.n_layer)]
    model = UniversalLM(c, wte=nn.Embedding(c.vocab_size, c.n_embd),
                        wpe=part(c, "positional", **offer["positional"]), blocks=blocks,
                        ln_f=norm() if c.norm_position == "pre" else nn.Identity(),
                        lm_head=OutputLayer(c.n_embd, c.vocab_size, bias=False), settings=settings)
    _init_weights(model, c.init_std)
    nn.init.zeros_(model.halt.weight)
    nn.init.constant_(model.halt.bias, 1.0)
    return model
