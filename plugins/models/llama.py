"""A Llama-style decoder (Touvron et al. 2023) with the parts SmolLM2 uses: RMSNorm, grouped-query
attention, rotary positions, SwiGLU, no biases, tied embeddings, no dropout."""
from lab.modeling.model import assemble
from lab.registry import MODELS

DEFAULTS = dict(norm="rmsnorm", norm_position="pre", attention="gqa", positional="rotary",
                mlp="swiglu", bias=False, norm_eps=1e-5, tie_embeddings=True, dropout=0.0)


@MODELS.register("llama", "Llama-style decoder (RMSNorm, GQA, rotary, SwiGLU), as SmolLM2",
                 defaults=DEFAULTS)
def llama(config):
    return assemble(config)
