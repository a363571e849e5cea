"""The assignment's Tfmr: a GPT-2-style decoder (Radford et al. 2019), weight-compatible with
HF GPT-2 (same module and parameter names; `lab.storage.interop` imports and exports)."""
from lab.modeling.model import assemble
from lab.registry import MODELS

DEFAULTS = dict(norm="layernorm", norm_position="pre", attention="mha", positional="learned",
                mlp="gelu", bias=True, norm_eps=1e-5, tie_embeddings=False, dropout=0.1)


@MODELS.register("gpt2", "GPT-2-style decoder (the assignment's Tfmr); imports/exports HF GPT-2",
                 defaults=DEFAULTS)
def gpt2(config):
    return assemble(config)
