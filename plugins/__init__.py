"""Built-in plugins, imported explicitly: each module registers itself on import."""
from plugins.norms import layernorm, rmsnorm  # noqa: F401
from plugins.positional import learned, sinusoidal, rotary  # noqa: F401
from plugins.attention import mha, gqa, mqa  # noqa: F401
from plugins.mlp import gelu, swiglu  # noqa: F401
from plugins.decoders import greedy, random, top_k, top_p, beam  # noqa: F401
from plugins.models import gpt2, llama  # noqa: F401
