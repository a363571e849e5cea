"""Drawing one token per row from a distribution over the vocabulary, fast and exact.

One token is drawn per row by inverting the cumulative distribution with one uniform number, in two
levels: blocks of BLOCK tokens by their summed probability, then the token inside the block, both
summed in float64. torch.multinomial draws an exponential number per vocabulary entry instead, which
is far slower on the CPU over GPT-2's 50,257 tokens (docs/benchmarks.md). The two
draw from the same distribution, not the same tokens: a seed gives other captions than
torch.multinomial would.

`weights` gives draw softmax's numerators, not softmax itself: the draw needs no normalized
distribution, and inside model.recycled_logits they are written over the last step's."""
import torch

from lab.modeling.model import recycled

BLOCK = 1024


def weights(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """exp((logits - row max) / temperature) in float32, (B, V): softmax(logits / temperature)
    times a number per row, which is all draw needs. Inside model.recycled_logits it is written
    over this thread's last weights (read them before asking for the next), which saves the two
    fresh (rows x vocabulary) tensors a softmax of freshly divided logits writes
    (experiments/generation_cpu/sampling_and_scoring/, docs/benchmarks.md)."""
    x = logits.detach()                 # a draw has no gradient; out= refuses one
    x = x if x.dtype == torch.float32 else x.float()
    w = recycled(weights, x.numel(), torch.float32, x.device).view(x.shape)
    torch.sub(x, x.amax(-1, keepdim=True), out=w)
    if temperature != 1.0:
        w.div_(temperature)
    return w.exp_()


def draw(p: torch.Tensor, generator=None) -> torch.Tensor:
    """One index per row of p (B, V), index i with probability p[i] / sum(p) (p need not sum to
    1); a zero is never drawn (the first index whose cumulative sum exceeds the uniform number is
    taken). Blocks are summed in p's float32 (pairwise, as exact as the probabilities themselves),
    the running sums in float64."""
    B, V = p.shape
    whole, rest = divmod(V, BLOCK)
    sums = p[:, :whole * BLOCK].view(B, whole, BLOCK).sum(-1)                 # (B, whole)
    if rest:
        sums = torch.cat([sums, p[:, whole * BLOCK:].sum(-1, keepdim=True)], 1)
    cum = sums.double().cumsum(-1)                                            # (B, nb)
    total = cum[:, -1]
    if not bool((torch.isfinite(total) & (total > 0)).all()):
        raise ValueError("invalid distribution to sample from: a row sums to zero, infinity or "
                         "NaN (all logits -inf, or a model whose outputs are no longer finite)")
    u = torch.rand(B, 1, generator=generator, dtype=torch.float64, device=p.device) * cum[:, -1:]
    b = torch.searchsorted(cum, u, right=True).clamp_(max=cum.size(1) - 1)   # (B, 1) its block
    before = torch.where(b > 0, cum.gather(1, (b - 1).clamp(min=0)), 0.0)
    at = b * BLOCK + torch.arange(BLOCK, device=p.device)                     # (B, BLOCK)
    inner = p.gather(1, at.clamp(max=V - 1)).masked_fill(at >= V, 0.0).double().cumsum(-1)
    u = torch.minimum(u - before, inner[:, -1:] * (1 - 2 ** -40))             # rounding stays inside
    return (b * BLOCK + torch.searchsorted(inner, u, right=True).clamp_(max=BLOCK - 1)).squeeze(1)
